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


def _forms(n: int) -> list[tuple[str, Callable[..., Any] | None, tuple, str, list[int]]]:
    """The index forms on a batch of `n` rows (n >= 3): (name, the function called as
    ``func(b, *args)``, args, what it gives: a ``row``, a ``batch`` or a list of ``rows``,
    the rows it picks); `func` None for the round trip, which is no call (a rule is given
    None)."""
    mask = [k % 2 == 0 or k == n - 1 for k in range(n)]
    item = Tensor.__getitem__
    return [
        ("b[1]", item, (1,), "row", [1]),
        ("b[-1]", item, (-1,), "row", [n - 1]),
        ("b[-3:-1]", item, (slice(-3, -1),), "batch", [n - 3, n - 2]),
        ("b[[2, 0, 2]]", item, ([2, 0, 2],), "batch", [2, 0, 2]),
        ("b[torch.tensor([n-1, 0])]", item, (torch.tensor([n - 1, 0]),), "batch", [n - 1, 0]),
        ("b[bool mask]", item, (torch.tensor(mask),), "batch", [k for k in range(n) if mask[k]]),
        ("b.unbind(0)", Tensor.unbind, (0,), "rows", list(range(n))),
        ("for row in b", Tensor.__iter__, (), "rows", list(range(n))),
        ("torch.save/torch.load", None, (), "batch", list(range(n))),
    ]


