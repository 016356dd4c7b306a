"""The graph convolution module (:class:`GraphConv`)."""

from __future__ import annotations

import torch
from torch import Tensor

from tensortools import ops
from tensortools.nn._checks import positive_int

__all__ = ["GraphConv"]


class GraphConv(torch.nn.Module):
    """Graph convolution ``adj @ x @ weight + bias`` over :func:`tensortools.ops.graph_conv`.

    ``weight`` is in_features×out_features (Glorot-uniform), ``bias`` out_features
    (zeros) or absent. ``forward(adj, x)``: adj N×N (dense or sparse), x N×in_features.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *, device=None, dtype=None
    ) -> None:
        super().__init__()
        self.in_features = positive_int("GraphConv", "in_features", in_features)
        self.out_features = positive_int("GraphConv", "out_features", out_features)
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
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )
