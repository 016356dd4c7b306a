"""``alpha * x + beta * y`` in one pass: ``torch.ops.tensortools.axpby``."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.overrides import handle_torch_function

from tensortools.dispatch.batch_rules import ALL, batch_rule
from tensortools.ops._autograd import register
from tensortools.ops._checks import check_number, check_tensors, overridden

__all__ = ["axpby"]


@batch_rule(rows=ALL)  # (a batch of x or y: elementwise)
def axpby(x: Tensor, y: Tensor, alpha: float, beta: float) -> Tensor:
    """``alpha * x + beta * y`` in one pass. ``x`` and ``y`` have one floating dtype and
    broadcast as torch does; the result has their broadcast shape."""
    if overridden((x, y)):
        return handle_torch_function(axpby, (x, y), x, y, alpha, beta)
    check_tensors("axpby", ("x", "y"), (x, y))
    check_number("axpby", "alpha", alpha)
    check_number("axpby", "beta", beta)
    return _axpby(x, y, float(alpha), float(beta))


def _axpby_setup(ctx, inputs, output):
    x, y, alpha, beta = inputs
    ctx.shapes = (x.shape, y.shape, output.shape)
    ctx.scales = (alpha, beta)


def _axpby_backward(ctx, grad):
    (x_shape, y_shape, _), (alpha, beta) = ctx.shapes, ctx.scales
    grad_x = (grad * alpha).sum_to_size(x_shape) if ctx.needs_input_grad[0] else None
    grad_y = (grad * beta).sum_to_size(y_shape) if ctx.needs_input_grad[1] else None
    return grad_x, grad_y, None, None


def _axpby_jvp(ctx, tangent_x, tangent_y, _alpha, _beta):
    alpha, beta = ctx.scales
    if tangent_x is not None and tangent_y is not None:
        return torch.ops.tensortools.axpby.default(tangent_x, tangent_y, alpha, beta)
    tangent = tangent_x * alpha if tangent_x is not None else tangent_y * beta
    return tangent.expand(ctx.shapes[2])


def _axpby_vmap(info, in_dims, x, y, alpha, beta):
    # The vmapped dim goes first, the others align on the right as broadcasting does.
    ndim = max(t.dim() - (d is not None) for t, d in zip((x, y), in_dims))

    def batch_first(t, d):
        if d is None:
            return t
        t = t.movedim(d, 0)
        return t.reshape(t.shape[0], *[1] * (ndim + 1 - t.dim()), *t.shape[1:])

    x, y = batch_first(x, in_dims[0]), batch_first(y, in_dims[1])
    return torch.ops.tensortools.axpby.default(x, y, alpha, beta), 0


_axpby = register(
    "tensortools::axpby",
    setup_context=_axpby_setup,
    backward=_axpby_backward,
    jvp=_axpby_jvp,
    vmap=_axpby_vmap,
)
