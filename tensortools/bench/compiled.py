"""Compiled cost over batches: a ten-operation pointwise chain compiled with
``torch.compile(fullgraph=True)`` and a compiled training step (a small conv + linear
model, a loss, ``backward()``, an SGD step), over MetadataTensor batches with new
per-sample metadata every call, against the same compiled on plain tensors, both eager
too, and MONAI's MetaTensor where it is installed and compiles. Part of ``--peers``."""

from __future__ import annotations

import dataclasses
import itertools
import types
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.data import default_collate

from tensortools.bench.dispatch import chain
from tensortools.bench.peers import BATCH, ROUND_TRIP_SAMPLES, monai_version
from tensortools.bench.timing import Row, interleaved, ratio_notes, time_call, time_ratio

__all__ = ["CALLS", "GOALS", "CompiledRow", "compiled_rows", "format_compiled_table"]

#: The calls timed, each compiled and eager.
CALLS = ("compiled chain", "eager chain", "compiled step", "eager step")
#: Issue 59's goals: a MetadataTensor batch's ratio to plain tensors, compiled.
GOALS = {"compiled chain": 1.1, "compiled step": 1.05}
#: Pre-collated batches that successive calls cycle through (each its own samples' ids).
BATCHES = 8
#: Warm-up calls of each compiled function before its graphs are counted.
WARM_UP = 3


@dataclasses.dataclass
class CompiledRow(Row):
    """A Row with the graphs torch.compile made for its function: `graphs_warm` after the
    warm-up, `kernels` after the timing too (equal: no recompilation while timed); None
    for eager. A call that raised has median_us None and the error in `note`."""

    graphs_warm: int | None = None
    note: str = ""


def _own(fn: Callable) -> Callable:
    """fn with a code object of its own: dynamo caches graphs per code object, so each
    variant's compiled function checks only its own graphs' guards, as in a process of
    its own."""
    code = fn.__code__.replace()
    return types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )


