"""ScalarTensor's reductions, derived from how many of the matrix's entries are ``value``
and how many are 0 rather than written one by one.

Every column (and row) of ``value * I_N`` holds one ``value`` and N - 1 zeros; the whole
matrix N values and N² - N zeros. Each reduction first runs on a small stand-in, the
dense ``value * I_k`` for k = min(N, 2): that call checks the arguments, picks the dtype
and the shape (dim, keepdim, dtype=) and raises the dense call's errors, exactly as the
dense call would. For N <= 2 the stand-in is the matrix itself and its answer is the
answer. For larger N:

- a reduction whose answer does not depend on how many zeros there are (amax, max, argmax,
  prod, all, ...; sum and count_nonzero along one dim) widens the stand-in's answer to N
  columns: column 1 stands for every column from 1 on;
- the others (mean, var, std, logsumexp, norms; sum over both dims) compute their closed
  form over "c values and z zeros" in float64, where the dense call's own sums cannot
  overflow or lose the value (see :func:`_in_range`); elsewhere the dense call answers.
"""

from __future__ import annotations

import cmath
import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensortools.types.scalar_handlers import FAST_FROBENIUS, FAST_SUM, _structured
from tensortools.types.scalar_handlers import _mean as _whole_mean
from tensortools.types.scalar_handlers import _sum as _whole_sum
from tensortools.types.scalar_tensor import ScalarTensor

__all__: list[str] = []


def _setting(x: Any) -> bool:
    """A reduction's argument that is not a tensor: a dim (or dims), a flag, an order, a
    dtype, or None."""
    if x is None or isinstance(x, (bool, int, float, str, torch.dtype)):
        return True
    return isinstance(x, (tuple, list, torch.Size)) and all(
        isinstance(i, int) and not isinstance(i, bool) for i in x
    )


@functools.lru_cache(maxsize=64)
def _cached(kind: str, n: int, device: torch.device) -> Tensor:
    return _made(kind, n, device)


def _made(kind: str, n: int, device: torch.device) -> Tensor:
    if kind == "stand-in":
        return torch.tensor([[0, 1], [1, 0]], device=device)[:n, :n]
    if kind == "widen":
        index = torch.ones(n, dtype=torch.long, device=device)
        index[:1] = 0
        return index
    return torch.arange(n, device=device)


def _indices(kind: str, n: int, device: torch.device) -> Tensor:
    """Index tensors the handlers read (never write): "stand-in" picks value * I_n (n <= 2)
    out of the pair [value, 0]; "widen" picks column 0, then column 1 n - 1 times;
    "arange" is 0 .. n - 1. Kept for sizes up to 4096 (at most 64 of them, 2 MB), made
    per call beyond."""
    return _cached(kind, n, device) if n <= 4096 else _made(kind, n, device)


def _stand_in(d: ScalarTensor, k: int) -> Tensor:
    """The dense ``value * I_k`` (k <= 2), with the signed zeros of d's matrix."""
    return d._pair.take(_indices("stand-in", k, d._pair.device))


def _on_stand_in(func: Callable, d: Any, args: tuple, kwargs: dict) -> Any:
    """func on the 2x2 (or smaller) stand-in of d, or NotImplemented where the call is
    not one this module answers; its errors are left to the dense call, which raises
    them with the matrix's own sizes."""
    if not isinstance(d, ScalarTensor) or d.device.type == "meta":
        return NotImplemented
    if not all(_setting(a) for a in (*args, *kwargs.values())):
        return NotImplemented  # a tensor operand (max(d, other)): the dense call
    try:
        return func(_stand_in(d, min(d.N, 2)), *args, **kwargs)
    except Exception:
        return NotImplemented


def _tensors(result: Any) -> list[Tensor]:
    return [result] if isinstance(result, Tensor) else list(result)


def _column_axis(result: Any) -> int | None:
    """The axis of the stand-in's result that runs over the matrix's columns (or rows):
    the one of size 2. None when the whole matrix was reduced; -1 when the result is no
    reduction of the matrix (both axes kept)."""
    t = _tensors(result)[0]
    axes = [a for a, size in enumerate(t.shape) if size == 2]
    if len(axes) > 1:
        return -1
    return axes[0] if axes else None


