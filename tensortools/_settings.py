"""The settings of tensortools' types: a process-wide value per class, and overrides that
hold in one context only.

A setting's process-wide value is what ``set_*`` methods change: every thread sees it. The
context managers (``using_policy``, ``tracking``, ``merge_policy``) override it in the
current context only: the calling thread (each thread starts with no overrides), or the
asyncio task. On exit they restore exactly what that context saw before, whatever other
threads did meanwhile, so overlapping blocks in two threads never leak into each other.

All overrides live in one context variable, :data:`OVERRIDES`, mapping ``(setting name,
class)`` to the stack of blocks overriding it; ``None`` when there are none, which is the
common case and the one the fast paths test for. A block leaving removes its own entry
only, wherever it stands in the stack: blocks that end out of order (a generator closed
after its caller's block has ended) leave no override behind. A generator suspended inside
a block runs in its caller's context, so its override holds there until it is resumed to
the end or closed, as with ``decimal.localcontext``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

#: The context's overrides: {(setting name, class): ((marker, value), ...)}, innermost
#: last, or None when there are none.
OVERRIDES: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "tensortools_setting_overrides", default=None
)


def push(var: contextvars.ContextVar, key: Any, value: Any) -> object:
    """Add value on top of key's stack in var (a dict of stacks, or None) for the current
    context; returns the marker that :func:`pop` takes it back with."""
    marker = object()
    current = var.get() or {}
    var.set({**current, key: (*current.get(key, ()), (marker, value))})
    return marker


def pop(var: contextvars.ContextVar, key: Any, marker: object) -> None:
    """Remove the entry `marker` from key's stack in var, wherever it stands."""
    current = var.get() or {}
    stack = current.get(key, ())
    kept = tuple(entry for entry in stack if entry[0] is not marker)
    if len(kept) == len(stack):
        raise RuntimeError(
            "tensortools: a settings block must end in the thread (or asyncio task) that began it"
        )
    changed = {k: v for k, v in current.items() if k != key}
    if kept:
        changed[key] = kept
    var.set(changed or None)


class ClassSetting:
    """A setting of a class and its subclasses, read as a class attribute.

    Declared in a class body (``policy = ClassSetting("fallback")``); ``cls.policy`` reads
    the value that holds for ``cls`` in the current context: along ``cls.__mro__``, the
    first class with a context override or a process-wide value of its own. A subclass
    declaring a plain value (``policy = "strict"``) gets it as its process-wide value (see
    :meth:`adopt`).
    """

    def __init__(self, default: Any) -> None:
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.storage = f"_global_{name.lstrip('_')}"  # where the process-wide value lives
        setattr(owner, self.storage, self.default)

    def __get__(self, obj: Any, cls: type | None = None) -> Any:
        if cls is None:
            cls = type(obj)
        overrides = OVERRIDES.get()
        if overrides is None:
            return getattr(cls, self.storage)
        for klass in cls.__mro__:
            stack = overrides.get((self.name, klass))
            if stack:
                return stack[-1][1]
            if self.storage in klass.__dict__:
                return klass.__dict__[self.storage]
        return self.default

    def set(self, cls: type, value: Any) -> Any:
        """Set the process-wide value for ``cls`` (and its subclasses without one of their
        own); returns the previous process-wide value."""
        previous = getattr(cls, self.storage)
        setattr(cls, self.storage, value)
        return previous

    @contextlib.contextmanager
    def override(self, cls: type, value: Any) -> Iterator[None]:
        """Within the block, and in the current context only, ``cls`` (and its subclasses
        without a value of their own) see ``value``."""
        marker = push(OVERRIDES, (self.name, cls), value)
        try:
            yield
        finally:
            pop(OVERRIDES, (self.name, cls), marker)

    def adopt(self, cls: type) -> Any:
        """Take a plain value that a class body assigned to this setting's name as that
        class's process-wide value (and put the descriptor back in charge); returns it,
        or the descriptor itself when the class assigned nothing."""
        value = cls.__dict__.get(self.name, self)
        if value is not self and not isinstance(value, ClassSetting):
            delattr(cls, self.name)
            setattr(cls, self.storage, value)
        return value
