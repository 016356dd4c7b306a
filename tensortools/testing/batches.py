"""The ``batches`` check (asked for by name: not among the default checks): samples of
the type collated into a batch (``default_collate``, or the type's own `collate_fn`,
directly and through a ``DataLoader``), then taken apart by every index form; each row
must be the sample it came from: its values, and its per-sample state.

The samples are :data:`N_SAMPLES` plain tensors of shape :data:`SHAPE`, sample k holding
the values ``6k .. 6k + 5`` (each value in one sample alone: a row's values say which
sample it holds); `make` gives each its instance, and a type's per-sample state is what
`sample_state(instance)` returns (by default the instance's attributes: a row must hold
each attribute of its sample, equal, and may hold more, as a batch's bookkeeping)."""

from __future__ import annotations

import dataclasses
import io
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, default_collate

from tensortools.testing.edge_calls import declined_as_plain, unknown_tensor
from tensortools.testing.run import Run, same_value

__all__ = ["N_SAMPLES", "SHAPE", "batch_samples", "check_batches"]

#: How many samples the check collates; the DataLoader takes them :data:`LOADER_BATCH`
#: at a time.
N_SAMPLES = 6
LOADER_BATCH = 3
#: Each sample's shape.
SHAPE = (2, 3)


@dataclasses.dataclass
class _Case:
    """Where a failure was found: the index form (``name``) on which batch (``label``),
    as a :class:`~tensortools.testing.samples.Sample` names a function and a sample."""

    name: str
    label: str


def batch_samples(dtype: torch.dtype = torch.float32) -> list[Tensor]:
    """The check's plain samples: :data:`N_SAMPLES` tensors of shape :data:`SHAPE`, sample
    k holding ``6k .. 6k + 5`` (as `dtype`; float32 for bool, which cannot tell them
    apart)."""
    dtype = torch.float32 if dtype == torch.bool else dtype
    size = SHAPE[0] * SHAPE[1]
    return [(torch.arange(size) + size * k).reshape(SHAPE).to(dtype) for k in range(N_SAMPLES)]


def _forms(n: int) -> list[tuple[str, Callable[[Any], Any], str, list[int]]]:
    """The index forms on a batch of `n` rows (n >= 3): (name, call, what it gives: a
    ``row``, a ``batch`` or a list of ``rows``, the rows it picks)."""
    mask = [k % 2 == 0 or k == n - 1 for k in range(n)]
    return [
        ("b[1]", lambda b: b[1], "row", [1]),
        ("b[-1]", lambda b: b[-1], "row", [n - 1]),
        ("b[-3:-1]", lambda b: b[-3:-1], "batch", [n - 3, n - 2]),
        ("b[[2, 0, 2]]", lambda b: b[[2, 0, 2]], "batch", [2, 0, 2]),
        ("b[torch.tensor([n-1, 0])]", lambda b: b[torch.tensor([n - 1, 0])], "batch", [n - 1, 0]),
        (
            "b[bool mask]",
            lambda b: b[torch.tensor(mask)],
            "batch",
            [k for k in range(n) if mask[k]],
        ),
        ("b.unbind(0)", lambda b: b.unbind(0), "rows", list(range(n))),
        ("for row in b", lambda b: [row for row in b], "rows", list(range(n))),
        ("torch.save/torch.load", _save_load, "batch", list(range(n))),
    ]


#: Calls of a batch b with u, a tensor of a type that overrides nothing (its rows, or row
#: indexes): as on a plain batch, each ends in TypeError (u declines), never in an answer
#: or another error of the batch's own rules.
WITH_UNKNOWN: list[tuple[str, Callable[[Any, Callable[[Tensor], Tensor]], Any]]] = [
    ("torch.cat([b, u])", lambda b, u: torch.cat([b, u(torch.zeros(1, *SHAPE))])),
    ("torch.cat([u, b])", lambda b, u: torch.cat([u(torch.zeros(1, *SHAPE)), b])),
    ("b[u]", lambda b, u: b[u(torch.tensor([1, 0]))]),
    ("torch.index_select(b, 0, u)", lambda b, u: torch.index_select(b, 0, u(torch.tensor([1, 0])))),
]


