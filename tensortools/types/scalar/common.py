"""What ScalarTensor's handler families share: how a handler registers, the two small
things a handler computes on instead of the dense matrix, range checks, and the
one-pass kernels.

Elementwise handlers run on the **probe**, d's pair ``[value, 0]`` repeated
(:func:`probe`, :func:`probed_result`); reductions and linear algebra on a **small
matrix**, the dense ``value * I_k`` for k <= 2 (``small.small_matrix``).

See Note [ScalarTensor's exact answers] in docs/design.md.

Under torch.func, a tensor a handler meets may be one of its wrapped tensors (batched
under vmap, tracking gradients under grad, jvp and jacrev, functional under
functionalize): it has no storage to read and no value to branch on (vmap refuses
``bool`` and ``item``). Handlers hand such an operand to the dense call
(``small.hidden``). A call without one is a constant of the transform (d's pair needs
no gradient), and its handler runs below the transforms (:func:`structured`): there,
every tensor it makes is plain, where grad and jvp would wrap even a tensor made from
d's pair.

This module imports no handler family; the families import it.
"""

from __future__ import annotations

import cmath
import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.autograd import forward_ad

from tensortools._native import C as _C
from tensortools.ops._autograd import wants_autograd
from tensortools.types.scalar.small import hidden, small_matrix, transforms_active
from tensortools.types.scalar.tensor import ScalarTensor, dim_index

__all__ = [
    "KERNEL_DTYPES",
    "structured",
    "probe",
    "probed_result",
    "pair_in",
    "plain_operand",
    "finite",
    "in_range",
    "as_index",
    "is_reduction_option",
    "as_options",
    "on_small_matrix",
    "result_tensors",
    "column_axis",
    "rebuilt",
    "ACCUMULATE_IN",
    "accumulated_total",
    "call_kernel",
    "scale_finite",
]


def structured(*funcs: Callable) -> Callable[[Callable], Callable]:
    """Register a structured handler for funcs on ScalarTensor. Calls with ``out=`` are
    left to the fallback, which writes the dense answer with torch's own out= rules (a
    subclass's handlers get out= like any other argument). Each handler returns
    NotImplemented where the dense answer is not a cheap structured one; the policy then
    decides (dense fallback by default). Under a torch.func transform, a call none of
    whose tensors is the transform's (see :func:`hidden`) runs below it."""

    def register(handler: Callable) -> Callable:
        @functools.wraps(handler)
        def without_out(*args, out=None, **kwargs):
            if out is not None:
                return NotImplemented
            if transforms_active() and not _any_hidden(args, kwargs):
                with torch._C._DisableFuncTorch():
                    return handler(*args, **kwargs)
            return handler(*args, **kwargs)

        ScalarTensor.implements(*funcs)(without_out)
        return handler

    return register


def pair_in(d: ScalarTensor, dtype: torch.dtype | None = None) -> Tensor:
    """d's pair itself (handlers only read it), or a copy in another dtype."""
    return d._pair if dtype is None else d._pair.to(dtype)


def probe(d: ScalarTensor) -> Tensor:
    """The tensor an elementwise function of d runs on in place of d's pair: the pair
    repeated, so that torch's vector loop computes its first copy and its scalar loop
    its last (C's ``probe_of``, csrc/python/scalar_values.cpp).

    See Note [ScalarTensor's exact answers] in docs/design.md."""
    return _C.scalar_probe(d._pair)


def probed_result(d: ScalarTensor, result: Any) -> Any:
    """The ScalarTensor of d's size for a function's result on the probe; NotImplemented
    where the dense answer is not value * I for every N: the off-diagonal entry is not 0,
    or the two loops disagree (then the dense matrix's diagonal holds whichever loop
    computed each entry, which depends on N)."""
    if type(result) is not Tensor:
        return NotImplemented
    pair = _C.scalar_probed_pair(result)
    if pair is None and d.dtype.is_complex:
        pair = _equal_by_value(result)
    return NotImplemented if pair is None else ScalarTensor._from_pair(d.N, pair)


