"""A reusable base for types that implement ``__torch_function__`` with a dispatch table.

A type derives from :class:`TorchFunctionTable` (or, for ``torch.Tensor`` subclasses, from
:class:`TensorWrapper`) and registers handlers::

    class MyType(TorchFunctionTable):
        @classmethod
        def fallback(cls, func, types, args, kwargs): ...

    @MyType.implements(torch.add)
    def add(input, other, *, alpha=1, out=None): ...

Registering a torch function also registers its ``Tensor`` method and operator forms
(``torch.add`` covers ``Tensor.add``, ``Tensor.__add__`` and ``Tensor.__radd__``) unless
``aliases=False``. A reflected operator reaches the handler with the operands in the order
torch itself computes it: ``1 + t`` as ``torch.add(t, 1)`` (addition, multiplication and
the bitwise operators are computed ``self op other``), ``1 - t`` as ``torch.sub(1, t)``. Each class has its own table;
a subclass sees its parents' entries and may override them. A handler may return
``NotImplemented`` to decline a particular call (the policy then decides).

Functions without a handler follow the class's policy: ``"fallback"`` runs the torch
function on plain tensors (and wrapper types re-wrap the results); ``"strict"`` returns
``NotImplemented``, so that torch raises a ``TypeError`` naming the function and the
types once every type involved has declined. ``set_policy`` sets it for every thread;
``using_policy`` for the block, in the current thread only. When several types override a call,
torch's own rules apply: subclasses before superclasses, otherwise left to right, and the
first result that is not ``NotImplemented`` wins.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import pickle
import threading
from typing import Any, Callable, ClassVar

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

from tensortools._settings import OVERRIDES, ClassSetting

__all__ = ["POLICIES", "TorchFunctionTable", "TensorLike", "TensorWrapper", "CannotHoldResult",
           "aliases_of"]

#: The policies a class may follow for calls without a handler.
POLICIES = ("fallback", "strict")

# torch function name -> its Tensor operator forms; True marks a form whose operands torch
# swaps (Tensor.__rsub__(self, other) computes torch.sub(other, self)). torch computes the
# reflected forms of add, mul and the bitwise operators as self op other (a different
# order of operands rounds differently for complex numbers), so they swap nothing.
_OPERATORS: dict[str, tuple[tuple[str, bool], ...]] = {
    "add": (("__add__", False), ("__radd__", False)),
    "sub": (("__sub__", False), ("__rsub__", True)),
    "subtract": (("__sub__", False), ("__rsub__", True)),
    "mul": (("__mul__", False), ("__rmul__", False)),
    "multiply": (("__mul__", False), ("__rmul__", False)),
    "div": (("__truediv__", False), ("__rtruediv__", True)),
    "divide": (("__truediv__", False), ("__rtruediv__", True)),
    "true_divide": (("__truediv__", False), ("__rtruediv__", True)),
    "floor_divide": (("__floordiv__", False), ("__rfloordiv__", True)),
    "remainder": (("__mod__", False), ("__rmod__", True)),
    "pow": (("__pow__", False), ("__rpow__", True)),
    "matmul": (("__matmul__", False), ("__rmatmul__", True)),
    "neg": (("__neg__", False),),
    "negative": (("__neg__", False),),
    "positive": (("__pos__", False),),
    "abs": (("__abs__", False),),
    "bitwise_not": (("__invert__", False),),
    "bitwise_and": (("__and__", False), ("__rand__", False)),
    "bitwise_or": (("__or__", False), ("__ror__", False)),
    "bitwise_xor": (("__xor__", False), ("__rxor__", False)),
    "eq": (("__eq__", False),),
    "ne": (("__ne__", False),),
    "lt": (("__lt__", False),),
    "le": (("__le__", False),),
    "gt": (("__gt__", False),),
    "ge": (("__ge__", False),),
}


def aliases_of(func: Callable) -> list[tuple[Callable, bool]]:
    """The ``Tensor`` method and operator forms of a ``torch.*`` function.

    Returns ``(alias, reflected)`` pairs; ``reflected`` means the alias takes the two
    operands in the opposite order. Functions outside the ``torch`` namespace have none.
    """
    name = getattr(func, "__name__", None)
    if name is None or getattr(torch, name, None) is not func:
        return []
    found = []
    method = getattr(Tensor, name, None)
    if callable(method):
        found.append((method, False))
    for dunder, reflected in _OPERATORS.get(name, ()):
        op = getattr(Tensor, dunder, None)
        if op is not None:
            found.append((op, reflected))
    return found


def _swap_operands(handler: Callable) -> Callable:
    def reflected(self, other, *args, **kwargs):
        return handler(other, self, *args, **kwargs)

    reflected.__wrapped__ = handler
    return reflected


_POLICY = ClassSetting("fallback")


class TorchFunctionTable:
    """Base for a type whose ``__torch_function__`` looks calls up in a per-class table.

    Subclasses implement :meth:`fallback`, which runs a call that no handler answered.
    ``cls.policy`` is the policy in force for ``cls`` in the current thread; a class body
    may set its own (``policy = "strict"``).
    """

    policy: ClassVar[str] = _POLICY
    # Handlers registered on this very class, and the merged view (own over inherited)
    # that __torch_function__ reads; the view is rebuilt on every registration.
    _own_handlers: ClassVar[dict[Callable, Callable]] = {}
    _handlers: ClassVar[dict[Callable, Callable]] = {}
    _registry_lock: ClassVar[threading.RLock] = threading.RLock()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = _POLICY.adopt(cls)
        if declared is not _POLICY:
            _check_policy(cls, declared)
        with cls._registry_lock:  # a parent may be registering in another thread
            cls._own_handlers = {}
            cls._rebuild_handlers()

    @classmethod
    def _rebuild_handlers(cls) -> None:
        merged: dict[Callable, Callable] = {}
        for klass in reversed(cls.__mro__):
            merged.update(klass.__dict__.get("_own_handlers", {}))
        cls._handlers = merged  # replaced whole, so readers never see a half-built table
        for sub in cls.__subclasses__():
            sub._rebuild_handlers()

    @classmethod
    def implements(cls, *funcs: Callable, aliases: bool = True) -> Callable[[Callable], Callable]:
        """Decorator: register the handler for ``funcs`` (and their aliases) on ``cls``.

        The handler is called with the call's own arguments; it may return
        ``NotImplemented`` to leave a call to the policy.
        """
        if not funcs:
            raise TypeError(f"{cls.__name__}.implements() needs at least one function")
        for func in funcs:
            if not callable(func):
                raise TypeError(f"{cls.__name__}.implements(): {func!r} is not callable")

        def register(handler: Callable) -> Callable:
            with cls._registry_lock:
                for func in funcs:
                    cls._own_handlers[func] = handler
                    if aliases:
                        for alias, reflected in aliases_of(func):
                            cls._own_handlers[alias] = (_swap_operands(handler) if reflected
                                                        else handler)
                cls._rebuild_handlers()
            return handler

        return register

    @classmethod
    def handler_for(cls, func: Callable) -> Callable | None:
        """The handler ``cls`` would call for ``func``, or None."""
        return cls._handlers.get(func)

    @classmethod
    def set_policy(cls, policy: str) -> str:
        """Set the policy for functions without a handler, for every thread; returns the
        previous one."""
        _check_policy(cls, policy)
        return _POLICY.set(cls, policy)

    @classmethod
    def using_policy(cls, policy: str) -> contextlib.AbstractContextManager:
        """Context manager: ``cls`` follows ``policy`` inside the block, in the current
        thread only; on exit the thread sees the policy it saw before."""
        _check_policy(cls, policy)
        return _POLICY.override(cls, policy)

    @classmethod
    def fallback(cls, func: Callable, types: tuple, args: tuple, kwargs: dict) -> Any:
        """Run a call no handler answered (policy "fallback").

        This default refuses (returns NotImplemented), so a type that defines no
        fallback of its own behaves as under the "strict" policy.
        """
        return NotImplemented

    @classmethod
    def refuses_unhandled(cls) -> bool:
        """Whether calls without a handler end in a TypeError: the policy is strict, or
        the class keeps the default (refusing) fallback."""
        return cls.policy == "strict" or cls.fallback.__func__ is TorchFunctionTable.fallback.__func__

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        handler = cls._handlers.get(func)
        if handler is not None:
            result = handler(*args, **kwargs)
            if result is not NotImplemented:
                return result
        # (cls.policy, read without the descriptor's call when no context overrides it)
        policy = cls._global_policy if OVERRIDES.get() is None else cls.policy
        if policy == "strict":
            return NotImplemented
        return cls.fallback(func, types, args, kwargs)


def _check_policy(cls: type, policy: Any) -> None:
    if policy not in POLICIES:
        raise ValueError(f"{cls.__name__}: 'policy' must be one of {POLICIES}, got {policy!r}")


class TensorLike(TorchFunctionTable):
    """Base for types that stand in for tensors without being ``torch.Tensor``.

    Python operators (``a + b``, ``a @ b``, ``-a``, ``a[i]``, ``a += b``, comparisons),
    conversions (``bool(a)``, ``float(a)``, iteration) and the ``Tensor`` methods and
    properties the class does not define (``a.sum()``, ``a.T``) go through
    ``__torch_function__`` as their ``Tensor`` forms (``Tensor.__add__``, ``Tensor.sum``),
    so they reach the table or the policy like ``torch.*`` calls do. Binary operators
    return ``NotImplemented`` where the call raises a ``TypeError`` (but
    :class:`CannotHoldResult`), as ``torch.Tensor``'s do, so that Python tries the other
    operand's reflected method.
    """

    __hash__ = object.__hash__  # defining __eq__ below would otherwise unset it

    def __getattr__(self, name: str) -> Any:
        attr = None if name.startswith("_") else getattr(Tensor, name, None)
        if attr is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        if callable(attr):
            return functools.partial(_call_method, attr, self)
        return _call_method(attr.__get__, self)


def _call_method(method: Callable, self: TensorLike, *args: Any, **kwargs: Any) -> Any:
    if has_torch_function((*args, *kwargs.values())):
        return handle_torch_function(method, (self, *args), self, *args, **kwargs)
    # Only this type overrides the call: dispatch directly. (torch's own refusal message
    # cannot name a method descriptor, so it is written here.)
    cls = type(self)
    result = cls.__torch_function__(method, (cls,), (self, *args), kwargs)
    if result is NotImplemented:
        name = (torch.overrides.resolve_name(method)
                or f"torch.Tensor.{getattr(method, '__name__', method)}")
        raise TypeError(f"no implementation found for '{name}' on types that implement "
                        f"__torch_function__: [{cls.__name__}] (policy {cls.policy!r})")
    return result


class CannotHoldResult(TypeError):
    """An in-place call (or ``out=``) whose result the tensor-like type cannot hold. Unlike
    other TypeErrors of an operator, it is not turned into NotImplemented: Python would
    then rebind ``a += b`` to a new object where torch changes ``a`` itself."""


# The Tensor dunders a TensorLike forwards through __torch_function__. Binary ones (and
# their reflected and in-place forms) return NotImplemented where the call raises a
# TypeError, as torch.Tensor's own do, so that Python tries the other operand's method.
_BINARY_DUNDERS = frozenset(
    f"__{prefix}{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow",
                                   "matmul", "and", "or", "xor", "lshift", "rshift", "div")
    for prefix in ("", "r", "i")
    if hasattr(Tensor, f"__{prefix}{op}__")
) | {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"}
_OTHER_DUNDERS = ("__neg__", "__pos__", "__abs__", "__invert__", "__getitem__", "__setitem__",
                  "__bool__", "__int__", "__float__", "__complex__", "__index__", "__iter__",
                  "__reversed__", "__contains__", "__array__", "__dlpack_device__",
                  "__nonzero__", "__long__")


def _operator(name: str) -> Callable:
    tensor_op = getattr(Tensor, name)
    binary = name in _BINARY_DUNDERS

    def operator(self, *args):
        if not binary:
            return _call_method(tensor_op, self, *args)
        try:
            return _call_method(tensor_op, self, *args)
        except CannotHoldResult:
            raise
        except TypeError:
            return NotImplemented

    operator.__name__ = name
    operator.__qualname__ = f"TensorLike.{name}"
    return operator


for _name in sorted(_BINARY_DUNDERS) + list(_OTHER_DUNDERS):
    setattr(TensorLike, _name, _operator(_name))


def _is_foreign(cls: type, t: type) -> bool:
    """Whether `t` is an overriding type `cls` knows nothing about."""
    return not (issubclass(t, cls) or issubclass(cls, t))


class TensorWrapper(TorchFunctionTable, Tensor):
    """Base for ``torch.Tensor`` subclasses whose results stay of their type.

    The fallback runs the torch function with subclass dispatch disabled (no unwrapping
    needed, so an un-intercepted call costs little) and turns every tensor it returns
    into the type via :meth:`wrap`, given what :meth:`context` drew from the arguments.
    When another overriding type takes part in the call, this type's instances are
    passed on as plain tensors and the call is left to the others, so both types act.
    Results that another type returned are re-wrapped only if ``wrap_foreign`` is true.
    """

    wrap_foreign: ClassVar[bool] = False

    @classmethod
    def _make(cls, data: Any) -> "TensorWrapper":
        """An instance sharing data's storage (and autograd graph); data may also be
        anything torch.as_tensor takes."""
        tensor = data if isinstance(data, Tensor) else torch.as_tensor(data)
        try:
            with torch._C.DisableTorchFunctionSubclass():
                return tensor.as_subclass(cls)
        except RuntimeError as err:  # layouts a subclass cannot share (sparse CSR, ...)
            raise TypeError(f"{cls.__name__}: cannot wrap a tensor of layout "
                            f"{tensor.layout}: {err}") from err

    @classmethod
    def context(cls, func: Callable, args: tuple, kwargs: dict) -> Any:
        """What :meth:`wrap` needs from the call's arguments (default: nothing)."""
        return None

    @classmethod
    def wrap(cls, tensor: Tensor, context: Any) -> Tensor:
        """Turn one plain result tensor into ``cls``."""
        return tensor.as_subclass(cls)

    # -- saving and loading -------------------------------------------------------------
    # An instance's state is its attributes (__dict__): pickle, copy and torch.save write
    # them, and loading (also torch.load(weights_only=True)) restores exactly those. An
    # attribute may be any name a user can set that the class does not define (a crafted
    # file could otherwise set __class__, or shadow a method); saving refuses the others
    # up front, so that whatever saves also loads.

    @classmethod
    def _check_state(cls, state: Any, error: type[Exception]) -> dict:
        """state as a dict of attributes an instance may hold, or raise `error`."""
        if not isinstance(state, dict):
            raise error(f"{cls.__name__}: invalid saved state; expected a dict of "
                        f"attributes, got {type(state).__name__}")
        for name in state:
            if not (isinstance(name, str) and name.isidentifier()) or hasattr(cls, name):
                raise error(f"{cls.__name__}: invalid saved state; {name!r} is not an "
                            "attribute an instance may hold (a name the class does not "
                            "define)")
        return state

    def __getstate__(self) -> dict:
        return dict(self._check_state(self.__dict__, pickle.PicklingError))

    def __setstate__(self, state: Any) -> None:
        if state is None:  # the rebuild step of __reduce_ex__; the state follows
            return
        self.__dict__.update(self._check_state(state, pickle.UnpicklingError))

    def __reduce_ex__(self, proto: int) -> tuple:
        # As torch.Tensor.__reduce_ex__, but with the state as pickle's separate "state"
        # item, applied once the tensor exists: an attribute that refers back to the
        # tensor (metadata holding it, say) then loads as that very tensor.
        state = self.__getstate__()
        with torch._C.DisableTorchFunctionSubclass():
            func, args = Tensor._reduce_ex_internal(self, proto)
        return (torch._tensor._rebuild_from_type_v2, (func, type(self), args, None), state)

    def __deepcopy__(self, memo: dict) -> "TensorWrapper":
        # Tensor.__deepcopy__ rebuilds subclasses through new_empty(), which runs with
        # subclass dispatch disabled here and so returns a plain tensor; copy directly.
        if id(self) in memo:
            return memo[id(self)]
        with torch._C.DisableTorchFunctionSubclass():
            if not self.is_leaf:
                raise RuntimeError("Only Tensors created explicitly by the user (graph "
                                   "leaves) support the deepcopy protocol at the moment")
            new = self.detach().clone().as_subclass(type(self))
            new.requires_grad_(self.requires_grad)
            grad = self.grad
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        if grad is not None:
            grad = copy.deepcopy(grad, memo)
            with torch._C.DisableTorchFunctionSubclass():
                new.grad = grad
        return new

    @classmethod
    def call_plain(cls, func: Callable, types: tuple, args: tuple,
                   kwargs: dict) -> tuple[Any, dict[int, Tensor]]:
        """Run ``func`` with this type's instances taken as plain tensors.

        Returns the result and, when another overriding type took part (and so got this
        type's instances as plain aliases), a map from those aliases back to them.
        """
        if not any(_is_foreign(cls, t) for t in types):
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs), {}
        originals: dict[int, Tensor] = {}
        args, kwargs = _unwrap(cls, args, originals), _unwrap(cls, kwargs, originals)
        return func(*args, **kwargs), originals

    @classmethod
    def fallback(cls, func, types, args, kwargs):
        context = cls.context(func, args, kwargs)
        result, originals = cls.call_plain(func, types, args, kwargs)
        if func in _NO_WRAP:
            return result
        return _wrap_outputs(cls, result, context, originals)


