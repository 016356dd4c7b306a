"""The ``mutation`` check: an out-of-place call leaves its instances as they were: the
values they stand for, their size, strides, dtype and ``requires_grad``, and the type's
own state (the instance's attributes, such as a metadata dict changed in place, less
those the run declares volatile: caches)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves

from tensortools._samples import seeded
from tensortools.testing.run import Run, same_value
from tensortools.testing.samples import Sample

__all__ = ["check_mutation", "same_state", "watch"]


def check_mutation(run: Run, s: Sample) -> None:
    """The sample's plain and typed calls, watched (where the values check does not
    run them already: :func:`watch`)."""
    typed = run.typed_call(s)
    if typed is None:
        return
    plain = run.plain_call(typed)
    report = watch(run, s, typed, plain)
    if report is None:
        return
    x, args, kwargs = typed
    try:
        seeded(lambda: run.want(s.info.op, plain))
        seeded(lambda: s.info.op(x, *args, **kwargs))
    except Exception:
        return  # (the values check reports a call that raises)
    report()


def watch(run: Run, s: Sample, typed: tuple, plain: tuple) -> Callable[[], None] | None:
    """Snapshots of a call's instances (and of its plain counterpart's tensors), taken
    before the two calls run; returns what to call after them, which reports what the
    typed call changed. None for the in-place and ``out=`` forms; calls whose plain run
    changes its own input (a function that writes into its input by design) report
    nothing."""
    if s.name.endswith("_") or "out" in s.kwargs or s.kwargs.get("inplace"):
        return None
    plain_before = [t.clone() for t in _tensors(plain)]
    instances = [x for x in tree_leaves(typed, is_leaf=_is_leaf(run)) if isinstance(x, run.cls)]
    before = [_snapshot(run, x) for x in instances]

    def report() -> None:
        if any(not same_value(a, b) for a, b in zip(plain_before, _tensors(plain))):
            return
        for k, (instance, was) in enumerate(zip(instances, before)):
            what = same_state(was, _snapshot(run, instance))
            if what:
                which = "the instance" if len(instances) == 1 else f"instance {k}"
                run.fail("mutation", s, f"the out-of-place call changed {which}'s {what}")

    return report


def _snapshot(run: Run, x: Any) -> dict:
    plain = run.densify(x).detach()
    state = {
        "values": plain.clone(),
        "size": tuple(plain.shape),
        "dtype": plain.dtype,
        "strides": plain.stride() if plain.layout == torch.strided else None,
        "storage offset": plain.storage_offset() if plain.layout == torch.strided else None,
        "requires_grad": bool(getattr(x, "requires_grad", False)),
    }
    attributes = run.state(x)
    # Objects without an ``==`` of their own (a handle, a plain Python object) compare by
    # identity: a deep copy of one would never equal it. They are kept, not copied.
    memo = {id(o): o for o in _by_identity(attributes)}
    try:
        state["attributes"] = copy.deepcopy(attributes, memo)
    except Exception:  # state that cannot be copied: compared by identity, one level down
        state["attributes"] = dict(attributes)
    return state


def _by_identity(value: Any, depth: int = 0) -> list:
    """The objects in value (itself, or inside its containers and attributes) that have
    no ``==`` of their own: their equality is identity."""
    if depth > 8 or isinstance(value, (Tensor, type, str, bytes, int, float, complex, bool)):
        return []
    if isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
    elif type(value).__eq__ is object.__eq__:
        return [value]
    else:
        items = list((getattr(value, "__dict__", None) or {}).values())
    return [o for item in items for o in _by_identity(item, depth + 1)]


def same_state(was: dict, now: dict) -> str:
    """'' when two snapshots agree, else what differs ('values', 'attributes', ...);
    state that cannot be compared (no ``==``, no pickle) counts as unchanged."""
    for key, value in was.items():
        if not same_value(value, now[key]):
            if key == "attributes":
                changed = sorted(
                    str(k)
                    for k in set(value) | set(now[key])
                    if k not in value or k not in now[key] or not same_value(value[k], now[key][k])
                )
                return f"attributes {changed}"
            return key
    return ""


def _tensors(call: tuple) -> list[Tensor]:
    return [
        t
        for t in tree_leaves(call, is_leaf=lambda x: isinstance(x, torch.Size))
        if isinstance(t, Tensor)
    ]


def _is_leaf(run: Run):
    return lambda x: isinstance(x, (torch.Size, run.cls))
