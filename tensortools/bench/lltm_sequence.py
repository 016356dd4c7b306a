"""The LLTM over whole sequences: ``ops.lltm_sequence`` against Python loops over the
reference cell (eager and compiled) and over the fused cell, forward and backward of a
whole sequence. Beside the times: the GFLOP/s of the matrix products each variant needs
(:func:`sequence_flops`), the machine's large-GEMM throughput measured in the same run,
the bytes each variant saves for backward, and the op's matrix products alone (its floor).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from tensortools import ops, reference
from tensortools.bench.profiling import saved_for_backward
from tensortools.bench.timing import (
    interleaved,
    ratio_notes,
    sync,
    time_call,
    time_ratio,
)

__all__ = [
    "SEQUENCE_SIZES",
    "SEQUENCE_STEPS",
    "SequenceRow",
    "sequence_rows",
    "format_sequence_table",
    "gemm_gflops",
    "sequence_flops",
]

#: (batch, features, state) and sequence lengths of the sequence rows.
SEQUENCE_SIZES: tuple[tuple[int, int, int], ...] = ((16, 32, 128), (64, 1024, 128))
SEQUENCE_STEPS: tuple[int, ...] = (32, 128)

EAGER_LOOP = "reference loop (eager)"
OP = "ops.lltm_sequence"
PRODUCTS = "its matrix products alone"
NO_INPUT_GRAD = "input needs no grad"


@dataclasses.dataclass
class SequenceRow:
    """Forward and backward of one sequence: a variant at one size and length."""

    size: tuple[int, int, int]  # batch, features, state
    steps: int
    dtype: str
    device: str
    variant: str
    median_us: float
    iqr_us: float
    runs: int
    gflops: float  # sequence_flops / median
    gemm_gflops: float  # the machine's large-GEMM throughput, same run
    saved_bytes: int | None  # saved for backward beyond the arguments (None: not measured)
    noisy: bool = False  # Pooled.noisy
    round_spread: float = 0.0  # Pooled.round_spread
    stalled: bool = False  # Pooled.stalled


def sequence_flops(steps: int, size: tuple[int, int, int], input_grad: bool = True) -> float:
    """Floating-point operations of the matrix products one forward and backward need:
    gates (T·B×(S+F) by (S+F)×3S), and backward the gradients of X = [h | input] and of
    the weights, each as many; without the input's gradient, its part of X's is not
    needed. The pointwise work is left out."""
    batch, features, state = size
    flops = 3 * 2.0 * steps * batch * 3 * state * (state + features)
    return flops if input_grad else flops - 2.0 * steps * batch * 3 * state * features


def gemm_gflops(
    dtype: torch.dtype = torch.float32, device: str = "cpu", min_run_time: float = 0.5
) -> float:
    """The machine's matrix-product throughput: a square product large enough to run at
    the library's best (2048 on the CPU, 8192 on a GPU), in GFLOP/s."""
    n = 8192 if torch.device(device).type == "cuda" else 2048
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    out = torch.empty(n, n, dtype=dtype, device=device)

    def product():
        torch.mm(a, b, out=out)
        sync(device)

    m = time_call(product, min_run_time)
    return 2.0 * n**3 / m.median / 1e9


def _cell_loop(input: Tensor, weights: Tensor, bias: Tensor, h: Tensor, c: Tensor):
    """The fused cell applied step by step from Python."""
    outputs = []
    for x in input.unbind(0):
        h, c = ops.lltm(x, weights, bias, h, c)
        outputs.append(h)
    return torch.stack(outputs), h, c


def sequence_products(
    args: tuple[Tensor, ...],
    d_gates: Tensor | None = None,
    hs: Tensor | None = None,
    *,
    input_grad: bool = True,
) -> None:
    """The matrix products ops.lltm_sequence runs, on stand-in operands of the same
    shapes, without the pointwise work: the op's floor. Forward: the input's product for
    every step at once, then one state product per step; given d_gates (T×B×3S) and hs
    (T·B×S), the backward's too (the input's gradient only with `input_grad`). Each
    product is one call from Python."""
    input, weights, bias, h0, _ = args
    steps, batch, features = input.shape
    state = h0.shape[1]
    w_h, w_x = weights[:, :state], weights[:, state:]
    w_h_t = w_h.t().contiguous()
    with torch.no_grad():
        gates = torch.addmm(bias, input.reshape(-1, features), w_x.t()).view(steps, batch, -1)
        for t in range(steps):
            gates[t].addmm_(h0, w_h_t)
        if d_gates is None:
            return
        w_h_c = w_h.contiguous()
        grad_h = torch.empty(batch, state, dtype=h0.dtype, device=h0.device)
        for t in range(steps):
            torch.mm(d_gates[t], w_h_c, out=grad_h)
        flat = d_gates.view(-1, 3 * state)
        flat.sum(0)
        if input_grad:
            flat @ w_x
        flat.t() @ input.reshape(-1, features)
        flat.t() @ hs


