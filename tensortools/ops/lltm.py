"""The LLTM recurrent cell, fused: ``torch.ops.tensortools.lltm_forward``, and the LLTM over
a whole sequence in one operator: ``torch.ops.tensortools.lltm_sequence_forward``, or
``lltm_sequence_inference`` where no derivative is wanted, with their autograd (the
backward kernels give the gradients), tangent formulas and batching rules."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.overrides import handle_torch_function

from tensortools._native import C as _C
from tensortools.dispatch.batch_rules import batch_rule
from tensortools.ops._autograd import (
    _LIB,
    below_autograd,
    loop_or_fold,
    loop_vmap,
    no_second_order,
    register,
    wants_autograd,
)
from tensortools.ops._checks import check_tensors, overridden

__all__ = ["lltm", "lltm_sequence"]

_LLTM_ARGS = ("input", "weights", "bias", "old_h", "old_cell")
_SEQUENCE_ARGS = ("input", "weights", "bias", "h0", "c0")


@batch_rule(rows=(0, 3, 4), min_ndim=2)  # (a batch of input, old_h or old_cell rows)
def lltm(
    input: Tensor, weights: Tensor, bias: Tensor, old_h: Tensor, old_cell: Tensor
) -> tuple[Tensor, Tensor]:
    """One step of the LLTM recurrent cell, fused.

    Shapes (B batch, F features, S state size): ``input`` B×F, ``weights`` 3S×(S+F),
    ``bias`` 3S, ``old_h`` B×S, ``old_cell`` B×S; all of one floating dtype and device.
    Returns ``(new_h, new_cell)``, both B×S. The maths is :func:`tensortools.reference.lltm`.
    A batch of zero rows gives empty results (and zero gradients for weights and bias).
    """
    args = (input, weights, bias, old_h, old_cell)
    if overridden(args):
        return handle_torch_function(lltm, args, *args)
    check_tensors("lltm", _LLTM_ARGS, args)
    new_h, new_cell, _, _ = _lltm_forward(*args)
    return new_h, new_cell


@batch_rule(rows=(0, 1), min_ndim=2)  # (a batch of gates or old_cell rows)
def lltm_from_gates(gates: Tensor, old_cell: Tensor) -> tuple[Tensor, Tensor]:
    """The LLTM cell's fused pointwise pass on pre-activation gates computed elsewhere:
    ``gates`` B×3S (``X @ weights.T + bias`` of :func:`lltm`'s maths), ``old_cell`` B×S,
    of one floating dtype and device. Returns ``(new_h, new_cell)``, both B×S. Not in
    ``__all__``: ScalarTensor's ``lltm`` handler forms the input's part of the gates
    without a matrix product and calls it (tensortools.types.scalar.operators)."""
    args = (gates, old_cell)
    if overridden(args):
        return handle_torch_function(lltm_from_gates, args, *args)
    check_tensors("lltm.lltm_from_gates", ("gates", "old_cell"), args)
    new_h, new_cell, _ = _gates_forward(*args)
    return new_h, new_cell


# (h_n and c_n have the rows of h0 and c0, whatever T; output's dim 0 is time)
@batch_rule(rows=(3, 4), results=(1, 2))
def lltm_sequence(
    input: Tensor, weights: Tensor, bias: Tensor, h0: Tensor, c0: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The LLTM cell applied over a whole sequence, in one operator.

    Shapes (T steps, B batch, F features, S state size): ``input`` T×B×F, ``weights``
    3S×(S+F), ``bias`` 3S, ``h0`` and ``c0`` B×S; all of one floating dtype and device.
    Returns ``(output, h_n, c_n)``: ``output`` T×B×S holds every step's new h, ``h_n`` and
    ``c_n`` (B×S) are the last step's h and cell (``h0`` and ``c0`` for T = 0). The maths
    is T calls of :func:`lltm` (:func:`tensortools.reference.lltm_sequence`); the input's
    part of every step's gates is one matrix product over all steps, and backward computes
    the gradients of ``input``, ``weights`` and ``bias`` in one product each. Every sequence
    of a batch has length T (no padding or packed sequences). Where no derivative is wanted
    (``torch.no_grad()``, ``torch.inference_mode()``, or no argument requires grad, outside
    forward-mode AD and torch.func transforms) it runs
    ``torch.ops.tensortools.lltm_sequence_inference``: the same results, bit for bit, with
    no step's cell or gates kept for backward.
    """
    args = (input, weights, bias, h0, c0)
    if overridden(args):
        return handle_torch_function(lltm_sequence, args, *args)
    check_tensors("lltm_sequence", _SEQUENCE_ARGS, args)
    if not wants_autograd(args):
        # No gradient wanted: the same forward, keeping nothing for backward.
        output, h_n, c_n = _sequence_inference(*args)
        return output, h_n, c_n
    output, h_n, c_n, _, _ = _sequence_forward(*args)
    return output, h_n, c_n


@batch_rule(rows=(0, 3, 4), min_ndim=3)  # (the samples at dim 0 of every result)
def lltm_sequence_batch_first(
    input: Tensor, weights: Tensor, bias: Tensor, h0: Tensor, c0: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`lltm_sequence` over ``input`` B×T×F, ``output`` B×T×S: what
    ``nn.LLTMSequence(batch_first=True)`` runs. A function of its own (not in ``__all__``)
    so that a type sees the call with the samples at dim 0 of its input and of every
    result (a MetadataTensor batch keeps its labels through it), not two transposes."""
    args = (input, weights, bias, h0, c0)
    if overridden(args):
        return handle_torch_function(lltm_sequence_batch_first, args, *args)
    if not isinstance(input, Tensor) or input.dim() != 3:
        check_tensors("lltm_sequence", _SEQUENCE_ARGS[:1], args[:1])
        raise ValueError(
            f"tensortools.ops.lltm_sequence: 'input' must be 3-D (batch x time x features), "
            f"got {input.dim()}-D"
        )
    output, h_n, c_n = lltm_sequence(input.transpose(0, 1), weights, bias, h0, c0)
    return output.transpose(0, 1), h_n, c_n


# Autograd: the backward kernels (lltm_backward, lltm_sequence_backward) give the
# gradients; the tangents follow the cell's maths below, step by step for a sequence.

_SECOND_ORDER = "; use tensortools.reference.{} for higher-order derivatives"


def _add(total, term):
    return term if total is None else total if term is None else total + term


def _cell_tangent(input, weights, bias, old_h, old_cell, t_input, t_weights, t_bias, t_h, t_c):
    """One step's (new_h, new_cell) and their tangents (None for none), from the step's
    arguments and theirs (None for none). The step is recomputed here from its arguments,
    in ATen operators, rather than read from the kernel's saved gates: so the tangents are
    themselves differentiable (reverse over forward mode, jacrev(jacfwd(f)), is right)."""
    X = torch.cat([old_h, input], dim=-1)
    gates = torch.nn.functional.linear(X, weights, bias)
    t_gates = None
    if t_h is not None or t_input is not None:
        t_X = torch.cat(
            [
                torch.zeros_like(old_h) if t_h is None else t_h,
                torch.zeros_like(input) if t_input is None else t_input,
            ],
            dim=-1,
        )
        t_gates = t_X @ weights.t()
    if t_weights is not None:
        t_gates = _add(t_gates, X @ t_weights.t())
    t_gates = _add(t_gates, t_bias)
    return _gates_tangent(gates, old_cell, t_gates, t_c)


def _gates_tangent(gates, old_cell, t_gates, t_c):
    """The pointwise pass's (new_h, new_cell) and their tangents (None for none), from the
    pre-activation gates, old_cell and their tangents (None for none), in ATen operators
    (see _cell_tangent)."""
    ig, og, cc = gates.chunk(3, dim=-1)
    ig, og, cc = torch.sigmoid(ig), torch.sigmoid(og), torch.nn.functional.elu(cc)
    new_cell = old_cell + cc * ig
    tanh_cell = torch.tanh(new_cell)
    t_new_cell, t_og = t_c, None
    if t_gates is not None:
        t_i, t_o, t_cc = t_gates.chunk(3, dim=-1)
        # sigmoid' = s (1 - s); elu' = 1 where elu > 0, else elu + 1
        t_cc = torch.where(cc > 0, t_cc, (cc + 1) * t_cc)
        t_new_cell = _add(t_new_cell, t_cc * ig + cc * (ig * (1 - ig) * t_i))
        t_og = og * (1 - og) * t_o
    t_new_h = None
    if t_new_cell is not None:
        t_new_h = (1 - tanh_cell * tanh_cell) * og * t_new_cell
    if t_og is not None:
        t_new_h = _add(t_new_h, tanh_cell * t_og)
    return tanh_cell * og, new_cell, t_new_h, t_new_cell


def _zeros_if_none(grad, like):
    return torch.zeros_like(like) if grad is None else grad


def _lltm_setup(ctx, inputs, output):
    _, new_cell, gates, X = output
    ctx.save_for_backward(new_cell, gates, X, inputs[1])
    ctx.save_for_forward(*inputs)
    ctx.mark_non_differentiable(gates, X)
    # gates and X never get gradients; zeros for them would be allocated for nothing.
    ctx.set_materialize_grads(False)


def _lltm_backward(ctx, grad_h, grad_cell, _grad_gates, _grad_X):
    new_cell, gates, X, weights = ctx.saved_tensors
    # An output that did not reach the loss has no gradient: it is zero.
    grad_h, grad_cell = _zeros_if_none(grad_h, new_cell), _zeros_if_none(grad_cell, new_cell)
    return _lltm_backward_op(grad_h, grad_cell, new_cell, gates, X, weights)


def _lltm_jvp(ctx, *tangents):
    _, _, t_h, t_cell = _cell_tangent(*ctx.saved_tensors, *tangents)
    return t_h, t_cell, None, None


def _fold_rows(t, d, size):
    """A per-sample B×k argument, vmapped at ``d`` (or None: shared), as (size·B)×k."""
    t = t.expand(size, *t.shape) if d is None else t.movedim(d, 0)
    return t.flatten(0, 1)


def _sample_rows(t, d):
    """The rows B of one sample's B×k argument ``t``, vmapped at ``d`` (or None): its
    dim 0 once the vmapped dim is left out (which may come before it)."""
    return t.shape[1 if d is not None and d % t.dim() == 0 else 0]


def _lltm_fold(info, in_dims, input, weights, bias, old_h, old_cell):
    # Samples are more rows of the cell's batch (unless each has its own parameters).
    V, B = info.batch_size, _sample_rows(old_h, in_dims[3])
    input_dim, _, _, old_h_dim, old_cell_dim = in_dims
    input, old_h = _fold_rows(input, input_dim, V), _fold_rows(old_h, old_h_dim, V)
    old_cell = _fold_rows(old_cell, old_cell_dim, V)
    out = torch.ops.tensortools.lltm_forward.default(input, weights, bias, old_h, old_cell)
    return tuple(o.unflatten(0, (V, B)) for o in out), (0, 0, 0, 0)


def _gates_setup(ctx, inputs, output):
    _, new_cell, activated = output
    ctx.save_for_backward(new_cell, activated)
    ctx.save_for_forward(*inputs)
    ctx.mark_non_differentiable(activated)
    ctx.set_materialize_grads(False)


def _gates_backward(ctx, grad_h, grad_cell, _grad_activated):
    new_cell, activated = ctx.saved_tensors
    grad_h, grad_cell = _zeros_if_none(grad_h, new_cell), _zeros_if_none(grad_cell, new_cell)
    return _gates_backward_op(grad_h, grad_cell, new_cell, activated)


def _gates_jvp(ctx, t_gates, t_cell):
    _, _, t_h, t_cell = _gates_tangent(*ctx.saved_tensors, t_gates, t_cell)
    return t_h, t_cell, None


def _rows_vmap(op):
    """A batching rule for an operator all of whose arguments and results are B×k rows,
    each row computed alone: the samples are more rows."""

    def rule(info, in_dims, *args):
        V = info.batch_size
        B = next(_sample_rows(a, d) for a, d in zip(args, in_dims) if d is not None)
        out = op(*(_fold_rows(a, d, V) for a, d in zip(args, in_dims)))
        return tuple(o.unflatten(0, (V, B)) for o in out), (0,) * len(out)

    return rule


def _lltm_sequence_setup(ctx, inputs, output):
    input, weights, bias, h0, c0 = inputs
    output, _, _, cells, gates = output
    # Not c0: the gradients do not depend on it (so a caller may reuse its buffer).
    ctx.save_for_backward(input, weights, h0, output, cells, gates)
    ctx.save_for_forward(*inputs)
    ctx.mark_non_differentiable(cells, gates)
    ctx.set_materialize_grads(False)


def _lltm_sequence_backward(ctx, grad_output, grad_h_n, grad_c_n, _grad_cells, _grad_gates):
    input, weights, h0, output, cells, gates = ctx.saved_tensors
    # Only the gradients autograd will use: the input of a sequence model seldom needs
    # one, and its product is a third of the backward's work when F >> S.
    mask = list(ctx.needs_input_grad[:3])
    d_input, d_weights, d_bias, d_h0, d_c0 = _sequence_backward_op(
        _zeros_if_none(grad_output, output),
        _zeros_if_none(grad_h_n, h0),
        _zeros_if_none(grad_c_n, h0),
        input,
        weights,
        h0,
        output,
        cells,
        gates,
        mask,
    )
    wanted = [g if m else None for g, m in zip((d_input, d_weights, d_bias), mask)]
    return (*wanted, d_h0, d_c0)


def _lltm_sequence_jvp(ctx, t_input, t_weights, t_bias, t_h0, t_c0):
    # The tangent recurrence: the cell's formula, once per step.
    input, weights, bias, h0, c0 = ctx.saved_tensors
    h, c, t_h, t_c, t_output = h0, c0, t_h0, t_c0, []
    for t in range(input.shape[0]):
        t_x = None if t_input is None else t_input[t]
        h, c, t_h, t_c = _cell_tangent(
            input[t], weights, bias, h, c, t_x, t_weights, t_bias, t_h, t_c
        )
        t_output.append(torch.zeros_like(h) if t_h is None else t_h)
    t_output = torch.stack(t_output) if t_output else input.new_zeros(0, *h0.shape)
    return t_output, t_h, t_c, None, None


def _sequence_vmap(op):
    """Samples are more sequences of the batch (dim 1 of the input), unless each has its
    own parameters (a loop)."""

    def fold(info, in_dims, input, weights, bias, h0, c0):
        V, B = info.batch_size, _sample_rows(h0, in_dims[3])
        input = (
            input.expand(V, *input.shape) if in_dims[0] is None else input.movedim(in_dims[0], 0)
        )
        input = input.movedim(0, 1).flatten(1, 2)
        h0, c0 = _fold_rows(h0, in_dims[3], V), _fold_rows(c0, in_dims[4], V)
        out = op(input, weights, bias, h0, c0)
        # output, cells and gates are T×(V·B)×k, h_n and c_n (V·B)×S
        dims = tuple(1 if o.dim() == 3 else 0 for o in out)
        return tuple(o.unflatten(d, (V, B)) for o, d in zip(out, dims)), dims

    return loop_or_fold(op, (1, 2), fold)


# (each register gives the call the entry points and backward formulas make: see register)
_lltm_forward = register(
    "tensortools::lltm_forward",
    setup_context=_lltm_setup,
    backward=_lltm_backward,
    jvp=_lltm_jvp,
    vmap=loop_or_fold(torch.ops.tensortools.lltm_forward.default, (1, 2), _lltm_fold),
    # (the plain path's Function in C++: 14-33% less per step at 16/32/128 than in Python)
    compiled=_C.lltm_cell_autograd,
)
_lltm_backward_op = register(
    "tensortools::lltm_backward",
    setup_context=lambda ctx, inputs, output: None,
    backward=no_second_order("lltm", _SECOND_ORDER.format("lltm")),
    jvp=no_second_order("lltm", _SECOND_ORDER.format("lltm")),
    # The weights' and bias' gradients sum over the batch: per sample, a loop.
    vmap=loop_vmap(torch.ops.tensortools.lltm_backward.default),
)
# The cell's pointwise pass on gates computed elsewhere (ScalarTensor's lltm handler forms
# the input's part of the gates without a matrix product: lltm_from_gates)
_gates_forward = register(
    "tensortools::lltm_gates_forward",
    setup_context=_gates_setup,
    backward=_gates_backward,
    jvp=_gates_jvp,
    vmap=_rows_vmap(torch.ops.tensortools.lltm_gates_forward.default),
)
_gates_backward_op = register(
    "tensortools::lltm_gates_backward",
    setup_context=lambda ctx, inputs, output: None,
    backward=no_second_order("lltm", _SECOND_ORDER.format("lltm")),
    jvp=no_second_order("lltm", _SECOND_ORDER.format("lltm")),
    vmap=_rows_vmap(torch.ops.tensortools.lltm_gates_backward.default),
)
_sequence_forward = register(
    "tensortools::lltm_sequence_forward",
    setup_context=_lltm_sequence_setup,
    backward=_lltm_sequence_backward,
    jvp=_lltm_sequence_jvp,
    vmap=_sequence_vmap(torch.ops.tensortools.lltm_sequence_forward.default),
)
_sequence_backward_op = register(
    "tensortools::lltm_sequence_backward",
    setup_context=lambda ctx, inputs, output: None,
    backward=no_second_order("lltm_sequence", _SECOND_ORDER.format("lltm_sequence")),
    jvp=no_second_order("lltm_sequence", _SECOND_ORDER.format("lltm_sequence")),
    vmap=loop_vmap(torch.ops.tensortools.lltm_sequence_backward.default),
)
torch.library.register_vmap(
    "tensortools::lltm_sequence_inference",
    _sequence_vmap(torch.ops.tensortools.lltm_sequence_inference.default),
    lib=_LIB,
)
_sequence_inference = below_autograd(torch.ops.tensortools.lltm_sequence_inference.default)
