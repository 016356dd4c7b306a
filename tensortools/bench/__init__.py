"""Benchmarks of tensortools against plain PyTorch, timed with torch.utils.benchmark.

``python -m tensortools.bench`` runs them and prints a table; :func:`lltm_rows` is the
library form the demo uses. Numbers are medians over many runs after warm-up; they are
measurements of this machine, never assertions.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import platform
import tempfile
import time
import warnings
from typing import Callable, Iterable

import torch
from torch import Tensor
from torch.utils import benchmark

from tensortools import ops, reference

__all__ = ["LLTM_SIZES", "Row", "machine_summary", "quiet_profiler", "kernel_count",
           "lltm_rows", "format_table", "dispatch_rows", "format_dispatch_table", "ConvBNRow",
           "conv_bn_rows", "format_conv_bn_table"]

#: LLTM sizes (batch, features, state): the tutorial size, a wider input, a larger cell.
LLTM_SIZES: tuple[tuple[int, int, int], ...] = ((16, 32, 128), (64, 1024, 128),
                                                (256, 1024, 512))
PHASES = ("forward", "backward", "forward+backward")


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
    device = (torch.cuda.get_device_name() if torch.cuda.is_available()
              else f"{_cpu_name()} CPU")
    return (f"{device}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
            f"Python {platform.python_version()}")


def _time(fn: Callable[[], object], min_run_time: float) -> benchmark.Measurement:
    fn()  # warm-up (and, for torch.compile, the compilation)
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn},
                            num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time)


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _time_each(prepare: Callable[[], object], step: Callable[[object], object],
               min_run_time: float, device: str, label: str) -> benchmark.Measurement:
    """Time `step(prepare())` with `prepare` left out of the clock, run by run.

    For a backward pass, which needs a fresh forward each time (compiled graphs may donate
    their buffers, so one graph cannot be replayed with retain_graph).
    """
    step(prepare())  # warm-up
    times: list[float] = []
    spent = 0.0
    while spent < min_run_time or len(times) < 10:
        state = prepare()
        _sync(device)
        start = time.perf_counter()
        step(state)
        _sync(device)
        times.append(time.perf_counter() - start)
        spent += times[-1]
    return benchmark.Measurement(1, times, benchmark.TaskSpec(stmt=label, setup=""))


@dataclasses.dataclass
class _Pooled:
    """The runs of one measurement over all rounds: median and IQR in microseconds, and
    the number of timed calls."""

    median_us: float
    iqr_us: float
    calls: int


def _interleaved(measures: dict, rounds: int,
                 progress: Callable[[str], None] | None = None,
                 describe: Callable[[object], str] = str) -> dict:
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
        pooled[key] = _Pooled(m.median * 1e6, m.iqr * 1e6, calls)
    return pooled


# Operators that only make views or allocate: no kernel runs for them.
_NOT_KERNELS = frozenset(f"aten::{name}" for name in (
    "empty", "empty_strided", "empty_like", "zeros_like", "as_strided", "view", "t",
    "transpose", "permute", "expand", "slice", "narrow", "select", "unsqueeze", "squeeze",
    "reshape", "_reshape_alias", "alias", "detach", "lift_fresh", "chunk", "split",
    "split_with_sizes", "unbind", "contiguous", "resolve_conj", "resolve_neg", "numpy_T",
    "result_type", "to", "_to_copy_noop"))


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
        _sync(device)
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


def _lltm_variants(compile: bool) -> dict[str, Callable]:
    variants = {"reference (eager)": reference.lltm}
    if compile:
        variants["reference (torch.compile)"] = torch.compile(reference.lltm)
    variants["tensortools op"] = ops.lltm
    return variants


def lltm_rows(sizes: Iterable[tuple[int, int, int]] = LLTM_SIZES, *,
              dtype: torch.dtype = torch.float32, device: str = "cpu",
              compile: bool = True, min_run_time: float = 0.5, rounds: int = 3,
              input_sets: int = 8,
              progress: Callable[[str], None] | None = None) -> list[Row]:
    """Time LLTM forward, backward and both for each variant at each size, and count
    the kernels each runs per call (:func:`kernel_count`).

    Each (variant, phase) is measured in `rounds` rounds, interleaved with the others, and
    its runs pooled, so a slow spell of the machine falls on every variant alike.
    `min_run_time` is the timed seconds per measurement in each round. Successive calls
    take their inputs from `input_sets` different sets, so that a small problem is not
    timed with its data always in the innermost cache.
    """
    rows = []
    for size in sizes:
        batch, features, state = size
        g = {"dtype": dtype, "device": device}

        def make_set():
            weights = torch.randn(3 * state, state + features, **g).div_(
                (state + features) ** 0.5)
            params = [torch.randn(batch, features, **g), weights,
                      torch.randn(3 * state, **g), torch.randn(batch, state, **g),
                      torch.randn(batch, state, **g)]
            return ([p.requires_grad_() for p in params],
                    (torch.randn(batch, state, **g), torch.randn(batch, state, **g)))

        sets = itertools.cycle([make_set() for _ in range(max(1, input_sets))])

        def backward(kept):
            outs, (params, grads) = kept
            return torch.autograd.grad(outs, params, grads)

        measures: dict[tuple[str, str], Callable[[], benchmark.Measurement]] = {}
        steps: dict[tuple[str, str], Callable[[], object]] = {}
        variants = _lltm_variants(compile)
        for name, fn in variants.items():
            def forward(fn=fn):
                params, _ = next(sets)
                return fn(*params)

            def forward_kept(fn=fn):
                params, grads = next(sets)
                return fn(*params), (params, grads)

            def both(fn=fn):
                params, grads = next(sets)
                return torch.autograd.grad(fn(*params), params, grads)

            measures[name, "forward"] = lambda f=forward: _time(f, min_run_time)
            measures[name, "backward"] = lambda f=forward_kept, n=name: _time_each(
                f, backward, min_run_time, device, f"{n} backward")
            measures[name, "forward+backward"] = lambda f=both: _time(f, min_run_time)
            steps[name, "forward"], steps[name, "forward+backward"] = forward, both

        kernels = {key: kernel_count(step, device) for key, step in steps.items()}
        for name in variants:
            kernels[name, "backward"] = (kernels[name, "forward+backward"]
                                         - kernels[name, "forward"])
        pooled = _interleaved(measures, rounds, progress,
                              lambda key: f"LLTM {size} {key[0]} {key[1]}")
        for (name, phase), p in pooled.items():
            rows.append(Row(size, str(dtype).removeprefix("torch."), device, name, phase,
                            p.median_us, p.iqr_us, p.calls, kernels[name, phase]))
    return rows


def format_table(rows: list[Row], baseline: str = "reference (eager)") -> str:
    """A text table: one line per size, phase and variant, with the speed-up over
    `baseline` (its median divided by the variant's) and the kernels per call."""
    base = {(r.size, r.phase, r.dtype): r.median_us for r in rows if r.variant == baseline}
    lines = [f"{'size (B/F/S)':<14} {'dtype':<8} {'phase':<17} {'variant':<26} "
             f"{'median':>10} {'IQR':>9} {'speed-up':>9} {'kernels':>8}"]
    for r in rows:
        size = "/".join(map(str, r.size))
        ratio = base.get((r.size, r.phase, r.dtype), float("nan")) / r.median_us
        kernels = "" if r.kernels is None else str(r.kernels)
        lines.append(f"{size:<14} {r.dtype:<8} {r.phase:<17} {r.variant:<26} "
                     f"{r.median_us:>8.1f}us {r.iqr_us:>7.1f}us {ratio:>8.2f}x {kernels:>8}")
    return "\n".join(lines)


class _PassThrough(torch.Tensor):
    """A Tensor subclass with torch's default __torch_function__, nothing added."""


class _ProtocolOnly(torch.Tensor):
    """The floor of any __torch_function__ type: the protocol's own cost. It returns its
    first argument without computing anything, so it is only a yardstick."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return args[0]


def dispatch_rows(sizes: Iterable[int] = (1, 1000), *, min_run_time: float = 0.3,
                  rounds: int = 3) -> list[Row]:
    """Per-call cost of torch.add and torch.sin on each tensor type against a plain
    tensor: 1-element tensors (size 1) and size×size ones.

    "protocol only" is a subclass whose __torch_function__ returns at once without
    running the call: the floor for any type built on the protocol. ScalarTensor is
    ScalarTensor(size, 2.0): its add is structured (the matrix is never formed), its sin
    runs on the dense matrix. MetadataTensor and LoggingTensor have a handler for
    neither: both calls take their generic path.
    """
    from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, capture_logs

    rows = []
    for n in sizes:
        shape = (1,) if n == 1 else (n, n)
        x = torch.randn(shape)
        cases = {
            "plain Tensor": x,
            "protocol only (no work)": x.as_subclass(_ProtocolOnly),
            "pass-through subclass": x.as_subclass(_PassThrough),
            "MetadataTensor": MetadataTensor(x, {"k": 1}),
            "LoggingTensor (no listener)": LoggingTensor(x),
            "ScalarTensor": ScalarTensor(n, 2.0),  # add is structured, sin runs dense
        }
        measures = {}
        for name, t in cases.items():
            measures[name, "torch.add"] = lambda t=t: _time(lambda: torch.add(t, t),
                                                            min_run_time)
            measures[name, "torch.sin"] = lambda t=t: _time(lambda: torch.sin(t),
                                                            min_run_time)

        def logged_add(t=cases["LoggingTensor (no listener)"]):
            with capture_logs() as logs:
                m = _time(lambda: torch.add(t, t), min_run_time)
                logs.clear()
            return m

        measures["LoggingTensor (capturing)", "torch.add"] = logged_add
        for (name, op), p in _interleaved(measures, rounds).items():
            rows.append(Row((n,), "float32", "cpu", name, op, p.median_us, p.iqr_us,
                            p.calls))
    return rows


def format_dispatch_table(rows: list[Row]) -> str:
    """A text table of dispatch_rows, with each median as a multiple of plain Tensor's."""
    base = {(r.size, r.phase): r.median_us for r in rows if r.variant == "plain Tensor"}
    lines = [f"{'tensors':<10} {'call':<10} {'type':<28} {'median':>10} {'vs plain':>9}"]
    for r in rows:
        size = "1 element" if r.size == (1,) else f"{r.size[0]}x{r.size[0]}"
        ratio = r.median_us / base[(r.size, r.phase)]
        lines.append(f"{size:<10} {r.phase:<10} {r.variant:<28} {r.median_us:>8.2f}us "
                     f"{ratio:>8.2f}x")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# fused Conv2d + BatchNorm2d


@dataclasses.dataclass
class ConvBNRow:
    """One variant of the conv-bn network: what its forward keeps for backward (bytes of
    distinct storages, and how many tensors were saved), the peak of tensor memory over a
    forward+backward step (from torch.profiler's memory timeline, parameters and input
    included), and the step's time."""

    variant: str
    batch: int
    saved_bytes: int
    saved_tensors: int
    peak_bytes: int
    median_us: float
    iqr_us: float
    runs: int


def _conv_bn_networks(dtype: torch.dtype, device: str) -> dict[str, torch.nn.Module]:
    """Two conv-bn layers (1 -> 32 channels, then 32 -> 64 at stride 2; 3x3 kernels,
    padding 1, ReLU between), unfused and fused with the same parameters."""
    from tensortools import nn

    g = {"dtype": dtype, "device": device}
    unfused = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1, bias=False, **g), torch.nn.BatchNorm2d(32, **g),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False, **g),
        torch.nn.BatchNorm2d(64, **g))
    fused = torch.nn.Sequential(
        nn.FusedConvBN2d.from_modules(unfused[0], unfused[1]), torch.nn.ReLU(),
        nn.FusedConvBN2d.from_modules(unfused[3], unfused[4]))
    return {"Conv2d + BatchNorm2d": unfused, "FusedConvBN2d": fused}


