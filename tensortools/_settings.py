"""The settings of tensortools' types: a process-wide value per class, and overrides that
hold in one context only.

A setting's process-wide value is what ``set_*`` methods change: every thread sees it. The
context managers (``using_policy``, ``tracking``, ``merge_policy``) override it in the
current context only: the calling thread (each thread starts with no overrides), or the
asyncio task. On exit they restore exactly what that context saw before, whatever other
threads did meanwhile, so overlapping blocks in two threads never leak into each other.

All overrides live in one context variable, :data:`OVERRIDES`, mapping ``(setting name,
class)`` to the value; ``None`` when there are none, which is the common case and the one
the fast paths test for.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator

#: The context's overrides: {(setting name, class): value}, or None when there are none.
OVERRIDES: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "tensortools_setting_overrides", default=None)


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
            value = overrides.get((self.name, klass), overrides)
            if value is not overrides:
                return value
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
        token = OVERRIDES.set({**(OVERRIDES.get() or {}), (self.name, cls): value})
        try:
            yield
        finally:
            OVERRIDES.reset(token)

    def adopt(self, cls: type) -> Any:
        """Take a plain value that a class body assigned to this setting's name as that
        class's process-wide value (and put the descriptor back in charge); returns it,
        or the descriptor itself when the class assigned nothing."""
        value = cls.__dict__.get(self.name, self)
        if value is not self and not isinstance(value, ClassSetting):
            delattr(cls, self.name)
            setattr(cls, self.storage, value)
        return value
