"""The ``serialization`` check: pickle, deepcopy and torch.save/torch.load give back an
equal instance, and state crafted to run code when loaded is refused, never run."""

from __future__ import annotations

import copy
import inspect
import io
import pickle
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from tensortools._samples import compare_results
from tensortools.testing.run import Run, first_instance, same_value
from tensortools.testing.samples import Sample

__all__ = ["check_crafted_state_refused", "check_serialization"]


def check_serialization(run: Run, s: Sample) -> None:
    """Round trips of the sample's typed input: an instance, or a list or tuple of them
    (each compared with its original); a sample whose instances are all in its further
    arguments has none of its own (they are made as the input's are)."""
    x = run.typed(s)
    if x is None:
        return
    rounds = {
        "pickle": lambda: pickle.loads(pickle.dumps(x)),
        "deepcopy": lambda: copy.deepcopy(x),
        "torch.save/torch.load(weights_only=True)": lambda: _save_load(x),
    }
    for form, call in rounds.items():
        try:
            back = call()
        except _Refused as refused:
            run.fail("serialization", s, f"{form}: {refused}")
            continue
        except Exception as err:
            run.fail("serialization", s, f"{form} raised {type(err).__name__}: {err}")
            continue
        reason = _differs(run, back, x)
        if reason:
            run.fail("serialization", s, f"{form}: {reason}")
    check_crafted_state_refused(run, s)


def _differs(run: Run, back: Any, x: Any) -> str:
    """'' when back is x again (each instance of a list or tuple in turn): the same
    types, values, attributes, and it follows the rule."""
    is_leaf = lambda y: isinstance(y, (run.cls, torch.Size))  # noqa: E731
    got, got_spec = tree_flatten(back, is_leaf=is_leaf)
    want, want_spec = tree_flatten(x, is_leaf=is_leaf)
    if got_spec != want_spec:
        return f"gave {type(back).__name__} {got_spec} instead of {want_spec}"
    for k, (b, w) in enumerate(zip(got, want)):
        where = "" if len(want) == 1 else f"element {k}: "
        if type(b) is not type(w):
            return f"{where}gave a {type(b).__name__}"
        if not isinstance(w, run.cls):
            continue
        reason = (
            compare_results(run.plain(b), run.plain(w), exact=True)
            or _state_differs(b, w, run.volatile_attrs)
            or run.type_problem(w, b)
        )
        if reason:
            return where + reason
    return ""


def check_crafted_state_refused(run: Run, s: Sample) -> None:
    """An instance whose state holds an object that runs code when unpickled: loading
    it with ``torch.load(weights_only=True)`` must refuse, never run it."""
    x = first_instance(run.cls, run.typed(s))
    if x is None or not hasattr(x, "__dict__"):
        return
    try:
        x.__dict__["crafted"] = _Crafted()
        buf = io.BytesIO()
        torch.save(x, buf)
    except Exception:
        return  # the type will not even save such state
    _Crafted.ran = False
    buf.seek(0)
    try:
        back = torch.load(buf, weights_only=True)
    except pickle.UnpicklingError:
        pass
    except Exception as err:
        run.fail("serialization", s, f"crafted state: {type(err).__name__}: {err}")
    else:
        if "crafted" in getattr(back, "__dict__", {}):  # (a type may not save it)
            run.fail("serialization", s, "crafted state accepted by weights_only loading")
    if _Crafted.ran:
        run.fail("serialization", s, "crafted state ran code while loading")


def _state_differs(back: Any, x: Any, volatile: frozenset = frozenset()) -> str:
    """'' when back's attributes (its __dict__) equal x's, the `volatile` ones (caches)
    aside, else which differ."""
    a, b = getattr(back, "__dict__", {}), getattr(x, "__dict__", {})
    for key in sorted((set(a) | set(b)) - volatile, key=str):
        # (an attribute one instance lacks reads as its class's: torch_geometric's
        # EdgeIndex declares `_T_indptr = None` on the class, and a result may hold it)
        got, want = _attribute(back, a, key), _attribute(x, b, key)
        missing = got is _MISSING or want is _MISSING
        if missing or not same_value(got, want, unknown=True):
            return f"attribute {key!r} is {got!r} instead of {want!r}"
    return ""


class _Missing:
    def __repr__(self) -> str:
        return "'(missing)'"


_MISSING = _Missing()


def _attribute(x: Any, attributes: dict, key: str) -> Any:
    """x's attribute `key`: its own, else its class's (as getattr reads it), else
    _MISSING."""
    if key in attributes:
        return attributes[key]
    return inspect.getattr_static(type(x), key, _MISSING)


class _Crafted:
    """State that runs code when unpickled (it only records that it ran)."""

    ran = False

    def __reduce__(self):
        return (_crafted_ran, ())


def _crafted_ran() -> None:
    _Crafted.ran = True


class _Refused(Exception):
    """weights_only loading refused a global the saved object needs."""


def _save_load(x: Any) -> Any:
    buf = io.BytesIO()
    torch.save(x, buf)
    buf.seek(0)
    try:
        return torch.load(buf, weights_only=True)
    except pickle.UnpicklingError as err:
        buf.seek(0)
        try:
            unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(buf)
        except Exception:
            unsafe = []
        if not unsafe:
            raise
        # torch's own message is a paragraph that a report cuts off before its advice:
        # say in one line which class to declare, and where.
        names = ", ".join(name.rsplit(".", 1)[-1] for name in unsafe)
        raise _Refused(
            f"torch.load(weights_only=True) refuses {', '.join(unsafe)} (not an allowed "
            f"global): declare it with torch.serialization.add_safe_globals([{names}]), or to "
            f"the kit with TypeSpec(..., safe_globals=[{names}])"
        ) from err