def _widen(t: Tensor, axis: int, n: int, index: bool) -> Tensor:
    """The stand-in's per-column result t, for n columns: entry 0 is column 0's; column 1
    stands for every later column j. For an index result (argmax), column 1's entry is 1
    where it picked the value on the diagonal and 0 where it picked a zero: column j's is
    j or 0 alike."""
    if not index:
        return t.index_select(axis, _indices("widen", n, t.device))
    shape = [1] * t.dim()
    shape[axis] = n
    j = _indices("arange", n, t.device).view(shape)
    return torch.where(j == 0, t.narrow(axis, 0, 1), j * t.narrow(axis, 1, 1))


def _rebuild(like: Any, parts: list[Tensor]) -> Any:
    return parts[0] if isinstance(like, Tensor) else type(like)(parts)


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
#: times what the 1x1 stand-in gives.
SUMS: tuple[Callable, ...] = (torch.sum, torch.nansum, torch.count_nonzero)


def _extreme(func: Callable) -> Callable:
    def handler(input: Any, *args: Any, **kwargs: Any) -> Any:
        result = _on_stand_in(func, input, args, kwargs)
        if result is NotImplemented or input.N <= 2:
            return result
        if func is torch.prod and input.dtype.is_complex:
            # the signs of a complex product's zero parts follow the order of its
            # multiplications, which the dense reduction picks for itself
            return NotImplemented
        axis = _column_axis(result)
        if axis is None:
            return _whole_prod(input, result) if func is torch.prod else result
        if axis < 0:
            return NotImplemented
        indices = _INDEX_RESULTS.get(func, ())
        parts = _tensors(result)
        parts = [_widen(t, axis, input.N, i in indices) for i, t in enumerate(parts)]
        return _rebuild(result, parts)

    handler.__name__ = f"_extreme_{func.__name__}"
    return handler


def _whole_prod(d: ScalarTensor, stand_in: Tensor) -> Tensor:
    """The whole matrix's product from the 2x2 stand-in's: a real product's sign is the
    parity of its negative factors, in any order. The stand-in has two copies of the
    value, the matrix N: for an odd N and a value with its sign bit set (-0 included), a
    zero product is -0."""
    if d.N % 2 and stand_in.is_floating_point() and torch.signbit(d._pair[0]).item():
        return torch.neg(stand_in)  # (NaN stays NaN: inf * 0)
    return stand_in


_ACCUMULATE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def _total(func: Callable, d: ScalarTensor, args: tuple, kwargs: dict) -> Any:
    """func over the whole matrix, for a sum: N times its answer on the 1x1 stand-in,
    multiplied in float for the half types as torch accumulates them; the dense call
    answers where the product comes near overflowing (the order of its additions decides
    there) or the value is not finite."""
    one = func(_stand_in(d, 1), *args, **kwargs)
    if one.is_complex() or one.dtype == torch.bool:
        return NotImplemented
    if one.is_floating_point():
        total = one.to(_ACCUMULATE.get(one.dtype, one.dtype)) * d.N
        if not _in_range(float(total), one.dtype) and not math.isinf(float(one)):
            return NotImplemented
        return total.to(one.dtype)
    return one * d.N  # integers: the dense sum wraps around as this product does


def _sum_like(func: Callable) -> Callable:
    def handler(input: Any, *args: Any, **kwargs: Any) -> Any:
        if func is torch.sum and not args and not kwargs and isinstance(input, ScalarTensor):
            return _whole_sum(input)  # the common call, without the stand-in
        result = _on_stand_in(func, input, args, kwargs)
        if result is NotImplemented or input.N <= 2:
            return result
        axis = _column_axis(result)
        if axis is None:
            return _total(func, input, args, kwargs)
        if axis < 0:
            return NotImplemented
        return _widen(result, axis, input.N, index=False)

    handler.__name__ = f"_sum_{func.__name__}"
    return handler


# -- reductions by their closed form over c values and z zeros ------------------------


