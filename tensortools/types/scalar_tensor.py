"""ScalarTensor: ``value * I_N`` stored as two numbers."""

from __future__ import annotations

import pickle
from typing import Any

import torch
from torch import Tensor

from tensortools import ops
from tensortools.dispatch import TensorLike

__all__ = ["ScalarTensor"]

# Dtypes tensortools' add_diagonal and scale kernels compute in.
_KERNEL_DTYPES = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16,
                            torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})


class ScalarTensor(TensorLike):
    """The N×N matrix ``value * I_N``, stored as ``N`` and ``value``.

    Any torch function accepts it. Structured handlers answer cheaply and exactly (the
    same values as on the dense matrix): add, sub, mul and div by a number or another
    ScalarTensor, neg, matmul/mm with a ScalarTensor or a dense tensor, dense +
    ScalarTensor, mean, sum, trace, det, inverse, diag/diagonal, transpose/t. Other calls,
    and structured ones whose dense answer is not of this form (``d * inf`` puts NaN off
    the diagonal), run on the dense matrix under the default ``"fallback"`` policy, or
    raise ``TypeError`` under ``"strict"`` (``ScalarTensor.set_policy("strict")``).

    ``dtype`` defaults to torch's default dtype (complex for a complex value),
    ``device`` to the CPU. ``value`` is the number given (for integer dtypes, as the
    dtype holds it); computations use it rounded to ``dtype``, like the dense matrix.
    """

    def __init__(self, N: int, value: Any, *, dtype: torch.dtype | None = None,
                 device: torch.device | str | None = None) -> None:
        if isinstance(N, bool) or not isinstance(N, int):
            raise TypeError(f"ScalarTensor: 'N' must be an int, got {type(N).__name__}")
        if N < 0:
            raise ValueError(f"ScalarTensor: 'N' must be non-negative, got {N}")
        if isinstance(value, Tensor):
            if value.numel() != 1:
                raise ValueError("ScalarTensor: 'value' must be a number or a one-element "
                                 f"tensor, got shape {tuple(value.shape)}")
            if value.requires_grad:  # its number is taken: no gradient could reach it
                raise ValueError("ScalarTensor: 'value' must not require grad; a "
                                 "ScalarTensor holds a number (pass value.detach())")
            dtype = value.dtype if dtype is None else dtype
            device = value.device if device is None else device
            value = value.item()
        elif not isinstance(value, (bool, int, float, complex)):
            raise TypeError("ScalarTensor: 'value' must be a number or a one-element tensor, "
                            f"got {type(value).__name__}")
        if dtype is None:
            dtype = torch.result_type(torch.empty(0), value)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"ScalarTensor: 'dtype' must be a torch.dtype, got {dtype!r}")
        self.N = N
        # [value, 0] in dtype: a diagonal and an off-diagonal entry of the dense matrix.
        # Handlers apply torch functions to it (see _from_probe below).
        self._pair = torch.tensor([value, 0], dtype=dtype,
                                  device="cpu" if device is None else device)
        # A floating value is shown as given (3.14, not float32's 3.1400001).
        self._shown = value if (dtype.is_floating_point or dtype.is_complex) else None

    @classmethod
    def _from_pair(cls, N: int, pair: Tensor) -> "ScalarTensor":
        out = cls.__new__(cls)
        out.N, out._pair, out._shown = N, pair, None
        return out

    @property
    def value(self) -> Any:
        """The diagonal value, a Python number (for integer dtypes, as the dtype holds it)."""
        return self._shown if self._shown is not None else self._pair[0].item()

    @property
    def dtype(self) -> torch.dtype:
        return self._pair.dtype

    @property
    def device(self) -> torch.device:
        return self._pair.device

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.N, self.N))

    def size(self, dim: int | None = None) -> torch.Size | int:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return 2

    def tensor(self) -> Tensor:
        """The dense N×N matrix."""
        out = torch.zeros(self.N, self.N, dtype=self.dtype, device=self.device)
        out.diagonal().fill_(self._pair[0])
        return out

    def scalar(self, dtype: torch.dtype | None = None) -> Tensor:
        """``value`` as a 0-d tensor (of ``dtype``, default this one's) on the device."""
        return self._pair[0].to(dtype or self.dtype)

    def __repr__(self) -> str:
        return f"ScalarTensor(N={self.N}, value={self.value})"

    def __setstate__(self, state: Any) -> None:
        # Unpickling (pickle, copy, torch.load also with weights_only=True) hands over
        # what was saved: N, the pair [value, 0] and the value as shown. A crafted file
        # could hand anything; refuse what this class could not have saved.
        ok = (isinstance(state, dict) and set(state) == {"N", "_pair", "_shown"}
              and type(state["N"]) is int and state["N"] >= 0
              and type(state["_pair"]) is Tensor and state["_pair"].shape == (2,)
              and (state["_shown"] is None or type(state["_shown"]) in (bool, int, float, complex)))
        if ok and state["_shown"] is not None:  # shown as given, stored rounded
            ok = bool(torch.tensor(state["_shown"], dtype=state["_pair"].dtype)
                      .eq(state["_pair"][0].cpu()) | state["_pair"][0].isnan().cpu())
        if not ok:
            raise pickle.UnpicklingError(
                "ScalarTensor: invalid saved state; expected N (an int >= 0), _pair (a "
                "2-element tensor) and _shown (None or the value)")
        self.__dict__.update(state)

    def __len__(self) -> int:
        return self.N

    @classmethod
    def fallback(cls, func, types, args, kwargs):
        """Run ``func`` with every ScalarTensor replaced by its dense matrix."""
        return func(*_densify(args), **_densify(kwargs))

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Structured handlers do not write into out=; the dense path honours it exactly.
        if kwargs and kwargs.get("out") is not None:
            if cls.policy == "strict":
                return NotImplemented
            return cls.fallback(func, types, args, kwargs)
        return super().__torch_function__(func, types, args, kwargs)


