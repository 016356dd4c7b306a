"""The settings of tensortools' types: a process-wide value per class, and overrides that
hold in one thread only.

Every setting has the same three words (docs/settings.md): ``cls.set_<name>(value)`` sets
the process-wide value, which every thread sees, and returns the previous one;
``with cls.using_<name>(value):`` overrides it in the calling thread only (each thread
starts with no overrides), and on exit restores exactly what that thread saw before,
whatever other threads did meanwhile, so overlapping blocks in two threads never leak into
each other; ``cls.<name>`` reads the value in force for ``cls`` in the calling thread. A
setting is a :class:`ClassSetting` declared in its class's body, and the class writes the
three words as one-line members over it; code that reads a setting at call time reads it
one way, :meth:`ClassSetting.value_for`.

All overrides live in one per-thread store, :data:`OVERRIDES`, mapping ``(setting name,
class)`` to the stack of blocks overriding it; ``None`` when there are none, which is the
common case and the one the fast paths test for. A block leaving removes its own entry
only, wherever it stands in the stack and whichever thread ends it: blocks that end out
of order (a generator closed after its caller's block has ended) leave no override
behind, and a block whose generator is finalized in another thread ends in the thread
that opened it. A generator suspended inside a block runs in its caller's thread, so its
override holds there until it is resumed to the end or closed, as with
``decimal.localcontext``.

The store is a ``threading.local``, which ``torch.compile`` reads and guards on: a
compiled function sees the overrides of the thread that calls it, and is compiled again
when they differ from those it was compiled under. (Asyncio tasks of one thread share
its overrides.)

What a change of a process-wide value means to a class (the dispatch base recomputes the
records its compiled paths read) is registered once per family of classes, with
:func:`register_owner`: the callback to run and the lock to run it under.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

__all__ = ["OVERRIDES", "ClassSetting", "ThreadStore", "pop", "push", "register_owner"]


class ThreadStore(threading.local):
    """One value per thread (None in a new thread), read and written with get and set."""

    def __init__(self) -> None:
        self.value: Any = None

    def get(self) -> Any:
        return self.value

    def set(self, value: Any) -> None:
        self.value = value


#: The calling thread's overrides: {(setting name, class): ((marker, value), ...)},
#: innermost last, or None when there are none.
OVERRIDES = ThreadStore()


# push and pop change one thread's stacks as a whole (read, then write back); a block that
# ends in another thread (a generator finalized there) writes to the stacks of the thread
# that opened it while that thread may be pushing: one lock keeps the two from losing
# each other's change. (Readers take no lock: they read a value, never a half-made one.)
_STACKS_LOCK = threading.Lock()


class _Entry:
    """What :func:`push` returns: the entry's identity and the calling thread's own slot of
    the store (a ``threading.local``'s per-thread dict), so that :func:`pop` finds it from
    any thread."""

    __slots__ = ("home",)

    def __init__(self, home: dict) -> None:
        self.home = home


def push(var: ThreadStore, key: Any, value: Any) -> _Entry:
    """Add value on top of key's stack in var (a dict of stacks, or None) for the calling
    thread; returns the marker that :func:`pop` takes it back with."""
    marker = _Entry(var.__dict__)  # (this thread's slot of the thread-local store)
    with _STACKS_LOCK:
        current = marker.home.get("value") or {}
        marker.home["value"] = {**current, key: (*current.get(key, ()), (marker, value))}
    return marker


def pop(var: ThreadStore, key: Any, marker: _Entry) -> None:
    """Remove the entry `marker` from key's stack, wherever it stands, in the thread that
    pushed it (also when called from another thread: a generator holding a block may be
    finalized anywhere; the block's override ends in the thread it was opened in)."""
    with _STACKS_LOCK:
        current = marker.home.get("value") or {}
        stack = current.get(key, ())
        kept = tuple(entry for entry in stack if entry[0] is not marker)
        if len(kept) == len(stack):
            raise RuntimeError("tensortools: a settings block ended twice")
        changed = {k: v for k, v in current.items() if k != key}
        if kept:
            changed[key] = kept
        marker.home["value"] = changed or None


class _Owner(NamedTuple):
    on_change: Callable[[type], None]
    lock: contextlib.AbstractContextManager


# class -> what a process-wide change of a setting of it or of a subclass means
_OWNERS: dict[type, _Owner] = {}
_NO_OWNER = _Owner(lambda cls: None, contextlib.nullcontext())


def register_owner(
    cls: type, *, on_change: Callable[[type], None], lock: contextlib.AbstractContextManager
) -> None:
    """Register what a change of a process-wide value means for ``cls`` and its subclasses:
    :meth:`ClassSetting.set` makes it under ``lock`` (a reentrant lock that the class's
    other changes, such as registering a handler, take too), then calls
    ``on_change(the class whose value changed)``, still under the lock, so that the
    record the callback recomputes follows the last change to land."""
    _OWNERS[cls] = _Owner(on_change, lock)


def _owner_of(cls: type) -> _Owner:
    for klass in cls.__mro__:
        owner = _OWNERS.get(klass)
        if owner is not None:
            return owner
    return _NO_OWNER


def _as_given(cls: type, value: Any) -> Any:
    return value


class ClassSetting:
    """A setting of a class and its subclasses, declared in the class body::

        policy = ClassSetting("fallback", storage="_global_policy", check=check_policy)

    ``storage`` names the class attribute that holds the process-wide value (named at the
    declaration, so that a search for it finds where it comes from); ``check(cls, value)``
    returns the value to store (a bool for a switch, say) or raises ValueError or
    TypeError naming the setting. The class then writes the vocabulary of every setting
    as one-line members over this object (docs/settings.md)::

        @classmethod
        def set_policy(cls, policy): return _POLICY.set(cls, policy)

        @classmethod
        def using_policy(cls, policy): return _POLICY.override(cls, policy)

    and ``cls.policy``, this descriptor, reads the value that holds for ``cls`` in the
    calling thread: along ``cls.__mro__``, the first class with a thread override or a
    process-wide value of its own. A subclass declaring a plain value (``policy =
    "strict"``) gets it as its process-wide value (see :meth:`adopt`).
    """

    def __init__(
        self, default: Any, *, storage: str, check: Callable[[type, Any], Any] | None = None
    ) -> None:
        self.default = default
        self.storage = storage  # the class attribute holding the process-wide value
        self.check = check or _as_given

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        setattr(owner, self.storage, self.default)

    def __get__(self, obj: Any, cls: type | None = None) -> Any:
        return self.value_for(type(obj) if cls is None else cls)

    def value_for(self, cls: type) -> Any:
        """The value that holds for ``cls`` in the calling thread: the one way code reads
        a setting at call time (what ``cls.<name>`` reads; code that torch.compile traces
        calls this, since dynamo cannot trace a descriptor read on a class)."""
        overrides = OVERRIDES.value
        if overrides is None:
            return getattr(cls, self.storage)
        for klass in cls.__mro__:
            stack = overrides.get((self.name, klass))
            if stack:
                return stack[-1][1]
            if self.storage in klass.__dict__:
                return klass.__dict__[self.storage]
        return self.default

    def global_value(self, cls: type) -> Any:
        """The process-wide value for ``cls``, whatever the calling thread overrides (what
        the records of the compiled paths are computed from)."""
        return getattr(cls, self.storage)

    def set(self, cls: type, value: Any) -> Any:
        """Set the process-wide value for ``cls`` (and its subclasses without one of their
        own); returns the previous process-wide value."""
        value = self.check(cls, value)
        owner = _owner_of(cls)
        with owner.lock:
            previous = getattr(cls, self.storage)
            setattr(cls, self.storage, value)
            owner.on_change(cls)
        return previous

    def override(self, cls: type, value: Any) -> contextlib.AbstractContextManager:
        """A context manager: within the block, and in the calling thread only, ``cls``
        (and its subclasses without a value of their own) see ``value`` (checked now, not
        on entering)."""
        return self._block(cls, self.check(cls, value))

    @contextlib.contextmanager
    def _block(self, cls: type, value: Any) -> Iterator[None]:
        marker = push(OVERRIDES, (self.name, cls), value)
        try:
            yield
        finally:
            pop(OVERRIDES, (self.name, cls), marker)

    def adopt(self, cls: type) -> Any:
        """Take a plain value that a class body assigned to this setting's name as that
        class's process-wide value, checked (and put the descriptor back in charge);
        returns it, or the descriptor itself when the class assigned nothing."""
        value = cls.__dict__.get(self.name, self)
        if value is not self and not isinstance(value, ClassSetting):
            value = self.check(cls, value)
            delattr(cls, self.name)
            setattr(cls, self.storage, value)
        return value
