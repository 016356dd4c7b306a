"""Fused Conv2d + BatchNorm2d: ``torch.ops.tensortools.conv_bn2d_*`` behind
:func:`fused_conv_bn2d`, with the training forward's autograd (its backward recomputes
the convolution)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

from tensortools.ops._checks import check_number, check_tensors

__all__ = ["fused_conv_bn2d"]


def _pair(fn_name: str, name: str, value: Any) -> tuple[int, int]:
    values = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(values) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise TypeError(
            f"tensortools.ops.{fn_name}: '{name}' must be an int or a pair of ints, got {value!r}"
        )
    return values


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
    if has_torch_function(relevant):
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
    out, mean, var = torch.ops.tensortools.conv_bn2d_forward.default(
        input, weight, gamma, beta, stride, padding, eps
    )
    if running_mean is not None:
        with torch.no_grad():
            torch.ops.tensortools.conv_bn2d_update_stats.default(
                running_mean, running_var, out.detach(), mean, var, momentum
            )
    return out


def _conv_bn2d_setup(ctx, inputs, output):
    input, weight, gamma, beta, stride, padding, eps = inputs
    _, mean, var = output
    ctx.save_for_backward(input, weight, gamma, mean, var)
    ctx.geometry = (stride, padding, eps)
    ctx.mark_non_differentiable(mean, var)


def _conv_bn2d_backward(ctx, grad_output, _grad_mean, _grad_var):
    input, weight, gamma, mean, var = ctx.saved_tensors
    need_input, need_weight, need_gamma, need_beta = ctx.needs_input_grad[:4]
    grads = torch.ops.tensortools.conv_bn2d_backward.default(
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


def _no_double_backward(ctx, *grads):
    raise RuntimeError(
        "tensortools.ops.fused_conv_bn2d: double backward (a gradient of "
        "the gradient) is not supported"
    )


torch.library.register_autograd(
    "tensortools::conv_bn2d_forward", _conv_bn2d_backward, setup_context=_conv_bn2d_setup
)
torch.library.register_autograd(
    "tensortools::conv_bn2d_backward",
    _no_double_backward,
    setup_context=lambda ctx, inputs, output: None,
)