def _equal_by_value(result: Tensor) -> Tensor | None:
    """The pair of a function of a complex d on the probe where the two loops differ only
    in the signs of zeros and NaNs (torch's vectorised complex neg computes 0 - z, its
    scalar loop -z: +0 and -0; sgn of an infinite z is nan+0j in one, nan+nanj in the
    other): their diagonal entries are equal, or both NaN, and both off-diagonal entries
    are 0. The dense matrix is then ``value * I`` by value (the signs of its zeros and
    NaNs depend on which loop computed each entry, as they do between two dense matrices
    of different N). The vector loop's pair, or None where it is not so."""
    n = result.numel()
    if result.dim() != 1 or n < 4 or n % 2 or result.layout != torch.strided or result.is_meta:
        return None
    if not (result.is_floating_point() or result.is_complex()):
        return None
    first, last = result[:2].resolve_conj().resolve_neg(), result[-2:].resolve_conj().resolve_neg()
    same = (first[0] == last[0]) | (first[0].isnan() & last[0].isnan())
    if not bool(same & (first[1] == 0) & (last[1] == 0)):
        return None
    return first.clone()


def _any_hidden(args: tuple, kwargs: dict) -> bool:
    return torch.utils._pytree.tree_any(
        lambda x: isinstance(x, Tensor) and hidden(x), (args, kwargs)
    )


def plain_operand(x: Any, like: ScalarTensor) -> Any:
    """x if it is a Python number or a plain 0-d tensor on like's device that needs no
    gradient, is no torch.func wrapper and, while a forward-mode AD level is open, no
    tensor at all (what a structured result can absorb); else None."""
    if isinstance(x, (bool, int, float, complex)):
        return x
    if (
        type(x) is Tensor
        and forward_ad._current_level < 0  # (a dual tensor's tangent would be lost)
        and x.dim() == 0
        and not x.requires_grad
        and x.device == like.device
        and not hidden(x)
    ):
        return x
    return None


def finite(x: Any) -> bool:
    """Whether a Python number (as ``tolist`` or ``item`` gives it) is finite. (On Python
    numbers: a 0-d tensor's torch.isfinite costs more than a whole structured call.)"""
    return cmath.isfinite(x) if isinstance(x, complex) else math.isfinite(x)


#: in_range(x, dtype): whether a magnitude the dense call computes on the way (a sum, a
#: sum of squares) lies well inside dtype's range: C's rule (scalar_rules.cpp).
#: See Note [ScalarTensor's exact answers] in docs/design.md.
in_range: Callable[[float, torch.dtype], bool] = _C.scalar_in_range


# -- the reductions' small matrix ----------------------------------------------------


def as_index(x: Any) -> int | None:
    """x as the int torch takes it as for a dim (tensor.dim_index: an int, a NumPy
    integer or a 0-d integer tensor, not a bool), where a handler can read it: a tensor
    only if plain, on a real device and no torch.func wrapper; else None."""
    if type(x) is int:
        return x
    if isinstance(x, Tensor) and (type(x) is not Tensor or x.is_meta or hidden(x)):
        return None
    return dim_index(x)


def is_reduction_option(x: Any) -> bool:
    """A reduction's argument that is not a tensor of values: a dim (or dims; an int, a
    NumPy integer or a 0-d integer tensor, see :func:`as_options`), a flag, an order, a
    dtype, or None."""
    if x is None or isinstance(x, (bool, float, str, torch.dtype)) or as_index(x) is not None:
        return True
    return isinstance(x, (tuple, list, torch.Size)) and all(as_index(i) is not None for i in x)


