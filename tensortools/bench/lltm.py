"""The fused LLTM cell against the reference maths, eager and compiled: time and kernel
count per phase (forward, backward, both)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

import torch
from torch.utils import benchmark

from tensortools import ops, reference
from tensortools.bench.timing import Row, interleaved, kernel_count, time_call, time_each

__all__ = ["LLTM_SIZES", "PHASES", "lltm_rows", "format_table"]

#: LLTM sizes (batch, features, state): the tutorial size, a wider input, a larger cell.
LLTM_SIZES: tuple[tuple[int, int, int], ...] = ((16, 32, 128), (64, 1024, 128), (256, 1024, 512))
PHASES = ("forward", "backward", "forward+backward")


def _lltm_variants(compile: bool) -> dict[str, Callable]:
    variants = {"reference (eager)": reference.lltm}
    if compile:
        # A fresh dynamo cache for each size: otherwise the second size would recompile
        # with symbolic shapes and time slower, dynamic-shape code.
        torch._dynamo.reset()
        variants["reference (torch.compile)"] = torch.compile(reference.lltm)
    variants["tensortools op"] = ops.lltm
    return variants


def lltm_rows(
    sizes: Iterable[tuple[int, int, int]] = LLTM_SIZES,
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    compile: bool = True,
    min_run_time: float = 0.5,
    rounds: int = 3,
    input_sets: int = 8,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
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
            weights = torch.randn(3 * state, state + features, **g).div_((state + features) ** 0.5)
            params = [
                torch.randn(batch, features, **g),
                weights,
                torch.randn(3 * state, **g),
                torch.randn(batch, state, **g),
                torch.randn(batch, state, **g),
            ]
            return (
                [p.requires_grad_() for p in params],
                (torch.randn(batch, state, **g), torch.randn(batch, state, **g)),
            )

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

            measures[name, "forward"] = lambda f=forward: time_call(f, min_run_time)
            measures[name, "backward"] = lambda f=forward_kept, n=name: time_each(
                f, backward, min_run_time, device, f"{n} backward"
            )
            measures[name, "forward+backward"] = lambda f=both: time_call(f, min_run_time)
            steps[name, "forward"], steps[name, "forward+backward"] = forward, both

        kernels = {key: kernel_count(step, device) for key, step in steps.items()}
        for name in variants:
            kernels[name, "backward"] = kernels[name, "forward+backward"] - kernels[name, "forward"]
        pooled = interleaved(
            measures, rounds, progress, lambda key: f"LLTM {size} {key[0]} {key[1]}"
        )
        for (name, phase), p in pooled.items():
            rows.append(
                Row(
                    size,
                    str(dtype).removeprefix("torch."),
                    device,
                    name,
                    phase,
                    p.median_us,
                    p.iqr_us,
                    p.calls,
                    kernels[name, phase],
                )
            )
    return rows


def format_table(rows: list[Row], baseline: str = "reference (eager)") -> str:
    """A text table: one line per size, phase and variant, with the speed-up over
    `baseline` (its median divided by the variant's) and the kernels per call."""
    base = {(r.size, r.phase, r.dtype): r.median_us for r in rows if r.variant == baseline}
    lines = [
        f"{'size (B/F/S)':<14} {'dtype':<8} {'phase':<17} {'variant':<26} "
        f"{'median':>10} {'IQR':>9} {'speed-up':>9} {'kernels':>8}"
    ]
    for r in rows:
        size = "/".join(map(str, r.size))
        ratio = base.get((r.size, r.phase, r.dtype), float("nan")) / r.median_us
        kernels = "" if r.kernels is None else str(r.kernels)
        lines.append(
            f"{size:<14} {r.dtype:<8} {r.phase:<17} {r.variant:<26} "
            f"{r.median_us:>8.1f}us {r.iqr_us:>7.1f}us {ratio:>8.2f}x {kernels:>8}"
        )
    return "\n".join(lines)
