"""ScalarTensor's linear algebra: ``value * I_N`` has every eigenvalue and every singular
value equal to its value (or its modulus), so each of these is the maths of one number.

Each handler runs the call on the 1x1 stand-in ``[[value]]`` where it can: that call
checks the arguments and the dtype, and gives the result's dtype and type, as the dense
call would; the handler then scales what it found to N (det is vᴺ, the eigenvalues are N
copies, the matrix exponential is exp(v) * I). The dense LAPACK routines treat value * I
exactly only for a finite value that is 0 or normal (see ``_lapack_safe``), and a result
near the dtype's limits is a matter of their order of operations: those cases, and N = 0,
go to the dense call.
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensortools.types.scalar_handlers import (
    _LAPACK_DTYPES,
    FAST_EIGVALS,
    FAST_EIGVALSH,
    FAST_SVDVALS,
    _lapack_safe,
    _structured,
    finite,
    power,
    scale_finite,
)
from tensortools.types.scalar_reductions import _in_range, _stand_in
from tensortools.types.scalar_tensor import ScalarTensor

__all__: list[str] = []


def _usable(d: Any) -> bool:
    if not (
        isinstance(d, ScalarTensor)
        and d.N > 0
        and d.dtype in _LAPACK_DTYPES
        and not d._pair.is_meta
        and _lapack_safe(d)
    ):
        return False
    v = d._pair.tolist()[0]
    # a complex value whose modulus nears overflow: LAPACK's own scaling decides
    return not isinstance(v, complex) or _in_range(math.hypot(v.real, v.imag), d.dtype)


def _one(func: Callable, d: ScalarTensor, *args: Any, **kwargs: Any) -> Any:
    """func on the 1x1 stand-in [[value]], or NotImplemented where it raises (the dense
    call then raises with the matrix's own sizes)."""
    return _one_of(func, d, 1, *args, **kwargs)


def _one_of(func: Callable, d: ScalarTensor, k: int, *args: Any, **kwargs: Any) -> Any:
    """func on the k x k stand-in value * I_k (k <= 2), or NotImplemented where it raises."""
    try:
        return func(_stand_in(d, k), *args, **kwargs)
    except Exception:
        return NotImplemented


def _diagonal(d: ScalarTensor, number: Tensor) -> Any:
    """number * I_N as a ScalarTensor, where number is finite and well inside its dtype's
    range (else the dense call, whose order of operations decides near the limits)."""
    x = number.item()
    if not (finite(x) and _in_range(abs(x), number.dtype)):
        return NotImplemented
    return ScalarTensor._from_pair(d.N, torch.stack((number, torch.zeros_like(number))))


def _slogdet_as(kind: type) -> Callable:
    """slogdet as sign(v)^N and N log|v|; torch.slogdet and linalg.slogdet differ only in
    the name of their result's type."""

    def handler(input):
        if not _usable(input):
            return NotImplemented
        return kind(_slogdet(input))

    return handler


def _slogdet(d: ScalarTensor) -> tuple[Tensor, Tensor]:
    """(sign(v)^N, N log|v|) for a value _usable accepts: for a real one on Python
    numbers; for a complex one from the 1x1 stand-in's, whose sign has torch's rounding."""
    pair = d._pair
    if pair.is_complex():
        sign, logabs = torch.linalg.slogdet(_stand_in(d, 1))
        return power(sign, d.N), logabs * d.N
    v = pair.tolist()[0]
    if v == 0:
        return pair.new_zeros(()), pair.new_full((), -math.inf)
    sign = 1.0 if v > 0 or d.N % 2 == 0 else -1.0
    return pair.new_full((), sign), pair.new_full((), d.N * math.log(abs(v)))


_structured(torch.slogdet)(_slogdet_as(torch.return_types.slogdet))
_structured(torch.linalg.slogdet)(_slogdet_as(torch.return_types.linalg_slogdet))


def _near_the_cut(v: complex, n: int, dtype: torch.dtype) -> bool:
    """Whether v ** n lies so near the negative real axis that the dense call's rounding
    (and the sign of its zeros) picks the side of log's branch cut, between +pi and -pi:
    then the dense call answers. A value on the positive side of the real axis (+0j)
    stays there, in the dense products as in :func:`power`."""
    if v.imag == 0 and math.copysign(1.0, v.imag) > 0:
        return False
    off = math.remainder(n * cmath.phase(v) - math.pi, 2 * math.pi)  # (0 on the cut)
    return abs(off) <= 8 * n * torch.finfo(dtype.to_real()).eps


@_structured(torch.logdet)
def _logdet(input):
    if not _usable(input):
        return NotImplemented
    sign, logabs = _slogdet(input)
    if input.dtype.is_complex:
        if _near_the_cut(input._pair.tolist()[0], input.N, input.dtype):
            return NotImplemented
        return torch.log(sign) + logabs  # (logabs is -inf for a zero value, as on LAPACK)
    # a negative determinant has no real logarithm: NaN, as the dense call gives
    return torch.where(sign < 0, torch.full_like(logabs, math.nan), logabs)


@_structured(torch.matrix_power, torch.linalg.matrix_power)
def _matrix_power(input, n):
    """The dense call on the 2x2 stand-in, which squares and multiplies value * I_2 as the
    dense call does value * I_N: each product's diagonal entry is v * v plus zeros, so
    each rounds alike (float16 rounds at every squaring; a power of 1.0000001 ** 2**20
    differs from pow's one rounding in the fifth digit)."""
    if (
        not isinstance(input, ScalarTensor)
        or type(n) is not int
        or input.N == 0
        or input.device.type == "meta"
        or input.dtype == torch.bool  # (no bool matmul)
    ):
        return NotImplemented
    v = input._pair.tolist()[0]
    if n < 0 and (not _usable(input) or v == 0):
        return NotImplemented  # the inverse's power: LAPACK's rules and errors
    if not cmath.isfinite(v):
        return NotImplemented  # off the diagonal inf * 0 is NaN
    if input.dtype.is_floating_point or input.dtype.is_complex:
        # every intermediate power of the dense squarings must stay finite off the
        # diagonal (compared as logarithms: v ** n may be beyond float64 too)
        info = torch.finfo(input.dtype.to_real())
        magnitude = abs(v if n >= 0 else 1 / v)
        if magnitude != 0 and not (
            math.log(4 * info.tiny) <= abs(n) * math.log(magnitude) <= math.log(info.max / 4)
        ):
            return NotImplemented
    result = _one_of(torch.linalg.matrix_power, input, min(input.N, 2), n)
    if result is NotImplemented:
        return result
    # (integers: the dense products wrap around as the stand-in's do)
    pair = result.flatten()[:2] if input.N > 1 else torch.cat((result[0], result.new_zeros(1)))
    return ScalarTensor._from_pair(input.N, pair)


@_structured(torch.matrix_exp, torch.linalg.matrix_exp)
def _matrix_exp(input):
    if not _usable(input):
        return NotImplemented
    real = input._scalar().real.item() if input.dtype.is_complex else input._scalar().item()
    info = torch.finfo(input.dtype.to_real() if input.dtype.is_complex else input.dtype)
    if not math.log(4 * info.tiny) <= real <= math.log(info.max / 4):
        return NotImplemented  # near overflow or underflow the dense squarings decide
    # on the 2x2 stand-in for N >= 2, not the 1x1: torch computes exp(v) there, more
    # exactly than the Padé and squarings it runs on larger matrices (float32 exp(0.5)
    # differs by 2e-5); those run on value * I_2 as on value * I_N, bit for bit
    stand_in = torch.linalg.matrix_exp(_stand_in(input, min(input.N, 2)))
    return _diagonal(input, stand_in[0, 0])


def _repeated(func: Callable, number: Callable[[Any], Any], dtype: Callable) -> Callable:
    """func's N values (eigenvalues, singular values) as N copies of number(value), in
    dtype(d.dtype): made on Python numbers, without LAPACK."""

    def handler(input, *args, **kwargs):
        if not _usable(input):
            return NotImplemented
        if func is torch.linalg.eigvalsh:
            uplo = args[0] if args else kwargs.get("UPLO", "L")
            if uplo not in ("L", "U"):
                return NotImplemented  # the dense call's error
            args, kwargs = (), {k: v for k, v in kwargs.items() if k != "UPLO"}
        if args or kwargs:
            return NotImplemented  # (svdvals' driver is for CUDA: the dense call decides)
        pair = input._pair
        return pair.new_full((input.N,), number(pair.tolist()[0]), dtype=dtype(pair.dtype))

    handler.__name__ = f"_repeated_{func.__name__}"
    return handler


# value * I has N eigenvalues value (complex, as eigvals gives them; eigvalsh reads the
# real part of the diagonal, as LAPACK's Hermitian routines do) and N singular values |value|
# (their calls without further arguments are answered in C too: scalar_dispatch.cpp)
_structured(torch.linalg.eigvals, fast=FAST_EIGVALS)(
    _repeated(torch.linalg.eigvals, complex, lambda t: t.to_complex())
)
_structured(torch.linalg.eigvalsh, fast=FAST_EIGVALSH)(
    _repeated(torch.linalg.eigvalsh, lambda v: v.real, lambda t: t.to_real())
)
_structured(torch.linalg.svdvals, fast=FAST_SVDVALS)(
    _repeated(torch.linalg.svdvals, abs, lambda t: t.to_real())
)


@_structured(torch.linalg.cholesky)
def _cholesky(input, *, upper=False):
    if not _usable(input) or input.dtype.is_complex or not isinstance(upper, bool):
        return NotImplemented
    if not bool(input._scalar() > 0):
        return NotImplemented  # not positive definite: the dense call's error
    return _diagonal(input, torch.sqrt(input._scalar()))


@_structured(torch.pinverse, torch.linalg.pinv)
def _pinv(input, *args, **kwargs):
    # the default tolerances only: they keep every singular value of value * I
    # (rtol = N * eps < 1) or, for a zero value, none
    if args or kwargs or not _usable(input):
        return NotImplemented
    v = input._scalar()
    return _diagonal(input, torch.zeros_like(v) if bool(v == 0) else torch.reciprocal(v))


def _divided(A: ScalarTensor, B: Any, rows: int) -> Any:
    """B / value for a dense B whose dim `rows` has A's N entries, in one pass that also
    checks B is finite (elsewhere the dense routines' 0 * inf terms put NaN in their
    answer); NotImplemented where the dense call must answer."""
    if (
        not _usable(A)
        or type(B) is not Tensor
        or B.dtype != A.dtype
        or B.device != A.device
        or A.dtype.is_complex
        or B.requires_grad
        or B.dim() == 0
        or B.shape[rows if B.dim() > 1 else 0] != A.N
    ):
        return NotImplemented
    v = A._pair.tolist()[0]
    if v == 0:
        return NotImplemented  # singular: the dense call's error (or its minimum norm)
    inverse = torch.reciprocal(A._pair[0])
    if not _in_range(inverse.tolist(), A.dtype):
        return NotImplemented
    out, finite_b = scale_finite(B, inverse)
    return out if bool(finite_b) else NotImplemented


@_structured(torch.linalg.solve)
def _solve(A, B, *, left=True):
    """X with A X = B (X A = B for left=False): B / value."""
    if not isinstance(left, bool) or (not left and isinstance(B, Tensor) and B.dim() == 1):
        return NotImplemented  # (the dense call refuses a vector B with left=False)
    return _divided(A, B, -2 if left else -1)


@_structured(torch.linalg.lstsq)
def _lstsq(A, B, rcond=None, *, driver=None):
    """The least-squares solution of A X = B, B / value, with the other fields (rank,
    singular values, residuals) as the driver gives them: from the same call on the 1x1
    stand-in, widened to N (rank N, N singular values |value|; no residuals for a square
    A). With the default tolerance only."""
    if not _usable(A) or type(B) is not Tensor or B.dim() not in (1, 2) or rcond is not None:
        # (with a tolerance given, the rank gelsy finds is its own: 1 of 3 for rcond=2)
        return NotImplemented
    info = torch.finfo(A.dtype)
    small = math.sqrt(info.tiny) / info.eps
    if not small <= abs(A._pair.tolist()[0]) <= 1 / small:
        return NotImplemented  # LAPACK scales A and B there, and rounds as it does
    one = _one(torch.linalg.lstsq, A, B[:1], rcond, driver=driver)
    if one is NotImplemented or (one.rank.numel() and one.rank.tolist() != 1):
        return NotImplemented  # (a rank the tolerance cut to 0: the dense minimum norm)
    solution = _divided(A, B, -2)
    if solution is NotImplemented:
        return solution
    rank = one.rank * A.N if one.rank.numel() else one.rank
    values = one.singular_values
    values = values.expand(A.N).clone() if values.numel() else values
    return torch.return_types.linalg_lstsq((solution, one.residuals, rank, values))
