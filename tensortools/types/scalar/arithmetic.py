"""ScalarTensor's arithmetic: add, sub, mul and div with numbers or another ScalarTensor,
neg, dense + ScalarTensor (the diagonal added in one pass), and matmul/mm with a
ScalarTensor or a dense tensor (``value * I @ T`` is ``value * T``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from tensortools.types.scalar.common import (
    KERNEL_DTYPES,
    call_kernel,
    finite,
    plain_operand,
    probe,
    probed_result,
    scale_finite,
    structured,
)
from tensortools.types.scalar.small import hidden
from tensortools.types.scalar.tensor import ScalarTensor

__all__: list[str] = []


def _same_n(name: str, a: ScalarTensor, b: ScalarTensor) -> None:
    if a.N != b.N:
        raise ValueError(f"torch.{name}: ScalarTensor sizes differ: N={a.N} and N={b.N}")


def _both(name: str, a: Any, b: Any) -> bool:
    """Whether a and b are ScalarTensors that can combine (same N, one device)."""
    if not (isinstance(a, ScalarTensor) and isinstance(b, ScalarTensor)):
        return False
    _same_n(name, a, b)
    return a._pair.device == b._pair.device


def _finite_nonzero(d: ScalarTensor, need_nonzero: bool = False) -> bool:
    v = d._pair.tolist()[0]
    return finite(v) and not (need_nonzero and v == 0)


def _dense_plus_diagonal(dense: Tensor, d: ScalarTensor, sign: int) -> Any:
    """dense + d (sign 1) or dense - d (sign -1) through the one-pass add_diagonal kernel.

    Other alphas take the dense path: torch computes dense + alpha * d with a fused
    multiply-add on some elements and not others, which no single pass can reproduce.
    """
    if dense.dim() < 2 or tuple(dense.shape[-2:]) != (d.N, d.N) or dense.device != d.device:
        return NotImplemented
    dtype = torch.promote_types(dense.dtype, d.dtype)
    if dtype not in KERNEL_DTYPES or (sign == -1 and torch.bool in (dense.dtype, d.dtype)):
        return NotImplemented  # (torch refuses to subtract bool tensors)
    value = d._scalar(dtype)
    return call_kernel(
        torch.ops.tensortools.add_diagonal.default, dense.to(dtype), value if sign == 1 else -value
    )


def _unit(alpha: Any) -> bool:
    """alpha is the int 1 (a float or bool alpha has dtype rules the dense call applies)."""
    return type(alpha) is int and alpha == 1


@structured(torch.add)
def _add(input, other, *, alpha=1):
    if _both("add", input, other):
        return probed_result(input, torch.add(probe(input), probe(other), alpha=alpha))
    if _unit(alpha) and isinstance(other, ScalarTensor) and isinstance(input, Tensor):
        return _dense_plus_diagonal(input, other, 1)
    if _unit(alpha) and isinstance(input, ScalarTensor) and isinstance(other, Tensor):
        return _dense_plus_diagonal(other, input, 1)
    return NotImplemented


@structured(torch.sub, torch.subtract)
def _sub(input, other, *, alpha=1):
    if _both("sub", input, other):
        return probed_result(input, torch.sub(probe(input), probe(other), alpha=alpha))
    if _unit(alpha) and isinstance(other, ScalarTensor) and isinstance(input, Tensor):
        return _dense_plus_diagonal(input, other, -1)
    return NotImplemented


@structured(torch.mul, torch.multiply)
def _mul(input, other):
    if _both("mul", input, other):
        return probed_result(input, torch.mul(probe(input), probe(other)))
    d, s = (input, other) if isinstance(input, ScalarTensor) else (other, input)
    s = plain_operand(s, d)
    if s is None:
        return NotImplemented
    # In the order of the call: torch rounds an operand that comes first (a number or a
    # 0-d tensor) to the matrix's dtype before the product, and one that comes second it
    # does not (float16: 1e5 first is inf, and inf * 0 is NaN off the diagonal). d * 2
    # and 2 * d both reach this as (d, 2): torch computes __rmul__ as matrix * number.
    if d is other:
        return probed_result(d, torch.mul(s, probe(d)))
    return probed_result(d, torch.mul(probe(d), s))


@structured(torch.div, torch.divide, torch.true_divide)
def _div(input, other, *, rounding_mode=None):
    if not isinstance(input, ScalarTensor) or input.N == 0:
        # number / d is inf off the diagonal; an empty matrix divides by an integer 0,
        # which the pair's call would refuse
        return NotImplemented
    s = plain_operand(other, input)
    if s is None:
        return NotImplemented
    return probed_result(input, torch.div(probe(input), s, rounding_mode=rounding_mode))


@structured(torch.neg, torch.negative)
def _neg(input):
    return probed_result(input, torch.neg(probe(input)))


def _scaled(d: ScalarTensor, dense: Tensor, rows_dim: int) -> Any:
    """d @ dense (rows_dim=-2) or dense @ d (rows_dim=-1) as value * dense.

    Exact when dense is finite; otherwise the dense product has NaN where 0 * inf is
    summed, so the dense path answers, as it does for a torch.func wrapper, whose
    finiteness is no Python bool.
    """
    if (
        hidden(dense)
        or dense.dtype != d.dtype
        or dense.device != d.device
        or dense.dim() == 0
        or dense.shape[rows_dim if dense.dim() >= 2 else 0] != d.N
        or dense.dtype not in KERNEL_DTYPES
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


@structured(torch.matmul)
def _matmul(input, other):
    return _matmul_impl(input, other, need_2d=False)


@structured(torch.mm)
def _mm(input, mat2):
    return _matmul_impl(input, mat2, need_2d=True)
