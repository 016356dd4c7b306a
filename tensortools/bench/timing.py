"""Timing utilities shared by the benchmarks: one row per measurement, interleaved
rounds pooled into a median and an IQR, ratios with their notes. (What a call runs and
keeps, kernels and saved tensors, is :mod:`tensortools.bench.profiling`.)"""

from __future__ import annotations

import dataclasses
import platform
import statistics
import time
from collections.abc import Callable

import torch
from torch.utils import benchmark

from tensortools.bench import load
from tensortools.bench.load import STALL_SHARE

__all__ = [
    "Row",
    "Pooled",
    "machine_summary",
    "time_call",
    "time_each",
    "sync",
    "interleaved",
    "NOISY_SPREAD",
    "BUSY_SHARE",
    "STALL_SHARE",
    "time_ratio",
    "ratio_notes",
]

#: A measurement whose runs spread (IQR) over more than this share of its median is
#: noisy: its median, and any ratio with it, may be off by about as much.
NOISY_SPREAD = 0.2
#: A measurement during which other processes used more than this share of the CPUs
#: was taken on a busy machine. Its runs can agree with each other and still be far off:
#: a parallel region whose second thread has no free core waits a scheduler time slice,
#: so every call takes a few such slices, steadily.
BUSY_SHARE = 0.25


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
    noisy: bool = (
        False  # Pooled.noisy: the runs spread, the rounds disagree or the machine was busy
    )
    busy: bool = False  # Pooled.busy: other processes used over BUSY_SHARE of the CPUs
    round_spread: float = 0.0  # Pooled.round_spread: how far the rounds' medians disagree
    stalled: bool = False  # Pooled.stalled: the threads waited for a CPU over STALL_SHARE

    @classmethod
    def of(cls, size, dtype, device, variant, phase, p: Pooled, kernels=None) -> Row:
        """The row of a pooled measurement."""
        return cls(
            size,
            dtype,
            device,
            variant,
            phase,
            p.median_us,
            p.iqr_us,
            p.calls,
            kernels,
            **p.flags(),
        )


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
    before = _readings()
    m = timer.blocked_autorange(min_run_time=min_run_time)
    m.metadata = _load_between(before, _readings())
    return m


def _readings() -> tuple:
    return _cpu_jiffies(), load.read()


def _load_between(before: tuple, after: tuple) -> dict:
    """What the machine's load did between two _readings: the share of the CPUs other
    processes used, and the share of the wall time this process's threads waited for a
    CPU (:mod:`tensortools.bench.load`)."""
    return {
        "others_cpu": _others_share(before[0], after[0]),
        "stalled": load.stall_share(before[1], after[1]),
    }


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
    before = _readings()
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
    # (the load over the whole loop, preparations included: reading it around every step
    # would put file reads between the steps)
    metadata = _load_between(before, _readings())
    return benchmark.Measurement(
        1, times, benchmark.TaskSpec(stmt=label, setup=""), metadata=metadata
    )


def _cpu_jiffies() -> tuple[int, int, int] | None:
    """(busy and total clock ticks of all CPUs, this process's ticks) from Linux's /proc;
    None elsewhere. Steal time (a VM's host running others) counts as busy."""
    try:
        with open("/proc/stat") as f:
            cpu = [int(v) for v in f.readline().split()[1:9]]
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    total = sum(cpu)  # user nice system idle iowait irq softirq steal
    return total - cpu[3] - cpu[4], total, int(own[11]) + int(own[12])  # utime + stime


def _others_share(before: tuple | None, after: tuple | None) -> float | None:
    """The share of all CPUs' time that other processes used between two _cpu_jiffies
    readings; None where unknown or too short to tell (under 20 ticks)."""
    if before is None or after is None or after[1] - before[1] < 20:
        return None
    busy, total, own = (a - b for a, b in zip(after, before))
    return min(1.0, max(0.0, (busy - own) / total))


@dataclasses.dataclass
class Pooled:
    """The runs of one measurement over all rounds: median and IQR in microseconds, the
    number of timed calls and of rounds, and how far the rounds' own medians disagree
    (their interquartile range, or their range for two rounds, over the median)."""

    median_us: float
    iqr_us: float
    calls: int
    rounds: int = 1
    round_spread: float = 0.0
    others_cpu: float = 0.0  # the median over rounds of the CPU share others used
    waited: float = 0.0  # the share of the timed wall time the threads waited for a CPU

    @property
    def busy(self) -> bool:
        """Whether other processes used more than BUSY_SHARE of the CPUs meanwhile."""
        return self.others_cpu > BUSY_SHARE

    @property
    def stalled(self) -> bool:
        """Whether this process's threads waited for a CPU over STALL_SHARE of the timed
        wall time (the runs can agree with each other and all be far off)."""
        return self.waited > STALL_SHARE

    @property
    def noisy(self) -> bool:
        """Whether the machine was busy or stalled the threads, or the runs spread or the
        rounds disagree by more than NOISY_SPREAD of the median (a slow spell of the
        machine can fill one round, whose runs then agree with each other and not with
        the other rounds')."""
        spread = self.iqr_us > NOISY_SPREAD * self.median_us or self.round_spread > NOISY_SPREAD
        return spread or self.busy or self.stalled

    def flags(self) -> dict:
        """The fields a row keeps of its measurement besides the times: noisy, busy,
        round_spread and stalled."""
        return {
            "noisy": self.noisy,
            "busy": self.busy,
            "round_spread": self.round_spread,
            "stalled": self.stalled,
        }


