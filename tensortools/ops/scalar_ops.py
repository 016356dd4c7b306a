"""The ScalarTensor kernels as operators: ``add_diagonal`` (``input + value * I`` in one
pass) and ``scale`` (``value * input``), with their autograd formulas (and those of
``scale_finite``, which ScalarTensor's products use)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.overrides import handle_torch_function

from tensortools.dispatch.batch_rules import ALL, batch_rule
from tensortools.ops._autograd import loop_or_fold, loop_vmap, register, save
from tensortools.ops._checks import check_tensors, overridden

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


@batch_rule(rows=ALL)  # (a batch of matrices: row for row)
def add_diagonal(input: Tensor, value: Any) -> Tensor:
    """``input + value * I`` for a square ``input`` (N×N, or a batch ``...×N×N``), in one
    pass. ``value`` is a number or a 0-d tensor; the result has ``input``'s dtype."""
    if overridden((input, value)):
        return handle_torch_function(add_diagonal, (input, value), input, value)
    check_tensors("add_diagonal", ("input",), (input,))
    return _add_diagonal(input, _as_value("add_diagonal", value, input))


@batch_rule(rows=ALL)
def scale(input: Tensor, value: Any) -> Tensor:
    """``value * input`` in one pass. ``value`` is a number or a 0-d tensor; the result
    has ``input``'s shape and dtype."""
    if overridden((input, value)):
        return handle_torch_function(scale, (input, value), input, value)
    check_tensors("scale", ("input",), (input,))
    return _scale(input, _as_value("scale", value, input))


def _save_inputs(ctx, inputs, output):
    save(ctx, *inputs)


def _add_diagonal_setup(ctx, inputs, output):
    save(ctx, inputs[1])
    ctx.shape = inputs[0].shape


def _add_diagonal_backward(ctx, grad):
    (value,) = ctx.saved_tensors
    grad_value = None
    if ctx.needs_input_grad[1]:
        grad_value = grad.diagonal(dim1=-2, dim2=-1).sum().to(value.dtype)
    return grad, grad_value


def _add_diagonal_jvp(ctx, tangent_input, tangent_value):
    if tangent_value is None:
        return tangent_input
    if tangent_input is None:
        tangent_input = tangent_value.new_zeros(ctx.shape)
    return torch.ops.tensortools.add_diagonal.default(tangent_input, tangent_value)


def _scale_backward(ctx, grad):
    self, value = ctx.saved_tensors
    grad_self = scale(grad, value) if ctx.needs_input_grad[0] else None
    grad_value = (grad * self).sum().to(value.dtype) if ctx.needs_input_grad[1] else None
    return grad_self, grad_value


def _scale_jvp(ctx, tangent_input, tangent_value):
    input, value = ctx.saved_tensors
    tangent = None
    if tangent_input is not None:
        tangent = torch.ops.tensortools.scale.default(tangent_input, value)
    if tangent_value is not None:
        term = tangent_value * input
        tangent = term if tangent is None else tangent + term
    return tangent


def _scale_finite_setup(ctx, inputs, output):
    save(ctx, *inputs)
    ctx.mark_non_differentiable(output[1])


def _scale_finite_backward(ctx, grad, grad_all_finite):
    return _scale_backward(ctx, grad)


def _scale_finite_jvp(ctx, tangent_input, tangent_value):
    return _scale_jvp(ctx, tangent_input, tangent_value), None


def _elementwise_vmap(op):
    """The vmapped dim of ``input`` is one more batch dim to these kernels; a vmapped
    ``value`` (a number per sample) takes a loop."""

    def fold(info, in_dims, input, value):
        return op(input.movedim(in_dims[0], 0), value), 0

    return loop_or_fold(op, (1,), fold)


# (each register gives the call the entry points make: see register)
_add_diagonal = register(
    "tensortools::add_diagonal",
    setup_context=_add_diagonal_setup,
    backward=_add_diagonal_backward,
    jvp=_add_diagonal_jvp,
    vmap=_elementwise_vmap(torch.ops.tensortools.add_diagonal.default),
)
_scale = register(
    "tensortools::scale",
    setup_context=_save_inputs,
    backward=_scale_backward,
    jvp=_scale_jvp,
    vmap=_elementwise_vmap(torch.ops.tensortools.scale.default),
)
# all_finite holds for the whole input: per sample, it takes a loop.
register(
    "tensortools::scale_finite",
    setup_context=_scale_finite_setup,
    backward=_scale_finite_backward,
    jvp=_scale_finite_jvp,
    vmap=loop_vmap(torch.ops.tensortools.scale_finite.default),
)
