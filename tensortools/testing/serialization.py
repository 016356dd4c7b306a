"""The ``serialization`` check: pickle, deepcopy and torch.save/torch.load give back an
equal instance, and state crafted to run code when loaded is refused, never run."""

from __future__ import annotations

import copy
import io
import pickle
from typing import Any

import torch

from tensortools.coverage.samples import compare_results
from tensortools.testing.run import Run
from tensortools.testing.samples import Sample

__all__ = ["check_crafted_state_refused", "check_serialization"]


def check_serialization(run: Run, s: Sample) -> None:
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
        except Exception as err:
            run.fail("serialization", s, f"{form} raised {type(err).__name__}: {err}")
            continue
        if type(back) is not type(x):
            run.fail("serialization", s, f"{form} gave a {type(back).__name__}")
            continue
        reason = (
            compare_results(run.plain(back), run.plain(x), exact=True)
            or _state_differs(back, x)
            or run.type_problem(x, back)
        )
        if reason:
            run.fail("serialization", s, f"{form}: {reason}")
    check_crafted_state_refused(run, s)


def check_crafted_state_refused(run: Run, s: Sample) -> None:
    """An instance whose state holds an object that runs code when unpickled: loading
    it with ``torch.load(weights_only=True)`` must refuse, never run it."""
    x = run.typed(s)
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


def _state_differs(back: Any, x: Any) -> str:
    """'' when back's attributes (its __dict__) equal x's, else which differ."""
    a, b = getattr(back, "__dict__", {}), getattr(x, "__dict__", {})
    for key in sorted(set(a) | set(b), key=str):
        try:
            same = key in a and key in b and bool(a[key] == b[key])
        except Exception:  # tensors or objects without a plain ==
            same = key in a and key in b
        if not same:
            got, want = a.get(key, "(missing)"), b.get(key, "(missing)")
            return f"attribute {key!r} is {got!r} instead of {want!r}"
    return ""


class _Crafted:
    """State that runs code when unpickled (it only records that it ran)."""

    ran = False

    def __reduce__(self):
        return (_crafted_ran, ())


def _crafted_ran() -> None:
    _Crafted.ran = True


def _save_load(x: Any) -> Any:
    buf = io.BytesIO()
    torch.save(x, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)