def _densify(obj: Any) -> Any:
    if isinstance(obj, ScalarTensor):
        return obj.tensor()
    if isinstance(obj, (list, tuple)):
        items = [_densify(o) for o in obj]
        return type(obj)._make(items) if hasattr(type(obj), "_make") else type(obj)(items)
    if isinstance(obj, dict):
        return {k: _densify(v) for k, v in obj.items()}
    return obj


# --- structured handlers ---------------------------------------------------------------
# Each returns NotImplemented where the dense answer is not a cheap structured one; the
# policy then decides (dense fallback by default).
#
# Elementwise handlers apply the torch function itself to a 2-element "probe" [value, 0]
# (a diagonal and an off-diagonal entry, dimensioned like the dense matrix), so dtype
# promotion, rounding of Python numbers to the dtype and special values come out exactly
# as on the dense matrix. The result is structured when the off-diagonal entry stays 0
# (0 * inf, 0 / 0 and the like make it NaN: then the dense answer is not value * I).


def _probe(d: ScalarTensor, dtype: torch.dtype | None = None) -> Tensor:
    return d._pair.to(dtype or d.dtype)


def _from_probe(d: ScalarTensor, probe: Tensor) -> Any:
    if probe[1].item() != 0:  # also true for NaN
        return NotImplemented
    return ScalarTensor._from_pair(d.N, probe)


def _plain_operand(x: Any, like: ScalarTensor) -> Any:
    """x if it is a Python number or a plain 0-d tensor on like's device that needs no
    gradient (what a structured result can absorb); else None."""
    if isinstance(x, (bool, int, float, complex)):
        return x
    if (type(x) is Tensor and x.dim() == 0 and not x.requires_grad
            and x.device == like.device):
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
    return a.device == b.device


def _finite_nonzero(d: ScalarTensor, need_nonzero: bool = False) -> bool:
    v = d.scalar()
    return bool(torch.isfinite(v)) and not (need_nonzero and bool(v == 0))


def _lapack_safe(d: ScalarTensor) -> bool:
    """Whether the dense LAPACK routines (det, inverse) treat value * I exactly: a finite
    value that is zero or normal. (On subnormals they scale by an overflowing reciprocal
    and return NaN.)"""
    v = d.scalar()
    if not bool(torch.isfinite(v)):
        return False
    return bool(v == 0) or bool(v.abs() >= torch.finfo(v.dtype).tiny)


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
    value = d.scalar(dtype)
    return ops._structured(torch.ops.tensortools.add_diagonal.default, dense.to(dtype),
                           value if sign == 1 else -value)


