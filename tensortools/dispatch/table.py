"""The dispatch table: per-class handlers filled by a decorator, with the method and
operator forms of each function, and the policy for calls without a handler."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.overrides import _is_torch_function_mode_enabled

from tensortools._compiler import run_whole_when_entered
from tensortools._settings import ClassSetting, register_owner
from tensortools.dispatch.binding import (
    HandlerShape,
    bind,
    foreign_ints,
    plain_up_to,
    torch_positions,
)
from tensortools.dispatch.documented import documented_aliases
from tensortools.dispatch.refusal import strict_refusal

__all__ = ["POLICIES", "POLICY", "TorchFunctionTable", "aliases_of", "strict_refusal"]

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


def _python_operator_code() -> Any:
    """The code of torch's wrapper around Tensor's operators written in Python
    (``__rsub__``, ``__rdiv__``, ``__rpow__``, ``__floordiv__``, ...; each keeps the
    function it wraps as ``__wrapped__``), or None for a torch that has none."""
    marker = getattr(
        torch._tensor, "_handle_torch_function_and_wrap_type_error_to_not_implemented", None
    )
    return None if marker is None else marker(lambda self: self).__code__


_PYTHON_OPERATOR = _python_operator_code()


def is_python_operator(func: Any) -> bool:
    """Whether func is one of Tensor's operators written in Python (see
    :func:`_python_operator_code`), told apart by their code, not looked up in a dict:
    traced by torch.compile, a dict keyed by these wrappers (which share one code object)
    answered for the wrong key (``x + y`` ran as ``x - y``). A type's own handlers for them
    are still looked up by key; traced, dynamo may miss them or take another's
    (docs/writing-a-type.md, "Under torch.compile")."""
    return _PYTHON_OPERATOR is not None and getattr(func, "__code__", None) is _PYTHON_OPERATOR


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


def _check_policy(cls: type, policy: Any) -> str:
    if policy not in POLICIES:
        raise ValueError(f"{cls.__name__}: 'policy' must be one of {POLICIES}, got {policy!r}")
    return policy


#: The policy of every class of the table, for calls without a handler: code that reads
#: it at call time calls ``POLICY.value_for(cls)`` (``cls.policy`` is this descriptor).
POLICY = ClassSetting("fallback", storage="_global_policy", check=_check_policy)


class TorchFunctionTable:
    """Base for a type whose ``__torch_function__`` looks calls up in a per-class table.

    Subclasses implement :meth:`fallback`, which runs a call that no handler answered.
    The policy for calls without a handler is a setting (docs/settings.md):
    :meth:`set_policy`, :meth:`using_policy`, and ``cls.policy``, the policy in force for
    ``cls`` in the current thread; a class body may set its own (``policy = "strict"``).
    """

    policy: ClassVar[str] = POLICY
    # Handlers registered on this very class, and the merged view (own over inherited)
    # that __torch_function__ reads; the view is rebuilt on every registration.
    _own_handlers: ClassVar[dict[Callable, Callable]] = {}
    _handlers: ClassVar[dict[Callable, Callable]] = {}
    # func -> the function its handler was registered for (torch.norm for Tensor.norm)
    _own_forms: ClassVar[dict[Callable, Callable]] = {}
    # func -> (handler, how many positional arguments reach it as they are, its
    # HandlerShape, func, the function it was registered for, whether func takes its ints
    # spread out, the positions func takes ints in): what __torch_function__ reads, so
    # that a call whose arguments the handler takes as they are costs one lookup
    # (tensortools.dispatch.binding binds the others, and a NumPy int among them)
    _calls: ClassVar[dict[Callable, tuple]] = {}
    _registry_lock: ClassVar[threading.RLock] = threading.RLock()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        POLICY.adopt(cls)
        with cls._registry_lock:  # a parent may be registering in another thread
            cls._own_handlers = {}
            cls._own_forms = {}
            cls._rebuild_handlers()

    @classmethod
    def _rebuild_handlers(cls) -> None:
        merged: dict[Callable, Callable] = {}
        forms: dict[Callable, Callable] = {}
        for klass in reversed(cls.__mro__):
            merged.update(klass.__dict__.get("_own_handlers", {}))
            forms.update(klass.__dict__.get("_own_forms", {}))
        calls = {}
        for func, handler in merged.items():
            shape, form = _shape_of(handler), forms.get(func, func)
            positions = torch_positions(func)
            spread, ints = bool(positions.spread), positions.ints
            calls[func] = (handler, plain_up_to(func, form, shape), shape, func, form, spread, ints)
        cls._calls = calls
        cls._handlers = merged  # replaced whole, so readers never see a half-built table
        cls._on_table_change()
        for sub in cls.__subclasses__():
            sub._rebuild_handlers()

    @classmethod
    def _on_table_change(cls) -> None:
        """Called when the class's table or a process-wide setting of it changed (classes
        with a compiled fast path recompute its record here)."""

    @classmethod
    def _on_settings_change(cls) -> None:
        """A process-wide setting of cls changed: it and its subclasses are told."""
        cls._on_table_change()
        for sub in cls.__subclasses__():
            sub._on_settings_change()

    @classmethod
    def implements(cls, *funcs: Callable, aliases: bool = True) -> Callable[[Callable], Callable]:
        """Decorator: register the handler for ``funcs`` (and their aliases) on ``cls``.

        The handler is called with the call bound as torch binds it, in the form of the
        function it is registered for (:mod:`tensortools.dispatch.binding`): an argument
        reaches the handler's parameter of torch's name for it, else the one in torch's
        position, whether the caller passed it by position, by torch's name or by a
        NumPy-style alias (``torch.linalg.det(A=d)``, ``sum(d, axis=0)``); sizes a method
        takes spread out arrive as one tuple (``d.flip(0, 1)``); keyword-only arguments
        (``out``, ``dtype``, ``alpha``) arrive by torch's name; a handler of ``(*args,
        **kwargs)`` gets the call as torch passed it. A call the handler's signature
        cannot take (an older overload such as ``torch.add(d, 2, t)``, a keyword it does
        not declare, unless at torch's default) goes to the policy, as does a call for
        which it returns ``NotImplemented``.
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
                    cls._own_forms[func] = func
                    if aliases:
                        cls._register_aliases(func, handler)
                cls._rebuild_handlers()
            return handler

        return register

    @classmethod
    def _register_aliases(cls, func: Callable, handler: Callable) -> None:
        """func's method and operator forms, and the aliases torch documents of it
        (torch.swapaxes for torch.transpose) with theirs, where no handler of their own
        is registered (the later registration answers an alias of both)."""
        for alias, reflected in aliases_of(func):
            cls._own_handlers[alias] = _swap_operands(handler) if reflected else handler
            cls._own_forms[alias] = func
        for other in documented_aliases(func):
            for alias, reflected in ((other, False), *aliases_of(other)):
                if cls._own_forms.get(alias) is other:
                    continue  # (registered for other itself)
                cls._own_handlers[alias] = _swap_operands(handler) if reflected else handler
                cls._own_forms[alias] = func

    @classmethod
    def handler_for(cls, func: Callable) -> Callable | None:
        """The handler ``cls`` would call for ``func``, or None."""
        return cls._handlers.get(func)

    @classmethod
    def set_policy(cls, policy: str) -> str:
        """Set the policy for functions without a handler (one of :data:`POLICIES`), for
        every thread; returns the previous one."""
        return POLICY.set(cls, policy)

    @classmethod
    def using_policy(cls, policy: str) -> contextlib.AbstractContextManager:
        """Context manager: ``cls`` follows ``policy`` inside the block, in the current
        thread only; on exit the thread sees the policy it saw before."""
        return POLICY.override(cls, policy)

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
        return (
            POLICY.value_for(cls) == "strict"
            or cls.fallback.__func__ is TorchFunctionTable.fallback.__func__
        )

    #: Whether the type observes the calls it takes part in (records them, as LoggingTensor
    #: does) rather than computing them: such a type sees each call first, whatever the
    #: order of the arguments, and hands it on to the others with its instances as plain
    #: tensors. So a call is observed once, as the user made it, and never as the many
    #: calls another type's handler may make on the observed tensor.
    observes_calls: ClassVar[bool] = False

    @classmethod
    def others_take_part(cls, types: tuple) -> bool:
        """Whether an overriding type that cls knows nothing about (neither a subclass nor a
        base) takes part in a call of `types`: the call is then left to it (no handler
        answers it; a wrapper's fallback passes cls's instances on as plain tensors)."""
        for t in types:  # (a loop, not any(): this runs on every batch rule's call)
            if t is not cls and not (issubclass(t, cls) or issubclass(cls, t) or t is Tensor):
                return True  # (torch.Tensor: a plain tensor beside a tensor-like)
        return False

    @classmethod
    @run_whole_when_entered
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        call = cls._calls.get(func)
        if len(types) > 1 and not cls.observes_calls:
            observer = next((t for t in types if getattr(t, "observes_calls", False)), None)
            if observer is not None:
                result = observer.__torch_function__(func, types, args, kwargs)
                if result is not NotImplemented:
                    return result
            if cls.others_take_part(types):
                # torch's protocol: a type answers only for the types it knows; another's
                # instance (one that declines every call, say) leaves the call to the
                # policy, as a plain tensor's would leave it to torch
                call = None
        if call is not None:
            handler, as_they_are, shape, key, form, spread, ints = call
            if (
                kwargs
                or len(args) > as_they_are
                or (spread and len(args) > 1 and not isinstance(args[1], (tuple, list)))
                or (ints and foreign_ints(args, ints))
            ):
                bound = bind(key, form, shape, args, kwargs)
            else:
                bound = args, kwargs
            if bound is not None:
                result = handler(*bound[0], **bound[1])
                if result is not NotImplemented:
                    return result
        if POLICY.value_for(cls) == "strict":
            return NotImplemented
        return cls.fallback(func, types, args, kwargs)


# A process-wide change of a setting of a class of the table (its policy, or a setting of a
# type's own) recomputes the records of the class and its subclasses, under the lock that
# registering a handler takes.
register_owner(
    TorchFunctionTable,
    on_change=lambda cls: cls._on_settings_change(),
    lock=TorchFunctionTable._registry_lock,
)


_SHAPES: dict[Callable, HandlerShape | None] = {}


def _shape_of(handler: Callable) -> HandlerShape | None:
    try:
        return _SHAPES[handler]
    except KeyError:
        return _SHAPES.setdefault(handler, HandlerShape.of(handler))
    except TypeError:  # (an unhashable callable)
        return HandlerShape.of(handler)


@contextlib.contextmanager
def refusing_endless_recursion(cls: type, func: Callable) -> Iterator[None]:
    """Turn a RecursionError raised while a TorchFunctionMode is active into a TypeError.

    A type's __torch_function__ runs with a mode active only when that mode declined the
    call (returned NotImplemented); the plain-tensor calls a handler makes then reach the
    mode again, and where it declines those too, torch recurses without end on a plain
    tensor's property getters (``t.device``, ``t.shape``) where its methods raise a
    TypeError. Every such call ends in the TypeError torch gives the methods."""
    try:
        yield
    except RecursionError:
        if not _is_torch_function_mode_enabled():
            raise
        name = torch.overrides.resolve_name(getattr(func, "method", func)) or repr(func)
        raise TypeError(
            f"{cls.__name__}: no implementation of '{name}' can run under the active "
            "TorchFunctionMode, which declined the call (returned NotImplemented) and "
            "the plain-tensor calls it needs"
        ) from None