def _in_range(x: float, dtype: torch.dtype) -> bool:
    """Whether a magnitude the dense call computes on the way (a sum, a sum of squares)
    lies well inside dtype's normal range, so that the order of the dense call's
    additions and roundings cannot decide between a number and infinity or zero."""
    info = torch.finfo(dtype.to_real() if dtype.is_complex else dtype)
    x = abs(x)
    return x == 0 or 4 * info.tiny <= x <= info.max / 4


def _value(d: ScalarTensor) -> complex | float | None:
    """d's value as a Python number, or None where it is not finite (the dense call
    answers: inf - inf and 0 * inf decide there)."""
    v = d._pair.tolist()[0]
    return v if cmath.isfinite(v) else None


def _counts(d: ScalarTensor, axis: int | None) -> tuple[int, int]:
    """(values, zeros) in what the reduction covers: a column, or the whole matrix."""
    return (1, d.N - 1) if axis is not None else (d.N, d.N * d.N - d.N)


def _filled(like: Tensor, axis: int | None, n: int, number: float | complex) -> Tensor:
    shape = list(like.shape)
    if axis is not None:
        shape[axis] = n
    return torch.full(shape, number, dtype=like.dtype, device=like.device)


def _plain_float(d: Any) -> bool:
    return (
        isinstance(d, ScalarTensor)
        and d.N > 2
        and d._pair.is_floating_point()
        and not d._pair.is_meta
    )


def _whole(formula: Callable, v: float, d: ScalarTensor) -> tuple | None:
    try:
        return formula(v, *_counts(d, None), {d.dtype}, (), {})
    except OverflowError:
        return None


def _rebuild_whole(d: ScalarTensor, numbers: tuple) -> Any:
    parts = tuple(d._pair.new_full((), x) for x in numbers)
    return parts[0] if len(parts) == 1 else parts


def _closed_form(func: Callable, formula: Callable) -> Callable:
    """A handler computing func as formula(v, c, z, dtypes, args, kwargs), which gives one
    number per result (or None: the dense call answers)."""

    def handler(input: Any, *args: Any, **kwargs: Any) -> Any:
        if func is torch.mean and not args and not kwargs and isinstance(input, ScalarTensor):
            whole = _whole_mean(input)  # the common call, without the stand-in
            if whole is not NotImplemented:
                return whole
        if not args and not kwargs and _plain_float(input) and func in _WHOLE:
            # the whole-matrix form of a real floating matrix: one number of its dtype,
            # without the stand-in
            v = _value(input)
            numbers = None if v is None else _whole(formula, v, input)
            if numbers is not None:
                return _rebuild_whole(input, numbers)
        result = _on_stand_in(func, input, args, kwargs)
        if result is NotImplemented or input.N <= 2:
            return result
        axis = _column_axis(result)
        v = _value(input)
        if axis == -1 or v is None:
            return NotImplemented
        parts = _tensors(result)
        dtypes = {input.dtype, *(t.dtype for t in parts)}
        if not all(t.is_floating_point() or t.is_complex() for t in parts):
            return NotImplemented
        if isinstance(v, complex) and not all(t.is_complex() for t in parts):
            return NotImplemented  # (a complex matrix reduced as real: dtype= decides)
        try:
            numbers = formula(v, *_counts(input, axis), dtypes, args, kwargs)
        except OverflowError:  # (v ** 2 beyond float64: far beyond the dense call's range)
            return NotImplemented
        if numbers is None:
            return NotImplemented
        return _rebuild(
            result, [_filled(t, axis, input.N, x) for t, x in zip(parts, numbers, strict=True)]
        )

    handler.__name__ = f"_closed_form_{func.__name__}"
    return handler


def _all_in_range(dtypes: set, *xs: float) -> bool:
    return all(
        _in_range(x, dtype)
        for x in xs
        for dtype in dtypes
        if dtype.is_floating_point or dtype.is_complex
    )


def _average(v, c, z):
    """The mean of c values v and z zeros. Plus +0, as torch's sums start from +0: the
    mean of -0 values is +0 (for a complex one in both parts)."""
    return c * v / (c + z) + (0j if isinstance(v, complex) else 0.0)


def _mean(v, c, z, dtypes, args, kwargs):
    return (_average(v, c, z),) if _all_in_range(dtypes, c * abs(v)) else None


