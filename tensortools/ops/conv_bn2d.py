"""Fused Conv2d + BatchNorm2d: ``torch.ops.tensortools.conv_bn2d_*`` behind
:func:`fused_conv_bn2d`, with the training forward's autograd (its backward recomputes
the convolution)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import forward_ad
from torch.overrides import handle_torch_function

from tensortools.dispatch.batch_rules import batch_rule
from tensortools.ops._autograd import (
    _LIB,
    below_autograd,
    loop_vmap,
    no_second_order,
    register,
)
from tensortools.ops._checks import check_number, check_tensors, overridden

__all__ = ["fused_conv_bn2d"]


def _pair(fn_name: str, name: str, value: Any) -> tuple[int, int]:
    values = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(values) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise TypeError(
            f"tensortools.ops.{fn_name}: '{name}' must be an int or a pair of ints, got {value!r}"
        )
    return values


@batch_rule(rows=(0,), min_ndim=4)  # (a batch of N×C×H×W inputs)
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
    """``batch_norm(conv2d(input, weight, stride=stride, padding=padding), ...)`` fused.

    ``input`` N×C_in×H×W, ``weight`` C_out×C_in×kH×kW (no bias, dilation 1, one group);
    ``running_mean``, ``running_var``, ``gamma`` and ``beta`` C_out or None. Returns
    N×C_out×H_out×W_out. The batch-norm arguments mean what they mean to
    :func:`torch.nn.functional.batch_norm` (``gamma``/``beta`` are its weight/bias):
    training normalises with the batch statistics and, when running statistics are given,
    updates them in place with ``momentum``; otherwise the running statistics are used,
    folded into the convolution's weight and bias.

    For backward, training saves only ``input``, ``weight``, ``gamma`` and two per-channel
    statistics, and recomputes the convolution, instead of keeping its output.
    """
    optional = (running_mean, running_var, gamma, beta)
    relevant = (input, weight) + tuple(t for t in optional if t is not None)
    if overridden(relevant):
        return handle_torch_function(
            fused_conv_bn2d,
            relevant,
            input,
            weight,
            running_mean,
            running_var,
            gamma,
            beta,
            stride=stride,
            padding=padding,
            training=training,
            momentum=momentum,
            eps=eps,
        )
    fn = "fused_conv_bn2d"
    check_tensors(fn, ("input", "weight"), (input, weight))
    for name, t in zip(("running_mean", "running_var", "gamma", "beta"), optional):
        if t is not None:
            check_tensors(fn, (name,), (t,))
    stride, padding = _pair(fn, "stride", stride), _pair(fn, "padding", padding)
    check_number(fn, "momentum", momentum)
    check_number(fn, "eps", eps)
    if (running_mean is None) != (running_var is None):
        raise ValueError(
            f"tensortools.ops.{fn}: give both 'running_mean' and 'running_var' or neither"
        )
    if not training:
        if running_mean is None:
            raise ValueError(
                f"tensortools.ops.{fn}: 'running_mean' and 'running_var' are "
                "required when not training"
            )
        return torch.ops.tensortools.conv_bn2d_eval.default(
            input, weight, running_mean, running_var, gamma, beta, stride, padding, eps
        )
    out, mean, var = _conv_bn2d_forward(input, weight, gamma, beta, stride, padding, eps)
    if running_mean is not None:
        with torch.no_grad():
            _update_stats(running_mean, running_var, out.detach(), mean, var, momentum)
    return out


def _conv_bn2d_setup(ctx, inputs, output):
    input, weight, gamma, beta, stride, padding, eps = inputs
    _, mean, var = output
    ctx.save_for_backward(input, weight, gamma, mean, var)
    ctx.save_for_forward(input, weight, gamma)
    ctx.geometry = (stride, padding, eps)
    ctx.mark_non_differentiable(mean, var)


def _conv_bn2d_backward(ctx, grad_output, _grad_mean, _grad_var):
    input, weight, gamma, mean, var = ctx.saved_tensors
    need_input, need_weight, need_gamma, need_beta = ctx.needs_input_grad[:4]
    grads = _conv_bn2d_backward_op(
        grad_output,
        input,
        weight,
        gamma,
        mean,
        var,
        *ctx.geometry,
        [need_input, need_weight, need_gamma or need_beta],
    )
    grad_input, grad_weight, grad_gamma, grad_beta = grads
    return (
        grad_input if need_input else None,
        grad_weight if need_weight else None,
        grad_gamma if need_gamma else None,
        grad_beta if need_beta else None,
        None,
        None,
        None,
    )


def _conv_bn2d_jvp(ctx, t_input, t_weight, t_gamma, t_beta, _stride, _padding, _eps):
    # Like the backward, the tangent recomputes the convolution z rather than keeping it,
    # and its statistics (in ATen operators, so the tangent is differentiable in turn).
    # out = gamma * xhat + beta, xhat = (z - mean) * rstd over the batch statistics, so
    # t_xhat = rstd * (t_z - mean(t_z) - xhat * mean(xhat * t_z)).
    input, weight, gamma = ctx.saved_tensors
    stride, padding, eps = ctx.geometry
    z = F.conv2d(input, weight, None, stride, padding)
    batch, channel = (0, 2, 3), (1, -1, 1, 1)
    var, mean = torch.var_mean(z, batch, correction=0, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    xhat = (z - mean) * rstd
    t_z = None
    for args in ((t_input, weight), (input, t_weight)):
        if all(a is not None for a in args):
            t_z = _add(t_z, F.conv2d(*args, None, stride, padding))
    t_out = None
    if t_z is not None:
        t_xhat = rstd * (
            t_z - t_z.mean(batch, keepdim=True) - xhat * (xhat * t_z).mean(batch, keepdim=True)
        )
        t_out = t_xhat if gamma is None else t_xhat * gamma.view(channel)
    if t_gamma is not None:
        t_out = _add(t_out, xhat * t_gamma.view(channel))
    if t_beta is not None:
        t_out = _add(t_out, t_beta.view(channel).expand_as(z))
    return t_out, None, None


def _add(total, term):
    return term if total is None else total + term


_conv_bn2d_forward = register(
    "tensortools::conv_bn2d_forward",
    setup_context=_conv_bn2d_setup,
    backward=_conv_bn2d_backward,
    jvp=_conv_bn2d_jvp,
    # Each sample is a batch of its own statistics: a loop.
    vmap=loop_vmap(torch.ops.tensortools.conv_bn2d_forward.default),
)


def _conv_bn2d_eval_vmap(info, in_dims, input, *args):
    # Inference uses no batch statistics: samples are more images of the batch, unless
    # each has its own weights or statistics (a loop).
    op = torch.ops.tensortools.conv_bn2d_eval.default
    if any(isinstance(d, int) for d in in_dims[1:]) or in_dims[0] is None:
        return loop_vmap(op)(info, in_dims, input, *args)
    input = input.movedim(in_dims[0], 0)
    return op(input.flatten(0, 1), *args).unflatten(0, input.shape[:2]), 0


_conv_bn2d_backward_op = register(
    "tensortools::conv_bn2d_backward",
    setup_context=lambda ctx, inputs, output: None,
    backward=no_second_order("fused_conv_bn2d"),
    jvp=no_second_order("fused_conv_bn2d"),
    vmap=loop_vmap(torch.ops.tensortools.conv_bn2d_backward.default),
)


def _update_stats_autograd(keyset, *args):
    # The running statistics are buffers, updated as batch_norm updates them: without a
    # derivative. torch's fallback would leave the update out of the graph silently
    # (gradients and tangents of zero); a derivative asked for is refused instead.
    tensors = [a for a in args if isinstance(a, Tensor)]
    if (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)) or (
        forward_ad._current_level >= 0
        and any(forward_ad.unpack_dual(t).tangent is not None for t in tensors)
    ):
        raise RuntimeError(
            "tensortools.ops.fused_conv_bn2d: conv_bn2d_update_stats updates the running "
            "statistics in place and has no derivative; call it under torch.no_grad() with "
            "detached tensors, as fused_conv_bn2d does"
        )
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.tensortools.conv_bn2d_update_stats.default.redispatch(
            keyset & torch._C._after_autograd_keyset, *args
        )


_LIB.impl("conv_bn2d_update_stats", _update_stats_autograd, "Autograd", with_keyset=True)
_update_stats = below_autograd(torch.ops.tensortools.conv_bn2d_update_stats.default)
# Inference is a composition of ATen operators (CompositeImplicitAutograd): autograd and
# tangents come from them; only vmap needs a rule.
torch.library.register_vmap("tensortools::conv_bn2d_eval", _conv_bn2d_eval_vmap, lib=_LIB)
