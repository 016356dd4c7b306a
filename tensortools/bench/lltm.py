"""The fused LLTM cell against the reference maths, eager and compiled: time and kernel
count per phase (forward, backward, both)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

import torch
from torch.utils import benchmark

from tensortools import ops, reference
from tensortools.bench.profiling import kernel_count
from tensortools.bench.timing import (
    NOISY_SPREAD,
    Row,
    interleaved,
    ratio_notes,
    time_call,
    time_each,
    time_ratio,
)

__all__ = [
    "LLTM_SIZES",
    "PHASES",
    "EAGER",
    "OP",
    "PRODUCTS",
    "lltm_rows",
    "format_table",
    "lltm_verdict",
]

#: LLTM sizes (batch, features, state): the tutorial size, a wider input, a larger cell.
LLTM_SIZES: tuple[tuple[int, int, int], ...] = ((16, 32, 128), (64, 1024, 128), (256, 1024, 512))
PHASES = ("forward", "backward", "forward+backward")
EAGER, OP = "reference (eager)", "tensortools op"
#: The matrix products the cell needs (forward: the gates; backward: the gradients of the
#: weights and of [h, input]), from Python with nothing else: what any LLTM pays.
PRODUCTS = "its matrix products alone"


def _lltm_variants(compile: bool) -> dict[str, Callable]:
    variants = {EAGER: reference.lltm}
    if compile:
        # A fresh dynamo cache for each size: otherwise the second size would recompile
        # with symbolic shapes and time slower, dynamic-shape code.
        torch._dynamo.reset()
        variants["reference (torch.compile)"] = torch.compile(reference.lltm)
    variants[OP] = ops.lltm
    return variants


def _products(params: list, backward: bool) -> None:
    """The cell's matrix products on operands of its shapes (see PRODUCTS)."""
    input, weights, bias, h, _ = params
    with torch.no_grad():
        x = torch.cat([h, input], dim=1)
        gates = torch.addmm(bias, x, weights.t())
        if backward:
            d_gates = gates  # (any B×3S operand: products take the same time)
            d_gates.t().mm(x)
            d_gates.mm(weights)


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

        for phase, with_backward in (("forward", False), ("forward+backward", True)):

            def products(with_backward=with_backward):
                _products(next(sets)[0], with_backward)

            measures[PRODUCTS, phase] = lambda f=products: time_call(f, min_run_time)
            steps[PRODUCTS, phase] = products
        kernels = {key: kernel_count(step, device) for key, step in steps.items()}
        for name in variants:
            kernels[name, "backward"] = kernels[name, "forward+backward"] - kernels[name, "forward"]
        pooled = interleaved(
            measures, rounds, progress, lambda key: f"LLTM {size} {key[0]} {key[1]}"
        )
        for (name, phase), p in pooled.items():
            dt = str(dtype).removeprefix("torch.")
            rows.append(Row.of(size, dt, device, name, phase, p, kernels[name, phase]))
    return rows


def format_table(rows: list[Row], baseline: str = EAGER) -> str:
    """A text table: one line per size, phase and variant, with the time ratio to
    `baseline` at the same size and phase (the variant's median over its) and the
    kernels per call; the notes under it say what the ratios are."""
    base = {(r.size, r.phase, r.dtype): r for r in rows if r.variant == baseline}
    lines = [
        f"{'size (B/F/S)':<14} {'dtype':<8} {'phase':<17} {'variant':<26} "
        f"{'median':>10} {'IQR':>9} {'time ratio':>10} {'kernels':>8}"
    ]
    any_noisy = False
    for r in sorted(rows, key=lambda r: (r.dtype, r.size, PHASES.index(r.phase))):
        size = "/".join(map(str, r.size))
        b = base.get((r.size, r.phase, r.dtype))
        noisy = r.noisy or (b is not None and b.noisy)
        any_noisy |= noisy
        ratio = time_ratio(r.median_us, b.median_us if b else None, noisy)
        kernels = "" if r.kernels is None else str(r.kernels)
        lines.append(
            f"{size:<14} {r.dtype:<8} {r.phase:<17} {r.variant:<26} "
            f"{r.median_us:>8.1f}us {r.iqr_us:>7.1f}us {ratio:>10} {kernels:>8}"
        )
    lines.append(ratio_notes(f"the {baseline} at the same size and phase", any_noisy))
    return "\n".join(lines)


def lltm_verdict(rows: list[Row], phase: str = "forward+backward") -> list[str]:
    """One line per size and dtype: whether the fused op beats the eager reference in
    `phase`, and where it does not, why: how the time beyond the matrix products both
    run (measured alone, :data:`PRODUCTS`) compares."""
    by = {(r.size, r.dtype, r.variant): r for r in rows if r.phase == phase}
    lines = []
    for size, dtype in dict.fromkeys((r.size, r.dtype) for r in rows if r.phase == phase):
        eager, op = by.get((size, dtype, EAGER)), by.get((size, dtype, OP))
        if eager is None or op is None:
            continue
        where = f"{'/'.join(map(str, size))} {dtype}, {phase}"
        ratio = op.median_us / eager.median_us
        noisy = op.noisy or eager.noisy
        # A ratio of spread runs is uncertain by about NOISY_SPREAD each way, so far from
        # 1 it still tells which is faster; on a machine busy with other processes the
        # runs can agree and still be off by any factor.
        unsure = op.busy or eager.busy or op.stalled or eager.stalled
        unsure |= noisy and (1 - NOISY_SPREAD) ** 2 < ratio < (1 + NOISY_SPREAD) ** 2
        busy = f" (runs spread: uncertain by {NOISY_SPREAD:.0%} or more)" if noisy else ""
        if unsure:
            lines.append(
                f"{where}: {ratio:.2f}x eager's time, but the machine was busy, so this run "
                "cannot tell whether the fused op wins"
            )
            continue
        if ratio < 0.9:
            lines.append(f"{where}: the fused op wins: {ratio:.2f}x eager's time{busy}")
            continue
        verb = "is slower" if ratio > 1.1 else "does not win clearly"
        products = by.get((size, dtype, PRODUCTS))
        if products is None or products.noisy:
            why = "its matrix products were not measured steadily enough to say why"
        else:
            share = products.median_us / eager.median_us
            why = (
                f"beyond the matrix products both run ({share:.2f}x eager's time alone), "
                f"it spends {ratio - share:.2f}x against eager's {max(0.0, 1 - share):.2f}x"
            )
            if share >= 0.7 and ratio <= 1.1:
                why += ": the products leave little for fusing to save"
        lines.append(f"{where}: the fused op {verb} ({ratio:.2f}x eager's time){busy}: {why}")
    return lines