def _correction(args: tuple, kwargs: dict) -> float:
    """The correction of var/std (and var_mean, std_mean) in any of their forms:
    (input, unbiased), (input, dim, unbiased, keepdim), (input, dim, *, correction)."""
    correction = kwargs.get("correction")
    if "unbiased" in kwargs:
        correction = int(kwargs["unbiased"])
    if args and isinstance(args[0], bool):
        correction = int(args[0])
    elif len(args) >= 2:
        correction = int(args[1])
    return 1 if correction is None else correction


def _variance(v, c, z, dtypes, args, kwargs) -> float | None:
    n = c + z
    correction = _correction(args, kwargs)
    if n - correction <= 0:
        return None  # torch warns and answers inf or NaN
    mean = c * v / n
    m2 = c * abs(v - mean) ** 2 + z * abs(mean) ** 2
    if not _all_in_range(dtypes, c * abs(v), c * abs(v) ** 2, m2):
        return None
    return m2 / (n - correction)


def _var(v, c, z, dtypes, args, kwargs):
    var = _variance(v, c, z, dtypes, args, kwargs)
    return None if var is None else (var,)


def _std(v, c, z, dtypes, args, kwargs):
    var = _variance(v, c, z, dtypes, args, kwargs)
    return None if var is None else (math.sqrt(var),)


def _var_mean(v, c, z, dtypes, args, kwargs):
    var = _variance(v, c, z, dtypes, args, kwargs)
    return None if var is None else (var, _average(v, c, z))


def _std_mean(v, c, z, dtypes, args, kwargs):
    var = _variance(v, c, z, dtypes, args, kwargs)
    return None if var is None else (math.sqrt(var), _average(v, c, z))


def _logsumexp(v, c, z, dtypes, args, kwargs):
    if isinstance(v, complex):
        return None
    top = max(v, 0.0)
    return (top + math.log(c * math.exp(v - top) + z * math.exp(-top)),)


def _p_norm(a: float, c: int, z: int, p: float, dtypes: set) -> float | None:
    """The p-norm of c entries of magnitude a and z zeros, or None where the dense call's
    sum of powers could leave the range (it is not scaled: float32's norm of [1e20] * 4 is
    inf)."""
    if p == math.inf:
        return a
    if p == -math.inf:
        return 0.0 if z else a
    if p == 0:
        return float(c * (a != 0))
    if math.isnan(p) or p not in (1.0, 2.0):
        return None  # other orders: the dense call's rounding of (|v| ** p) ** (1 / p)
    if a == 0:
        return 0.0
    if p < 0:
        if z:
            return 0.0  # 0 ** p is inf, and inf ** (1 / p) is 0
        if not _all_in_range(dtypes, a**p, c * a**p):
            return None
        return c ** (1 / p) * a
    try:
        power = a**p
    except OverflowError:
        return None
    if not _all_in_range(dtypes, power, c * power):
        return None
    return c ** (1 / p) * a


def _matrix_norm(a: float, n: int, ord: Any, dtypes: set) -> float | None:
    """ord's matrix norm of a * I_n (a = |value|): its singular values are all a, and so
    are its absolute row and column sums."""
    if ord == "fro":
        return _p_norm(a, n, n * n - n, 2, dtypes)
    if ord == "nuc":
        return n * a if _all_in_range(dtypes, n * a) else None
    if ord in (1, -1, 2, -2, math.inf, -math.inf):
        return a
    return None


def _norm_kind(func: Callable, args: tuple, kwargs: dict) -> tuple[str, Any]:
    """("vector", p) or ("matrix", ord): what func computes with these arguments on a 2-D
    input (which the stand-in's call has already checked)."""
    if func is torch.linalg.vector_norm:
        return "vector", args[0] if args else kwargs.get("ord", 2)
    if func is torch.linalg.matrix_norm:
        return "matrix", args[0] if args else kwargs.get("ord", "fro")
    if func is torch.nuclear_norm:
        return "matrix", "nuc"
    if func is torch.linalg.norm:
        ord = args[0] if args else kwargs.get("ord")
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if ord is None:
            return "vector", 2  # (over both dims: the Frobenius norm, the same)
        if dim is None or (not isinstance(dim, int) and len(dim) == 2):
            return "matrix", ord
        return "vector", ord
    # torch.norm and Tensor.norm: p="fro" is the 2-norm over the dims given
    p = args[0] if args else kwargs.get("p", "fro")
    if p is None or p == "fro":
        return "vector", 2
    if p == "nuc":
        return "matrix", "nuc"
    return "vector", p


