"""How a ScalarTensor takes a call that changes it in place (``d.mul_(2)``, ``d += e``,
``torch.add(a, b, out=d)``, ``F.relu(d, inplace=True)``): it ends as the dense matrix
would, when that is ``value * I`` again, or the call raises :class:`CannotHoldResult`
and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensortools.dispatch import CannotHoldResult
from tensortools.dispatch.in_place import written_arguments
from tensortools.dispatch.tensor_like import INPLACE_OPERATORS
from tensortools.types.scalar.tensor import ScalarTensor, densify

__all__ = ["fallback", "written_scalar_tensors"]


def written_scalar_tensors(func: Callable, args: tuple, kwargs: dict) -> list:
    """The ScalarTensors a call would change (each once): see
    tensortools.dispatch.in_place.written_arguments."""
    return [o for o in written_arguments(func, args, kwargs) if isinstance(o, ScalarTensor)]


def _is_value_eye(dense: Tensor) -> bool:
    """Whether a square matrix is value * I: one value on the diagonal (NaN counts as
    equal to NaN) and zeros elsewhere."""
    n = dense.shape[0]
    if n == 0:
        return True
    diagonal = dense.diagonal()
    first = diagonal[:1]
    same = (diagonal == first) | (diagonal.isnan() & first.isnan())
    off = dense.count_nonzero() - diagonal.count_nonzero()
    return bool(same.all()) and int(off) == 0


def _check_holdable(target: ScalarTensor, pair: Tensor, name: str) -> None:
    """Refuse a pair [value, off-diagonal entry] that target cannot take in."""
    if pair.requires_grad:
        raise CannotHoldResult(
            f"{name}: a ScalarTensor holds a number and cannot require "
            "grad; compute on target.tensor() instead"
        )
    if pair.dtype != target.dtype:  # (in-place calls keep the dtype; out= may not)
        raise CannotHoldResult(
            f"{name}: the result has dtype {pair.dtype}, but the "
            f"ScalarTensor written to has {target.dtype}"
        )
    if pair[1].item() != 0:  # also true for NaN
        raise CannotHoldResult(
            f"{name}: the result is not value * I (it has "
            f"{pair[1].item()} off the diagonal), so a ScalarTensor cannot "
            "hold it; use the out-of-place call, which returns the "
            "dense result"
        )


def _commit(target: ScalarTensor, pair: Tensor, name: str) -> None:
    """Give target the pair (in place, so ScalarTensors sharing its pair, as a dense
    matrix's views share its storage, see the change), or refuse."""
    _check_holdable(target, pair, name)
    with torch.no_grad():
        target._pair.copy_(pair)


def _name(func: Callable) -> str:
    return torch.overrides.resolve_name(func) or f"torch.Tensor.{getattr(func, '__name__', func)}"


_NO_OPERAND = object()


def _pair_operand(x: Any, like: ScalarTensor) -> Any:
    """What stands for x when an elementwise function is applied to like's pair: x's own
    pair for a ScalarTensor of like's size and device, a plain 0-d tensor on like's device
    or anything that is not a tensor (numbers, options) as it is; _NO_OPERAND for other
    tensors."""
    if isinstance(x, ScalarTensor):
        return x._pair if (x.N == like.N and x.device == like.device) else _NO_OPERAND
    if isinstance(x, Tensor):
        return (
            x if (type(x) is Tensor and x.dim() == 0 and x.device == like.device) else _NO_OPERAND
        )
    return x


def _write(func: Callable, args: tuple, kwargs: dict, targets: list) -> Any:
    name = _name(func)
    target = args[0] if args and args[0] is targets[-1] else None
    # (N of 0 or 1 has no off-diagonal entry to read; its dense matrix costs nothing)
    if (
        target is not None
        and target.N >= 2
        and len(targets) == 1
        and func in _ELEMENTWISE_INPLACE
        and "out" not in kwargs
    ):
        operands = [_pair_operand(a, target) for a in args[1:]]
        options = {k: _pair_operand(v, target) for k, v in kwargs.items()}
        if not any(o is _NO_OPERAND for o in (*operands, *options.values())):
            # An elementwise function changes a diagonal and an off-diagonal entry of the
            # dense matrix as it changes [value, 0]: the same dtype rules, rounding and
            # errors, for any N.
            pair = target._pair.clone()
            if func(pair, *operands, **options) is NotImplemented:  # an operator declining
                return NotImplemented
            _commit(target, pair, name)
            return target
    memo: dict = {}
    dense_args, dense_kwargs = densify(args, memo), densify(kwargs, memo)
    result = func(*dense_args, **dense_kwargs)
    if result is NotImplemented:  # an operator declining: nothing was changed
        return NotImplemented
    pairs = []  # every target is checked before any is changed
    for t in targets:
        dense = memo[id(t)]
        if dense.shape != (t.N, t.N) or not _is_value_eye(dense):
            raise CannotHoldResult(
                f"{name}: the result (shape {tuple(dense.shape)}) is not "
                f"value * I_{t.N}, so a ScalarTensor cannot hold it; use "
                "the out-of-place call, which returns the dense result"
            )
        # the diagonal value and an off-diagonal entry (zero, perhaps -0.0)
        pair = dense[:2, :2].flatten()[[0, 1]] if t.N >= 2 else None
        if pair is None:
            value = dense.reshape(-1)[:1] if t.N else t._pair[:1].to(dense.dtype)
            pair = torch.cat([value, torch.zeros_like(value)])
        _check_holdable(t, pair, name)
        pairs.append((t, pair))
    for t, pair in pairs:
        _commit(t, pair, name)
    by_id = {id(memo[id(t)]): t for t in targets}
    return torch.utils._pytree.tree_map_only(Tensor, lambda r: by_id.get(id(r), r), result)


# In-place elementwise functions: each changes the dense matrix entry by entry, so it
# changes the diagonal and an off-diagonal entry as it changes the pair [value, 0]
# (see _write), whatever N is.
_ELEMENTWISE_INPLACE = frozenset(
    f
    for name in (
        "add_",
        "sub_",
        "subtract_",
        "mul_",
        "multiply_",
        "div_",
        "divide_",
        "true_divide_",
        "floor_divide_",
        "remainder_",
        "fmod_",
        "pow_",
        "neg_",
        "negative_",
        "abs_",
        "absolute_",
        "sign_",
        "sgn_",
        "sin_",
        "sinh_",
        "tan_",
        "tanh_",
        "asin_",
        "asinh_",
        "atan_",
        "atanh_",
        "arcsin_",
        "arcsinh_",
        "arctan_",
        "arctanh_",
        "sqrt_",
        "square_",
        "trunc_",
        "fix_",
        "floor_",
        "ceil_",
        "round_",
        "frac_",
        "expm1_",
        "log1p_",
        "erf_",
        "erfinv_",
        "deg2rad_",
        "rad2deg_",
        "nan_to_num_",
        "clamp_",
        "clamp_min_",
        "clamp_max_",
        "clip_",
        "relu_",
        "exp_",
        "exp2_",
        "cos_",
        "cosh_",
        "sigmoid_",
        "log_",
        "log2_",
        "log10_",
        "reciprocal_",
        "rsqrt_",
        "zero_",
        "fill_",
        "copy_",
        "lerp_",
        "addcmul_",
        "addcdiv_",
        "logical_not_",
        "bitwise_not_",
        "bitwise_and_",
        "bitwise_or_",
        "bitwise_xor_",
        "hypot_",
        "atan2_",
        "copysign_",
        "xlogy_",
        *INPLACE_OPERATORS,
    )
    for f in (getattr(Tensor, name, None), getattr(torch, name, None))
    if f is not None
)


def fallback(cls: type, func: Callable, types: tuple, args: tuple, kwargs: dict) -> Any:
    """ScalarTensor's fallback: run ``func`` with every ScalarTensor replaced by its dense
    matrix; a call that changes a ScalarTensor in place (or writes into one with ``out=``)
    changes it as it changes the dense matrix, or raises :class:`CannotHoldResult`."""
    targets = written_scalar_tensors(func, args, kwargs)
    if targets:
        return _write(func, args, kwargs, targets)
    return func(*densify(args, {}), **densify(kwargs, {}))


ScalarTensor.fallback = classmethod(fallback)
