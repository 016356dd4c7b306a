"""tensortools' fused operators, as Python functions over ``torch.ops.tensortools``.

Each function here is overridable: when an argument defines ``__torch_function__`` the
call goes through :func:`torch.overrides.handle_torch_function`, so tensor-like types can
intercept it. The fake (meta) kernels and the autograd formulas of the underlying
operators are registered next to their wrappers, so ``torch.compile(fullgraph=True)``
traces the operators. Autograd is registered in C++, for the Autograd dispatch key, so
the hand-written backward runs without a Python layer.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

import tensortools._native  # noqa: F401  (registers torch.ops.tensortools)

__all__ = ["add_diagonal", "lltm", "scale"]


def _check_tensors(fn_name: str, names: tuple[str, ...], args: tuple) -> None:
    for name, arg in zip(names, args):
        if not isinstance(arg, Tensor):
            raise TypeError(
                f"tensortools.ops.{fn_name}: '{name}' must be a torch.Tensor, "
                f"got {type(arg).__name__}"
            )
        if arg.layout != torch.strided:
            raise TypeError(
                f"tensortools.ops.{fn_name}: '{name}' must be a dense (strided) tensor, "
                f"got layout {arg.layout}"
            )


# ---------------------------------------------------------------------------------------
# LLTM

_LLTM_ARGS = ("input", "weights", "bias", "old_h", "old_cell")


def lltm(input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor,
         old_cell: Tensor) -> tuple[Tensor, Tensor]:
    """One step of the LLTM recurrent cell, fused.

    Shapes (B batch, F features, S state size): ``input`` B×F, ``weights`` 3S×(S+F),
    ``bias`` 3S, ``old_h`` B×S, ``old_cell`` B×S; all of one floating dtype and device.
    Returns ``(new_h, new_cell)``, both B×S. The maths is :func:`tensortools.reference.lltm`.
    A batch of zero rows gives empty results (and zero gradients for weights and bias).
    """
    args = (input, weights, bias, old_h, old_cell)
    if has_torch_function(args):
        return handle_torch_function(lltm, args, *args)
    _check_tensors("lltm", _LLTM_ARGS, args)
    new_h, new_cell, _, _ = torch.ops.tensortools.lltm_forward.default(*args)
    return new_h, new_cell


@torch.library.register_fake("tensortools::lltm_forward")
def _lltm_forward_fake(input, weights, bias, old_h, old_cell):
    batch, features = input.shape
    state = old_h.shape[1]
    return (
        old_cell.new_empty(batch, state),
        old_cell.new_empty(batch, state),
        input.new_empty(batch, 3 * state),
        input.new_empty(batch, state + features),
    )


@torch.library.register_fake("tensortools::lltm_backward")
def _lltm_backward_fake(grad_h, grad_cell, new_cell, gates, X, weights):
    batch, state = new_cell.shape
    return (
        X.new_empty(batch, X.shape[1] - state),
        weights.new_empty(weights.shape),
        weights.new_empty(weights.shape[0]),
        X.new_empty(batch, state),
        new_cell.new_empty(batch, state),
    )


# ---------------------------------------------------------------------------------------
# ScalarTensor kernels: adding value * I to a dense matrix, scaling a dense tensor


def _as_value(fn_name: str, value: Any, like: Tensor) -> Tensor:
    """`value` (a number or a 0-d tensor) as a 0-d tensor of like's dtype and device."""
    if isinstance(value, Tensor):
        if value.dim() != 0:
            raise ValueError(f"tensortools.ops.{fn_name}: 'value' must be a number or a "
                             f"0-d tensor, got shape {tuple(value.shape)}")
        return value.to(dtype=like.dtype, device=like.device)
    if isinstance(value, (bool, int, float)):
        return torch.tensor(value, dtype=like.dtype, device=like.device)
    raise TypeError(f"tensortools.ops.{fn_name}: 'value' must be a number or a 0-d tensor, "
                    f"got {type(value).__name__}")


def add_diagonal(input: Tensor, value: Any) -> Tensor:
    """``input + value * I`` for a square ``input`` (N×N, or a batch ``...×N×N``), in one
    pass. ``value`` is a number or a 0-d tensor; the result has ``input``'s dtype."""
    if has_torch_function((input, value)):
        return handle_torch_function(add_diagonal, (input, value), input, value)
    _check_tensors("add_diagonal", ("input",), (input,))
    return torch.ops.tensortools.add_diagonal.default(
        input, _as_value("add_diagonal", value, input))


def scale(input: Tensor, value: Any) -> Tensor:
    """``value * input`` in one pass. ``value`` is a number or a 0-d tensor; the result
    has ``input``'s shape and dtype."""
    if has_torch_function((input, value)):
        return handle_torch_function(scale, (input, value), input, value)
    _check_tensors("scale", ("input",), (input,))
    return torch.ops.tensortools.scale.default(input, _as_value("scale", value, input))


@torch.library.register_fake("tensortools::add_diagonal")
def _add_diagonal_fake(self, value):
    return torch.empty_like(self, memory_format=torch.contiguous_format)


@torch.library.register_fake("tensortools::scale")
def _scale_fake(self, value):
    return torch.empty_like(self, memory_format=torch.contiguous_format)


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


torch.library.register_autograd("tensortools::add_diagonal", _add_diagonal_backward,
                                setup_context=_save_value)
torch.library.register_autograd("tensortools::scale", _scale_backward,
                                setup_context=_save_inputs)