def _unit(alpha: Any) -> bool:
    """alpha is the int 1 (a float or bool alpha has dtype rules the dense call applies)."""
    return type(alpha) is int and alpha == 1


@ScalarTensor.implements(torch.add)
def _add(input, other, *, alpha=1):
    if _both("add", input, other):
        return _from_probe(input, torch.add(_probe(input), _probe(other), alpha=alpha))
    if _unit(alpha) and isinstance(other, ScalarTensor) and isinstance(input, Tensor):
        return _dense_plus_diagonal(input, other, 1)
    if _unit(alpha) and isinstance(input, ScalarTensor) and isinstance(other, Tensor):
        return _dense_plus_diagonal(other, input, 1)
    return NotImplemented


@ScalarTensor.implements(torch.sub, torch.subtract)
def _sub(input, other, *, alpha=1):
    if _both("sub", input, other):
        return _from_probe(input, torch.sub(_probe(input), _probe(other), alpha=alpha))
    if _unit(alpha) and isinstance(other, ScalarTensor) and isinstance(input, Tensor):
        return _dense_plus_diagonal(input, other, -1)
    return NotImplemented


@ScalarTensor.implements(torch.mul, torch.multiply)
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


@ScalarTensor.implements(torch.div, torch.divide, torch.true_divide)
def _div(input, other, *, rounding_mode=None):
    if not isinstance(input, ScalarTensor) or input.N == 0:
        # number / d is inf off the diagonal; an empty matrix divides by an integer 0,
        # which the probe would refuse
        return NotImplemented
    s = _plain_operand(other, input)
    if s is None:
        return NotImplemented
    return _from_probe(input, torch.div(_probe(input), s, rounding_mode=rounding_mode))


@ScalarTensor.implements(torch.neg, torch.negative)
def _neg(input):
    return _from_probe(input, torch.neg(_probe(input)))


def _scaled(d: ScalarTensor, dense: Tensor, rows_dim: int) -> Any:
    """d @ dense (rows_dim=-2) or dense @ d (rows_dim=-1) as value * dense.

    Exact when dense is finite; otherwise the dense product has NaN where 0 * inf is
    summed, so the dense path answers.
    """
    if (dense.dtype != d.dtype or dense.device != d.device or dense.dim() == 0
            or dense.shape[rows_dim if dense.dim() >= 2 else 0] != d.N
            or dense.dtype not in _KERNEL_DTYPES):
        return NotImplemented
    out, all_finite = ops._scale_finite(dense, d._pair[0])
    return out if bool(all_finite) else NotImplemented


def _matmul_impl(input, other, need_2d: bool):
    if isinstance(input, ScalarTensor) and isinstance(other, ScalarTensor):
        # Off the diagonal the dense product sums value * 0 terms: NaN unless finite.
        # (There is no dense product of bool matrices.)
        if (input.N != other.N or input.dtype != other.dtype or input.dtype == torch.bool
                or input.device != other.device
                or not (_finite_nonzero(input) and _finite_nonzero(other))):
            return NotImplemented
        product = torch.mul(input._pair, other._pair)
        # An overflowing product is left to the dense path (complex Inf differs there).
        return (ScalarTensor._from_pair(input.N, product) if bool(torch.isfinite(product[0]))
                else NotImplemented)
    if isinstance(input, ScalarTensor) and isinstance(other, Tensor):
        if need_2d and other.dim() != 2:
            return NotImplemented
        return _scaled(input, other, -2)
    if isinstance(other, ScalarTensor) and isinstance(input, Tensor):
        if need_2d and input.dim() != 2:
            return NotImplemented
        return _scaled(other, input, -1)
    return NotImplemented


@ScalarTensor.implements(torch.matmul)
def _matmul(input, other):
    return _matmul_impl(input, other, need_2d=False)