def _saved_for_backward(step: Callable[[], Tensor]) -> tuple[int, int]:
    """(bytes of distinct storages, tensors) saved for backward by step()'s graph."""
    storages: dict[int, int] = {}
    count = 0

    def pack(t):
        nonlocal count
        count += 1
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = step()
    del out
    return sum(storages.values()), count


def _peak_memory(step: Callable[[], object], device: str) -> int:
    """Peak bytes of tensor memory on `device` while step() runs (profiler timeline)."""
    with torch.profiler.profile(profile_memory=True, record_shapes=True,
                                with_stack=True) as prof:
        step()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "timeline.json")
        # Deprecated in favour of CUDA memory snapshots, which do not cover the CPU.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            prof.export_memory_timeline(path, device=str(torch.device(device)))
        with open(path) as f:
            _, sizes = json.load(f)
    return int(max((sum(s) for s in sizes), default=0))


def conv_bn_rows(batch: int = 256, *, dtype: torch.dtype = torch.float32,
                 device: str = "cpu", min_run_time: float = 0.5, rounds: int = 3,
                 progress: Callable[[str], None] | None = None) -> list[ConvBNRow]:
    """Unfused against fused conv-bn on a batch of 1x28x28 images, in training mode:
    bytes saved for backward, peak tensor memory and forward+backward time."""
    networks = _conv_bn_networks(dtype, device)
    x = torch.randn(batch, 1, 28, 28, dtype=dtype, device=device)

    def step_of(net):
        def step():
            out = net(x)
            out.backward(torch.ones_like(out))
        return step

    measured = {}
    for name, net in networks.items():
        if progress:
            progress(f"conv-bn {name}: saved tensors and peak memory")
        saved_bytes, saved_tensors = _saved_for_backward(lambda net=net: net(x))
        step_of(net)()  # warm-up, so one-time buffers do not count as the step's peak
        measured[name] = (saved_bytes, saved_tensors, _peak_memory(step_of(net), device))
    measures = {name: lambda net=net: _time(step_of(net), min_run_time)
                for name, net in networks.items()}
    pooled = _interleaved(measures, rounds, progress,
                          lambda name: f"conv-bn {name}: forward+backward")
    return [ConvBNRow(name, batch, *measured[name], p.median_us, p.iqr_us, p.calls)
            for name, p in pooled.items()]


def format_conv_bn_table(rows: list[ConvBNRow]) -> str:
    """A text table of conv_bn_rows, each figure also as a multiple of the first row's."""
    base = rows[0]
    mib = 2.0 ** 20
    lines = [f"{'variant':<22} {'saved for backward':>26} {'peak memory':>20} "
             f"{'forward+backward':>28}"]
    for r in rows:
        lines.append(
            f"{r.variant:<22} {r.saved_bytes / mib:>8.1f} MiB ({r.saved_tensors:>2} tensors) "
            f"{r.saved_bytes / base.saved_bytes:>5.2f}x {r.peak_bytes / mib:>8.1f} MiB "
            f"{r.peak_bytes / base.peak_bytes:>5.2f}x {r.median_us / 1e3:>8.2f}ms "
            f"(IQR {r.iqr_us / 1e3:>5.2f}) {r.median_us / base.median_us:>5.2f}x")
    return "\n".join(lines)
