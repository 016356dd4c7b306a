"""A reusable base for types that implement ``__torch_function__`` with a dispatch table.

A type derives from :class:`TorchFunctionTable` (or, for ``torch.Tensor`` subclasses, from
:class:`TensorWrapper`) and registers handlers::

    class MyType(TorchFunctionTable):
        @classmethod
        def fallback(cls, func, types, args, kwargs): ...

    @MyType.implements(torch.add)
    def add(input, other, *, alpha=1, out=None): ...

Registering a torch function also registers its ``Tensor`` method and operator forms
(``torch.add`` covers ``Tensor.add``, ``Tensor.__add__`` and ``Tensor.__radd__``, the last
with its operands swapped back) unless ``aliases=False``. Each class has its own table;
a subclass sees its parents' entries and may override them. A handler may return
``NotImplemented`` to decline a particular call (the policy then decides).

Functions without a handler follow the class's policy: ``"fallback"`` runs the torch
function on plain tensors (and wrapper types re-wrap the results); ``"strict"`` returns
``NotImplemented``, so that torch raises a ``TypeError`` naming the function and the
types once every type involved has declined. When several types override a call,
torch's own rules apply: subclasses before superclasses, otherwise left to right, and the
first result that is not ``NotImplemented`` wins.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import threading
from typing import Any, Callable, ClassVar

import torch
from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

from tensortools._settings import temporarily

__all__ = ["POLICIES", "TorchFunctionTable", "TensorLike", "TensorWrapper", "aliases_of"]

#: The policies a class may follow for calls without a handler.
POLICIES = ("fallback", "strict")

# torch function name -> its Tensor operator forms; True marks a reflected form
# (Tensor.__radd__(self, other) computes torch.add(other, self)).
_OPERATORS: dict[str, tuple[tuple[str, bool], ...]] = {
    "add": (("__add__", False), ("__radd__", True)),
    "sub": (("__sub__", False), ("__rsub__", True)),
    "subtract": (("__sub__", False), ("__rsub__", True)),
    "mul": (("__mul__", False), ("__rmul__", True)),
    "multiply": (("__mul__", False), ("__rmul__", True)),
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
    "bitwise_and": (("__and__", False), ("__rand__", True)),
    "bitwise_or": (("__or__", False), ("__ror__", True)),
    "bitwise_xor": (("__xor__", False), ("__rxor__", True)),
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


class TorchFunctionTable:
    """Base for a type whose ``__torch_function__`` looks calls up in a per-class table.

    Subclasses implement :meth:`fallback`, which runs a call that no handler answered.
    """

    policy: ClassVar[str] = "fallback"
    # Handlers registered on this very class, and the merged view (own over inherited)
    # that __torch_function__ reads; the view is rebuilt on every registration.
    _own_handlers: ClassVar[dict[Callable, Callable]] = {}
    _handlers: ClassVar[dict[Callable, Callable]] = {}
    _registry_lock: ClassVar[threading.RLock] = threading.RLock()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
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
        """Set the policy for functions without a handler; returns the previous one."""
        if policy not in POLICIES:
            raise ValueError(f"{cls.__name__}.set_policy: 'policy' must be one of "
                             f"{POLICIES}, got {policy!r}")
        previous = cls.policy
        cls.policy = policy
        return previous

    @classmethod
    def using_policy(cls, policy: str) -> contextlib.AbstractContextManager:
        """Context manager: ``cls`` follows ``policy`` inside the block."""
        return temporarily(cls.set_policy, policy)

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
        if cls.policy == "strict":
            return NotImplemented
        return cls.fallback(func, types, args, kwargs)


class TensorLike(TorchFunctionTable):
    """Base for types that stand in for tensors without being ``torch.Tensor``.

    Python operators (``a + b``, ``a @ b``, ``-a``, ``a[i]``, comparisons) and the
    ``Tensor`` methods and properties the class does not define (``a.sum()``, ``a.T``)
    go through ``__torch_function__`` as their ``Tensor`` forms (``Tensor.__add__``,
    ``Tensor.sum``), so they reach the table or the policy like ``torch.*`` calls do.
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


def _operator(name: str) -> Callable:
    tensor_op = getattr(Tensor, name)

    def operator(self, *args):
        return _call_method(tensor_op, self, *args)

    operator.__name__ = name
    operator.__qualname__ = f"TensorLike.{name}"
    return operator


for _name in sorted({d for forms in _OPERATORS.values() for d, _ in forms} | {"__getitem__"}):
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
