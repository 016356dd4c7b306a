"""ScalarTensor through tensortools' own operators (``tensortools.ops``): structured
handlers that call the operators' kernels on what the structure leaves, never forming
the N×N matrix ``value * I_N`` where the result does not need it.

- ``lltm`` with a ScalarTensor ``input`` (a batch of N one-hot rows scaled by the value,
  B = F = N): the input's part of the gates is ``value * W[:, S:]ᵀ`` (N×3S, a scaled
  slice), which the fused kernel takes as its input beside the weights ``[W[:, :S] | I_3S]``:
  the state's product, the bias and the pointwise pass run in the kernel as for a dense
  input, and autograd flows through it. Where 3S >= N that costs no less than the dense
  input (N×N), which is then formed. ScalarTensor ``old_h``/``old_cell`` (B = S = N) are
  formed: they are the size of the results.
- ``graph_conv`` with ScalarTensor ``adj``, ``x`` or ``weight``: each product with
  ``value * I`` is a scaled copy (the ``scale`` kernel), in the order the kernel picks.
- ``axpby``: structured where both operands are ScalarTensors; otherwise ``beta * t`` and
  ``alpha * value`` added to its diagonal (the ``scale`` and ``add_diagonal`` kernels).
- ``scale`` and ``add_diagonal`` of a ScalarTensor: a ScalarTensor, from the kernels run
  on its pair.

A product with ``value * I`` meets ``0 * m`` for every other entry of the dense operand
``m``: where that entry is not finite the dense product is NaN, and so is this one
(:func:`diagonal_product`). Calls these handlers do not answer (other dtypes, devices or
shapes than the operator takes) go to the policy: the dense call, which raises the
operator's own error, or the strict refusal.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from tensortools import ops
from tensortools.ops._checks import check_number
from tensortools.ops.lltm import _gates_forward, lltm_from_gates
from tensortools.types.scalar.common import (
    KERNEL_DTYPES,
    plain_operand,
    scale_finite,
    structured,
)
from tensortools.types.scalar.small import hidden, small_matrix, transforms_active
from tensortools.types.scalar.tensor import ScalarTensor

__all__ = ["diagonal_product"]


def _branch_free() -> bool:
    # under torch.func or torch.compile a handler may not read a tensor's values
    return transforms_active() or torch.compiler.is_compiling()


def diagonal_product(d: ScalarTensor, m: Tensor, *, left: bool = True) -> Tensor:
    """``d.tensor() @ m`` (``left``) or ``m @ d.tensor()`` without the N×N matrix: the
    ``scale`` kernel's ``value * m``, NaN where the dense product meets a non-finite entry
    of ``m`` in another row (left) or column (right) of the same column (row)."""
    value = d._pair[0]
    if value.dtype != m.dtype:  # (m computed under autocast)
        value = value.to(m.dtype)
    if not _branch_free() and not hidden(m):
        out, all_finite = scale_finite(m, value)
        if bool(all_finite):
            return out
    else:
        out = ops.scale(m, value)
    bad = ~torch.isfinite(m)
    counts = bad.sum(0 if left else 1, keepdim=True)
    elsewhere = counts - bad.to(counts.dtype) > 0
    return torch.where(elsewhere, math.nan, out)


def _tensors_like(d: ScalarTensor | Tensor, tensors: tuple) -> bool:
    """Whether tensors (None allowed) are tensors of d's (a ScalarTensor's, or its pair's)
    floating dtype and device: what the handlers below compute for (anything else is the
    dense call's to refuse)."""
    dtype, device = d.dtype, d.device
    if not dtype.is_floating_point:
        return False
    return all(
        t is None or (isinstance(t, Tensor) and t.dtype == dtype and t.device == device)
        for t in tensors
    )


#: The dtypes of graph_conv's and axpby's CPU kernels (csrc/checks.h, kCpuFloatingTypes);
#: their CUDA kernels take every floating dtype.
_CPU_KERNEL_DTYPES = (torch.float32, torch.float64)


def _kernel_dtype(d: ScalarTensor) -> bool:
    """Whether graph_conv's and axpby's kernels take d's dtype on d's device: a handler
    computing with other kernels must not answer a call the dense one refuses."""
    return d.device.type != "cpu" or d.dtype in _CPU_KERNEL_DTYPES


# -- the LLTM cell ----------------------------------------------------------------------


@structured(ops.lltm)
def lltm(input: Any, weights: Any, bias: Any, old_h: Any, old_cell: Any) -> Any:
    if isinstance(weights, ScalarTensor) or isinstance(bias, ScalarTensor):
        return NotImplemented  # no structure to use (and bias is never square)
    # The state is B×S, the size of both results: forming it costs what they cost.
    old_h = old_h.tensor() if isinstance(old_h, ScalarTensor) else old_h
    old_cell = old_cell.tensor() if isinstance(old_cell, ScalarTensor) else old_cell
    if not isinstance(input, ScalarTensor):
        return ops.lltm(input, weights, bias, old_h, old_cell)
    n, pair = input.N, input._pair
    if not _tensors_like(pair, (weights, bias, old_h, old_cell)) or weights.dim() != 2:
        return NotImplemented
    s = weights.shape[0] // 3
    if (
        weights.shape != (3 * s, s + n)
        or bias.shape != (3 * s,)
        or old_h.shape != (n, s)
        or old_cell.shape != (n, s)
    ):
        return NotImplemented
    if torch.is_autocast_enabled(pair.device.type):
        return _lltm_autocast(pair.device.type, input, weights, bias, old_h, old_cell)
    # gates = old_h @ W[:, :S]ᵀ + (value * I_N) @ W[:, S:]ᵀ + bias: the second term is
    # (W[:, S:] @ (value * I_N))ᵀ, a scaled slice (NaN where the dense product meets a
    # non-finite weight: diagonal_product), the first a product of N×S by S×3S; the
    # kernel's pointwise pass then runs on the gates as in the cell.
    w_input = weights[:, s:]
    plain = all(type(t) is Tensor for t in (weights, bias, old_h, old_cell))
    eager = plain and not _branch_free() and not hidden(weights)
    if eager:
        input_part, all_finite = scale_finite(w_input, pair[0])
        if not bool(all_finite):
            input_part = diagonal_product(input, w_input, left=False)
    else:
        input_part = diagonal_product(input, w_input, left=False)
    # The bias joins the input's part first: an addmm onto a transposed matrix costs two
    # passes more than onto a contiguous one, and an in-place addmm half an out-of-place
    # one (and orders its sums as the C path's; under a transform, where old_h may be
    # batched and the sum not, out of place).
    gates = input_part.t() + bias
    if eager:
        gates.addmm_(old_h, weights[:, :s].t())
    else:
        gates = torch.addmm(gates, old_h, weights[:, :s].t())
    if plain:  # (no other type to hand the call to: the operator's own call)
        new_h, new_cell, _ = _gates_forward(gates, old_cell)
        return new_h, new_cell
    return lltm_from_gates(gates, old_cell)


def _lltm_autocast(device_type: str, input: ScalarTensor, *tensors: Tensor) -> Any:
    """ops.lltm under autocast as its autocast kernel runs it (csrc/ops/autocast/
    lltm_autocast.cpp): every floating argument but a float64 one in the autocast dtype,
    then the call with autocast off."""
    lower = torch.get_autocast_dtype(device_type)

    def cast(t: Tensor) -> Tensor:
        return t.to(lower) if t.is_floating_point() and t.dtype != torch.float64 else t

    if input.dtype != torch.float64:
        input = ScalarTensor._from_pair(input.N, input._pair.to(lower))
    with torch.autocast(device_type, enabled=False):
        return ops.lltm(input, *(cast(t) for t in tensors))


# -- graph convolution ------------------------------------------------------------------


def _product(a: Any, b: Any) -> Any:
    """a @ b where either may be a ScalarTensor (both: ScalarTensor's own product)."""
    if isinstance(a, ScalarTensor) and not isinstance(b, ScalarTensor):
        return diagonal_product(a, b, left=True)
    if isinstance(b, ScalarTensor) and not isinstance(a, ScalarTensor):
        return diagonal_product(b, a, left=False)
    return torch.mm(a, b)


@structured(ops.graph_conv)
def graph_conv(adj: Any, x: Any, weight: Any, bias: Any = None) -> Any:
    scalars = [t for t in (adj, x, weight) if isinstance(t, ScalarTensor)]
    if not scalars or isinstance(bias, ScalarTensor):
        return NotImplemented
    dense = tuple(t for t in (adj, x, weight, bias) if not isinstance(t, ScalarTensor))
    if not _tensors_like(scalars[0]._pair, (*dense, *(d._pair for d in scalars))):
        return NotImplemented
    if any(t.layout != torch.strided for t in dense if t is not None and t is not adj):
        return NotImplemented
    if not _kernel_dtype(scalars[0]):
        return NotImplemented  # (the dense call refuses it, naming the argument)
    shapes = [tuple(t.shape) for t in (adj, x, weight)]
    if len(shapes[1]) != 2 or len(shapes[2]) != 2:
        return NotImplemented
    (n, f_in), f_out = shapes[1], shapes[2][1]
    if shapes[0] != (n, n) or shapes[2][0] != f_in:
        return NotImplemented
    if bias is not None and tuple(bias.shape) != (f_out,):
        return NotImplemented
    # the kernel's order: (adj @ x) @ weight when F_in <= F_out (csrc/ops/graph_conv.h)
    if f_in <= f_out:
        ax = _product(adj, x)
        if (
            bias is not None
            and not isinstance(ax, ScalarTensor)
            and not isinstance(weight, ScalarTensor)
            and not torch.is_autocast_enabled(ax.device.type)  # (bias is added as it is)
        ):
            return torch.addmm(bias, ax, weight)  # (the kernel's own call)
        out = _product(ax, weight)
    else:
        out = _product(adj, _product(x, weight))
    if isinstance(out, ScalarTensor):  # all three were: the dense matrix is the result
        out = out.tensor()
    return out if bias is None else out + bias


# -- axpby, scale, add_diagonal ---------------------------------------------------------


@structured(ops.axpby)
def axpby(x: Any, y: Any, alpha: Any, beta: Any) -> Any:
    check_number("axpby", "alpha", alpha)
    check_number("axpby", "beta", beta)
    if not (math.isfinite(alpha) and math.isfinite(beta)):
        return NotImplemented  # inf * 0 off the diagonal: the dense matrix is NaN there
    if isinstance(x, ScalarTensor) and isinstance(y, ScalarTensor):
        if x.N != y.N or x.dtype != y.dtype or x.device != y.device:
            return NotImplemented
        pair = torch.ops.tensortools.axpby.default(x._pair, y._pair, float(alpha), float(beta))
        return ScalarTensor._from_pair(x.N, pair)
    d, t, a, b = (x, y, alpha, beta) if isinstance(x, ScalarTensor) else (y, x, beta, alpha)
    if not _tensors_like(d, (t,)) or t.layout != torch.strided or not _kernel_dtype(d):
        return NotImplemented
    try:
        shape = t.shape if t.shape == d.shape else torch.broadcast_shapes(d.shape, t.shape)
    except RuntimeError:
        return NotImplemented
    # b * t, broadcast to the result's shape (no N×N beyond the result), then a * value
    # added to its diagonal in place (N entries: add_diagonal would copy the whole result)
    out = ops.scale(t if t.shape == shape else t.expand(shape), float(b))
    out.diagonal(dim1=-2, dim2=-1).add_(d._scalar() * float(a))
    return out


def _plain_value(d: ScalarTensor, value: Any) -> bool:
    """Whether value can go into a ScalarTensor's pair (a number, or a 0-d tensor that
    needs no gradient and is no torch.func wrapper); other tensors take the dense call."""
    if isinstance(value, ScalarTensor):
        return False
    return not isinstance(value, Tensor) or plain_operand(value, d) is not None


def _finite_in(value: Any, dtype: torch.dtype) -> bool:
    """Whether value is a Python number that dtype holds finite."""
    if not isinstance(value, (bool, int, float)):
        return False
    return not dtype.is_floating_point or abs(value) <= torch.finfo(dtype).max


@structured(ops.scale)
def scale(input: Any, value: Any) -> Any:
    if not isinstance(input, ScalarTensor) or input.dtype not in KERNEL_DTYPES:
        return NotImplemented
    if not _plain_value(input, value):
        return NotImplemented
    pair = ops.scale(input._pair, value)  # (refuses a bad value as the dense call does)
    # 0 * value off the diagonal is 0 for a number the dtype holds finite (no branch on the
    # values: torch.compile traces it whole); else it may be NaN (0 * inf, 0 * nan)
    if not _finite_in(value, input.dtype) and not bool(pair[1] == 0):
        return NotImplemented
    return ScalarTensor._from_pair(input.N, pair)


@structured(ops.add_diagonal)
def add_diagonal(input: Any, value: Any) -> Any:
    if not isinstance(input, ScalarTensor) or input.dtype not in KERNEL_DTYPES:
        return NotImplemented
    if not _plain_value(input, value):
        return NotImplemented
    # value * I_2 + value' * I_2: its first row is the new pair
    return ScalarTensor._from_pair(input.N, ops.add_diagonal(small_matrix(input, 2), value)[0])