@ScalarTensor.implements(torch.mm)
def _mm(input, mat2):
    return _matmul_impl(input, mat2, need_2d=True)


def _accumulated(d: ScalarTensor) -> Tensor:
    """N * value in the dtype torch's sum and trace return (int64 for integers)."""
    v = d.scalar()
    if not (v.is_floating_point() or v.is_complex()):
        v = v.to(torch.int64)
    if d.N == 0:
        return torch.zeros_like(v)  # the empty sum, also for an Inf value
    if v.is_complex():  # N * (a + bj) as a sum does it: no a * 0 or b * 0 terms (Inf * 0)
        return torch.view_as_complex(torch.view_as_real(v) * d.N)
    return v * d.N


@ScalarTensor.implements(torch.sum)
def _sum(input, *args, **kwargs):
    if args or kwargs:
        return NotImplemented
    return _accumulated(input)


@ScalarTensor.implements(torch.trace)
def _trace(input):
    if input.dtype == torch.bool:
        return NotImplemented  # the dense trace refuses bool
    return _accumulated(input)


@ScalarTensor.implements(torch.mean)
def _mean(input, *args, **kwargs):
    if args or kwargs or input.N == 0 or input.N >= 2**31 or not (
            input.dtype.is_floating_point or input.dtype.is_complex):
        return NotImplemented  # (N² beyond int64 is no size torch can divide by)
    # As the dense mean does: the sum (which may overflow), then divided by N².
    return torch.div(_accumulated(input), input.N * input.N)


# The dtypes the dense LAPACK routines (det, inverse) take.
_LAPACK_DTYPES = frozenset({torch.float32, torch.float64, torch.complex64, torch.complex128})


@ScalarTensor.implements(torch.det, torch.linalg.det)
def _det(input):
    if input.dtype not in _LAPACK_DTYPES or not _lapack_safe(input):
        return NotImplemented
    det = torch.pow(input.scalar(), input.N)
    # An overflowing product is left to LAPACK: a complex one is Inf+NaNj there.
    return det if bool(torch.isfinite(det)) else NotImplemented


@ScalarTensor.implements(torch.inverse, torch.linalg.inv)
def _inverse(input):
    if input.dtype not in _LAPACK_DTYPES:
        return NotImplemented
    inverse = torch.reciprocal(input.scalar())
    # The dense inverse raises for 0, and has NaN off the diagonal once the reciprocal
    # overflows.
    if not (_lapack_safe(input) and bool(input.scalar() != 0) and bool(torch.isfinite(inverse))):
        return NotImplemented
    return ScalarTensor._from_pair(input.N, torch.stack((inverse, torch.zeros_like(inverse))))


def _diagonal_values(d: ScalarTensor, offset: int) -> Any:
    if abs(offset) >= max(d.N, 1):
        return NotImplemented
    length = d.N - abs(offset)
    if offset != 0:
        return torch.zeros(length, dtype=d.dtype, device=d.device)
    return d.scalar().expand(length).clone()


@ScalarTensor.implements(torch.diag)
def _diag(input, diagonal=0):
    return _diagonal_values(input, diagonal)


def _matrix_dim(dim: int) -> int | None:
    """dim of a 2-D tensor as 0 or 1, or None if out of range."""
    return dim % 2 if -2 <= dim < 2 else None


@ScalarTensor.implements(torch.diagonal)
def _diagonal(input, offset=0, dim1=0, dim2=1):
    if {_matrix_dim(dim1), _matrix_dim(dim2)} != {0, 1}:
        return NotImplemented  # the dense call raises for equal or invalid dims
    return _diagonal_values(input, offset)


@ScalarTensor.implements(torch.transpose)
def _transpose(input, dim0, dim1):
    if _matrix_dim(dim0) is None or _matrix_dim(dim1) is None:
        return NotImplemented
    return ScalarTensor._from_pair(input.N, input._pair)


@ScalarTensor.implements(torch.t)
def _t(input):
    return ScalarTensor._from_pair(input.N, input._pair)


# torch.load(weights_only=True) may rebuild ScalarTensors once tensortools is imported.
torch.serialization.add_safe_globals([ScalarTensor])