# Results left as they are: torch's own list (property getters such as .grad) and the
# pickling protocol, whose result describes the tensor rather than being one.
_NO_WRAP = torch.overrides.get_default_nowrap_functions() | {Tensor.__reduce_ex__}


def _unwrap(cls: type, obj: Any, originals: dict[int, Tensor]) -> Any:
    if isinstance(obj, cls):
        with torch._C.DisableTorchFunctionSubclass():
            plain = obj.as_subclass(Tensor)
        originals[id(plain)] = obj
        return plain
    if isinstance(obj, (list, tuple)):
        return _rebuild(obj, [_unwrap(cls, o, originals) for o in obj])
    if isinstance(obj, dict):
        return {k: _unwrap(cls, v, originals) for k, v in obj.items()}
    return obj


def _rebuild(seq: list | tuple, items: list) -> list | tuple:
    """A sequence of seq's type holding `items` (lists, tuples, named tuples and
    torch.return_types structs alike)."""
    kind = type(seq)
    if kind is list or kind is tuple:
        return kind(items)
    if hasattr(kind, "_make"):  # collections.namedtuple
        return kind._make(items)
    return kind(items)  # struct sequences such as torch.return_types.max


def _wrap_outputs(cls: type, out: Any, context: Any, originals: dict[int, Tensor]) -> Any:
    if isinstance(out, Tensor):
        if id(out) in originals:  # an in-place call returned our argument's plain alias
            return originals[id(out)]
        if isinstance(out, cls):
            return out
        if type(out) is not Tensor and not cls.wrap_foreign:
            return out
        try:
            with torch._C.DisableTorchFunctionSubclass():
                return cls.wrap(out, context)
        except (RuntimeError, NotImplementedError) as err:  # sparse results and the like
            raise TypeError(f"{cls.__name__} cannot hold a result of layout {out.layout}: "
                            f"{err}") from err
    if isinstance(out, (list, tuple)):
        return _rebuild(out, [_wrap_outputs(cls, o, context, originals) for o in out])
    return out
