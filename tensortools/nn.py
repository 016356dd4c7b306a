"""``torch.nn`` modules over tensortools' fused operators."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tensortools import ops

__all__ = ["LLTM"]


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
