"""Fused against unfused Conv2d + BatchNorm2d training steps: bytes saved for backward,
peak memory and time."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import warnings
from collections.abc import Callable

import torch

from tensortools import nn
from tensortools.bench.profiling import saved_for_backward
from tensortools.bench.timing import (
    interleaved,
    ratio_notes,
    time_call,
    time_ratio,
)

__all__ = ["ConvBNRow", "conv_bn_rows", "format_conv_bn_table"]


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
    noisy: bool = False  # Pooled.noisy
    round_spread: float = 0.0  # Pooled.round_spread
    stalled: bool = False  # Pooled.stalled


def _conv_bn_networks(dtype: torch.dtype, device: str) -> dict[str, torch.nn.Module]:
    """Two conv-bn layers (1 -> 32 channels, then 32 -> 64 at stride 2; 3x3 kernels,
    padding 1, ReLU between), unfused and fused with the same parameters."""
    g = {"dtype": dtype, "device": device}
    unfused = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1, bias=False, **g),
        torch.nn.BatchNorm2d(32, **g),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False, **g),
        torch.nn.BatchNorm2d(64, **g),
    )
    fused = torch.nn.Sequential(
        nn.FusedConvBN2d.from_modules(unfused[0], unfused[1]),
        torch.nn.ReLU(),
        nn.FusedConvBN2d.from_modules(unfused[3], unfused[4]),
    )
    return {"Conv2d + BatchNorm2d": unfused, "FusedConvBN2d": fused}


def _peak_memory(step: Callable[[], object], device: str) -> int:
    """Peak bytes of tensor memory on `device` while step() runs: on a GPU from the
    caching allocator's statistics, on the CPU from the profiler's memory timeline."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        step()
        torch.cuda.synchronize(dev)
        return torch.cuda.max_memory_allocated(dev)
    with torch.profiler.profile(profile_memory=True, record_shapes=True, with_stack=True) as prof:
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


def conv_bn_rows(
    batch: int = 256,
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    min_run_time: float = 0.5,
    rounds: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[ConvBNRow]:
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
        saved_bytes, saved_tensors = saved_for_backward(lambda net=net: net(x))
        step_of(net)()  # warm-up, so one-time buffers do not count as the step's peak
        measured[name] = (saved_bytes, saved_tensors, _peak_memory(step_of(net), device))
    measures = {
        name: lambda net=net: time_call(step_of(net), min_run_time)
        for name, net in networks.items()
    }
    pooled = interleaved(
        measures, rounds, progress, lambda name: f"conv-bn {name}: forward+backward"
    )
    return [
        ConvBNRow(
            name,
            batch,
            *measured[name],
            p.median_us,
            p.iqr_us,
            p.calls,
            p.noisy,
            p.round_spread,
            p.stalled,
        )
        for name, p in pooled.items()
    ]


def _ratio(value: float, base: float) -> str:
    """value / base as the table prints it; 'n/a' where the baseline measured nothing."""
    return f"{value / base:>5.2f}x" if base else "  n/a "


def format_conv_bn_table(rows: list[ConvBNRow]) -> str:
    """A text table of conv_bn_rows, each figure also as a ratio to the first row's (the
    unfused network's)."""
    base = rows[0]
    mib = 2.0**20
    lines = [
        f"{'variant':<22} {'saved for backward, ratio':>32}{'peak memory, ratio':>20}"
        f"{'forward+backward, time ratio':>32}"
    ]
    any_noisy = False
    for r in rows:
        noisy = r.noisy or base.noisy
        any_noisy |= noisy
        lines.append(
            f"{r.variant:<22} {r.saved_bytes / mib:>8.1f} MiB ({r.saved_tensors:>2} tensors) "
            f"{_ratio(r.saved_bytes, base.saved_bytes)} {r.peak_bytes / mib:>8.1f} MiB "
            f"{_ratio(r.peak_bytes, base.peak_bytes)} {r.median_us / 1e3:>8.2f}ms "
            f"(IQR {r.iqr_us / 1e3:>5.2f}) {time_ratio(r.median_us, base.median_us, noisy):>7}"
        )
    what = f"ratios: the row's figure over {base.variant}'s (below 1.00x: less memory, or faster)"
    lines.append(ratio_notes(base.variant, any_noisy, what))
    return "\n".join(lines)
