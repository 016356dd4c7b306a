"""tensortools' fused operators, as Python functions over ``torch.ops.tensortools``.

Each function here is overridable: when an argument defines ``__torch_function__`` the
call goes through :func:`torch.overrides.handle_torch_function`, so tensor-like types can
intercept it. The fake (meta) kernels of the underlying operators are registered next to
their wrappers, with the argument checks of the C++ kernels, so meta tensors and
``torch.compile(fullgraph=True)`` get the same errors. The LLTM's autograd is registered
in C++, for the Autograd dispatch key, so its backward runs without a Python layer; the
small ScalarTensor kernels register theirs here, with differentiable formulas.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

import tensortools._native  # noqa: F401  (registers torch.ops.tensortools)

__all__ = ["add_diagonal", "axpby", "graph_conv", "lltm", "scale"]


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


def _check_fake(op: str, args: dict[str, Tensor], dims: dict[str, int]) -> None:
    """The argument checks of the C++ kernels, for fake (meta) tensors and tracing:
    same dtype and device as the first argument, and the given ranks."""
    first_name, first = next(iter(args.items()))
    for name, t in args.items():
        torch._check_type(t.dtype == first.dtype, lambda: (
            f"{op}: '{name}' must have the same dtype as '{first_name}' ({first.dtype}), "
            f"got {t.dtype}"))
        torch._check_value(t.device == first.device, lambda: (
            f"{op}: '{name}' must be on the same device as '{first_name}' ({first.device}), "
            f"got {t.device}"))
    for name, dim in dims.items():
        torch._check_value(args[name].dim() == dim, lambda: (
            f"{op}: '{name}' must be {dim}-D, got {args[name].dim()}-D"))


def _check_shape(op: str, name: str, t: Tensor, shape: tuple) -> None:
    torch._check_value(tuple(t.shape) == tuple(shape), lambda: (
        f"{op}: '{name}' must have shape {list(shape)}, got {list(t.shape)}"))


@torch.library.register_fake("tensortools::lltm_forward")
def _lltm_forward_fake(input, weights, bias, old_h, old_cell):
    op = "tensortools.lltm"
    _check_fake(op, {"input": input, "weights": weights, "bias": bias, "old_h": old_h,
                     "old_cell": old_cell}, {"input": 2, "old_h": 2})
    torch._check_type(input.dtype in (torch.float32, torch.float64, torch.float16,
                                      torch.bfloat16),
                      lambda: f"{op}: 'input' must have a floating dtype, got {input.dtype}")
    batch, features = input.shape
    state = old_h.shape[1]
    _check_shape(op, "old_h", old_h, (batch, state))
    _check_shape(op, "old_cell", old_cell, (batch, state))
    _check_shape(op, "weights", weights, (3 * state, state + features))
    _check_shape(op, "bias", bias, (3 * state,))
    return (
        old_cell.new_empty(batch, state),
        old_cell.new_empty(batch, state),
        input.new_empty(batch, 3 * state),
        input.new_empty(batch, state + features),
    )


@torch.library.register_fake("tensortools::lltm_backward")
def _lltm_backward_fake(grad_h, grad_cell, new_cell, gates, X, weights):
    op = "tensortools.lltm_backward"
    _check_fake(op, {"new_cell": new_cell, "grad_h": grad_h, "grad_cell": grad_cell,
                     "gates": gates, "X": X, "weights": weights}, {"new_cell": 2, "X": 2})
    batch, state = new_cell.shape
    for name, t, shape in (("grad_h", grad_h, (batch, state)),
                           ("grad_cell", grad_cell, (batch, state)),
                           ("gates", gates, (batch, 3 * state)),
                           ("weights", weights, (3 * state, X.shape[1]))):
        _check_shape(op, name, t, shape)
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
    _check_fake("tensortools.add_diagonal", {"self": self, "value": value}, {"value": 0})
    torch._check_value(self.dim() >= 2 and self.shape[-1] == self.shape[-2], lambda: (
        "tensortools.add_diagonal: 'self' must be a square matrix or a batch of them "
        f"(..., N, N), got shape {list(self.shape)}"))
    return torch.empty_like(self, memory_format=torch.contiguous_format)


@torch.library.register_fake("tensortools::scale")
def _scale_fake(self, value):
    _check_fake("tensortools.scale", {"self": self, "value": value}, {"value": 0})
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


# ---------------------------------------------------------------------------------------
# axpby


def _check_number(fn_name: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"tensortools.ops.{fn_name}: '{name}' must be a real number, got "
                        f"{type(value).__name__}")


def axpby(x: Tensor, y: Tensor, alpha: float, beta: float) -> Tensor:
    """``alpha * x + beta * y`` in one pass. ``x`` and ``y`` have one floating dtype and
    broadcast as torch does; the result has their broadcast shape."""
    if has_torch_function((x, y)):
        return handle_torch_function(axpby, (x, y), x, y, alpha, beta)
    _check_tensors("axpby", ("x", "y"), (x, y))
    _check_number("axpby", "alpha", alpha)
    _check_number("axpby", "beta", beta)
    return torch.ops.tensortools.axpby.default(x, y, alpha, beta)


@torch.library.register_fake("tensortools::axpby")
def _axpby_fake(x, y, alpha, beta):
    _check_fake("tensortools.axpby", {"x": x, "y": y}, {})
    return x.new_empty(torch.broadcast_shapes(x.shape, y.shape))


def _axpby_setup(ctx, inputs, output):
    x, y, alpha, beta = inputs
    ctx.shapes = (x.shape, y.shape)
    ctx.scales = (alpha, beta)


def _axpby_backward(ctx, grad):
    (x_shape, y_shape), (alpha, beta) = ctx.shapes, ctx.scales
    grad_x = (grad * alpha).sum_to_size(x_shape) if ctx.needs_input_grad[0] else None
    grad_y = (grad * beta).sum_to_size(y_shape) if ctx.needs_input_grad[1] else None
    return grad_x, grad_y, None, None


torch.library.register_autograd("tensortools::axpby", _axpby_backward,
                                setup_context=_axpby_setup)


# ---------------------------------------------------------------------------------------
# graph convolution


def graph_conv(adj: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``adj @ x @ weight + bias``, multiplying in the cheaper order for the shapes.

    ``adj`` N×N (dense, sparse COO or sparse CSR), ``x`` N×F_in, ``weight`` F_in×F_out,
    ``bias`` F_out or None; one floating dtype and device. Returns N×F_out. Gradients
    flow to ``x``, ``weight``, ``bias`` and a dense ``adj``.
    """
    relevant = (adj, x, weight) if bias is None else (adj, x, weight, bias)
    if has_torch_function(relevant):
        return handle_torch_function(graph_conv, relevant, adj, x, weight, bias)
    _check_tensors("graph_conv", ("x", "weight"), (x, weight))
    if not isinstance(adj, Tensor):
        raise TypeError("tensortools.ops.graph_conv: 'adj' must be a torch.Tensor, got "
                        f"{type(adj).__name__}")
    if bias is not None:
        _check_tensors("graph_conv", ("bias",), (bias,))
    return torch.ops.tensortools.graph_conv.default(adj, x, weight, bias)


