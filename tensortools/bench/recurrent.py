"""The LLTM against the recurrent layers users would pick instead: ``nn.LLTMSequence``
against ``torch.nn.LSTM`` and ``torch.nn.GRU`` (oneDNN's fused RNN on the CPU, cuDNN on a
GPU) over whole sequences, and the cell ``nn.LLTM`` against ``torch.nn.LSTMCell`` per step;
training (forward and backward, the input needing no gradient, as a model's data) and
inference (forward under ``torch.inference_mode()``). On a GPU the LLTM sequence runs twice:
as it runs by default (its persistent kernels where the state fits) and as ``LLTM-loop``,
the per-step loop (``tensortools.ops.set_lltm_sequence_options(mode="loop")``). Times are
compared with ``nn.LSTM``'s (``nn.LSTMCell``'s for the cells) of the same case; GFLOP/s count each
layer's own gate products (the LLTM has 3 gate blocks per step, the LSTM 4, the GRU 3),
against the machine's large-GEMM throughput measured in the same run."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterable

import torch

from tensortools import nn, ops
from tensortools.bench.lltm_sequence import gemm_gflops, sequence_products
from tensortools.bench.timing import interleaved, ratio_notes, sync, time_call, time_ratio

__all__ = [
    "RECURRENT_SIZES",
    "RECURRENT_STEPS",
    "RecurrentRow",
    "recurrent_rows",
    "format_recurrent_table",
    "gate_flops",
]

#: (batch, features, state) and sequence lengths of the rows (the cell rows take T = 1).
RECURRENT_SIZES: tuple[tuple[int, int, int], ...] = ((16, 32, 128), (64, 1024, 128), (32, 256, 512))
RECURRENT_STEPS: tuple[int, ...] = (32, 128)

#: Gate blocks per step: what a layer's products scale with.
GATE_BLOCKS = {"LLTM": 3, "LLTM-loop": 3, "LSTM": 4, "GRU": 3, "floor": 3}
#: The LLTM sequence's per-step loop, timed beside its persistent kernels on a GPU.
LOOP = "LLTM-loop"
#: The sequence rows' floor: the LLTM's matrix products alone, no pointwise work.
FLOOR = "floor"
PHASES = ("training", "inference")
BASELINE = "LSTM"


@dataclasses.dataclass
class RecurrentRow:
    """One layer, one phase, at one size and length."""

    kind: str  # "sequence" or "cell"
    size: tuple[int, int, int]  # batch, features, state
    steps: int
    dtype: str
    device: str
    phase: str
    layer: str  # LLTM, LSTM or GRU
    median_us: float
    iqr_us: float
    runs: int
    gflops: float
    gemm_gflops: float
    noisy: bool = False  # Pooled.noisy
    round_spread: float = 0.0  # Pooled.round_spread
    stalled: bool = False  # Pooled.stalled


def gate_flops(layer: str, steps: int, size: tuple[int, int, int], phase: str) -> float:
    """Floating-point operations of a layer's gate products over `steps` steps: forward
    one product of [h | x] (B×(S+F)) by the gate weights ((S+F)×G·S, G gate blocks);
    training adds the gradients of h and of the weights (not of the input, which needs
    none): 2·B·G·S·S and 2·B·G·S·(S+F) per step. Pointwise work is left out."""
    batch, features, state = size
    blocks = GATE_BLOCKS[layer]
    forward = 2.0 * batch * blocks * state * (state + features)
    if phase == "inference":
        return steps * forward
    return steps * (2 * forward + 2.0 * batch * blocks * state * state)


def _layers(kind: str, features: int, state: int, g: dict) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    if kind == "sequence":
        layers = {
            "LLTM": nn.LLTMSequence(features, state, **g),
            "LSTM": torch.nn.LSTM(features, state, **g),
            "GRU": torch.nn.GRU(features, state, **g),
        }
        if torch.device(g["device"]).type == "cuda":
            layers[LOOP] = layers["LLTM"]
        return layers
    return {
        "LLTM": nn.LLTM(features, state, **g),
        "LSTM": torch.nn.LSTMCell(features, state, **g),
        "GRU": torch.nn.GRUCell(features, state, **g),
    }


def _call(kind: str, layer: str, module: torch.nn.Module, x, h, c):
    """The layer's forward on input x and state (h, c), and the tensors a loss reads."""
    if kind == "sequence":
        if layer == "GRU":
            out, h_n = module(x, h.unsqueeze(0))
            return (out, h_n)
        lltm = layer in ("LLTM", LOOP)
        out, (h_n, c_n) = module(x, (h, c) if lltm else (h.unsqueeze(0), c.unsqueeze(0)))
        return (out, h_n, c_n)
    if layer == "GRU":
        return (module(x, h),)
    return tuple(module(x, (h, c)))


@contextlib.contextmanager
def _sequence_path(layer: str):
    """The LLTM sequence's per-step loop for the calls inside, where `layer` is LOOP."""
    if layer != LOOP:
        yield
        return
    previous = ops.set_lltm_sequence_options(mode="loop")
    try:
        yield
    finally:
        ops.set_lltm_sequence_options(**previous._asdict())


