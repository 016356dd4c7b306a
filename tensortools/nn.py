"""``torch.nn`` modules over tensortools' fused operators."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tensortools import ops

__all__ = ["GraphConv", "LLTM"]


def _positive_int(module: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{module}: '{name}' must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{module}: '{name}' must be positive, got {value}")
    return value


class LLTM(torch.nn.Module):
    """The LLTM recurrent cell as a module, running the fused :func:`tensortools.ops.lltm`.

    ``weights`` is 3S×(S+F) and ``bias`` 3S (S = ``state_size``, F = ``input_features``),
    both initialised uniform in ±1/sqrt(state_size).
    ``forward(input, (h, c))`` takes input B×F and h, c B×S; returns ``(new_h, new_cell)``.
    """

    def __init__(self, input_features: int, state_size: int, *, device=None,
                 dtype=None) -> None:
        super().__init__()
        self.input_features = _positive_int("LLTM", "input_features", input_features)
        self.state_size = _positive_int("LLTM", "state_size", state_size)
        factory = {"device": device, "dtype": dtype}
        self.weights = torch.nn.Parameter(
            torch.empty(3 * state_size, state_size + input_features, **factory))
        self.bias = torch.nn.Parameter(torch.empty(3 * state_size, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.state_size)
        for p in (self.weights, self.bias):
            torch.nn.init.uniform_(p, -bound, bound)

    def forward(self, input: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        old_h, old_cell = state
        return ops.lltm(input, self.weights, self.bias, old_h, old_cell)

    def extra_repr(self) -> str:
        return f"input_features={self.input_features}, state_size={self.state_size}"


class GraphConv(torch.nn.Module):
    """Graph convolution ``adj @ x @ weight + bias`` over :func:`tensortools.ops.graph_conv`.

    ``weight`` is in_features×out_features (Glorot-uniform), ``bias`` out_features
    (zeros) or absent. ``forward(adj, x)``: adj N×N (dense or sparse), x N×in_features.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.in_features = _positive_int("GraphConv", "in_features", in_features)
        self.out_features = _positive_int("GraphConv", "out_features", out_features)
        factory = {"device": device, "dtype": dtype}
        self.weight = torch.nn.Parameter(torch.empty(in_features, out_features, **factory))
        self.bias = torch.nn.Parameter(torch.empty(out_features, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        torch.nn.init.xavier_uniform_(self.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, adj: Tensor, x: Tensor) -> Tensor:
        return ops.graph_conv(adj, x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")