@torch.library.register_fake("tensortools::graph_conv")
def _graph_conv_fake(adj, x, weight, bias):
    op = "tensortools.graph_conv"
    _check_fake(op, {"x": x, "weight": weight, "adj": adj}, {"x": 2, "weight": 2})
    nodes = x.shape[0]
    _check_shape(op, "adj", adj, (nodes, nodes))
    _check_shape(op, "weight", weight, (x.shape[1], weight.shape[1]))
    if bias is not None:
        _check_shape(op, "bias", bias, (weight.shape[1],))
    return x.new_empty(nodes, weight.shape[1])


def _graph_conv_setup(ctx, inputs, output):
    adj, x, weight, bias = inputs
    ctx.save_for_backward(adj, x, weight)


def _graph_conv_backward(ctx, grad):
    adj, x, weight = ctx.saved_tensors
    need_adj, need_x, need_weight, need_bias = ctx.needs_input_grad
    grad_adj = grad_x = grad_weight = grad_bias = None
    if need_x:
        grad_x = adj.t() @ (grad @ weight.t())
    if need_weight:
        grad_weight = (adj @ x).t() @ grad
    if need_bias:
        grad_bias = grad.sum(0)
    if need_adj:
        if adj.layout != torch.strided:
            raise RuntimeError("tensortools.ops.graph_conv: no gradient for a sparse 'adj'; "
                               "pass a dense adj, or one that does not require grad")
        grad_adj = grad @ (x @ weight).t()
    return grad_adj, grad_x, grad_weight, grad_bias


torch.library.register_autograd("tensortools::graph_conv", _graph_conv_backward,
                                setup_context=_graph_conv_setup)
