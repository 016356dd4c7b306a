"""ScalarTensor's reductions whose answer is the small matrix's, widened to N: every
column (and row) of ``value * I_N`` holds one ``value`` and N - 1 zeros, the whole matrix
N values and N² - N zeros.

Each reduction first runs on the small matrix, the dense ``value * I_k`` for
k = min(N, 2). For larger N, a reduction whose answer does not depend on how many zeros
there are (amax, max, argmax, prod, all, ...; sum and count_nonzero along one dim) widens
its answer to N columns; sums over the whole matrix are N times the 1x1 answer. The
reductions computed by a closed form over the counts (mean, var, std, logsumexp, norms)
are :mod:`~tensortools.types.scalar.closed_forms`.

See Note [ScalarTensor's exact answers] in docs/design.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensortools._native import C as _C
from tensortools.types.scalar.common import (
    ACCUMULATE_IN,
    accumulated_total,
    column_axis,
    in_range,
    on_small_matrix,
    rebuilt,
    result_tensors,
    structured,
)
from tensortools.types.scalar.small import index_tensor, small_matrix
from tensortools.types.scalar.tensor import ScalarTensor

__all__: list[str] = []


def _widen(t: Tensor, axis: int, n: int, index: bool) -> Tensor:
    """The small matrix's per-column result t, for n columns: entry 0 is column 0's; column 1
    stands for every later column j. For an index result (argmax), column 1's entry is 1
    where it picked the value on the diagonal and 0 where it picked a zero: column j's is
    j or 0 alike."""
    if not index:
        return t.index_select(axis, index_tensor("widen", n, t.device))
    shape = [1] * t.dim()
    shape[axis] = n
    j = index_tensor("arange", n, t.device).view(shape)
    return torch.where(j == 0, t.narrow(axis, 0, 1), j * t.narrow(axis, 1, 1))


# -- the whole sum and trace: N * value ---------------------------------------


def _whole_sum(input):
    """torch.sum(d) without further arguments: N * value, by C's ``whole_sum``
    (csrc/python/scalar_rules.cpp, which the compiled path runs for the same call, and
    which says where it leaves the call to the dense sum)."""
    total = _C.scalar_whole_sum(input.N, input._pair)
    return NotImplemented if total is None else total


@functools.cache
def _has_trace(dtype: torch.dtype) -> bool:
    """Whether torch's trace has a kernel for dtype (not for bool or uint16/32/64)."""
    try:
        torch.trace(torch.zeros(1, 1, dtype=dtype))
    except (RuntimeError, NotImplementedError):
        return False
    return True


@structured(torch.trace)
def _trace(input):
    if not _has_trace(input.dtype):
        return NotImplemented  # the dense call's error
    return accumulated_total(input)


# -- reductions whose answer does not depend on the number of zeros -------------------

#: For these, a column's answer is the same for one zero or N - 1 of them, and so is the
#: whole matrix's for 2 zeros or N² - N. (The index results of max, min, argmax, argmin
#: are the position of the value or of the first zero.)
EXTREMES: tuple[Callable, ...] = (
    torch.amax,
    torch.amin,
    torch.aminmax,
    torch.max,
    torch.min,
    torch.argmax,
    torch.argmin,
    torch.all,
    torch.any,
    torch.prod,
)
#: Their results that are indices (max and min give (values, indices) along a dim).
_INDEX_RESULTS = {torch.argmax: (0,), torch.argmin: (0,), torch.max: (1,), torch.min: (1,)}

#: Sums: along one dim a column's sum is the value (zeros add nothing); over both dims N
#: times what the 1x1 small matrix gives.
SUMS: tuple[Callable, ...] = (torch.sum, torch.nansum, torch.count_nonzero)


def _extreme(func: Callable) -> Callable:
    def handler(input: Any, *args: Any, **kwargs: Any) -> Any:
        result = on_small_matrix(func, input, args, kwargs)
        if result is NotImplemented or input.N <= 2:
            return result
        if func is torch.prod and input.dtype.is_complex:
            # the signs of a complex product's zero parts follow the order of its
            # multiplications, which the dense reduction picks for itself
            return NotImplemented
        axis = column_axis(result)
        if axis is None:
            return _whole_prod(input, result) if func is torch.prod else result
        if axis < 0:
            return NotImplemented
        indices = _INDEX_RESULTS.get(func, ())
        parts = result_tensors(result)
        parts = [_widen(t, axis, input.N, i in indices) for i, t in enumerate(parts)]
        return rebuilt(result, parts)

    handler.__name__ = f"_extreme_{func.__name__}"
    return handler


#: More than the entries apart that torch's CPU product reduction multiplies into one
#: partial product (a vector's lanes times its unrolling, 64 with AVX-512), with margin.
_PRODUCT_STRIDE = 256


def _whole_prod(d: ScalarTensor, small: Tensor) -> Any:
    """The whole matrix's product from the 2x2 small matrix's: a real product's sign is the
    parity of its negative factors, in any order. The small matrix has two copies of the
    value, the matrix N: for an odd N and a value with its sign bit set (-0 included), a
    zero product is -0. Where a product of up to N copies of a finite value could
    overflow, the order of multiplications decides whether an infinite partial product
    meets a zero (NaN) or a zero comes first (0): the CPU reduction multiplies entries a
    vector's width (times its unrolling, at most 64 entries) apart, so once N + 1 exceeds
    that no run of diagonal entries goes without a zero between them, and the product
    is 0 for any N; elsewhere the dense call answers."""
    if small.is_floating_point() and not (d.N + 1 > _PRODUCT_STRIDE and d.device.type == "cpu"):
        v = d._pair.tolist()[0]
        if math.isfinite(v) and abs(v) > 1:
            largest = torch.finfo(small.dtype).max
            if d.N * math.log(abs(v)) >= math.log(largest / 4):
                return NotImplemented
    if d.N % 2 and small.is_floating_point() and torch.signbit(d._pair[0]).item():
        return torch.neg(small)  # (NaN stays NaN: inf * 0)
    return small


def _total(func: Callable, d: ScalarTensor, args: tuple, kwargs: dict) -> Any:
    """func over the whole matrix, for a sum: N times its answer on the 1x1 small matrix,
    multiplied in float for the half types as torch accumulates them; the dense call
    answers where the product comes near overflowing (the order of its additions decides
    there) or the value is not finite."""
    one = func(small_matrix(d, 1), *args, **kwargs)
    if one.is_complex() or one.dtype == torch.bool:
        return NotImplemented
    if one.is_floating_point():
        total = one.to(ACCUMULATE_IN.get(one.dtype, one.dtype)) * d.N
        if not in_range(float(total), one.dtype) and not math.isinf(float(one)):
            return NotImplemented
        return total.to(one.dtype)
    return one * d.N  # integers: the dense sum wraps around as this product does


def _sum_like(func: Callable) -> Callable:
    def handler(input: Any, *args: Any, **kwargs: Any) -> Any:
        if func is torch.sum and not args and not kwargs and isinstance(input, ScalarTensor):
            return _whole_sum(input)  # the common call, without the small matrix
        result = on_small_matrix(func, input, args, kwargs)
        if result is NotImplemented or input.N <= 2:
            return result
        axis = column_axis(result)
        if axis is None:
            return _total(func, input, args, kwargs)
        if axis < 0:
            return NotImplemented
        return _widen(result, axis, input.N, index=False)

    handler.__name__ = f"_sum_{func.__name__}"
    return handler


for _func in EXTREMES:
    structured(_func)(_extreme(_func))
for _func in SUMS:
    structured(_func)(_sum_like(_func))
