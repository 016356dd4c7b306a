"""The maths of tensortools' operators in plain PyTorch.

Autograd differentiates these; they are the correctness reference for the tests and the
baseline for the benchmarks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["axpby", "fused_conv_bn2d", "graph_conv", "lltm", "lltm_sequence"]


def lltm(
    input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor, old_cell: Tensor
) -> tuple[Tensor, Tensor]:
    """One LLTM step. Shapes: input B×F, weights 3S×(S+F), bias 3S, old_h and old_cell B×S.

    Returns ``(new_h, new_cell)``, both B×S.
    """
    X = torch.cat([old_h, input], dim=1)
    gates = F.linear(X, weights, bias)
    i, o, c = gates.chunk(3, dim=1)
    input_gate = torch.sigmoid(i)
    output_gate = torch.sigmoid(o)
    candidate_cell = F.elu(c)
    new_cell = old_cell + candidate_cell * input_gate
    new_h = torch.tanh(new_cell) * output_gate
    return new_h, new_cell


def lltm_sequence(
    input: Tensor, weights: Tensor, bias: Tensor, h0: Tensor, c0: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`lltm` over a sequence, one step at a time. Shapes: input T×B×F, weights
    3S×(S+F), bias 3S, h0 and c0 B×S.

    Returns ``(output, h_n, c_n)``: output T×B×S (every step's new h), h_n and c_n B×S.
    """
    h, c = h0, c0
    outputs = []
    for x in input.unbind(0):
        h, c = lltm(x, weights, bias, h, c)
        outputs.append(h)
    if not outputs:
        return input.new_empty(0, *h0.shape), h0, c0
    return torch.stack(outputs), h, c


def axpby(x: Tensor, y: Tensor, alpha: float, beta: float) -> Tensor:
    """alpha * x + beta * y, broadcasting."""
    return alpha * x + beta * y


def graph_conv(adj: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """adj @ x @ weight (+ bias). adj N×N (dense or sparse), x N×F_in, weight F_in×F_out."""
    out = (adj @ x) @ weight
    return out if bias is None else out + bias


def fused_conv_bn2d(
    input: Tensor,
    weight: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    gamma: Tensor | None = None,
    beta: Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """batch_norm(conv2d(input, weight, stride=stride, padding=padding), ...), unfused."""
    z = F.conv2d(input, weight, None, stride, padding)
    return F.batch_norm(z, running_mean, running_var, gamma, beta, training, momentum, eps)
