"""``alpha * x + beta * y`` in one pass: ``torch.ops.tensortools.axpby``."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

from tensortools.ops._checks import check_number, check_tensors

__all__ = ["axpby"]


def axpby(x: Tensor, y: Tensor, alpha: float, beta: float) -> Tensor:
    """``alpha * x + beta * y`` in one pass. ``x`` and ``y`` have one floating dtype and
    broadcast as torch does; the result has their broadcast shape."""
    if has_torch_function((x, y)):
        return handle_torch_function(axpby, (x, y), x, y, alpha, beta)
    check_tensors("axpby", ("x", "y"), (x, y))
    check_number("axpby", "alpha", alpha)
    check_number("axpby", "beta", beta)
    return torch.ops.tensortools.axpby.default(x, y, float(alpha), float(beta))


def _axpby_setup(ctx, inputs, output):
    x, y, alpha, beta = inputs
    ctx.shapes = (x.shape, y.shape)
    ctx.scales = (alpha, beta)


def _axpby_backward(ctx, grad):
    (x_shape, y_shape), (alpha, beta) = ctx.shapes, ctx.scales
    grad_x = (grad * alpha).sum_to_size(x_shape) if ctx.needs_input_grad[0] else None
    grad_y = (grad * beta).sum_to_size(y_shape) if ctx.needs_input_grad[1] else None
    return grad_x, grad_y, None, None


torch.library.register_autograd("tensortools::axpby", _axpby_backward, setup_context=_axpby_setup)
