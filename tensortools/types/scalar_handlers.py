"""ScalarTensor's structured handlers: the calls answered as ``value * I`` (or a number)
without the dense matrix, exactly as the dense call would answer them."""

from __future__ import annotations

import cmath
import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensortools.types.scalar_tensor import ScalarTensor

__all__: list[str] = []

# Dtypes tensortools' add_diagonal and scale kernels compute in.
_KERNEL_DTYPES = frozenset(
    (torch.float32, torch.float64, torch.float16, torch.bfloat16)
    + (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
)


def _kernel(op: Callable, input: Tensor, value: Tensor) -> Any:
    """``op(input, value)`` for a kernel whose arguments the handler has checked
    (``value`` a 0-d tensor of input's dtype and device). Without a gradient to record,
    the call skips the autograd layer, which costs more than the kernel on small inputs."""
    if torch.is_grad_enabled() and (input.requires_grad or value.requires_grad):
        return op(input, value)
    with torch._C._AutoDispatchBelowAutograd():
        return op(input, value)


def scale_finite(input: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """``(value * input, whether every element of input is finite)`` in one pass over
    ``input``; the second is a 0-d bool tensor. ``value * I @ input`` equals
    ``value * input`` only for a finite ``input``."""
    return _kernel(torch.ops.tensortools.scale_finite.default, input, value)


# Each returns NotImplemented where the dense answer is not a cheap structured one; the
# policy then decides (dense fallback by default).
#
# Elementwise handlers apply the torch function itself to a 2-element "probe" [value, 0]
# (a diagonal and an off-diagonal entry, dimensioned like the dense matrix), so dtype
# promotion, rounding of Python numbers to the dtype and special values come out exactly
# as on the dense matrix. The result is structured when the off-diagonal entry stays 0
# (0 * inf, 0 / 0 and the like make it NaN: then the dense answer is not value * I).


#: The calls csrc/python/scalar_dispatch.cpp answers in C as the handler registered with
#: the code does: an elementwise function of d and numbers (FAST_FLAGGED: one with the
#: flags inplace or training), the whole sum, the Frobenius norm, and eigvals, eigvalsh and
#: svdvals without further arguments.
FAST_ELEMENTWISE, FAST_SUM, FAST_FROBENIUS, FAST_FLAGGED = 1, 2, 3, 4
FAST_EIGVALS, FAST_EIGVALSH, FAST_SVDVALS = 5, 6, 7


def _structured(*funcs: Callable, fast: int = 0) -> Callable[[Callable], Callable]:
    """Register a structured handler for funcs on ScalarTensor. Calls with ``out=`` are
    left to the fallback, which writes the dense answer with torch's own out= rules (a
    subclass's handlers get out= like any other argument). ``fast``: one of the FAST_
    codes, for a handler whose common call the compiled path answers as it does."""

    def register(handler: Callable) -> Callable:
        @functools.wraps(handler)
        def without_out(*args, out=None, **kwargs):
            if out is not None:
                return NotImplemented
            return handler(*args, **kwargs)

        ScalarTensor.implements(*funcs)(without_out)
        if fast:  # (funcs and their aliases, each with this very handler object)
            own = ScalarTensor._own_handlers.items()
            ScalarTensor._fast_handlers.update(
                {f: (without_out, fast) for f, h in own if h is without_out}
            )
            ScalarTensor._on_table_change()
        return handler

    return register


def _probe(d: ScalarTensor, dtype: torch.dtype | None = None) -> Tensor:
    # the pair itself (handlers only read it), or a copy in another dtype
    return d._pair if dtype is None else d._pair.to(dtype)


def _from_probe(d: ScalarTensor, probe: Tensor) -> Any:
    if probe.tolist()[1] != 0:  # (also true for NaN; both numbers in one read)
        return NotImplemented
    return ScalarTensor._from_pair(d.N, probe)


def _plain_operand(x: Any, like: ScalarTensor) -> Any:
    """x if it is a Python number or a plain 0-d tensor on like's device that needs no
    gradient (what a structured result can absorb); else None."""
    if isinstance(x, (bool, int, float, complex)):
        return x
    if type(x) is Tensor and x.dim() == 0 and not x.requires_grad and x.device == like.device:
        return x
    return None


def _same_n(name: str, a: ScalarTensor, b: ScalarTensor) -> None:
    if a.N != b.N:
        raise ValueError(f"torch.{name}: ScalarTensor sizes differ: N={a.N} and N={b.N}")


def _both(name: str, a: Any, b: Any) -> bool:
    """Whether a and b are ScalarTensors that can combine (same N, one device)."""
    if not (isinstance(a, ScalarTensor) and isinstance(b, ScalarTensor)):
        return False
    _same_n(name, a, b)
    return a._pair.device == b._pair.device


def finite(x: Any) -> bool:
    """Whether a Python number (as ``tolist`` or ``item`` gives it) is finite. (On Python
    numbers: a 0-d tensor's torch.isfinite costs more than a whole structured call.)"""
    return cmath.isfinite(x) if isinstance(x, complex) else math.isfinite(x)


def _finite_nonzero(d: ScalarTensor, need_nonzero: bool = False) -> bool:
    v = d._pair.tolist()[0]
    return finite(v) and not (need_nonzero and v == 0)


# The dtypes the dense LAPACK routines (det, inverse) take.
_LAPACK_DTYPES = frozenset({torch.float32, torch.float64, torch.complex64, torch.complex128})

# The smallest normal number of each dtype LAPACK takes (of the real part for complex).
_TINY = {dtype: torch.finfo(dtype).tiny for dtype in _LAPACK_DTYPES}


def _lapack_safe(d: ScalarTensor) -> bool:
    """Whether the dense LAPACK routines (det, inverse) treat value * I exactly: a finite
    value that is zero or normal. (On subnormals they scale by an overflowing reciprocal
    and return NaN.)"""
    v = d._pair.tolist()[0]
    if not finite(v):
        return False
    return v == 0 or abs(v) >= _TINY[d.dtype]


def _dense_plus_diagonal(dense: Tensor, d: ScalarTensor, sign: int) -> Any:
    """dense + d (sign 1) or dense - d (sign -1) through the one-pass add_diagonal kernel.

    Other alphas take the dense path: torch computes dense + alpha * d with a fused
    multiply-add on some elements and not others, which no single pass can reproduce.
    """
    if dense.dim() < 2 or tuple(dense.shape[-2:]) != (d.N, d.N) or dense.device != d.device:
        return NotImplemented
    dtype = torch.promote_types(dense.dtype, d.dtype)
    if dtype not in _KERNEL_DTYPES or (sign == -1 and torch.bool in (dense.dtype, d.dtype)):
        return NotImplemented  # (torch refuses to subtract bool tensors)
    value = d._scalar(dtype)
    return _kernel(
        torch.ops.tensortools.add_diagonal.default, dense.to(dtype), value if sign == 1 else -value
    )


def _unit(alpha: Any) -> bool:
    """alpha is the int 1 (a float or bool alpha has dtype rules the dense call applies)."""
    return type(alpha) is int and alpha == 1


@_structured(torch.add)
def _add(input, other, *, alpha=1):
    if _both("add", input, other):
        return _from_probe(input, torch.add(_probe(input), _probe(other), alpha=alpha))
    if _unit(alpha) and isinstance(other, ScalarTensor) and isinstance(input, Tensor):
        return _dense_plus_diagonal(input, other, 1)
    if _unit(alpha) and isinstance(input, ScalarTensor) and isinstance(other, Tensor):
        return _dense_plus_diagonal(other, input, 1)
    return NotImplemented


@_structured(torch.sub, torch.subtract)
def _sub(input, other, *, alpha=1):
    if _both("sub", input, other):
        return _from_probe(input, torch.sub(_probe(input), _probe(other), alpha=alpha))
    if _unit(alpha) and isinstance(other, ScalarTensor) and isinstance(input, Tensor):
        return _dense_plus_diagonal(input, other, -1)
    return NotImplemented


@_structured(torch.mul, torch.multiply)
def _mul(input, other):
    if _both("mul", input, other):
        return _from_probe(input, torch.mul(_probe(input), _probe(other)))
    d, s = (input, other) if isinstance(input, ScalarTensor) else (other, input)
    s = _plain_operand(s, d)
    if s is None:
        return NotImplemented
    # In the order torch multiplies the dense matrix: a 0-d tensor first is rounded to the
    # matrix's dtype before the product, second it is not. (A number comes first only
    # through __rmul__, which torch computes as matrix * number.)
    first = isinstance(s, Tensor) and d is other
    return _from_probe(d, torch.mul(s, _probe(d)) if first else torch.mul(_probe(d), s))


@_structured(torch.div, torch.divide, torch.true_divide)
def _div(input, other, *, rounding_mode=None):
    if not isinstance(input, ScalarTensor) or input.N == 0:
        # number / d is inf off the diagonal; an empty matrix divides by an integer 0,
        # which the probe would refuse
        return NotImplemented
    s = _plain_operand(other, input)
    if s is None:
        return NotImplemented
    return _from_probe(input, torch.div(_probe(input), s, rounding_mode=rounding_mode))


@_structured(torch.neg, torch.negative, fast=FAST_ELEMENTWISE)
def _neg(input):
    return _from_probe(input, torch.neg(_probe(input)))


def _scaled(d: ScalarTensor, dense: Tensor, rows_dim: int) -> Any:
    """d @ dense (rows_dim=-2) or dense @ d (rows_dim=-1) as value * dense.

    Exact when dense is finite; otherwise the dense product has NaN where 0 * inf is
    summed, so the dense path answers.
    """
    if (
        dense.dtype != d.dtype
        or dense.device != d.device
        or dense.dim() == 0
        or dense.shape[rows_dim if dense.dim() >= 2 else 0] != d.N
        or dense.dtype not in _KERNEL_DTYPES
    ):
        return NotImplemented
    out, all_finite = scale_finite(dense, d._pair[0])
    return out if bool(all_finite) else NotImplemented


def _matmul_impl(input, other, need_2d: bool):
    if isinstance(input, ScalarTensor) and isinstance(other, ScalarTensor):
        # Off the diagonal the dense product sums value * 0 terms: NaN unless finite.
        # (There is no dense product of bool matrices.)
        if (
            input.N != other.N
            or input.dtype != other.dtype
            or input.dtype == torch.bool
            or input.device != other.device
            or not (_finite_nonzero(input) and _finite_nonzero(other))
        ):
            return NotImplemented
        product = torch.mul(input._pair, other._pair)
        # An overflowing product is left to the dense path (complex Inf differs there).
        return (
            ScalarTensor._from_pair(input.N, product)
            if finite(product.tolist()[0])
            else NotImplemented
        )
    if isinstance(input, ScalarTensor) and isinstance(other, Tensor):
        if need_2d and other.dim() != 2:
            return NotImplemented
        return _scaled(input, other, -2)
    if isinstance(other, ScalarTensor) and isinstance(input, Tensor):
        if need_2d and input.dim() != 2:
            return NotImplemented
        return _scaled(other, input, -1)
    return NotImplemented


@_structured(torch.matmul)
def _matmul(input, other):
    return _matmul_impl(input, other, need_2d=False)


@_structured(torch.mm)
def _mm(input, mat2):
    return _matmul_impl(input, mat2, need_2d=True)


# The dtypes torch's reductions accumulate in for the half types.
_ACCUMULATE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def _accumulated(d: ScalarTensor, accumulate: bool = False) -> Tensor:
    """N * value as torch's sum and trace compute it: in float for the half types (which
    do not overflow where the dense sum does not) and returned in the input's dtype (in
    that float with accumulate=True), int64 for integers."""
    v = d._scalar()
    dtype = v.dtype if (v.is_floating_point() or v.is_complex()) else torch.int64
    v = v.to(_ACCUMULATE.get(dtype, dtype))
    if d.N == 0:
        total = torch.zeros_like(v)  # the empty sum, also for an Inf value
    elif v.is_complex():  # N * (a + bj) as a sum does it: no a * 0 or b * 0 terms (Inf * 0)
        total = torch.view_as_complex(torch.view_as_real(v) * d.N)
    else:
        total = v * d.N
    if total.is_floating_point() or total.is_complex():
        total = total + 0  # torch's sums start from +0: the sum of -0 values is +0
    return total if accumulate else total.to(dtype)


# The largest finite number of each floating dtype (of its real part for complex ones).
_LARGEST = {
    dtype: torch.finfo(dtype).max
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    + (torch.complex32, torch.complex64, torch.complex128)
}


def _sum(input):
    """torch.sum(d) without further arguments (registered with the other sums in
    scalar_reductions): N * value on Python numbers, so that the one tensor made is the
    result. A float total within a factor 4 of the dtype's largest number is left to the
    dense call (whether its additions overflow depends on their order); one beyond is
    infinite, as the dense sum is."""
    pair, n = input._pair, input.N
    v = pair.tolist()[0]
    if not (pair.is_floating_point() or pair.is_complex()):
        # integers and bool sum into int64, which wraps around as the dense sum does
        return pair.new_full((), (n * int(v) + 2**63) % 2**64 - 2**63, dtype=torch.int64)
    if n == 0:
        return pair.new_zeros(())  # the empty sum, also for an infinite value
    largest = _LARGEST[pair.dtype]
    totals = []
    for part in (v.real, v.imag) if pair.is_complex() else (v,):
        total = n * part + 0.0  # (+0 for a -0 value, as torch's sum starts from +0)
        if largest / 4 < abs(total) < 4 * largest:
            return NotImplemented
        totals.append(math.copysign(math.inf, total) if abs(total) >= 4 * largest else total)
    return pair.new_full((), complex(*totals) if pair.is_complex() else totals[0])


@functools.cache
def _has_trace(dtype: torch.dtype) -> bool:
    """Whether torch's trace has a kernel for dtype (not for bool or uint16/32/64)."""
    try:
        torch.trace(torch.zeros(1, 1, dtype=dtype))
    except (RuntimeError, NotImplementedError):
        return False
    return True


@_structured(torch.trace)
def _trace(input):
    if not _has_trace(input.dtype):
        return NotImplemented  # the dense call's error
    return _accumulated(input)


def _mean(input):
    """torch.mean(d) without further arguments (registered in scalar_reductions)."""
    if (
        input.N == 0
        or input.N >= 2**31
        or not (input.dtype.is_floating_point or input.dtype.is_complex)
    ):
        return NotImplemented  # (N² beyond int64 is no size torch can divide by)
    # As the dense mean does: the sum (in float for the half types; it may overflow),
    # divided by N², in the input's dtype.
    return torch.div(_accumulated(input, accumulate=True), input.N * input.N).to(input.dtype)


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


@_structured(torch.det, torch.linalg.det)
def _det(input):
    if input.dtype not in _LAPACK_DTYPES or not _lapack_safe(input):
        return NotImplemented
    det = power(input._scalar(), input.N)
    # An overflowing product is left to LAPACK: a complex one is Inf+NaNj there.
    return det if finite(det.item()) else NotImplemented


@_structured(torch.inverse, torch.linalg.inv)
def _inverse(input):
    if input.dtype not in _LAPACK_DTYPES:
        return NotImplemented
    inverse = torch.reciprocal(input._scalar())
    # The dense inverse raises for 0, and has NaN off the diagonal once the reciprocal
    # overflows.
    if not (_lapack_safe(input) and input._pair.tolist()[0] != 0 and finite(inverse.tolist())):
        return NotImplemented
    return ScalarTensor._from_pair(input.N, torch.stack((inverse, torch.zeros_like(inverse))))


def _diagonal_values(d: ScalarTensor, offset: int, view: bool) -> Any:
    """The diagonal `offset` of d's matrix. As a view (torch.diagonal), the main diagonal
    is d's value expanded: reading it costs nothing, writing through it changes d for
    N = 1 and raises for larger N (its entries share one number); other diagonals are
    copies, as is everything torch.diag returns."""
    if not isinstance(offset, int) or abs(offset) >= max(d.N, 1):
        return NotImplemented  # (the dense call refuses offsets that are not ints)
    length = d.N - abs(offset)
    if offset != 0:
        return d._pair[1].expand(length).clone()
    diagonal = d._pair[:1].expand(length)
    return diagonal if view else diagonal.clone()


@_structured(torch.diag)
def _diag(input, diagonal=0):
    return _diagonal_values(input, diagonal, view=False)


def _matrix_dim(dim: int) -> int | None:
    """dim of a 2-D tensor as 0 or 1, or None if out of range or not an int."""
    return dim % 2 if isinstance(dim, int) and -2 <= dim < 2 else None


@_structured(torch.diagonal)
def _diagonal(input, offset=0, dim1=0, dim2=1):
    if {_matrix_dim(dim1), _matrix_dim(dim2)} != {0, 1}:
        return NotImplemented  # the dense call raises for equal or invalid dims
    return _diagonal_values(input, offset, view=True)


@_structured(torch.transpose)
def _transpose(input, dim0, dim1):
    if _matrix_dim(dim0) is None or _matrix_dim(dim1) is None:
        return NotImplemented
    return ScalarTensor._from_pair(input.N, input._pair)


@_structured(torch.t)
def _t(input):
    return ScalarTensor._from_pair(input.N, input._pair)
