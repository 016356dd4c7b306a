"""ScalarTensor: ``value * I_N`` stored as two numbers."""

from __future__ import annotations

import functools
import inspect
import math
import pickle
from typing import Any, Callable

import torch
from torch import Tensor

from tensortools import ops
from tensortools.dispatch import CannotHoldResult, TensorLike

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

    Every call gives what the same call on the dense matrix gives (value, dtype, shape),
    or raises a ``TypeError``. In-place calls (``d.mul_(2)``, ``d += e``, ``out=d``) change
    ``d`` as they would change the dense matrix when the result is again ``value * I``,
    and raise :class:`~tensortools.dispatch.CannotHoldResult` (a ``TypeError``) when it is
    not. Queries (``numel``, ``requires_grad``, ``is_floating_point``, ``stride``, ...)
    and conversions (``bool``, ``float``, ``item``) never build the dense matrix.

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
        if dim is None:
            return self.shape
        if not isinstance(dim, int):
            raise TypeError(f"size(): argument 'dim' (position 1) must be int, not "
                            f"{type(dim).__name__}")
        if not -2 <= dim < 2:
            raise IndexError(f"Dimension out of range (expected to be in range of [-2, 1], "
                             f"but got {dim})")
        return self.shape[dim]

    def dim(self) -> int:
        return 2

    def tensor(self) -> Tensor:
        """The dense N×N matrix."""
        out = torch.zeros(self.N, self.N, dtype=self.dtype, device=self.device)
        out.diagonal().fill_(self._pair[0])
        return out

    def scalar(self, dtype: torch.dtype | None = None) -> Tensor:
        """``value`` as a new 0-d tensor (of ``dtype``, default this one's) on the device."""
        return self._pair[0].to(dtype or self.dtype, copy=True)

    def _scalar(self, dtype: torch.dtype | None = None) -> Tensor:
        # scalar() for the handlers, which only read it: no copy where none is needed
        return self._pair[0].to(dtype or self.dtype)

    def __repr__(self) -> str:
        return f"ScalarTensor(N={self.N}, value={_shortest_repr(self._pair[0])})"

    def __setstate__(self, state: Any) -> None:
        # Unpickling (pickle, copy, torch.load also with weights_only=True) hands over
        # what was saved: N, the pair [value, 0] and the value as given. A crafted file
        # could hand anything; refuse what this class could not have saved.
        ok = (isinstance(state, dict) and set(state) == {"N", "_pair", "_shown"}
              and type(state["N"]) is int and state["N"] >= 0
              and type(state["_pair"]) is Tensor and state["_pair"].shape == (2,)
              and bool(state["_pair"][1] == 0)
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
        """Run ``func`` with every ScalarTensor replaced by its dense matrix; a call that
        changes a ScalarTensor in place (or writes into one with ``out=``) changes it as
        it changes the dense matrix, or raises :class:`CannotHoldResult`."""
        targets = _mutated(func, args, kwargs)
        if targets:
            return _mutate(func, args, kwargs, targets)
        return func(*_densify(args, {}), **_densify(kwargs, {}))


def _shortest_repr(value: Tensor) -> str:
    """A 0-d tensor's value as Python prints a number, with the fewest digits that give
    back the same value in the tensor's dtype (float32's 6.28000020980835 is 6.28)."""
    number = value.item()
    if not (value.is_floating_point() or value.is_complex()) or value.dtype in (
            torch.float64, torch.complex128):
        return repr(number)
    parts = (number.real, number.imag) if value.is_complex() else (number,)
    part_dtype = value.real.dtype
    shortest = []
    for part in parts:
        for digits in range(1, 18):
            candidate = float(f"{part:.{digits}g}")
            if not math.isfinite(part) or torch.tensor(candidate, dtype=part_dtype).item() == part:
                break
        shortest.append(candidate if math.isfinite(part) else part)
    return repr(complex(*shortest) if value.is_complex() else shortest[0])


def _densify(obj: Any, memo: dict) -> Any:
    """obj with every ScalarTensor replaced by its dense matrix, the same matrix for the
    same ScalarTensor (memo: id -> matrix), so that aliasing arguments stay aliases."""
    if isinstance(obj, ScalarTensor):
        if id(obj) not in memo:
            memo[id(obj)] = obj.tensor()
        return memo[id(obj)]
    return torch.utils._pytree.tree_map_only(ScalarTensor, lambda d: _densify(d, memo), obj)


# --- calls that change a ScalarTensor ---------------------------------------------------

# Tensor dunders that change their first operand: the in-place operators and item
# assignment (other in-place functions end in a single underscore: add_, zero_, ...).
_INPLACE_DUNDERS = frozenset(f"__i{op}__" for op in (
    "add", "sub", "mul", "truediv", "div", "floordiv", "mod", "pow", "matmul", "and", "or",
    "xor", "lshift", "rshift")) | {"__setitem__"}


def _mutated(func: Callable, args: tuple, kwargs: dict) -> list:
    """The ScalarTensors a call would change: its out= arguments, and the first argument
    of an in-place function (name ending in one underscore, an in-place operator,
    item assignment, or inplace=True)."""
    targets = [o for o in torch.utils._pytree.tree_leaves(kwargs.get("out"))
               if isinstance(o, ScalarTensor)]
    name = getattr(func, "__name__", "")
    inplace = (name in _INPLACE_DUNDERS or (name.endswith("_") and not name.endswith("__"))
               or _inplace_argument(func, args, kwargs)
               or (func is Tensor.module_load and not _argument(args, kwargs, 2, "assign")))
    if inplace and args and isinstance(args[0], ScalarTensor):
        targets.append(args[0])
    return targets


def _argument(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


@functools.lru_cache(maxsize=None)
def _inplace_position(func: Callable) -> int | None:
    """The position of a function's `inplace` parameter (torch.nn.functional.relu(input,
    inplace=False), ...), or None."""
    try:
        parameters = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):  # builtins without a signature
        return None
    return parameters.index("inplace") if "inplace" in parameters else None


def _inplace_argument(func: Callable, args: tuple, kwargs: dict) -> bool:
    if "inplace" in kwargs:
        return bool(kwargs["inplace"])
    try:
        position = _inplace_position(func)
    except TypeError:  # unhashable callables
        return False
    return position is not None and len(args) > position and bool(args[position])


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


def _commit(target: ScalarTensor, pair: Tensor, name: str) -> None:
    """Give target the value pair[0] (in place, so ScalarTensors sharing its pair, as a
    dense matrix's views share its storage, see the change), or refuse."""
    if pair.requires_grad:
        raise CannotHoldResult(f"{name}: a ScalarTensor holds a number and cannot require "
                               "grad; compute on target.tensor() instead")
    if pair.dtype != target.dtype:  # (in-place calls keep the dtype; out= may not)
        raise CannotHoldResult(f"{name}: the result has dtype {pair.dtype}, but the "
                               f"ScalarTensor written to has {target.dtype}")
    if pair[1].item() != 0:  # also true for NaN
        raise CannotHoldResult(f"{name}: the result is not value * I (it has "
                               f"{pair[1].item()} off the diagonal), so a ScalarTensor cannot "
                               "hold it; use the out-of-place call, which returns the "
                               "dense result")
    with torch.no_grad():
        target._pair.copy_(pair)
    target._shown = None


def _name(func: Callable) -> str:
    return (torch.overrides.resolve_name(func)
            or f"torch.Tensor.{getattr(func, '__name__', func)}")


_NO_OPERAND = object()


def _pair_operand(x: Any, like: ScalarTensor) -> Any:
    """What stands for x when an elementwise function is applied to like's pair: x's own
    pair for a ScalarTensor of like's size and device, a plain 0-d tensor on like's device
    or anything that is not a tensor (numbers, options) as it is; _NO_OPERAND for other
    tensors."""
    if isinstance(x, ScalarTensor):
        return x._pair if (x.N == like.N and x.device == like.device) else _NO_OPERAND
    if isinstance(x, Tensor):
        return x if (type(x) is Tensor and x.dim() == 0 and x.device == like.device) \
            else _NO_OPERAND
    return x


def _mutate(func: Callable, args: tuple, kwargs: dict, targets: list) -> Any:
    name = _name(func)
    target = args[0] if args and args[0] is targets[-1] else None
    # (N of 0 or 1 has no off-diagonal entry to probe; its dense matrix costs nothing)
    if (target is not None and target.N >= 2 and len(targets) == 1
            and func in _ELEMENTWISE_INPLACE and "out" not in kwargs):
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
    dense_args, dense_kwargs = _densify(args, memo), _densify(kwargs, memo)
    result = func(*dense_args, **dense_kwargs)
    if result is NotImplemented:  # an operator declining: nothing was changed
        return NotImplemented
    for t in targets:
        dense = memo[id(t)]
        if dense.shape != (t.N, t.N) or not _is_value_eye(dense):
            raise CannotHoldResult(f"{name}: the result (shape {tuple(dense.shape)}) is not "
                                   f"value * I_{t.N}, so a ScalarTensor cannot hold it; use "
                                   "the out-of-place call, which returns the dense result")
        value = dense.diagonal()[:1] if t.N else t._pair[:1]
        _commit(t, torch.cat([value.to(dense.dtype), torch.zeros_like(value, dtype=dense.dtype)]),
                name)
    by_id = {id(memo[id(t)]): t for t in targets}
    return torch.utils._pytree.tree_map_only(
        Tensor, lambda r: by_id.get(id(r), r), result)


# --- structured handlers ---------------------------------------------------------------
# Each returns NotImplemented where the dense answer is not a cheap structured one; the
# policy then decides (dense fallback by default).
#
# Elementwise handlers apply the torch function itself to a 2-element "probe" [value, 0]
# (a diagonal and an off-diagonal entry, dimensioned like the dense matrix), so dtype
# promotion, rounding of Python numbers to the dtype and special values come out exactly
# as on the dense matrix. The result is structured when the off-diagonal entry stays 0
# (0 * inf, 0 / 0 and the like make it NaN: then the dense answer is not value * I).


def _structured(*funcs: Callable) -> Callable[[Callable], Callable]:
    """Register a structured handler for funcs on ScalarTensor. Calls with ``out=`` are
    left to the fallback, which writes the dense answer with torch's own out= rules (a
    subclass's handlers get out= like any other argument)."""
    def register(handler: Callable) -> Callable:
        @functools.wraps(handler)
        def without_out(*args, out=None, **kwargs):
            if out is not None:
                return NotImplemented
            return handler(*args, **kwargs)

        ScalarTensor.implements(*funcs)(without_out)
        return handler

    return register


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
    v = d._scalar()
    return bool(torch.isfinite(v)) and not (need_nonzero and bool(v == 0))


def _lapack_safe(d: ScalarTensor) -> bool:
    """Whether the dense LAPACK routines (det, inverse) treat value * I exactly: a finite
    value that is zero or normal. (On subnormals they scale by an overflowing reciprocal
    and return NaN.)"""
    v = d._scalar()
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
    value = d._scalar(dtype)
    return ops._structured(torch.ops.tensortools.add_diagonal.default, dense.to(dtype),
                           value if sign == 1 else -value)


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


@_structured(torch.neg, torch.negative)
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
    return total if accumulate else total.to(dtype)


@_structured(torch.sum)
def _sum(input, *args, **kwargs):
    if args or kwargs:
        return NotImplemented
    return _accumulated(input)


@_structured(torch.trace)
def _trace(input):
    if input.dtype == torch.bool:
        return NotImplemented  # the dense trace refuses bool
    return _accumulated(input)


@_structured(torch.mean)
def _mean(input, *args, **kwargs):
    if args or kwargs or input.N == 0 or input.N >= 2**31 or not (
            input.dtype.is_floating_point or input.dtype.is_complex):
        return NotImplemented  # (N² beyond int64 is no size torch can divide by)
    # As the dense mean does: the sum (in float for the half types; it may overflow),
    # divided by N², in the input's dtype.
    return torch.div(_accumulated(input, accumulate=True), input.N * input.N).to(input.dtype)


# The dtypes the dense LAPACK routines (det, inverse) take.
_LAPACK_DTYPES = frozenset({torch.float32, torch.float64, torch.complex64, torch.complex128})


@_structured(torch.det, torch.linalg.det)
def _det(input):
    if input.dtype not in _LAPACK_DTYPES or not _lapack_safe(input):
        return NotImplemented
    det = torch.pow(input._scalar(), input.N)
    # An overflowing product is left to LAPACK: a complex one is Inf+NaNj there.
    return det if bool(torch.isfinite(det)) else NotImplemented


@_structured(torch.inverse, torch.linalg.inv)
def _inverse(input):
    if input.dtype not in _LAPACK_DTYPES:
        return NotImplemented
    inverse = torch.reciprocal(input._scalar())
    # The dense inverse raises for 0, and has NaN off the diagonal once the reciprocal
    # overflows.
    if not (_lapack_safe(input) and bool(input._scalar() != 0) and bool(torch.isfinite(inverse))):
        return NotImplemented
    return ScalarTensor._from_pair(input.N, torch.stack((inverse, torch.zeros_like(inverse))))


def _diagonal_values(d: ScalarTensor, offset: int) -> Any:
    if not isinstance(offset, int) or abs(offset) >= max(d.N, 1):
        return NotImplemented  # (the dense call refuses offsets that are not ints)
    length = d.N - abs(offset)
    if offset != 0:
        return torch.zeros(length, dtype=d.dtype, device=d.device)
    return d._scalar().expand(length).clone()


@_structured(torch.diag)
def _diag(input, diagonal=0):
    return _diagonal_values(input, diagonal)


def _matrix_dim(dim: int) -> int | None:
    """dim of a 2-D tensor as 0 or 1, or None if out of range or not an int."""
    return dim % 2 if isinstance(dim, int) and -2 <= dim < 2 else None


@_structured(torch.diagonal)
def _diagonal(input, offset=0, dim1=0, dim2=1):
    if {_matrix_dim(dim1), _matrix_dim(dim2)} != {0, 1}:
        return NotImplemented  # the dense call raises for equal or invalid dims
    return _diagonal_values(input, offset)


@_structured(torch.transpose)
def _transpose(input, dim0, dim1):
    if _matrix_dim(dim0) is None or _matrix_dim(dim1) is None:
        return NotImplemented
    return ScalarTensor._from_pair(input.N, input._pair)


@_structured(torch.t)
def _t(input):
    return ScalarTensor._from_pair(input.N, input._pair)


# --- queries and conversions: answered without the dense matrix --------------------------


def _stand_in(d: ScalarTensor) -> Tensor:
    """An empty dense matrix of d's dtype and device: it answers every query whose answer
    does not depend on N (dtype, device, layout, autograd state, contiguity) as d's dense
    matrix would, and costs nothing to make."""
    return torch.empty(0, 0, dtype=d.dtype, device=d.device)


def _as_stand_in(obj: Any) -> Any:
    return _stand_in(obj) if isinstance(obj, ScalarTensor) else obj


def _size_free(func: Callable) -> Callable:
    def query(*args, **kwargs):
        return func(*map(_as_stand_in, args), **kwargs)
    return query


_PROPERTIES = ("is_cpu", "is_cuda", "is_ipu", "is_maia", "is_meta", "is_mkldnn", "is_mps",
               "is_mtia", "is_nested", "is_quantized", "is_sparse", "is_sparse_csr",
               "is_vulkan", "is_xla", "is_xpu", "itemsize", "layout", "ndim",
               "requires_grad", "retains_grad", "is_leaf", "grad", "grad_fn", "output_nr",
               "_base", "_version")
_METHODS = ("dim", "ndimension", "element_size", "get_device", "is_complex",
            "is_floating_point", "is_signed", "is_conj", "is_neg", "is_inference",
            "is_contiguous", "is_pinned", "is_shared", "is_set_to", "is_coalesced",
            "result_type")


def _size_free_queries() -> list[Callable]:
    found = [getattr(Tensor, p).__get__ for p in _PROPERTIES if hasattr(Tensor, p)]
    for name in _METHODS:
        # the torch.* form where there is one (its Tensor method comes along)
        found.append(getattr(torch, name, None) or getattr(Tensor, name, None))
    found.append(Tensor.type)  # type() with no dtype is a query; with one, a cast
    return [f for f in found if f is not None]


for _query in _size_free_queries():
    if _query is Tensor.type:
        def _type(input, dtype=None, *args, **kwargs):
            if dtype is not None or args or kwargs:
                return NotImplemented
            return Tensor.type(_stand_in(input))
        ScalarTensor.implements(Tensor.type)(_type)
    else:
        ScalarTensor.implements(_query)(_size_free(_query))


@ScalarTensor.implements(torch.numel, Tensor.nelement)
def _numel(input):
    return input.N * input.N


@ScalarTensor.implements(Tensor.nbytes.__get__)
def _nbytes(input):
    return input.N * input.N * input.dtype.itemsize


@ScalarTensor.implements(Tensor.stride)
def _stride(input, dim=None):
    strides = (input.N, 1)  # the dense matrix is contiguous
    if dim is None:
        return strides
    _stand_in(input).stride(dim)  # an invalid dim raises as on the dense matrix
    return strides[dim]


@ScalarTensor.implements(Tensor.storage_offset)
def _storage_offset(input):
    return 0


@ScalarTensor.implements(torch.is_same_size)
def _is_same_size(input, other):
    return tuple(input.shape) == tuple(other.shape)


def _one_element(d: ScalarTensor) -> Tensor:
    """A dense matrix with as many elements as d's, when that is 0 or 1, or a 2 x 2 stand-in
    otherwise: what conversions to a Python number (which need exactly one element) see."""
    if d.N == 1:
        return d._pair[:1].reshape(1, 1)
    n = min(d.N, 2)
    return torch.zeros(n, n, dtype=d.dtype, device=d.device)


for _conversion in (torch.is_nonzero, Tensor.item, Tensor.__bool__, Tensor.__int__,
                    Tensor.__float__, Tensor.__complex__, Tensor.__index__):
    ScalarTensor.implements(_conversion)(
        lambda d, *args, _f=_conversion, **kwargs: _f(_one_element(d), *args, **kwargs))


def _no_storage(d, *args, **kwargs):
    raise TypeError("a ScalarTensor stores N and a value, not the N x N matrix: it has no "
                    "storage or data pointer (d.tensor() makes the dense matrix)")


for _storage in (Tensor.data_ptr, Tensor.untyped_storage, Tensor.storage,
                 getattr(Tensor, "_typed_storage", None), getattr(Tensor, "const_data_ptr", None),
                 getattr(Tensor, "mutable_data_ptr", None)):
    if _storage is not None:
        ScalarTensor.implements(_storage)(_no_storage)


@ScalarTensor.implements(Tensor.T.__get__, Tensor.mT.__get__, Tensor.data.__get__)
def _same_matrix(input):
    return ScalarTensor._from_pair(input.N, input._pair)  # shares the pair, as views do


@ScalarTensor.implements(Tensor.H.__get__, Tensor.mH.__get__)
def _conjugate_transpose(input):
    return ScalarTensor._from_pair(input.N, input._pair.conj().resolve_conj())


@ScalarTensor.implements(Tensor.real.__get__)
def _real(input):
    return ScalarTensor._from_pair(input.N, input._pair.real) if input.dtype.is_complex else input


@ScalarTensor.implements(Tensor.imag.__get__)
def _imag(input):
    if not input.dtype.is_complex:
        return Tensor.imag.__get__(_stand_in(input))  # raises as on the dense matrix
    return ScalarTensor._from_pair(input.N, input._pair.imag)


# In-place functions that act on each element alone: on a ScalarTensor they are applied to
# its pair [value, 0] (see _mutate), whatever N is.
_ELEMENTWISE_INPLACE = frozenset(
    f for name in (
        "add_", "sub_", "subtract_", "mul_", "multiply_", "div_", "divide_", "true_divide_",
        "floor_divide_", "remainder_", "fmod_", "pow_", "neg_", "negative_", "abs_",
        "absolute_", "sign_", "sgn_", "sin_", "sinh_", "tan_", "tanh_", "asin_", "asinh_",
        "atan_", "atanh_", "arcsin_", "arcsinh_", "arctan_", "arctanh_", "sqrt_", "square_",
        "trunc_", "fix_", "floor_", "ceil_", "round_", "frac_", "expm1_", "log1p_", "erf_",
        "erfinv_", "deg2rad_", "rad2deg_", "nan_to_num_", "clamp_", "clamp_min_",
        "clamp_max_", "clip_", "relu_", "exp_", "exp2_", "cos_", "cosh_", "sigmoid_", "log_",
        "log2_", "log10_", "reciprocal_", "rsqrt_", "zero_", "fill_", "copy_", "lerp_",
        "addcmul_", "addcdiv_", "logical_not_", "bitwise_not_", "bitwise_and_",
        "bitwise_or_", "bitwise_xor_", "hypot_", "atan2_", "copysign_", "xlogy_",
        "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
        "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__")
    for f in (getattr(Tensor, name, None), getattr(torch, name, None)) if f is not None)


# torch.load(weights_only=True) may rebuild ScalarTensors once tensortools is imported.
torch.serialization.add_safe_globals([ScalarTensor])