def as_options(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A reduction's options (see :func:`is_reduction_option`) with every dim a Python
    int: what the handlers' own reading of a dim expects. The call on the small matrix
    takes them as the user gave them, so that torch picks the overload it picks for the
    dense matrix (``max(d, torch.tensor(0))`` is the elementwise maximum, not a dim)."""

    def one(x: Any) -> Any:
        if isinstance(x, (tuple, list)):
            return type(x)(one(i) for i in x)
        index = None if isinstance(x, (bool, int)) else as_index(x)
        return x if index is None else index

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def on_small_matrix(func: Callable, d: Any, args: tuple, kwargs: dict) -> Any:
    """func on the 2x2 (or smaller) small matrix of d, or NotImplemented where the call is
    not one the reductions answer; its errors are left to the dense call, which raises
    them with the matrix's own sizes."""
    if not isinstance(d, ScalarTensor) or d.device.type == "meta":
        return NotImplemented
    if not all(is_reduction_option(a) for a in (*args, *kwargs.values())):
        return NotImplemented  # a tensor operand (max(d, other)): the dense call
    try:
        return func(small_matrix(d, min(d.N, 2)), *args, **kwargs)
    except Exception:
        return NotImplemented


def result_tensors(result: Any) -> list[Tensor]:
    return [result] if isinstance(result, Tensor) else list(result)


def column_axis(result: Any) -> int | None:
    """The axis of the small matrix's result that runs over the matrix's columns (or rows):
    the one of size 2. None when the whole matrix was reduced; -1 when the result is no
    reduction of the matrix (both axes kept)."""
    t = result_tensors(result)[0]
    axes = [a for a, size in enumerate(t.shape) if size == 2]
    if len(axes) > 1:
        return -1
    return axes[0] if axes else None


def rebuilt(like: Any, parts: list[Tensor]) -> Any:
    return parts[0] if isinstance(like, Tensor) else type(like)(parts)


#: The dtypes torch's reductions accumulate in for the half types.
ACCUMULATE_IN = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def accumulated_total(d: ScalarTensor, accumulate: bool = False) -> Tensor:
    """N * value as torch's sum and trace compute it: in float for the half types (which
    do not overflow where the dense sum does not) and returned in the input's dtype (in
    that float with accumulate=True), int64 for integers."""
    v = d._scalar()
    dtype = v.dtype if (v.is_floating_point() or v.is_complex()) else torch.int64
    v = v.to(ACCUMULATE_IN.get(dtype, dtype))
    if d.N == 0:
        total = torch.zeros_like(v)  # the empty sum, also for an Inf value
    elif v.is_complex():  # N * (a + bj) as a sum does it: no a * 0 or b * 0 terms (Inf * 0)
        total = torch.view_as_complex(torch.view_as_real(v) * d.N)
    else:
        total = v * d.N
    if total.is_floating_point() or total.is_complex():
        total = total + 0  # torch's sums start from +0: the sum of -0 values is +0
    return total if accumulate else total.to(dtype)


# -- one-pass kernels ------------------------------------------------------------------


#: Dtypes tensortools' add_diagonal and scale kernels compute in.
KERNEL_DTYPES = frozenset(
    (torch.float32, torch.float64, torch.float16, torch.bfloat16)
    + (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
)


def call_kernel(op: Callable, input: Tensor, value: Tensor) -> Any:
    """``op(input, value)`` for a kernel whose arguments the handler has checked
    (``value`` a 0-d tensor of input's dtype and device). Without a derivative to record
    (a gradient, or a tangent of forward-mode AD), the call skips the autograd layer,
    which costs more than the kernel on small inputs."""
    if wants_autograd((input, value)):
        return op(input, value)
    with torch._C._AutoDispatchBelowAutograd():
        return op(input, value)


def scale_finite(input: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """``(value * input, whether every element of input is finite)`` in one pass over
    ``input``; the second is a 0-d bool tensor. ``value * I @ input`` equals
    ``value * input`` only for a finite ``input``."""
    return call_kernel(torch.ops.tensortools.scale_finite.default, input, value)
