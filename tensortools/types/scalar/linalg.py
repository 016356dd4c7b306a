"""ScalarTensor's linear algebra: ``value * I_N`` has every eigenvalue and every singular
value equal to its value (or its modulus), so each of these is the maths of one number.

Each handler runs the call on the 1x1 small matrix ``[[value]]`` where it can: that call
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

from tensortools._native import C as _C
from tensortools.types.scalar.common import (
    finite,
    in_range,
    scale_finite,
    structured,
)
from tensortools.types.scalar.small import hidden, small_matrix
from tensortools.types.scalar.tensor import FastCode, ScalarTensor

__all__: list[str] = []


def _lapack_safe(d: ScalarTensor) -> bool:
    """Whether the dense LAPACK routines (det, inverse) treat value * I exactly: C's
    ``lapack_safe``.

    See Note [ScalarTensor's exact answers] in docs/design.md."""
    return _C.scalar_lapack_safe(d._pair, False)


def power(v: Tensor, n: int) -> Tensor:
    """v ** n for a 0-d tensor v and an int n; complex in double precision, where the
    angle n * arg(v) keeps its value for large n (float32's pi is 9e-8 off: (-2+0j) ** 33
    would have an imaginary part of 2e4 in complex64). A complex v on the real axis stays
    there, as the dense products do: (-1+0j) ** 17 is -1+0j, where pow's angle 17 * pi
    gives -1-4e-15j, whose logarithm's imaginary part is -pi instead of pi."""
    if v.is_complex():
        if v.imag.item() == 0:
            return torch.complex(torch.pow(v.real, n), torch.zeros_like(v.real))
        return torch.pow(v.to(torch.complex128), n).to(v.dtype)
    return torch.pow(v, n)


def power_beyond_range(v: complex, n: int, dtype: torch.dtype) -> int:
    """Where |v| ** n lies for the dense product of n copies of v (v finite and nonzero),
    judged on logarithms, so for any n: +1 far beyond the dtype's largest number (the
    product overflows, in any order of multiplications), -1 far below half its smallest
    subnormal (it underflows to zero), 0 in between or within rounding reach of either
    end (n roundings of a relative eps each move the logarithm by up to n * eps; there,
    and for a subnormal result, the dense product's own roundings decide)."""
    info = torch.finfo(dtype.to_real() if dtype.is_complex else dtype)
    log = n * math.log(abs(v))
    reach = 2 * n * info.eps + math.log(4)
    if log > math.log(info.max) + reach:
        return 1
    if log < math.log(info.tiny) + math.log(info.eps / 2) - reach:
        return -1
    return 0


@structured(torch.det, torch.linalg.det)
def _det(input):
    if not _lapack_safe(input):
        return NotImplemented
    v = input._pair.tolist()[0]
    beyond = 0 if v == 0 else power_beyond_range(v, input.N, input.dtype)
    if beyond and not input.dtype.is_complex:
        # far past either end, whatever the order of multiplications: the signed zero or
        # infinity (the dense product of n copies of a value in (0.5, 1) can stop at a
        # few subnormals, as its roundings stall there: 0.9 ** 2000 is 5.6e-45 in float32;
        # this is the correctly rounded 0)
        negative = v < 0 and input.N % 2 == 1
        number = (math.inf if beyond > 0 else 0.0) * (-1.0 if negative else 1.0)
        return input._pair.new_full((), number)
    if beyond < 0:
        return power(input._scalar(), input.N)  # (a complex zero; no complex overflow)
    det = power(input._scalar(), input.N)
    # A product that overflows or underflows is left to LAPACK, whose order of
    # multiplications decides there (a complex one is Inf+NaNj).
    x = det.item()
    if not finite(x) or (x == 0) != (v == 0):
        return NotImplemented
    return det if x == 0 or in_range(abs(x), det.dtype) else NotImplemented


@structured(torch.inverse, torch.linalg.inv)
def _inverse(input):
    if not _lapack_safe(input):
        return NotImplemented
    inverse = torch.reciprocal(input._scalar())
    # The dense inverse raises for 0, and has NaN off the diagonal once the reciprocal
    # overflows.
    if not (input._pair.tolist()[0] != 0 and finite(inverse.tolist())):
        return NotImplemented
    return ScalarTensor._from_pair(input.N, torch.stack((inverse, torch.zeros_like(inverse))))


def _usable(d: Any) -> bool:
    """Whether the eigenvalue, Cholesky and solve routines treat d's matrix exactly: N > 0
    and C's ``lapack_safe`` with ``usable``.

    See Note [ScalarTensor's exact answers] in docs/design.md."""
    return isinstance(d, ScalarTensor) and d.N > 0 and _C.scalar_lapack_safe(d._pair, True)


def _one(func: Callable, d: ScalarTensor, *args: Any, **kwargs: Any) -> Any:
    """func on the 1x1 small matrix [[value]], or NotImplemented where it raises (the dense
    call then raises with the matrix's own sizes)."""
    return _one_of(func, d, 1, *args, **kwargs)


def _one_of(func: Callable, d: ScalarTensor, k: int, *args: Any, **kwargs: Any) -> Any:
    """func on the k x k small matrix value * I_k (k <= 2), or NotImplemented where it raises."""
    try:
        return func(small_matrix(d, k), *args, **kwargs)
    except Exception:
        return NotImplemented


def _diagonal(d: ScalarTensor, number: Tensor) -> Any:
    """number * I_N as a ScalarTensor, where number is finite and well inside its dtype's
    range (else the dense call, whose order of operations decides near the limits)."""
    x = number.item()
    if not (finite(x) and in_range(abs(x), number.dtype)):
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
    numbers; for a complex one from the 1x1 small matrix's, whose sign has torch's rounding."""
    pair = d._pair
    if pair.is_complex():
        sign, logabs = torch.linalg.slogdet(small_matrix(d, 1))
        return power(sign, d.N), logabs * d.N
    v = pair.tolist()[0]
    if v == 0:
        return pair.new_zeros(()), pair.new_full((), -math.inf)
    sign = 1.0 if v > 0 or d.N % 2 == 0 else -1.0
    return pair.new_full((), sign), pair.new_full((), d.N * math.log(abs(v)))


structured(torch.slogdet)(_slogdet_as(torch.return_types.slogdet))
structured(torch.linalg.slogdet)(_slogdet_as(torch.return_types.linalg_slogdet))


def _near_the_cut(v: complex, n: int, dtype: torch.dtype) -> bool:
    """Whether v ** n lies so near the negative real axis that the dense call's rounding
    (and the sign of its zeros) picks the side of log's branch cut, between +pi and -pi:
    then the dense call answers. A value on the positive side of the real axis (+0j)
    stays there, in the dense products as in :func:`power`."""
    if v.imag == 0 and math.copysign(1.0, v.imag) > 0:
        return False
    off = math.remainder(n * cmath.phase(v) - math.pi, 2 * math.pi)  # (0 on the cut)
    return abs(off) <= 8 * n * torch.finfo(dtype.to_real()).eps


@structured(torch.logdet)
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


@structured(torch.matrix_power, torch.linalg.matrix_power)
def _matrix_power(input, n):
    """The dense call on the 2x2 small matrix, which squares and multiplies value * I_2 as the
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
        # every intermediate power of the dense squarings must stay finite, or inf * 0
        # puts NaN off the diagonal (compared as logarithms: v ** n may be beyond float64
        # too); one that underflows keeps the zeros, and the small matrix's squarings
        # underflow as the dense ones do
        info = torch.finfo(input.dtype.to_real())
        magnitude = abs(v if n >= 0 else 1 / v)
        if magnitude != 0 and abs(n) * math.log(magnitude) > math.log(info.max / 4):
            return NotImplemented
    result = _one_of(torch.linalg.matrix_power, input, min(input.N, 2), n)
    if result is NotImplemented:
        return result
    # (integers: the dense products wrap around as the small matrix's do)
    pair = result.flatten()[:2] if input.N > 1 else torch.cat((result[0], result.new_zeros(1)))
    return ScalarTensor._from_pair(input.N, pair)


@structured(torch.matrix_exp, torch.linalg.matrix_exp)
def _matrix_exp(input):
    if not _usable(input):
        return NotImplemented
    real = input._scalar().real.item() if input.dtype.is_complex else input._scalar().item()
    info = torch.finfo(input.dtype.to_real() if input.dtype.is_complex else input.dtype)
    if not math.log(4 * info.tiny) <= real <= math.log(info.max / 4):
        return NotImplemented  # near overflow or underflow the dense squarings decide
    # on the 2x2 small matrix for N >= 2, not the 1x1: torch computes exp(v) there, more
    # exactly than the Padé and squarings it runs on larger matrices (float32 exp(0.5)
    # differs by 2e-5); those run on value * I_2 as on value * I_N, bit for bit
    small = torch.linalg.matrix_exp(small_matrix(input, min(input.N, 2)))
    return _diagonal(input, small[0, 0])


def _repeated(func: Callable, code: FastCode) -> Callable:
    """func's N values (eigenvalues, singular values) as N copies of a number of d's value,
    made without LAPACK by C's ``repeated`` (csrc/python/scalar_rules.cpp, which the
    compiled path runs for the same calls): the value itself as complex (eigvals; code
    EIGVALS), its real part (eigvalsh, which reads the real part of the diagonal as
    LAPACK's Hermitian routines do; EIGVALSH), or its modulus (svdvals; SVDVALS)."""

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
        values = _C.scalar_repeated(int(code), input.N, input._pair)
        return NotImplemented if values is None else values

    handler.__name__ = f"_repeated_{func.__name__}"
    return handler


structured(torch.linalg.eigvals)(_repeated(torch.linalg.eigvals, FastCode.EIGVALS))
structured(torch.linalg.eigvalsh)(_repeated(torch.linalg.eigvalsh, FastCode.EIGVALSH))
structured(torch.linalg.svdvals)(_repeated(torch.linalg.svdvals, FastCode.SVDVALS))


@structured(torch.linalg.cholesky)
def _cholesky(input, *, upper=False):
    if not _usable(input) or input.dtype.is_complex or not isinstance(upper, bool):
        return NotImplemented
    if not bool(input._scalar() > 0):
        return NotImplemented  # not positive definite: the dense call's error
    return _diagonal(input, torch.sqrt(input._scalar()))


@structured(torch.pinverse, torch.linalg.pinv)
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
        or hidden(B)  # (its finiteness is no Python bool under vmap)
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
    if not in_range(inverse.tolist(), A.dtype):
        return NotImplemented
    out, finite_b = scale_finite(B, inverse)
    return out if bool(finite_b) else NotImplemented


@structured(torch.linalg.solve)
def _solve(A, B, *, left=True):
    """X with A X = B (X A = B for left=False): B / value."""
    if not isinstance(left, bool) or (not left and isinstance(B, Tensor) and B.dim() == 1):
        return NotImplemented  # (the dense call refuses a vector B with left=False)
    return _divided(A, B, -2 if left else -1)


@structured(torch.linalg.lstsq)
def _lstsq(A, B, rcond=None, *, driver=None):
    """The least-squares solution of A X = B, B / value, with the other fields (rank,
    singular values, residuals) as the driver gives them: from the same call on the 1x1
    small matrix, widened to N (rank N, N singular values |value|; no residuals for a square
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
