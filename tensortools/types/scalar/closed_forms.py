"""ScalarTensor's reductions by their closed form over "c values and z zeros": mean,
var, std, var_mean, std_mean, logsumexp and the norms. A column (or row) of
``value * I_N`` holds one value and N - 1 zeros, the whole matrix N values and N² - N.

Each first runs on the small matrix for the dense call's argument checks, dtype and
shape; the numbers are then computed in float64 where the range rules allow, elsewhere
the dense call answers.

See Note [ScalarTensor's exact answers] in docs/design.md.
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensortools._native import C as _C
from tensortools.types.scalar.common import (
    accumulated_total,
    as_options,
    column_axis,
    in_range,
    on_small_matrix,
    rebuilt,
    result_tensors,
    structured,
)
from tensortools.types.scalar.tensor import ScalarTensor

__all__: list[str] = []


def _whole_mean(input):
    """torch.mean(d) without further arguments."""
    if (
        input.N == 0
        or input.N >= 2**31
        or not (input.dtype.is_floating_point or input.dtype.is_complex)
    ):
        return NotImplemented  # (N² beyond int64 is no size torch can divide by)
    # As the dense mean does: the sum (in float for the half types; it may overflow),
    # divided by N², in the input's dtype.
    return torch.div(accumulated_total(input, accumulate=True), input.N * input.N).to(input.dtype)


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


def _closed_form(func: Callable, formula: Callable, of_moduli: bool = False) -> Callable:
    """A handler computing func as formula(v, c, z, dtypes, args, kwargs), which gives one
    number per result (or None: the dense call answers); of_moduli for a formula of |v|
    alone (the norms), whose results are real for a complex v too."""

    def handler(input: Any, *args: Any, **kwargs: Any) -> Any:
        if func is torch.mean and not args and not kwargs and isinstance(input, ScalarTensor):
            whole = _whole_mean(input)  # the common call, without the small matrix
            if whole is not NotImplemented:
                return whole
        if not args and not kwargs and _plain_float(input) and func in _WHOLE:
            # the whole-matrix form of a real floating matrix: one number of its dtype,
            # without the small matrix
            v = _value(input)
            numbers = None if v is None else _whole(formula, v, input)
            if numbers is not None:
                return _rebuild_whole(input, numbers)
        result = on_small_matrix(func, input, args, kwargs)
        if result is NotImplemented or input.N <= 2:
            return result
        axis = column_axis(result)
        v = _value(input)
        if axis == -1 or v is None:
            return NotImplemented
        parts = result_tensors(result)
        dtypes = {input.dtype, *(t.dtype for t in parts)}
        if not all(t.is_floating_point() or t.is_complex() for t in parts):
            return NotImplemented
        if isinstance(v, complex) and not of_moduli and not all(t.is_complex() for t in parts):
            return NotImplemented  # (a complex matrix reduced as real: dtype= decides)
        try:
            numbers = formula(v, *_counts(input, axis), dtypes, *as_options(args, kwargs))
        except OverflowError:  # (v ** 2 beyond float64: far beyond the dense call's range)
            return NotImplemented
        if numbers is None:
            return NotImplemented
        return rebuilt(
            result, [_filled(t, axis, input.N, x) for t, x in zip(parts, numbers, strict=True)]
        )

    handler.__name__ = f"_closed_form_{func.__name__}"
    return handler


def _all_in_range(dtypes: set, *xs: float) -> bool:
    """Whether every magnitude xs, computed from a nonzero value, lies well inside each
    floating dtype's normal range. A 0 among them is a product that underflowed (in
    float64 here, so in the dense call's dtype too): the dense call's own order of
    operations decides there between 0 and a tiny number."""
    return all(
        x != 0 and in_range(x, dtype)
        for x in xs
        for dtype in dtypes
        if dtype.is_floating_point or dtype.is_complex
    )


def _average(v, c, z):
    """The mean of c values v and z zeros. Plus +0, as torch's sums start from +0: the
    mean of -0 values is +0 (for a complex one in both parts)."""
    return c * v / (c + z) + (0j if isinstance(v, complex) else 0.0)


def _mean(v, c, z, dtypes, args, kwargs):
    if v == 0 or _all_in_range(dtypes, c * abs(v)):
        return (_average(v, c, z),)
    return None


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
    if v == 0:
        return 0.0
    mean = c * v / n
    m2 = c * abs(v - mean) ** 2 + z * abs(mean) ** 2
    if not _all_in_range(dtypes, abs(v), c * abs(v), abs(v) ** 2, c * abs(v) ** 2, m2):
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
    sum of powers could leave the range at either end (it is not scaled: float32's norm
    of [1e20] * 4 is inf, float64's of [1e-170] * 4 is 0)."""
    if math.isnan(p):
        return None
    if p == math.inf:
        return a
    if p == -math.inf:
        return 0.0 if z else a
    if p == 0:
        return float(c * (a != 0))
    if a == 0 or (p < 0 and z):
        return 0.0  # (for p < 0, 0 ** p is inf, and inf ** (1 / p) is 0)
    beyond = _beyond_range(a, c, p, dtypes)
    if beyond is not None:
        return beyond
    try:
        power = a**p
    except OverflowError:
        return None
    # as the dense call computes it, (sum of the powers) ** (1 / p), with 1 / p rounded
    # (for a tiny or huge a that rounding moves the result by many ulps)
    norm = (c * power) ** (1 / p)
    return norm if _all_in_range(dtypes, power, c * power, norm) else None


