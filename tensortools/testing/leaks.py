"""The ``leaks`` check: once an out-of-place call's result is dropped, nothing keeps its
instances, or their memory, alive (a handler that stores its inputs, or a plain view of
their data, in a cache, a list or a closure holds their memory for the life of the
process)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import torch
from torch import Tensor
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_leaves

from tensortools._samples import seeded
from tensortools.testing.run import Run
from tensortools.testing.samples import Sample

__all__ = ["check_leaks"]


def check_leaks(run: Run, samples: list[Sample]) -> None:
    """The first sample of each function, on fresh instances; one garbage collection for
    all of them (a collection per call would cost more than the calls)."""
    watched: list[tuple[Sample, list[tuple[str, weakref.ref]]]] = []
    seen: set[str] = set()
    for s in samples:
        if s.name in seen or s.name.endswith("_") or "out" in s.kwargs:
            continue
        seen.add(s.name)
        refs = _call_and_drop(run, s)
        if refs:
            watched.append((s, refs))
    gc.collect()
    for s, refs in watched:
        alive = [what for what, ref in refs if _alive(ref)]
        if alive:
            run.fail("leaks", s, f"still alive after the call and its result are gone: {alive}")


def _call_and_drop(run: Run, s: Sample) -> list[tuple[str, Any]]:
    """Weak references to the instances of a call of `s` (and to the tensors they hold
    as attributes), made after the call ran and its result was dropped; [] where the
    call does not run."""
    typed = run.typed_call(s)
    if typed is None:
        return []
    x, args, kwargs = typed
    try:
        seeded(lambda: s.info.op(x, *args, **kwargs))
    except Exception:
        return []  # (the values check reports a call that raises)
    refs = []
    leaves = tree_leaves(typed, is_leaf=lambda v: isinstance(v, (torch.Size, run.cls)))
    for k, instance in enumerate(v for v in leaves if isinstance(v, run.cls)):
        refs.extend(_refs(run, f"instance {k}", instance))
    return refs


def _alive(ref: Any) -> bool:
    return not ref.expired() if isinstance(ref, StorageWeakRef) else ref() is not None


def _refs(run: Run, name: str, instance: Any) -> list[tuple[str, Any]]:
    """Weak references to the instance, to the storage of the data it stands for (a
    view of it kept anywhere keeps that alive), and to its tensor attributes."""
    refs: list[tuple[str, Any]] = []
    try:
        refs.append((name, weakref.ref(instance)))
    except TypeError:  # a type without weak references: its tensors still tell
        pass
    tensors = [(f"{name}'s memory", _data(run, instance))]
    for key, value in getattr(instance, "__dict__", {}).items():
        if isinstance(value, Tensor):
            refs.append((f"{name}'s {key}", weakref.ref(value)))
            tensors.append((f"{name}'s {key}'s memory", value))
    for what, t in tensors:
        storage = _storage(t)
        if storage is not None:
            refs.append((what, StorageWeakRef(storage)))
    return refs


def _data(run: Run, instance: Any) -> Any:
    """The tensor an instance holds its values in: the instance itself for a subclass,
    else (a tensor-like type) what densify gives where it is not a copy of them."""
    if isinstance(instance, Tensor):
        return instance
    try:
        return run.densify(instance)
    except Exception:
        return None


def _storage(t: Any) -> Any:
    if not isinstance(t, Tensor):
        return None
    try:
        with torch._C.DisableTorchFunctionSubclass():
            if t.layout != torch.strided or t.device.type == "meta":
                return None
            return t.untyped_storage()
    except Exception:  # (a wrapper subclass without storage of its own)
        return None
