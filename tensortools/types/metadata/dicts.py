"""The metadata dicts, apart from the class: how several merge into a result's, when two
values are the same, and what a batch must hold (one entry per sample in each value of
its dict, as many rows in its dim 0)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from tensortools.types.metadata.results import traced_metadata

__all__ = [
    "MERGE_POLICIES",
    "MergePolicy",
    "check_batch",
    "check_merge_policy",
    "check_same_keys",
    "merge",
    "metadata_of",
    "same_value",
    "sample_rows",
    "stackable",
]

#: The named merge policies; a callable taking the list of dicts is accepted too.
MERGE_POLICIES = ("first", "strict", "union")
MergePolicy = str | Callable[[list], dict]


def check_merge_policy(policy: Any) -> None:
    """ValueError unless `policy` is a named merge policy or a callable."""
    if not callable(policy) and policy not in MERGE_POLICIES:
        raise ValueError(
            "MetadataTensor: 'policy' must be one of "
            f"{MERGE_POLICIES} or a callable, got {policy!r}"
        )


def check_batch(metadata: dict, size: int, rows: int | None = None, what: str = "batch") -> None:
    """Raise ValueError unless every value of `metadata` holds `size` entries (a list or
    tuple of that length, or a tensor of that many rows) and, where given, `rows` (the
    tensor's dim 0) equals `size`."""
    if rows is not None and rows != size:
        raise ValueError(
            f"MetadataTensor: a {what} of {size} samples whose dim 0 has {rows} entries; "
            "a call moved or reduced its samples' dimension (set batch_size = None to "
            "treat it as one tensor)"
        )
    for key, value in metadata.items():
        if isinstance(value, (list, tuple)):
            n = len(value)
        elif isinstance(value, Tensor) and value.dim() > 0:
            n = value.shape[0]
        else:
            raise ValueError(
                f"MetadataTensor: a {what} of {size} samples holds {type(value).__name__} "
                f"under metadata key {key!r}; every value of a batch's metadata must hold "
                "one entry per sample (a list, or a tensor with a row per sample)"
            )
        if n != size:
            raise ValueError(
                f"MetadataTensor: a {what} of {size} samples holds {n} entries under "
                f"metadata key {key!r}; every value of a batch's metadata must hold one "
                "entry per sample"
            )


def metadata_of(tensor: Tensor, default: Any = None) -> Any:
    """A MetadataTensor's metadata dict, or `default` where it has none (a tensor made a
    MetadataTensor by other means, such as as_subclass, has no dict yet). Write
    ``metadata_of(t, {})``, not ``metadata_of(t) or {}``: traced, the truth of a dict
    reads its values, and dynamo would guard the graph on them."""
    if torch.compiler.is_compiling():  # (a result of the graph holds its dict by reference)
        metadata = traced_metadata(tensor)
    else:
        metadata = getattr(tensor, "metadata", None)  # (not __dict__, which dynamo refuses)
    return default if metadata is None else metadata


def merge(policy: MergePolicy, dicts: list[dict]) -> dict:
    """The metadata of a call's result: the dicts of its MetadataTensor arguments, in
    order, merged by `policy` (see MetadataTensor.set_merge_policy)."""
    if not dicts:
        return {}
    if policy == "first":
        return dicts[0]
    if callable(policy):
        merged = policy([dict(d) for d in dicts])
        if not isinstance(merged, Mapping):
            raise TypeError(
                f"MetadataTensor merge policy must return a dict, got {type(merged).__name__}"
            )
        return merged
    merged: dict = {}
    for d in dicts:
        for key, value in d.items():
            if key not in merged:
                merged[key] = value
            elif policy == "strict" and not same_value(merged[key], value):
                raise ValueError(
                    f"MetadataTensor (merge policy 'strict'): key {key!r} has "
                    f"conflicting values {merged[key]!r} and {value!r}"
                )
    return merged


def same_value(a: Any, b: Any) -> bool:
    """Whether two metadata values are the same (tensors: equal shapes and elements)."""
    if a is b:
        return True
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return (
            isinstance(a, Tensor)
            and isinstance(b, Tensor)
            and a.shape == b.shape
            and bool(torch.equal(a, b))
        )
    try:
        return bool(a == b)
    except Exception:  # values whose == is not a truth value are different
        return False


def same_metadata(a: dict, b: dict) -> bool:
    """Whether two metadata dicts hold the same keys with the same values (same_value)."""
    return a is b or (a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a))


def check_same_keys(dicts: list[dict], who: str, item: str, holders: str) -> None:
    """ValueError naming the first of `dicts` whose keys differ from the first's."""
    for i, d in enumerate(dicts):
        if d.keys() != dicts[0].keys():
            raise ValueError(
                f"{who}: {item} {i} has metadata keys {sorted(map(str, d))}, {item} 0 has "
                f"{sorted(map(str, dicts[0]))}; {holders} need the same keys"
            )


def stackable(values: Sequence, skip: int = 0) -> bool:
    """Whether `values` are tensors of one dtype, device and shape (past their first
    `skip` dims), so that torch.stack (torch.cat, with skip 1) joins them."""
    first = values[0]
    return all(
        isinstance(v, Tensor)
        and v.shape[skip:] == first.shape[skip:]
        and v.dtype == first.dtype
        and v.device == first.device
        for v in values
    )


def sample_rows(t: Tensor) -> int:
    """The size of t's dim 0, the number of samples it can hold (none for a 0-d tensor)."""
    with torch._C.DisableTorchFunctionSubclass():
        shape = t.shape
    if not shape:
        raise ValueError(
            f"MetadataTensor: a batch must have a dim 0 holding its samples; got a 0-d "
            f"{type(t).__name__}"
        )
    return shape[0]