def sequence_rows(
    sizes: Iterable[tuple[int, int, int]] = SEQUENCE_SIZES,
    steps: Iterable[int] = SEQUENCE_STEPS,
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    compile: bool = True,
    min_run_time: float = 0.5,
    rounds: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[SequenceRow]:
    """Time forward+backward of a whole sequence for each variant, size and length.

    Each variant is measured in `rounds` interleaved rounds and its runs pooled.
    Compiling the reference loop unrolls it: at 128 steps that takes minutes on a small
    CPU (it is reported on stderr through `progress`); ``compile=False`` leaves it out.
    """
    gemm = gemm_gflops(dtype, device, min_run_time)
    rows = []
    for size, n_steps in itertools.product(list(sizes), list(steps)):
        batch, features, state = size
        g = {"dtype": dtype, "device": device}

        def make_set():
            args = (
                torch.randn(n_steps, batch, features, **g),
                torch.randn(3 * state, state + features, **g) / (state + features) ** 0.5,
                torch.randn(3 * state, **g),
                torch.randn(batch, state, **g),
                torch.randn(batch, state, **g),
            )
            grads = (
                torch.randn(n_steps, batch, state, **g),
                torch.randn(batch, state, **g),
                torch.randn(batch, state, **g),
            )
            return tuple(a.requires_grad_() for a in args), grads

        sets = itertools.cycle([make_set() for _ in range(2)])
        # name -> (function, whether the input needs a gradient): a model's input data
        # seldom does, and then the op leaves out the product that gives it.
        variants: dict[str, tuple[Callable, bool]] = {EAGER_LOOP: (reference.lltm_sequence, True)}
        if compile:
            # A fresh dynamo cache for each size: otherwise the second size would recompile
            # with symbolic shapes and time slower, dynamic-shape code.
            torch._dynamo.reset()
            variants["reference loop (torch.compile)"] = (
                torch.compile(reference.lltm_sequence),
                True,
            )
        variants["fused cell loop (ops.lltm)"] = (_cell_loop, True)
        variants[OP] = (ops.lltm_sequence, True)
        variants[f"{EAGER_LOOP}, {NO_INPUT_GRAD}"] = (reference.lltm_sequence, False)
        variants[f"{OP}, {NO_INPUT_GRAD}"] = (ops.lltm_sequence, False)

        measures = {}
        saved: dict[str, int | None] = {}
        for name, (fn, input_grad) in variants.items():

            def both(fn=fn, input_grad=input_grad):
                args, grads = next(sets)
                if not input_grad:
                    args = (args[0].detach(), *args[1:])
                wrt = args if input_grad else args[1:]
                return torch.autograd.grad(fn(*args), wrt, grads, allow_unused=True)

            if progress and name.endswith("(torch.compile)"):
                progress(f"compiling the {n_steps}-step reference loop at {size}")
                start = time.perf_counter()
                both()
                progress(f"  compiled in {time.perf_counter() - start:.0f} s")
            measures[name] = lambda f=both: time_call(f, min_run_time)
            args, _ = next(sets)
            saved[name], _ = saved_for_backward(lambda fn=fn, a=args: fn(*a), leave_out=args)
        d_gates = torch.randn(n_steps, batch, 3 * state, **g)
        hs = torch.randn(n_steps * batch, state, **g)
        measures[PRODUCTS] = lambda: time_call(
            lambda: sequence_products(next(sets)[0], d_gates, hs), min_run_time
        )
        saved[PRODUCTS] = None
        pooled = interleaved(
            measures, rounds, progress, lambda key: f"LLTM sequence {size} T={n_steps} {key}"
        )
        for name, p in pooled.items():
            flops = sequence_flops(n_steps, size, not name.endswith(NO_INPUT_GRAD))
            rows.append(
                SequenceRow(
                    size,
                    n_steps,
                    str(dtype).removeprefix("torch."),
                    device,
                    name,
                    p.median_us,
                    p.iqr_us,
                    p.calls,
                    flops / p.median_us / 1e3,
                    gemm,
                    saved[name],
                    p.noisy,
                    p.round_spread,
                    p.stalled,
                )
            )
    return rows


def format_sequence_table(rows: list[SequenceRow]) -> str:
    """One line per size, length and variant: the median, the time ratio to the eager
    reference loop in the same case (with or without the input's gradient), GFLOP/s and
    their share of the large GEMM's, and the megabytes saved for backward. GFLOP/s count
    the products a variant needs (without the input's gradient, fewer:
    :func:`sequence_flops`)."""
    base = {(r.size, r.steps, r.dtype, r.variant): r for r in rows}
    lines = [
        f"{'size (B/F/S)':<14} {'T':>4} {'dtype':<8} {'variant':<44} {'median':>10} "
        f"{'IQR':>9} {'time ratio':>10} {'GFLOP/s':>8} {'of GEMM':>8} {'saved':>9}"
    ]
    any_noisy = False
    for r in rows:
        size = "/".join(map(str, r.size))
        case = f"{EAGER_LOOP}, {NO_INPUT_GRAD}" if r.variant.endswith(NO_INPUT_GRAD) else EAGER_LOOP
        b = base.get((r.size, r.steps, r.dtype, case))
        noisy = r.noisy or (b is not None and b.noisy)
        any_noisy |= noisy
        ratio = time_ratio(r.median_us, b.median_us if b else None, noisy)
        saved = "" if r.saved_bytes is None else f"{r.saved_bytes / 2**20:.1f} MB"
        lines.append(
            f"{size:<14} {r.steps:>4} {r.dtype:<8} {r.variant:<44} {r.median_us / 1e3:>8.2f}ms "
            f"{r.iqr_us / 1e3:>7.2f}ms {ratio:>10} {r.gflops:>8.1f} "
            f"{r.gflops / r.gemm_gflops:>7.0%} {saved:>9}"
        )
    if rows:
        lines.append(ratio_notes(f"the {EAGER_LOOP} in the same case", any_noisy))
        lines.append(
            f"large GEMM: {rows[0].gemm_gflops:.1f} GFLOP/s; 'saved': bytes kept for backward "
            "beyond the arguments"
        )
    return "\n".join(lines)
