"""tensortools' fused operators, as Python functions over ``torch.ops.tensortools``.

Each function here is overridable: when an argument defines ``__torch_function__`` the
call goes through :func:`torch.overrides.handle_torch_function`, so tensor-like types can
intercept it. The argument checks and output shapes live once, in C++: the CPU, CUDA and
meta kernels (the last is what meta tensors and ``torch.compile`` see) call the same
check and allocation functions, so they accept and refuse the same calls alike. The
wrappers here check only what C++ cannot see: the Python types of the arguments, and
layouts that no kernel is registered for. The LLTM's autograd is registered in C++, for
the Autograd dispatch key, so its backward runs without a Python layer; the other
operators register theirs here, with differentiable formulas.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

import tensortools._native  # noqa: F401  (registers torch.ops.tensortools)

__all__ = ["add_diagonal", "axpby", "fused_conv_bn2d", "graph_conv", "lltm", "scale"]


def _check_tensors(fn_name: str, names: tuple[str, ...], args: tuple) -> None:
    """Tensors, and strided ones: the operators have kernels for the strided layout only,
    so a sparse tensor would meet the dispatcher's error, which names no argument."""
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


# ---------------------------------------------------------------------------------------
# ScalarTensor kernels: adding value * I to a dense matrix, scaling a dense tensor


def _as_value(fn_name: str, value: Any, like: Tensor) -> Tensor:
    """`value` (a number or a 0-d tensor) as a 0-d tensor of like's dtype and device."""
    def refuse(error: type[Exception], why: str) -> Exception:
        return error(f"tensortools.ops.{fn_name}: 'value' must be a number or a 0-d tensor "
                     f"that {like.dtype} holds, {why}")

    if isinstance(value, Tensor):
        if value.dim() != 0:
            raise refuse(ValueError, f"got shape {tuple(value.shape)}")
        if value.is_complex() and not like.is_complex():
            raise refuse(TypeError, f"got a {value.dtype} tensor")
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


def _structured(op: Callable, input: Tensor, value: Tensor) -> Any:
    """``op(input, value)`` for ScalarTensor's handlers, which have checked the arguments
    (``value`` a 0-d tensor of input's dtype and device). Without a gradient to record,
    the call skips the autograd layer, which costs more than the kernel on small inputs."""
    if torch.is_grad_enabled() and (input.requires_grad or value.requires_grad):
        return op(input, value)
    with torch._C._AutoDispatchBelowAutograd():
        return op(input, value)


def _scale_finite(input: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """``(value * input, whether every element of input is finite)`` in one pass over
    ``input``; the second is a 0-d bool tensor. ScalarTensor's products use it: ``value *
    I @ input`` equals ``value * input`` only for a finite ``input``."""
    return _structured(torch.ops.tensortools.scale_finite.default, input, value)


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


torch.library.register_autograd("tensortools::add_diagonal", _add_diagonal_backward,
                                setup_context=_save_value)
torch.library.register_autograd("tensortools::scale", _scale_backward,
                                setup_context=_save_inputs)
torch.library.register_autograd("tensortools::scale_finite", _scale_finite_backward,
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


# ---------------------------------------------------------------------------------------
# fused Conv2d + BatchNorm2d


def _pair(fn_name: str, name: str, value: Any) -> tuple[int, int]:
    values = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(values) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise TypeError(f"tensortools.ops.{fn_name}: '{name}' must be an int or a pair of "
                        f"ints, got {value!r}")
    return values


def fused_conv_bn2d(input: Tensor, weight: Tensor, running_mean: Tensor | None = None,
                    running_var: Tensor | None = None, gamma: Tensor | None = None,
                    beta: Tensor | None = None, stride: int | tuple[int, int] = 1,
                    padding: int | tuple[int, int] = 0, training: bool = True,
                    momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
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
            fused_conv_bn2d, relevant, input, weight, running_mean, running_var, gamma, beta,
            stride=stride, padding=padding, training=training, momentum=momentum, eps=eps)
    fn = "fused_conv_bn2d"
    _check_tensors(fn, ("input", "weight"), (input, weight))
    for name, t in zip(("running_mean", "running_var", "gamma", "beta"), optional):
        if t is not None:
            _check_tensors(fn, (name,), (t,))
    stride, padding = _pair(fn, "stride", stride), _pair(fn, "padding", padding)
    _check_number(fn, "momentum", momentum)
    _check_number(fn, "eps", eps)
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"tensortools.ops.{fn}: give both 'running_mean' and 'running_var' "
                         "or neither")
    if not training:
        if running_mean is None:
            raise ValueError(f"tensortools.ops.{fn}: 'running_mean' and 'running_var' are "
                             "required when not training")
        return torch.ops.tensortools.conv_bn2d_eval.default(
            input, weight, running_mean, running_var, gamma, beta, stride, padding, eps)
    out, mean, var = torch.ops.tensortools.conv_bn2d_forward.default(
        input, weight, gamma, beta, stride, padding, eps)
    if running_mean is not None:
        count = out.shape[0] * out.shape[2] * out.shape[3]  # values per channel
        with torch.no_grad():
            torch.ops.tensortools.conv_bn2d_update_stats.default(
                running_mean, running_var, mean, var, momentum, count)
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
        grad_output, input, weight, gamma, mean, var, *ctx.geometry,
        [need_input, need_weight, need_gamma or need_beta])
    grad_input, grad_weight, grad_gamma, grad_beta = grads
    return (grad_input if need_input else None, grad_weight if need_weight else None,
            grad_gamma if need_gamma else None, grad_beta if need_beta else None,
            None, None, None)


def _no_double_backward(ctx, *grads):
    raise RuntimeError("tensortools.ops.fused_conv_bn2d: double backward (a gradient of "
                       "the gradient) is not supported")


torch.library.register_autograd("tensortools::conv_bn2d_forward", _conv_bn2d_backward,
                                setup_context=_conv_bn2d_setup)
torch.library.register_autograd("tensortools::conv_bn2d_backward", _no_double_backward,
                                setup_context=lambda ctx, inputs, output: None)