#: The dtypes whose norms torch sums in the dtype itself (the half types sum in float).
_SUMMED_IN_DTYPE = {torch.float32, torch.float64, torch.complex64, torch.complex128}


def _beyond_range(a: float, c: int, p: float, dtypes: set) -> float | None:
    """The p-norm (p > 0) of c entries of magnitude a (normal, nonzero) and zeros where
    the dense call's sum of powers leaves the range whatever its order and roundings
    (judged on logarithms, so for any N): inf where every power, or their sum, is beyond
    the largest number by more than the sum's roundings could move it; 0 for p = 2
    (squares, each rounded once) where every square is below half the smallest
    subnormal. None elsewhere, and where the dtypes differ in precision."""
    reals = {d.to_real() if d.is_complex else d for d in dtypes}
    if p <= 0 or not dtypes <= _SUMMED_IN_DTYPE or len(reals) != 1:
        return None
    info = torch.finfo(reals.pop())
    log_power = p * math.log(a)
    if log_power + math.log(c) > math.log(info.max) + math.log(2) + c * info.eps:
        return math.inf
    if p == 2 and log_power < math.log(info.tiny) + math.log(info.eps / 4):
        return 0.0
    return None


def _matrix_norm(a: float, n: int, ord: Any, dtypes: set) -> float | None:
    """ord's matrix norm of a * I_n (a = |value|): its singular values are all a, and so
    are its absolute row and column sums."""
    if ord == "fro":
        return _p_norm(a, n, n * n - n, 2, dtypes)
    if ord == "nuc":
        if a == 0:
            return 0.0
        if _all_in_range(dtypes, n * a):
            return n * a
        return _beyond_range(a, n, 1, dtypes)  # (the sum of n singular values a)
    if ord in (1, -1, 2, -2, math.inf, -math.inf):
        return a
    return None


def _norm_kind(func: Callable, args: tuple, kwargs: dict) -> tuple[str, Any]:
    """("vector", p) or ("matrix", ord): what func computes with these arguments on a 2-D
    input (which the small matrix's call has already checked)."""
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
# common call: answered without the small matrix.
_FROBENIUS = {"dim": None, "keepdim": False, "dtype": None}
_FROBENIUS_BY = {
    torch.norm: {"p": "fro"},
    torch.linalg.norm: {"ord": None},
    torch.linalg.vector_norm: {"ord": 2},
    torch.linalg.matrix_norm: {"ord": "fro", "dim": (-2, -1)},
}


def _frobenius(d: ScalarTensor) -> Any:
    """The Frobenius norm sqrt(N) * |value|, by C's ``frobenius``
    (csrc/python/scalar_rules.cpp, which the compiled path runs for the same calls),
    where the dense call's sum of squares stays well inside the dtype's range."""
    norm = _C.scalar_frobenius(d.N, d._pair)
    return NotImplemented if norm is None else norm


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

    general = _closed_form(func, formula, of_moduli=True)

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

for _func, _formula in CLOSED_FORMS.items():
    structured(_func)(_closed_form(_func, _formula))
for _func in NORMS:
    structured(_func)(_norm(_func))
