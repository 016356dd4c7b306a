"""How a ScalarTensor takes a call that changes it in place (``d.mul_(2)``, ``d += e``,
``torch.add(a, b, out=d)``, ``F.relu(d, inplace=True)``): it ends as the dense matrix
would, when that is ``value * I`` again, or the call raises :class:`CannotHoldResult`
and changes nothing.

The class body takes its ``fallback`` and ``_python_torch_function`` from here; this
module knows a ScalarTensor by the class it is called for (:func:`_scalar_class`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import torch
from torch import Tensor
from torch.overrides import has_torch_function

from tensortools.dispatch import CannotHoldResult
from tensortools.dispatch.in_place import out_of_place_form, written_arguments
from tensortools.dispatch.signatures import torch_positions
from tensortools.dispatch.table import POLICY, TorchFunctionTable, strict_refusal
from tensortools.dispatch.tensor_like import INPLACE_OPERATORS
from tensortools.types.scalar.small import densify, hidden, small_matrix, transforms_active

__all__ = ["fallback", "python_torch_function", "write_without_dense", "written_scalar_tensors"]


def _scalar_class(cls: type) -> type:
    """What cls's calls take as a ScalarTensor: ScalarTensor, also for a subclass's."""
    return cls._fast.result_class


def written_scalar_tensors(kind: type, func: Callable, args: tuple, kwargs: dict) -> list:
    """The ScalarTensors (instances of kind) a call would change (each once): see
    tensortools.dispatch.in_place.written_arguments."""
    return [o for o in written_arguments(func, args, kwargs) if isinstance(o, kind)]


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


def _check_holdable(target: Any, pair: Tensor, func: Callable) -> None:
    """Refuse a pair [value, off-diagonal entry] that target cannot take in."""
    name = _Name(func)  # (resolved only for a message: torch's lookup costs more than a call)
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


def _commit(target: Any, pair: Tensor, func: Callable) -> None:
    """Give target the pair (in place, so ScalarTensors sharing its pair, as a dense
    matrix's views share its storage, see the change), or refuse."""
    _check_holdable(target, pair, func)
    with torch.no_grad():
        target._pair.copy_(pair)


class _Name:
    """A function's name as torch's messages give it, looked up when formatted."""

    def __init__(self, func: Callable) -> None:
        self.func = func

    def __format__(self, spec: str) -> str:
        func = self.func
        name = torch.overrides.resolve_name(func)
        return name or f"torch.Tensor.{getattr(func, '__name__', func)}"


_NO_OPERAND = object()


def _pair_operand(x: Any, like: Any, kind: type) -> Any:
    """What stands for x when an elementwise function is applied to like's pair: x's own
    pair for a ScalarTensor of like's size and device, a plain 0-d tensor on like's device
    or anything that is not a tensor (numbers, options) as it is; _NO_OPERAND for other
    tensors."""
    if isinstance(x, kind):
        return x._pair if (x.N == like.N and x.device == like.device) else _NO_OPERAND
    if isinstance(x, Tensor):
        return (
            x
            if type(x) is Tensor and x.dim() == 0 and x.device == like.device and not hidden(x)
            else _NO_OPERAND
        )
    return x


# -- calls answered without the dense matrix -------------------------------------------

#: The function whose structured answer is being asked for (see _structured_answer): the
#: fallback declines it, so that the answer is a handler's or none.
_PROBING: ContextVar = ContextVar("scalar_tensor_probing", default=None)


def _structured_answer(cls: type, func: Callable, args: tuple, kwargs: dict) -> Any:
    """What cls's handlers answer for an out-of-place call, or NotImplemented: never the
    dense fallback's answer (the call is dispatched as the user's would be, so the
    handler gets it bound as the table binds calls)."""
    token = _PROBING.set(func)
    try:
        return cls.__torch_function__(func, (cls,), args, kwargs)
    except CannotHoldResult:
        raise
    except TypeError:  # (refused, or arguments the dense call will report)
        return NotImplemented
    finally:
        _PROBING.reset(token)


def _flat(args: tuple, kwargs: dict) -> list:
    """The arguments of a call, with the items of a list or tuple among them (tensor
    lists): every place a tensor can take part in the calls written here."""
    found = []
    for x in (*args, *kwargs.values()):
        if isinstance(x, (list, tuple)):
            found.extend(x)
        else:
            found.append(x)
    return found


def _replaced(args: tuple, kwargs: dict, new: Callable[[Any], Any]) -> tuple[tuple, dict]:
    """args and kwargs with each argument (and each item of a list or tuple among them)
    x replaced by new(x)."""

    def one(x: Any) -> Any:
        return type(x)(map(new, x)) if type(x) in (list, tuple) else new(x)

    return tuple(map(one, args)), {k: one(v) for k, v in kwargs.items()}


def _stand_ins(kind: type, args: tuple, kwargs: dict, square: bool) -> tuple[tuple, dict]:
    """args and kwargs with small tensors in place of every tensor, for torch to check a
    call on (dtypes it may cast to, shapes, out= rules, errors) without the values
    that cost: each ScalarTensor becomes its dense value * I_k (k = min(N, 2), with the
    matrix's signed zeros), or, with square=False (a dense operand whose shape matters),
    every tensor an empty meta tensor of its shape and dtype. The same object becomes the
    same stand-in, so that aliasing arguments stay aliases."""
    memo: dict = {}

    def stand_in(x: Any) -> Any:
        if not isinstance(x, (kind, Tensor)) or (square and isinstance(x, Tensor)):
            return x
        if id(x) not in memo:
            if square:
                memo[id(x)] = small_matrix(x, min(x.N, 2))
            else:
                memo[id(x)] = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        return memo[id(x)]

    return _replaced(args, kwargs, stand_in)


def _write_structured(cls: type, func: Callable, args: tuple, kwargs: dict) -> Any:
    """An in-place call (or out=) answered from the structured answer of its out-of-place
    form: what that form gives, cast to the written tensor's dtype, as torch's in-place
    forms compute. Where the cast, out= or a dense operand's shape could decide, torch
    first checks the call on stand-ins (_stand_ins), so that its errors (a cast it
    refuses, a shape, out= rules) are the dense call's. NotImplemented where no handler
    answers the out-of-place form with a result the written tensor can hold without
    the dense matrix."""
    form = out_of_place_form(func, args, kwargs, known=lambda f: cls.handler_for(f) is not None)
    if form is None:
        return NotImplemented
    kind = _scalar_class(cls)
    operands = _flat(args, kwargs)
    if has_torch_function([x for x in operands if not isinstance(x, kind)]):
        return NotImplemented  # (another type's call: the dense path hands it on)
    target = form.target
    if not isinstance(target, kind) and (
        type(target) is not Tensor or (target.requires_grad and torch.is_grad_enabled())
    ):
        return NotImplemented  # (autograd records the dense call)
    result = _structured_answer(cls, form.func, form.args, form.kwargs)
    if isinstance(target, kind):
        if isinstance(result, kind):
            if result.N != target.N or result.device != target.device:
                return NotImplemented
        elif type(result) is not Tensor or result.shape != target.shape:
            return NotImplemented
    elif type(result) is not Tensor:
        return NotImplemented
    dense_operands = any(type(x) is Tensor and x.dim() > 0 for x in operands)
    if dense_operands or "out" in kwargs or result.dtype != target.dtype:
        if dense_operands and isinstance(target, kind) and target.N**2 >= 2**62:
            return NotImplemented
        small_args, small_kwargs = _stand_ins(kind, args, kwargs, square=not dense_operands)
        if func(*small_args, **small_kwargs) is NotImplemented:  # an operator declining
            return NotImplemented
    if not isinstance(target, kind):
        with torch.no_grad():
            target.copy_(result)
        return target
    if isinstance(result, kind):  # (a structured answer: 0 off the diagonal)
        with torch.no_grad():
            target._pair.copy_(result._pair)
        return target
    # a dense answer (d += t): held where it is value * I
    _commit(target, _dense_pair(result.to(target.dtype), target, func), func)
    return target


def _dense_pair(dense: Tensor, target: Any, func: Callable) -> Tensor:
    """The pair [value, off-diagonal entry] of a dense N×N result that target is to hold;
    CannotHoldResult where it is not value * I."""
    n = target.N
    if dense.shape != (n, n) or not _is_value_eye(dense):
        raise CannotHoldResult(
            f"{_Name(func)}: the result (shape {tuple(dense.shape)}) is not "
            f"value * I_{n}, so a ScalarTensor cannot hold it; use "
            "the out-of-place call, which returns the dense result"
        )
    if n >= 2:  # the diagonal value and an off-diagonal entry (zero, perhaps -0.0)
        return dense[:2, :2].flatten()[[0, 1]]
    value = dense.reshape(-1)[:1] if n else target._pair[:1].to(dense.dtype)
    return torch.cat([value, torch.zeros_like(value)])


def _write_pairwise(kind: type, func: Callable, args: tuple, kwargs: dict, target: Any) -> Any:
    """An elementwise in-place function applied to target's pair [value, 0]: it changes a
    diagonal and an off-diagonal entry of the dense matrix as it changes the pair, with
    the same dtype rules, rounding and errors, for any N. NotImplemented where it does not
    apply (N of 0 or 1 has no off-diagonal entry to read; its dense matrix costs
    nothing)."""
    if target.N < 2 or func not in _ELEMENTWISE_INPLACE or "out" in kwargs:
        return NotImplemented
    first = args[0] if args else next(iter(kwargs.values()), None)
    if first is not target:
        return NotImplemented
    pair = target._pair.clone()
    operands = _replaced(
        args, kwargs, lambda x: pair if x is target else _pair_operand(x, target, kind)
    )
    if any(o is _NO_OPERAND for o in _flat(*operands)):
        return NotImplemented
    if func(*operands[0], **operands[1]) is NotImplemented:  # an operator declining
        return NotImplemented
    _commit(target, pair, func)
    return target


def write_without_dense(cls: type, func: Callable, args: tuple, kwargs: dict) -> Any:
    """A call that writes one tensor (in place, out=), answered without the dense matrix
    of any ScalarTensor: from the structured answer of its out-of-place form, or, for an
    elementwise in-place function, on the pair; NotImplemented where only the dense call
    can answer it. Raises CannotHoldResult where the result is not value * I."""
    done = _write_structured(cls, func, args, kwargs)
    if done is NotImplemented:
        kind = _scalar_class(cls)
        targets = written_scalar_tensors(kind, func, args, kwargs)
        if len(targets) == 1:
            done = _write_pairwise(kind, func, args, kwargs, targets[0])
    return done


def _write_dense(kind: type, func: Callable, args: tuple, kwargs: dict, targets: list) -> Any:
    memo: dict = {}
    dense_args, dense_kwargs = densify(args, memo, kind), densify(kwargs, memo, kind)
    result = func(*dense_args, **dense_kwargs)
    if result is NotImplemented:  # an operator declining: nothing was changed
        return NotImplemented
    pairs = []  # every target is checked before any is changed
    for t in targets:
        pair = _dense_pair(memo[id(t)], t, func)
        _check_holdable(t, pair, func)
        pairs.append((t, pair))
    for t, pair in pairs:
        _commit(t, pair, func)
    by_id = {id(memo[id(t)]): t for t in targets}
    return torch.utils._pytree.tree_map_only(Tensor, lambda r: by_id.get(id(r), r), result)


# In-place elementwise functions: each changes the dense matrix entry by entry, so it
# changes the diagonal and an off-diagonal entry as it changes the pair [value, 0]
# (see _write_pairwise), whatever N is.
_ELEMENTWISE_INPLACE = frozenset(
    f
    for name in (
        "add_ sub_ subtract_ mul_ multiply_ div_ divide_ true_divide_ floor_divide_ "
        "remainder_ fmod_ pow_ neg_ negative_ abs_ absolute_ sign_ sgn_ sin_ sinh_ tan_ tanh_ "
        "asin_ asinh_ atan_ atanh_ arcsin_ arcsinh_ arctan_ arctanh_ sqrt_ square_ trunc_ "
        "fix_ floor_ ceil_ round_ frac_ expm1_ log1p_ erf_ erfinv_ deg2rad_ rad2deg_ "
        "nan_to_num_ clamp_ clamp_min_ clamp_max_ clip_ relu_ exp_ exp2_ cos_ cosh_ sigmoid_ "
        "log_ log2_ log10_ reciprocal_ rsqrt_ zero_ fill_ copy_ lerp_ addcmul_ addcdiv_ "
        "logical_not_ bitwise_not_ bitwise_and_ bitwise_or_ bitwise_xor_ hypot_ atan2_ "
        "copysign_ xlogy_"
    ).split()
    + sorted(INPLACE_OPERATORS)
    for f in (getattr(Tensor, name, None), getattr(torch, name, None))
    if f is not None
) | {torch.nn.init.constant_, torch.nn.init.zeros_, torch.nn.init.ones_}


def _transform_argument(func: Callable, args: tuple, kwargs: dict) -> str | None:
    """The name (torch's) of an argument that is or holds a tensor of a torch.func
    transform, or None."""

    def holds(x: Any) -> bool:
        return torch.utils._pytree.tree_any(lambda t: isinstance(t, Tensor) and hidden(t), x)

    layout = torch_positions(func).layout
    for i, x in enumerate(args):
        if holds(x):
            if i < len(layout) and layout[i]:
                return layout[i]
            return "other" if i == 1 else f"argument {i}"  # (operators: d += y)
    return next((key for key, x in kwargs.items() if holds(x)), None)


def _writing(kind: type, func: Callable, args: tuple, kwargs: dict, written: list) -> Any:
    """Where a call that writes a ScalarTensor runs under a torch.func transform: below it
    (d's pair is a constant of the transform, as every tensor of the call is one), or
    nowhere: a tensor of the transform (functional under functionalize, batched, tracking
    gradients) cannot go into the number d stores outside it, as it cannot go into a
    tensor made outside functionalize (torch's internal assert) or grad; the call raises
    CannotHoldResult naming the argument."""
    if not transforms_active() or not any(isinstance(o, kind) for o in written):
        return contextlib.nullcontext()
    name = _transform_argument(func, args, kwargs)
    if name is not None:
        raise CannotHoldResult(
            f"{_Name(func)}: '{name}' is a tensor of a torch.func transform (functionalize, "
            "vmap, grad, ...); a ScalarTensor stores its value outside the transform and "
            "cannot take one computed in it; use the out-of-place call (d * y rather than "
            "d *= y), which gives a result of the transform"
        )
    return torch._C._DisableFuncTorch()


def fallback(cls: type, func: Callable, types: tuple, args: tuple, kwargs: dict) -> Any:
    """ScalarTensor's fallback: run ``func`` with every ScalarTensor replaced by its dense
    matrix; a call that changes a ScalarTensor in place (or writes into one with ``out=``)
    changes it as it changes the dense matrix, or raises :class:`CannotHoldResult`. A
    call that writes can often do without the dense matrix (write_without_dense): that
    comes first. Under a torch.func transform, see _writing."""
    if _PROBING.get() is func:
        return NotImplemented
    kind = _scalar_class(cls)
    written = written_arguments(func, args, kwargs)
    if written:
        with _writing(kind, func, args, kwargs, written):
            done = write_without_dense(cls, func, args, kwargs)
            if done is not NotImplemented:
                return done
            targets = [o for o in written if isinstance(o, kind)]
            if targets:
                return _write_dense(kind, func, args, kwargs, targets)
    return func(*densify(args, {}, kind), **densify(kwargs, {}, kind))


_table_torch_function = TorchFunctionTable.__dict__["__torch_function__"].__func__


def python_torch_function(cls: type, func: Callable, types: tuple, args=(), kwargs=None) -> Any:
    """ScalarTensor's __torch_function__ in Python: the table's, and, under the "strict"
    policy, the writes that need no dense matrix. Strict refuses what would form the
    dense matrix; a call that writes a ScalarTensor (d.mul_(2), d += e, out=d) or writes a
    plain tensor with a ScalarTensor's help (t += d) forms none when its out-of-place form
    has a structured answer, or when it is elementwise."""
    result = _table_torch_function(cls, func, types, args, kwargs)
    strict = result is NotImplemented and POLICY.value_for(cls) == "strict"
    if strict and _PROBING.get() is not func:
        kwargs, kind = kwargs or {}, _scalar_class(cls)
        written = written_arguments(func, args, kwargs)
        if written:
            with _writing(kind, func, args, kwargs, written):
                result = write_without_dense(cls, func, args, kwargs)
        if result is NotImplemented and all(t is cls or t is torch.Tensor for t in types):
            # no other type could answer (a plain tensor's __torch_function__ cannot run
            # a ScalarTensor): torch would raise its TypeError, which names neither the
            # policy nor the way out, and lists torch.Tensor
            raise strict_refusal(cls, func, args, kwargs)
    return result