def _trainer() -> Callable:
    """A fresh model (the same initial weights each time) and its SGD step on (x, y)."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    return step


def _batches() -> dict[str, list]:
    """BATCHES collated batches of ROUND_TRIP_SAMPLES 3x32x32 samples for each variant,
    every sample with its own id and spacing (the same values in each variant)."""
    from tensortools import MetadataTensor

    n = ROUND_TRIP_SAMPLES
    g = torch.Generator().manual_seed(0)
    images = [[torch.randn(3, 32, 32, generator=g) for _ in range(n)] for _ in range(BATCHES)]
    meta = [
        [{"id": f"image-{b * n + i}", "spacing": (1.0, 0.5 + i / n)} for i in range(n)]
        for b in range(BATCHES)
    ]
    out = {
        "plain Tensor": [torch.stack(b) for b in images],
        "MetadataTensor batch": [
            default_collate([MetadataTensor(t, m) for t, m in zip(b, ms)])
            for b, ms in zip(images, meta)
        ],
    }
    if monai_version() is not None:
        from monai.data import MetaTensor, list_data_collate

        out["monai MetaTensor batch"] = [
            list_data_collate([MetaTensor(t, meta=dict(m)) for t, m in zip(b, ms)])
            for b, ms in zip(images, meta)
        ]
    return out


def _error(err: Exception) -> str:
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"[:160]


def compiled_rows(
    *,
    backend: str = "inductor",
    min_run_time: float = 0.3,
    rounds: int = 3,
    threads: int | None = 1,
    progress: Callable[[str], None] | None = None,
) -> list[CompiledRow]:
    """Time :data:`CALLS` on each variant's batches (plain, MetadataTensor, MONAI's where
    installed), each call taking the next of BATCHES pre-collated batches, all
    interleaved, on `threads` intra-op threads (default one, as :func:`batch_rows`).
    Each compiled function is compiled (WARM_UP calls) before any timing, its graphs
    counted by dynamo (per function) then and again after the timing. A variant whose
    call raises gets a row with median None and the error."""
    from torch._dynamo.testing import CompileCounterWithBackend

    labels = torch.arange(ROUND_TRIP_SAMPLES) % 4
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        measures, counters, warm, failed = {}, {}, {}, {}
        for name, batches in _batches().items():
            for call in CALLS:
                counter = CompileCounterWithBackend(backend)
                if call.endswith("chain"):
                    fn = chain
                    if call.startswith("compiled"):
                        fn = torch.compile(_own(chain), fullgraph=True, backend=counter)
                    inputs = itertools.cycle(batches)

                    def run(fn=fn, inputs=inputs):
                        return fn(next(inputs))
                else:
                    fn = _trainer()
                    if call.startswith("compiled"):
                        fn = torch.compile(_own(fn), backend=counter)
                    inputs = itertools.cycle(batches)

                    def run(fn=fn, inputs=inputs):
                        return fn(next(inputs), labels)

                key = call, name
                try:
                    with warnings.catch_warnings():  # (dynamo's about MONAI's code)
                        warnings.simplefilter("ignore")
                        for _ in range(WARM_UP):  # compiles (fullgraph: a break raises)
                            run()
                except Exception as err:
                    failed[key] = _error(err)
                    continue
                if call.startswith("compiled"):
                    counters[key], warm[key] = counter, counter.frame_count
                measures[key] = lambda run=run: time_call(run, min_run_time)
        pooled = interleaved(measures, rounds, progress, lambda k: f"{BATCH} {k[0]} {k[1]}")
    finally:
        torch.set_num_threads(before)
    rows = []
    for key, p in pooled.items():
        c = counters.get(key)
        row = CompiledRow.of((BATCH,), "float32", "cpu", key[1], key[0], p, c and c.frame_count)
        rows.append(dataclasses.replace(row, graphs_warm=warm.get(key)))
    for (call, name), note in failed.items():
        rows.append(CompiledRow((BATCH,), "float32", "cpu", name, call, None, None, 0, note=note))
    order = {c: i for i, c in enumerate(CALLS)}
    return sorted(rows, key=lambda r: order[r.phase])


def _graphs(r: CompiledRow) -> str:
    if r.kernels is None:
        return ""
    if r.kernels == r.graphs_warm:
        return f"{r.kernels} graph{'s' * (r.kernels != 1)}, none while timed"
    return f"{r.graphs_warm} graphs after warm-up, {r.kernels} after timing: RECOMPILED"


def format_compiled_table(rows: list[CompiledRow]) -> str:
    """A text table of compiled_rows: each median's ratio to plain Tensor's in the same
    call, the graphs dynamo made, and the issue's goals."""
    base = {r.phase: r for r in rows if r.variant == "plain Tensor"}
    lines = [f"{'call':<15} {'type':<22} {'median':>11} {'IQR':>10} {'ratio':>7}  graphs"]
    any_noisy = False
    for r in rows:
        head = f"{r.phase:<15} {r.variant:<22} "
        if r.median_us is None:
            lines.append(f"{head}{'raised':>11} {'':>10} {'':>7}  {r.note}")
            continue
        b = base.get(r.phase)
        noisy = r.noisy or (b is not None and b.noisy)
        any_noisy |= noisy
        ratio = time_ratio(r.median_us, b.median_us if b and b.median_us else None, noisy)
        lines.append(
            f"{head}{r.median_us:>9.2f}us {r.iqr_us:>8.2f}us {ratio:>7}  {_graphs(r)}".rstrip()
        )
    version = monai_version()
    lines.append(
        ratio_notes("plain tensors in the same call", any_noisy)
        + "\ngoals, MetadataTensor batch against plain: "
        + ", ".join(f"{c} <= {g:.2f}x" for c, g in GOALS.items())
        + f"\neach call takes the next of {BATCHES} pre-collated batches of {BATCH} (every "
        "sample its own id and spacing); chain: ten pointwise operations, "
        "torch.compile(fullgraph=True); step: conv -> relu -> pool -> linear, cross_entropy, "
        "backward, SGD step, torch.compile; compiled after warm-up calls, graphs counted by "
        "dynamo per function; one intra-op thread"
        + (
            f"\nmonai {version}"
            if version
            else "\nmonai is not installed: its rows are left out (pip install --no-deps monai)"
        )
    )
    return "\n".join(lines)