def _called(func: Callable[..., Any] | None, b: Any, args: tuple) -> Any:
    """An index form on b, as user code writes it (``b[1]``, ``b.unbind(0)``, a loop)."""
    if func is None:
        return _save_load(b)
    if func is Tensor.__getitem__:
        return b[args[0]]
    if func is Tensor.__iter__:
        return [row for row in b]
    return getattr(b, func.__name__)(*args)


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
    failed = len(run.failures)
    instances = [run.instance(t, made) for t in plains]
    missing = [k for k, x in enumerate(instances) if not isinstance(x, run.cls)]
    if missing:
        # (a sample the type cannot take is declined, as op_db's are; a make that raised
        # is a failure of make, recorded by run.instance)
        if len(run.failures) == failed:
            run.decline(
                made,
                f"make gave no {run.cls.__name__} for sample {missing[0]}: no batch to check",
            )
        return
    judge = _Judge(run, plains, instances, sample_state)
    judge.distinct(made)
    batches: list[tuple[str, Any, list[int], tuple]] = []
    everything = list(range(N_SAMPLES))
    whole = judge.made(_Case("collate", "collate_fn(samples)"), lambda: collate(instances))
    if whole is not None:
        label = f"collate_fn(samples 0-{N_SAMPLES - 1})"
        batches.append((label, whole, everything, (collate, (instances, (), {}))))
    loaded = judge.made(
        _Case("DataLoader", f"DataLoader(batch_size={LOADER_BATCH})"),
        lambda: list(DataLoader(instances, batch_size=LOADER_BATCH, collate_fn=collate)),
    )
    if loaded is not None and len(loaded) == 2:
        first, second = loaded
        late = everything[LOADER_BATCH:]
        call = (collate, ([instances[k] for k in late], (), {}))
        batches.append(("DataLoader batch 2 (samples 3-5)", second, late, call))
        joined = judge.made(
            _Case("torch.cat", "torch.cat(DataLoader batches 2, 1)"),
            lambda: torch.cat([second, first]),
        )
        if joined is not None:
            order = everything[LOADER_BATCH:] + everything[:LOADER_BATCH]
            call = (torch.cat, ([second, first], (), {}))
            batches.append(("torch.cat(DataLoader batches 2, 1)", joined, order, call))
    elif loaded is not None:
        run.fail("batches", _Case("DataLoader", "-"), f"gave {len(loaded)} batches instead of 2")
    for label, batch, sources, call in batches:
        judge.batch(label, batch, sources, call)
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
        self.run, self.plains, self.instances = run, plains, instances
        self.hook = sample_state
        self.states = [self.state(x) for x in instances]
        #: whether the samples hold state of their own to compare (a type with none, as
        #: torchvision's Mask: rows are judged by their values and the rule alone)
        self.stateful = any(_held(s) for s in self.states)

    def state(self, x: Any) -> Any:
        return self.hook(x) if self.hook is not None else self.run.state(x)

    def distinct(self, case: _Case) -> None:
        """Samples of equal state would let a row given another sample's state pass; a
        type whose samples hold no state at all is declined (its rows' values are still
        judged)."""
        if not self.stateful:
            what = "state" if self.hook is not None else "attributes"
            self.run.decline(
                case,
                f"the samples hold no {what} of their own: rows are judged by their values "
                "(and the rule) alone",
            )
            return
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

    def batch(self, label: str, b: Any, sources: list[int], call: tuple) -> None:
        """The batch itself (made by ``call``: (func, (input, args, kwargs))), then each
        index form on it."""
        reason = self._whole(b, sources, call)
        if reason:
            self.run.fail("batches", _Case("(the batch)", label), reason)
            return
        for name, func, args, gives, picks in _forms(len(sources)):
            case = _Case(name, label)
            got = self.made(case, lambda: _called(func, b, args))
            if got is None:
                continue
            reason = self._result(got, gives, [sources[i] for i in picks], (func, (b, args, {})))
            if reason:
                self.run.fail("batches", case, reason)

    def _kind(self, got: Any, call: tuple) -> str:
        """'' when `got` is what the type gives: with the run's `rule`, what the rule
        accepts of this call (a plain tensor, where the type's results are plain);
        without one, an instance of the type."""
        if self.run.rule is None:
            if isinstance(got, self.run.cls):
                return ""
            return f"a {type(got).__name__}, not a {self.run.cls.__name__}"
        func, (inp, args, kwargs) = call
        x = inp if isinstance(inp, self.run.cls) else self.instances[0]
        return self.run.type_problem(x, got, func, None if func is None else (inp, args, kwargs))

    def _whole(self, b: Any, sources: list[int], call: tuple) -> str:
        """'' when b is what the type gives and holds the stacked values of `sources`."""
        reason = self._kind(b, call)
        if reason:
            return f"gave {reason}" if self.run.rule is None else reason
        want = torch.stack([self.plains[k] for k in sources])
        got = self.run.plain(b)
        if not same_value(got, want):
            return f"holds values {_short(got)} instead of samples {sources}' stacked"
        return ""

    def _result(self, got: Any, gives: str, sources: list[int], call: tuple) -> str:
        """'' when each row of `got` (one row, a batch or a list of rows) is its sample."""
        if gives == "row":
            rows = [got]
        elif gives == "rows":
            rows = list(got)
            if len(rows) != len(sources):
                return f"gave {len(rows)} rows instead of {len(sources)}"
        else:
            reason = self._whole(got, sources, call)
            if reason:
                return reason
            rows = []
            for i in range(len(sources)):
                try:
                    rows.append(got[i])
                except Exception as err:
                    return f"its row {i} (b[{i}]) raised {type(err).__name__}: {err}"
        for i, (row, k) in enumerate(zip(rows, sources)):
            reason = self._row(
                row, k, call if gives != "batch" else (Tensor.__getitem__, (got, (i,), {}))
            )
            if reason:
                where = f"row {i} " if len(rows) > 1 else ""
                return f"{where}(sample {k}): {reason}"
        return ""

    def _row(self, row: Any, k: int, call: tuple) -> str:
        """'' when row is sample k: what the type gives (of the type, or what the rule
        accepts), its values, its state (where it is of the type and the samples hold
        any)."""
        reason = self._kind(row, call)
        if reason:
            return reason
        got = self.run.plain(row)
        if not same_value(got, self.plains[k]):
            held = [j for j, p in enumerate(self.plains) if same_value(got, p)]
            return f"holds sample {held[0]}'s values" if held else f"holds {_short(got)}"
        if not self.stateful or not isinstance(row, self.run.cls):
            return ""  # (no state to compare; a plain row the rule accepts holds none)
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


def _held(state: Any) -> bool:
    """Whether a sample's state holds anything: None, and containers holding nothing (no
    attributes, an empty metadata dict), do not."""
    if state is None:
        return False
    if isinstance(state, Mapping):
        return any(_held(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return any(_held(v) for v in state)
    return True


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
