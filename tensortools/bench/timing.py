"""Timing utilities shared by the benchmarks: one row per measurement, interleaved
rounds pooled into a median and an IQR, kernel counts from torch.profiler."""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from collections.abc import Callable

import torch
from torch.utils import benchmark

__all__ = [
    "Row",
    "Pooled",
    "machine_summary",
    "time_call",
    "time_each",
    "sync",
    "interleaved",
    "quiet_profiler",
    "kernel_count",
    "saved_for_backward",
]


@dataclasses.dataclass
class Row:
    """One timing: a variant of one phase at one size, in microseconds.

    `median_us` and `iqr_us` are over the timed blocks (a block averages several calls
    for short steps), `runs` is the number of timed calls.
    """

    size: tuple[int, int, int]
    dtype: str
    device: str
    variant: str
    phase: str
    median_us: float
    iqr_us: float
    runs: int
    kernels: int | None = None  # per call, see kernel_count


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_summary() -> str:
    """One line naming the device, the threads and the torch and Python versions."""
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"{_cpu_name()} CPU"
    return (
        f"{device}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"Python {platform.python_version()}"
    )


def time_call(fn: Callable[[], object], min_run_time: float) -> benchmark.Measurement:
    """fn timed by torch.utils.benchmark after one warm-up call."""
    fn()  # warm-up (and, for torch.compile, the compilation)
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time)


def sync(device: str) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_each(
    prepare: Callable[[], object],
    step: Callable[[object], object],
    min_run_time: float,
    device: str,
    label: str,
) -> benchmark.Measurement:
    """Time `step(prepare())` with `prepare` left out of the clock, run by run.

    For a backward pass, which needs a fresh forward each time (compiled graphs may donate
    their buffers, so one graph cannot be replayed with retain_graph).
    """
    step(prepare())  # warm-up
    times: list[float] = []
    spent = 0.0
    while spent < min_run_time or len(times) < 10:
        state = prepare()
        sync(device)
        start = time.perf_counter()
        step(state)
        sync(device)
        times.append(time.perf_counter() - start)
        spent += times[-1]
    return benchmark.Measurement(1, times, benchmark.TaskSpec(stmt=label, setup=""))


def saved_for_backward(
    step: Callable[[], object], leave_out: tuple[torch.Tensor, ...] = ()
) -> tuple[int, int]:
    """(bytes of distinct storages, tensors) that step()'s autograd graph saves for
    backward; storages of the tensors in `leave_out` (the arguments, say) not counted."""
    known = {t.untyped_storage().data_ptr() for t in leave_out}
    storages: dict[int, int] = {}
    count = 0

    def pack(t):
        nonlocal count
        count += 1
        storage = t.untyped_storage()
        if storage.data_ptr() not in known:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = step()
    del out
    return sum(storages.values()), count


@dataclasses.dataclass
class Pooled:
    """The runs of one measurement over all rounds: median and IQR in microseconds, and
    the number of timed calls."""

    median_us: float
    iqr_us: float
    calls: int


def interleaved(
    measures: dict,
    rounds: int,
    progress: Callable[[str], None] | None = None,
    describe: Callable[[object], str] = str,
) -> dict:
    """Take every measurement (key -> function returning a benchmark.Measurement) once
    per round, the rounds interleaved so that a slow spell of the machine falls on every
    key alike, and pool each key's runs."""
    runs: dict = {key: [] for key in measures}
    for r in range(rounds):
        for key, measure in measures.items():
            if progress:
                progress(f"{describe(key)} (round {r + 1}/{rounds})")
            runs[key].append(measure())
    pooled = {}
    for key, ms in runs.items():
        calls = sum(len(m.raw_times) * m.number_per_run for m in ms)
        (m,) = benchmark.Measurement.merge(ms)
        pooled[key] = Pooled(m.median * 1e6, m.iqr * 1e6, calls)
    return pooled


# Operators that only make views or allocate: no kernel runs for them.
_NOT_KERNELS = frozenset(
    f"aten::{name}"
    for name in (
        "empty",
        "empty_strided",
        "empty_like",
        "zeros_like",
        "as_strided",
        "view",
        "t",
        "transpose",
        "permute",
        "expand",
        "slice",
        "narrow",
        "select",
        "unsqueeze",
        "squeeze",
        "reshape",
        "_reshape_alias",
        "alias",
        "detach",
        "lift_fresh",
        "chunk",
        "split",
        "split_with_sizes",
        "unbind",
        "contiguous",
        "resolve_conj",
        "resolve_neg",
        "numpy_T",
        "result_type",
        "to",
        "_to_copy_noop",
    )
)


def quiet_profiler() -> None:
    """Keep torch.profiler's own progress lines (one per session, on stderr) out of a
    command's output, unless the user set ``KINETO_LOG_LEVEL``. Entry points call it."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "99")


def kernel_count(fn: Callable[[], object], device: str = "cpu") -> int:
    """Kernels one call of `fn` runs, from torch.profiler (after a warm-up call).

    On a GPU: the device's own events (kernels, copies, fills). On the CPU: the operator
    calls made from Python or by autograd, that is the outermost operators that compute
    (an operator inside another is part of its kernel; operators that only make views or
    allocate are left out). Loops that torch.compile generates for the CPU are not
    operators, so a compiled function's count holds only the library calls it makes.
    """
    fn()
    cuda = torch.device(device).type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        fn()
        sync(device)
    events = prof.events()
    if cuda:
        return sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)

    def computes(e) -> bool:
        return e.name.startswith(("aten::", "tensortools::")) and e.name not in _NOT_KERNELS

    def outermost(e) -> bool:
        parent = e.cpu_parent
        while parent is not None:
            if computes(parent):
                return False
            parent = parent.cpu_parent
        return True

    return sum(1 for e in events if computes(e) and outermost(e))