def recurrent_rows(
    sizes: Iterable[tuple[int, int, int]] = RECURRENT_SIZES,
    steps: Iterable[int] = RECURRENT_STEPS,
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    min_run_time: float = 0.5,
    rounds: int = 3,
    cells: bool = True,
    progress: Callable[[str], None] | None = None,
    into: list[RecurrentRow] | None = None,
) -> list[RecurrentRow]:
    """Time each layer in both phases at each size and length (and the cells, one step,
    at each size), in `rounds` interleaved rounds whose runs are pooled. Each case's rows
    are appended to `into` (returned; a new list by default) as soon as it is measured,
    so an interrupted run keeps the cases it finished."""
    gemm = gemm_gflops(dtype, device, min_run_time)
    g = {"dtype": dtype, "device": device}
    cases = [("sequence", size, t) for size, t in itertools.product(list(sizes), list(steps))]
    if cells:
        cases += [("cell", size, 1) for size in sizes]
    rows = [] if into is None else into
    for kind, size, n_steps in cases:
        batch, features, state = size
        layers = _layers(kind, features, state, g)
        shape = (n_steps, batch, features) if kind == "sequence" else (batch, features)
        # Two input sets, alternated, so that no call reads what the last one left cached.
        sets = itertools.cycle(
            [
                (
                    torch.randn(shape, **g),
                    torch.randn(batch, state, **g),
                    torch.randn(batch, state, **g),
                )
                for _ in range(2)
            ]
        )
        measures = {}
        for (name, module), phase in itertools.product(layers.items(), PHASES):

            def step(name=name, module=module, phase=phase):
                x, h, c = next(sets)
                with _sequence_path(name):
                    if phase == "inference":
                        with torch.inference_mode():
                            _call(kind, name, module, x, h, c)
                    else:
                        outs = _call(kind, name, module, x, h, c)
                        params = list(module.parameters())
                        grads = [torch.ones_like(o) for o in outs]
                        torch.autograd.grad(outs, params, grads)
                    sync(device)

            step()  # warm-up: oneDNN primitives and cuDNN plans are made on the first call
            measures[name, phase] = lambda f=step: time_call(f, min_run_time)
        if kind == "sequence":
            lltm = layers["LLTM"]
            weights, bias = lltm.weights.detach(), lltm.bias.detach()
            d_gates = torch.randn(n_steps, batch, 3 * state, **g)
            hs = torch.randn(n_steps * batch, state, **g)
            for phase in PHASES:

                def floor(phase=phase):
                    x, h, c = next(sets)
                    backward = (d_gates, hs) if phase == "training" else ()
                    sequence_products((x, weights, bias, h, c), *backward, input_grad=False)
                    sync(device)

                floor()
                measures[FLOOR, phase] = lambda f=floor: time_call(f, min_run_time)
        pooled = interleaved(
            measures,
            rounds,
            progress,
            lambda key: f"{kind} {size} T={n_steps} {key[0]} {key[1]}",
        )
        for (name, phase), p in pooled.items():
            flops = gate_flops(name, n_steps, size, phase)
            rows.append(
                RecurrentRow(
                    kind,
                    size,
                    n_steps,
                    str(dtype).removeprefix("torch."),
                    device,
                    phase,
                    name,
                    p.median_us,
                    p.iqr_us,
                    p.calls,
                    flops / p.median_us / 1e3,
                    gemm,
                    p.noisy,
                    p.round_spread,
                    p.stalled,
                )
            )
    return rows


def format_recurrent_table(rows: list[RecurrentRow]) -> str:
    """One line per case and layer: the median, the time ratio to nn.LSTM's (LSTMCell's)
    in the same case and phase, GFLOP/s of its gate products and their share of the
    large GEMM's."""
    base = {(r.kind, r.size, r.steps, r.dtype, r.phase): r for r in rows if r.layer == BASELINE}
    lines = [
        f"{'kind':<9} {'size (B/F/S)':<13} {'T':>4} {'dtype':<8} {'phase':<10} {'layer':<9} "
        f"{'median':>10} {'IQR':>9} {'vs LSTM':>8} {'GFLOP/s':>8} {'of GEMM':>8}"
    ]
    any_noisy = False
    for r in rows:
        b = base.get((r.kind, r.size, r.steps, r.dtype, r.phase))
        noisy = r.noisy or (b is not None and b.noisy)
        any_noisy |= noisy
        ratio = time_ratio(r.median_us, b.median_us if b else None, noisy)
        size = "/".join(map(str, r.size))
        lines.append(
            f"{r.kind:<9} {size:<13} {r.steps:>4} {r.dtype:<8} {r.phase:<10} {r.layer:<9} "
            f"{r.median_us / 1e3:>8.3f}ms {r.iqr_us / 1e3:>7.3f}ms {ratio:>8} "
            f"{r.gflops:>8.1f} {r.gflops / r.gemm_gflops:>7.0%}"
        )
    if rows:
        lines.append(
            ratio_notes("nn.LSTM (nn.LSTMCell for the cells) in the same case and phase", any_noisy)
        )
        lines.append(
            f"large GEMM: {rows[0].gemm_gflops:.1f} GFLOP/s; GFLOP/s count each layer's gate "
            "products (LLTM and GRU 3 gate blocks per step, LSTM 4); training: forward and "
            "backward, the input needing no gradient; inference: forward under "
            "torch.inference_mode(); floor: the LLTM's matrix products alone, one call "
            "each from Python, no pointwise work"
        )
    return "\n".join(lines)