def interleaved(
    measures: dict,
    rounds: int,
    progress: Callable[[str], None] | None = None,
    describe: Callable[[object], str] = str,
    extra_budget: float | None = None,
) -> dict:
    """Take every measurement (key -> function returning a benchmark.Measurement) once
    per round, the rounds interleaved so that a slow spell of the machine falls on every
    key alike, and pool each key's runs.

    While a key's pooled runs are noisy (:data:`NOISY_SPREAD`), whole rounds are added,
    every key in each (a ratio stays a comparison of runs taken side by side), as long
    as another round fits in `extra_budget` seconds (default: as long as the planned
    rounds took; 0: none). A key still noisy then is reported so (``Pooled.noisy``).
    """
    runs: dict = {key: [] for key in measures}

    def one_round(label: str) -> None:
        for key, measure in measures.items():
            if progress:
                progress(f"{describe(key)} ({label})")
            runs[key].append(measure())

    start = time.perf_counter()
    for r in range(rounds):
        one_round(f"round {r + 1}/{rounds}")
    planned = time.perf_counter() - start
    budget = planned if extra_budget is None else extra_budget
    per_round = planned / max(1, rounds)
    pooled = {key: _pool(ms) for key, ms in runs.items()}
    start = time.perf_counter()
    extra = 0
    while any(p.noisy for p in pooled.values()):
        if time.perf_counter() - start + per_round > budget:
            break
        extra += 1
        one_round(f"noisy: extra round {extra}")
        pooled = {key: _pool(ms) for key, ms in runs.items()}
    return pooled


def _pool(ms: list[benchmark.Measurement]) -> Pooled:
    calls = sum(len(m.raw_times) * m.number_per_run for m in ms)
    medians = [m.median for m in ms]
    if len(medians) >= 3:
        q1, _, q3 = statistics.quantiles(medians, n=4, method="inclusive")
        disagreement = q3 - q1
    else:
        disagreement = max(medians) - min(medians)
    shares = [
        m.metadata["others_cpu"] for m in ms if (m.metadata or {}).get("others_cpu") is not None
    ]
    # the stalled share over all rounds, each weighted by its timed wall time
    timed = [
        (m.metadata["stalled"], sum(m.raw_times))  # (a block's raw time: all its calls)
        for m in ms
        if (m.metadata or {}).get("stalled") is not None
    ]
    wall = sum(t for _, t in timed)
    waited = sum(s * t for s, t in timed) / wall if wall > 0 else 0.0
    (m,) = benchmark.Measurement.merge(ms)
    spread = disagreement / m.median if m.median > 0 else 0.0
    others = statistics.median(shares) if shares else 0.0
    return Pooled(m.median * 1e6, m.iqr * 1e6, calls, len(ms), spread, others, waited)


def time_ratio(median_us: float, base_us: float | None, noisy: bool = False) -> str:
    """A row's median over its baseline's, as text: "0.62x", with "?" after it when the
    row or its baseline is noisy (see :func:`ratio_notes`)."""
    if not base_us:
        return "  -  "
    ratio = median_us / base_us
    text = f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"
    return text + ("?" if noisy else " ")


def ratio_notes(baseline: str, any_noisy: bool, what: str = "") -> str:
    """The lines under a table that say what its ratios are (`what`: another first line,
    for a table of other ratios besides time)."""
    lines = [what or f"time ratio: the row's median over that of {baseline} (below 1.00x: faster)"]
    if any_noisy:
        lines.append(
            "?: the machine was busy while this row or its baseline was measured, even after "
            f"longer measuring (other processes used over {BUSY_SHARE:.0%} of the CPUs, this "
            f"process's threads waited for a CPU over {STALL_SHARE:.0%} of the time, or the "
            f"runs spread or the rounds disagreed by over {NOISY_SPREAD:.0%} of the median): "
            "the ratio is uncertain; where the threads waited, a parallel call can take a "
            "scheduler slice (milliseconds) each time, so by far more than that"
        )
    return "\n".join(lines)