def check_batches(
    run: Run,
    dtypes: Sequence[torch.dtype],
    sample_state: Callable[[Any], Any] | None = None,
    collate_fn: Callable[[list], Any] | None = None,
) -> None:
    """Collate the samples (all at once, and :data:`LOADER_BATCH` at a time through a
    ``DataLoader``; ``torch.cat`` of the loader's batches, the second first), then check
    each batch's rows under every index form against their samples."""
    collate = collate_fn or default_collate
    plains = batch_samples(dtypes[0] if dtypes else torch.float32)
    made = _Case("make", f"{N_SAMPLES} samples {plains[0].dtype} {SHAPE}")
    instances = [run.instance(t, made) for t in plains]
    missing = [k for k, x in enumerate(instances) if not isinstance(x, run.cls)]
    if missing:
        run.fail(
            "batches",
            made,
            f"make gave no {run.cls.__name__} for sample {missing[0]} (see 'declined'): "
            "no batch to check",
        )
        return
    judge = _Judge(run, plains, instances, sample_state)
    judge.distinct(made)
    batches: list[tuple[str, Any, list[int]]] = []
    everything = list(range(N_SAMPLES))
    whole = judge.made(_Case("collate", "collate_fn(samples)"), lambda: collate(instances))
    if whole is not None:
        batches.append((f"collate_fn(samples 0-{N_SAMPLES - 1})", whole, everything))
    loaded = judge.made(
        _Case("DataLoader", f"DataLoader(batch_size={LOADER_BATCH})"),
        lambda: list(DataLoader(instances, batch_size=LOADER_BATCH, collate_fn=collate)),
    )
    if loaded is not None and len(loaded) == 2:
        first, second = loaded
        batches.append(("DataLoader batch 2 (samples 3-5)", second, everything[LOADER_BATCH:]))
        joined = judge.made(
            _Case("torch.cat", "torch.cat(DataLoader batches 2, 1)"),
            lambda: torch.cat([second, first]),
        )
        if joined is not None:
            order = everything[LOADER_BATCH:] + everything[:LOADER_BATCH]
            batches.append(("torch.cat(DataLoader batches 2, 1)", joined, order))
    elif loaded is not None:
        run.fail("batches", _Case("DataLoader", "-"), f"gave {len(loaded)} batches instead of 2")
    for label, batch, sources in batches:
        judge.batch(label, batch, sources)
    if whole is not None:
        _with_unknown(run, whole)


def _with_unknown(run: Run, b: Any) -> None:
    """WITH_UNKNOWN's calls on the collated batch: a TypeError wherever the plain batch's
    call ends in one."""
    plain = run.plain(b)

    def unknown(t: Tensor) -> Tensor:  # (rows of the batch's dtype; indexes as they are)
        return unknown_tensor(t.to(plain.dtype) if t.is_floating_point() else t)

    for name, call in WITH_UNKNOWN:
        case = _Case(name, "with a Tensor subclass that overrides nothing")
        declined_as_plain(
            run, "batches", case, lambda: call(plain, unknown), lambda: call(b, unknown)
        )