# The arguments that ask each norm for the Frobenius norm of the whole matrix, its most
# common call: answered without the stand-in.
_FROBENIUS = {"dim": None, "keepdim": False, "dtype": None}
_FROBENIUS_BY = {
    torch.norm: {"p": "fro"},
    torch.linalg.norm: {"ord": None},
    torch.linalg.vector_norm: {"ord": 2},
    torch.linalg.matrix_norm: {"ord": "fro", "dim": (-2, -1)},
}


def _frobenius(d: ScalarTensor) -> Any:
    """The Frobenius norm sqrt(N) * |value|, on Python numbers (the one tensor made is the
    result), where the dense call's sum of squares stays well inside the dtype's range."""
    pair = d._pair
    real = pair.real if pair.is_complex() else pair
    try:
        a = abs(pair.tolist()[0])
    except OverflowError:  # (a complex value whose modulus is beyond float64)
        return NotImplemented
    if d.N == 0 or a == 0 or not math.isfinite(a):
        return real.new_full((), a if d.N else 0.0)  # (the dense norm of inf is inf)
    if not (_in_range(a * a, pair.dtype) and _in_range(d.N * a * a, pair.dtype)):
        return NotImplemented
    return real.new_full((), math.sqrt(d.N) * a)


def _norm(func: Callable) -> Callable:
    whole = {**_FROBENIUS, **_FROBENIUS_BY.get(func, {})}

    def formula(v, c, z, dtypes, args, kwargs):
        kind, order = _norm_kind(func, args, kwargs)
        if kind == "vector":
            if isinstance(order, str) or isinstance(order, bool):
                return None
            norm = _p_norm(abs(v), c, z, float(order), dtypes)
        elif z and c == 1:
            return None  # a matrix norm of one column is no call torch has
        else:
            norm = _matrix_norm(abs(v), c, order, dtypes)
        return None if norm is None else (norm,)

    general = _closed_form(func, formula)

    def handler(input: Any, *args: Any, **kwargs: Any) -> Any:
        if (
            func in _FROBENIUS_BY
            and not args
            and isinstance(input, ScalarTensor)
            and not input._pair.is_meta
            and (input._pair.is_floating_point() or input._pair.is_complex())
            and all(
                k in whole and type(v) is type(whole[k]) and v == whole[k]
                for k, v in kwargs.items()
            )
        ):
            answer = _frobenius(input)
            if answer is not NotImplemented:
                return answer
        return general(input, *args, **kwargs)

    handler.__name__ = f"_norm_{func.__name__}"
    return handler


CLOSED_FORMS: dict[Callable, Callable] = {
    torch.mean: _mean,
    torch.nanmean: _mean,
    torch.var: _var,
    torch.std: _std,
    torch.var_mean: _var_mean,
    torch.std_mean: _std_mean,
    torch.logsumexp: _logsumexp,
}
# The closed forms whose call without arguments reduces the whole matrix to one number
# of its dtype (or a tuple of two: var_mean and std_mean).
_WHOLE = frozenset({torch.mean, torch.var, torch.std, torch.var_mean, torch.std_mean})
NORMS: tuple[Callable, ...] = (
    torch.norm,
    torch.nuclear_norm,
    torch.linalg.norm,
    torch.linalg.vector_norm,
    torch.linalg.matrix_norm,
)

for _func in EXTREMES:
    _structured(_func)(_extreme(_func))
for _func in SUMS:
    _structured(_func, fast=FAST_SUM if _func is torch.sum else 0)(_sum_like(_func))
for _func, _formula in CLOSED_FORMS.items():
    _structured(_func)(_closed_form(_func, _formula))
for _func in NORMS:
    _structured(_func, fast=FAST_FROBENIUS if _func in _FROBENIUS_BY else 0)(_norm(_func))
