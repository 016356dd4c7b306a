"""The ScalarTensor kernels as operators: ``add_diagonal`` (``input + value * I`` in one
pass) and ``scale`` (``value * input``), with their autograd formulas (and those of
``scale_finite``, which ScalarTensor's products use)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

from tensortools.ops._checks import check_tensors

__all__ = ["add_diagonal", "scale"]


def _as_value(fn_name: str, value: Any, like: Tensor) -> Tensor:
    """`value` (a number or a 0-d tensor) as a 0-d tensor of like's dtype and device."""

    def refuse(error: type[Exception], why: str) -> Exception:
        return error(
            f"tensortools.ops.{fn_name}: 'value' must be a number or a 0-d tensor "
            f"that {like.dtype} holds, {why}"
        )

    if isinstance(value, Tensor):
        if value.dim() != 0:
            raise refuse(ValueError, f"got shape {tuple(value.shape)}")
        if value.is_complex() and not like.is_complex():
            raise refuse(TypeError, f"got a {value.dtype} tensor")
        if value.device != like.device and value.device.type != "cpu":
            # Only a CPU 0-d tensor stands for a number beside a tensor elsewhere (as in
            # torch); any other device goes as it is to the kernels' device check.
            return value.to(dtype=like.dtype)
        if value.is_meta:  # no number to read: the conversion is left unchecked
            return value.to(dtype=like.dtype, device=like.device)
        if value.is_floating_point() and not like.is_floating_point():
            value = value.item()  # checked below, like a Python float
        else:
            return value.to(dtype=like.dtype, device=like.device)
    if not isinstance(value, (bool, int, float)):
        raise refuse(TypeError, f"got {type(value).__name__}")
    try:  # made on the CPU, which checks the conversion (the meta device does not)
        return torch.tensor(value, dtype=like.dtype).to(like.device)
    except (RuntimeError, ValueError, OverflowError) as err:  # NaN, Inf, out of range
        raise refuse(ValueError, f"got {value!r}") from err


def add_diagonal(input: Tensor, value: Any) -> Tensor:
    """``input + value * I`` for a square ``input`` (N×N, or a batch ``...×N×N``), in one
    pass. ``value`` is a number or a 0-d tensor; the result has ``input``'s dtype."""
    if has_torch_function((input, value)):
        return handle_torch_function(add_diagonal, (input, value), input, value)
    check_tensors("add_diagonal", ("input",), (input,))
    return torch.ops.tensortools.add_diagonal.default(
        input, _as_value("add_diagonal", value, input)
    )


def scale(input: Tensor, value: Any) -> Tensor:
    """``value * input`` in one pass. ``value`` is a number or a 0-d tensor; the result
    has ``input``'s shape and dtype."""
    if has_torch_function((input, value)):
        return handle_torch_function(scale, (input, value), input, value)
    check_tensors("scale", ("input",), (input,))
    return torch.ops.tensortools.scale.default(input, _as_value("scale", value, input))


def _save_inputs(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _save_value(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])


def _add_diagonal_backward(ctx, grad):
    (value,) = ctx.saved_tensors
    grad_value = None
    if ctx.needs_input_grad[1]:
        grad_value = grad.diagonal(dim1=-2, dim2=-1).sum().to(value.dtype)
    return grad, grad_value


def _scale_backward(ctx, grad):
    self, value = ctx.saved_tensors
    grad_self = scale(grad, value) if ctx.needs_input_grad[0] else None
    grad_value = (grad * self).sum().to(value.dtype) if ctx.needs_input_grad[1] else None
    return grad_self, grad_value


def _scale_finite_backward(ctx, grad, grad_all_finite):
    return _scale_backward(ctx, grad)


torch.library.register_autograd(
    "tensortools::add_diagonal", _add_diagonal_backward, setup_context=_save_value
)
torch.library.register_autograd("tensortools::scale", _scale_backward, setup_context=_save_inputs)
torch.library.register_autograd(
    "tensortools::scale_finite", _scale_finite_backward, setup_context=_save_inputs
)