class _Judge:
    """Compares what an index form gives with the samples its rows came from."""

    def __init__(self, run: Run, plains: list[Tensor], instances: list, sample_state) -> None:
        self.run, self.plains = run, plains
        self.hook = sample_state
        self.states = [self.state(x) for x in instances]

    def state(self, x: Any) -> Any:
        return self.hook(x) if self.hook is not None else self.run.state(x)

    def distinct(self, case: _Case) -> None:
        """Samples of equal state would let a row given another sample's state pass."""
        for j in range(len(self.states)):
            for k in range(j):
                if same_value(self.states[j], self.states[k], unknown=False):
                    what = "state" if self.hook is not None else "attributes"
                    self.run.fail(
                        "batches",
                        case,
                        f"make gave samples {k} and {j} the same {what} "
                        f"({_short(self.states[j])}): a row given another sample's state "
                        "would pass unseen; give each sample its own (from its values: "
                        "{'id': t.flatten()[0].item()})",
                    )
                    return

    def made(self, case: _Case, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as err:
            self.run.raised("batches", case, err)
            return None

    def batch(self, label: str, b: Any, sources: list[int]) -> None:
        """The batch itself, then each index form on it."""
        reason = self._whole(b, sources)
        if reason:
            self.run.fail("batches", _Case("(the batch)", label), reason)
            return
        for name, call, gives, picks in _forms(len(sources)):
            case = _Case(name, label)
            got = self.made(case, lambda: call(b))
            if got is None:
                continue
            reason = self._result(got, gives, [sources[i] for i in picks])
            if reason:
                self.run.fail("batches", case, reason)

    def _whole(self, b: Any, sources: list[int]) -> str:
        """'' when b is of the type and holds the stacked values of `sources`."""
        if not isinstance(b, self.run.cls):
            return f"gave a {type(b).__name__}, not a {self.run.cls.__name__}"
        want = torch.stack([self.plains[k] for k in sources])
        got = self.run.plain(b)
        if not same_value(got, want):
            return f"holds values {_short(got)} instead of samples {sources}' stacked"
        return ""

    def _result(self, got: Any, gives: str, sources: list[int]) -> str:
        """'' when each row of `got` (one row, a batch or a list of rows) is its sample."""
        if gives == "row":
            rows = [got]
        elif gives == "rows":
            rows = list(got)
            if len(rows) != len(sources):
                return f"gave {len(rows)} rows instead of {len(sources)}"
        else:
            reason = self._whole(got, sources)
            if reason:
                return reason
            rows = []
            for i in range(len(sources)):
                try:
                    rows.append(got[i])
                except Exception as err:
                    return f"its row {i} (b[{i}]) raised {type(err).__name__}: {err}"
        for i, (row, k) in enumerate(zip(rows, sources)):
            reason = self._row(row, k)
            if reason:
                where = f"row {i} " if len(rows) > 1 else ""
                return f"{where}(sample {k}): {reason}"
        return ""

    def _row(self, row: Any, k: int) -> str:
        """'' when row is sample k: of the type, its values, its state."""
        if not isinstance(row, self.run.cls):
            return f"a {type(row).__name__}, not a {self.run.cls.__name__}"
        got = self.run.plain(row)
        if not same_value(got, self.plains[k]):
            held = [j for j, p in enumerate(self.plains) if same_value(got, p)]
            return f"holds sample {held[0]}'s values" if held else f"holds {_short(got)}"
        if self.hook is not None:
            return _differs(self.state(row), self.states[k], "state")
        attributes = self.state(row)
        for key, want in self.states[k].items():  # (a row may hold more: bookkeeping)
            if key not in attributes:
                return f"attribute {key!r} missing (the sample has {_short(want)})"
            reason = _differs(attributes[key], want, f"attribute {key!r}")
            if reason:
                return reason
        return ""


def _differs(got: Any, want: Any, path: str) -> str:
    """'' when got equals want, else the innermost key that differs and both values."""
    if isinstance(got, Mapping) and isinstance(want, Mapping):
        for key in [*want, *(k for k in got if k not in want)]:
            if key not in got or key not in want:
                side = "missing" if key not in got else "not in the sample's"
                return f"{path}[{key!r}] {side}"
            reason = _differs(got[key], want[key], f"{path}[{key!r}]")
            if reason:
                return reason
        return ""
    if same_value(got, want):
        return ""
    return f"{path} is {_short(got)} instead of the sample's {_short(want)}"


def _short(value: Any, limit: int = 80) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _save_load(b: Any) -> Any:
    """b through torch.save and torch.load: ``weights_only=True`` where the type loads so
    (the ``serialization`` check reports a type that does not), else a full load of what
    was just saved."""
    buf = io.BytesIO()
    torch.save(b, buf)
    buf.seek(0)
    try:
        return torch.load(buf, weights_only=True)
    except pickle.UnpicklingError:
        buf.seek(0)
        return torch.load(buf, weights_only=False)
