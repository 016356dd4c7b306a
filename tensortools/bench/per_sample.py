"""Per-sample gradients of a recurrent layer, as DP-SGD takes them: ``vmap(grad)`` of one
sample's loss over ``torch.func.functional_call``, against a Python loop over the samples
(one forward and backward each), for ``nn.LLTMSequence`` and ``torch.nn.LSTM`` alike.

Under ``vmap`` the LLTM's forward folds the samples into its batch (one kernel call for
all), and its backward runs once per sample (each sample's weight gradient is a sum over
its own steps: ``loop_vmap``). torch has no batching rule for the LSTM's fused kernel on
the CPU (``aten::mkldnn_rnn_layer``) and runs it once per sample through its fallback,
with a warning; on a GPU, cuDNN's may refuse ``vmap`` outright. Whatever torch does is
measured and said: a warning goes into the row's note, an error stands in the row instead
of a time."""

from __future__ import annotations

import dataclasses
import itertools
import warnings
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from tensortools import nn
from tensortools.bench.timing import interleaved, ratio_notes, sync, time_call, time_ratio

__all__ = [
    "PER_SAMPLE_SIZES",
    "PER_SAMPLE_STEPS",
    "PerSampleRow",
    "format_per_sample_table",
    "per_sample_grads",
    "per_sample_rows",
]

#: (samples, features, state) and sequence lengths of the rows; each sample is one
#: sequence (a batch of one).
PER_SAMPLE_SIZES: tuple[tuple[int, int, int], ...] = ((16, 32, 128), (64, 32, 64))
PER_SAMPLE_STEPS: tuple[int, ...] = (32,)
LAYERS = ("LLTM", "LSTM")
METHODS = ("vmap(grad)", "loop")
#: The row every ratio is over: the same layer's loop over samples.
BASELINE = "loop"


@dataclasses.dataclass
class PerSampleRow:
    """Per-sample gradients of one layer by one method, at one size and length."""

    size: tuple[int, int, int]  # samples, features, state
    steps: int
    dtype: str
    device: str
    layer: str  # LLTM or LSTM
    method: str  # vmap(grad) or loop
    median_us: float | None  # None: the method raised (see note)
    iqr_us: float | None
    runs: int
    noisy: bool = False  # Pooled.noisy
    note: str = ""  # torch's warning, or the error that stands in for a time
    round_spread: float = 0.0  # Pooled.round_spread
    stalled: bool = False  # Pooled.stalled


def _layer(layer: str, features: int, state: int, g: dict) -> torch.nn.Module:
    torch.manual_seed(0)
    if layer == "LLTM":
        return nn.LLTMSequence(features, state, batch_first=True, **g)
    return torch.nn.LSTM(features, state, batch_first=True, **g)


def _loss(module: torch.nn.Module, params: dict[str, Tensor], sample: Tensor) -> Tensor:
    """One sample's loss: a sequence T×F as a batch of one, every step's output squared."""
    output, _ = torch.func.functional_call(module, params, (sample.unsqueeze(0),))
    return output.pow(2).sum()


def per_sample_grads(module: torch.nn.Module, samples: Tensor, method: str) -> dict[str, Tensor]:
    """The gradient of each sample's loss (:func:`_loss`) with respect to each parameter
    of `module`, stacked over the samples (N×parameter shape): by ``vmap(grad)`` or by a
    loop of forward and backward over the samples."""
    params = {k: v.detach() for k, v in module.named_parameters()}
    if method == "vmap(grad)":
        return torch.func.vmap(
            torch.func.grad(lambda p, x: _loss(module, p, x)), in_dims=(None, 0)
        )(params, samples)
    if method != "loop":
        raise ValueError(f"per_sample_grads: 'method' must be one of {METHODS}, got {method!r}")
    leaves = {k: v.requires_grad_() for k, v in params.items()}
    grads = [torch.autograd.grad(_loss(module, leaves, x), list(leaves.values())) for x in samples]
    return {k: torch.stack(g) for k, g in zip(leaves, zip(*grads))}


def _attempt(fn: Callable[[], object]) -> tuple[str, str]:
    """Run fn once: ("", warning) where it runs (torch's warning, if any), or
    ("error", what it raised)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()
        except Exception as err:
            return "error", f"{type(err).__name__}: {str(err).splitlines()[0]}"[:200]
    said = [str(w.message).split(". ")[0] for w in caught]
    return "", "; ".join(dict.fromkeys(said))[:200]


def per_sample_rows(
    sizes: Iterable[tuple[int, int, int]] = PER_SAMPLE_SIZES,
    steps: Iterable[int] = PER_SAMPLE_STEPS,
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    min_run_time: float = 0.5,
    rounds: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[PerSampleRow]:
    """Time both methods on both layers at each size and length, in `rounds` interleaved
    rounds whose runs are pooled; a method that raises gets a row with its error."""
    g = {"dtype": dtype, "device": device}
    rows = []
    for size, n_steps in itertools.product(list(sizes), list(steps)):
        n, features, state = size
        samples = [torch.randn(n, n_steps, features, **g) for _ in range(2)]
        measures, notes = {}, {}
        for layer, method in itertools.product(LAYERS, METHODS):
            module = _layer(layer, features, state, g)
            inputs = itertools.cycle(samples)  # two sets: no call reads the last one's cache

            def step(module=module, method=method, inputs=inputs):
                per_sample_grads(module, next(inputs), method)
                sync(device)

            failed, notes[layer, method] = _attempt(step)
            if not failed:
                measures[layer, method] = lambda f=step: _quiet_time(f, min_run_time)
        pooled = interleaved(
            measures, rounds, progress, lambda key: f"per-sample {size} T={n_steps} {key}"
        )
        for layer, method in itertools.product(LAYERS, METHODS):
            p = pooled.get((layer, method))
            rows.append(
                PerSampleRow(
                    size,
                    n_steps,
                    str(dtype).removeprefix("torch."),
                    device,
                    layer,
                    method,
                    p.median_us if p else None,
                    p.iqr_us if p else None,
                    p.calls if p else 0,
                    p.noisy if p else False,
                    notes[layer, method],
                    p.round_spread if p else 0.0,
                    p.stalled if p else False,
                )
            )
    return rows


def _quiet_time(fn: Callable[[], object], min_run_time: float):
    with warnings.catch_warnings():  # (torch's warning is said once, in the row's note)
        warnings.simplefilter("ignore")
        return time_call(fn, min_run_time)


def format_per_sample_table(rows: list[PerSampleRow]) -> str:
    """One line per case, layer and method: the median, its ratio to the same layer's
    loop over samples and to nn.LSTM's vmap(grad), and what torch said."""
    key = {(r.size, r.steps, r.dtype, r.layer, r.method): r for r in rows}
    lines = [
        f"{'size (N/F/S)':<13} {'T':>4} {'dtype':<8} {'layer':<5} {'method':<11} "
        f"{'median':>10} {'IQR':>9} {'vs loop':>8} {'vs LSTM':>8}  note"
    ]
    any_noisy = False
    for r in rows:
        size = "/".join(map(str, r.size))
        head = f"{size:<13} {r.steps:>4} {r.dtype:<8} {r.layer:<5} {r.method:<11} "
        if r.median_us is None:
            lines.append(f"{head}{'raised':>10} {'':>9} {'':>8} {'':>8}  {r.note}")
            continue
        ratios = []
        for base in (
            key.get((r.size, r.steps, r.dtype, r.layer, BASELINE)),
            key.get((r.size, r.steps, r.dtype, "LSTM", r.method)),
        ):
            noisy = r.noisy or (base is not None and base.noisy)
            any_noisy |= noisy
            ratios.append(time_ratio(r.median_us, base.median_us if base else None, noisy))
        lines.append(
            f"{head}{r.median_us / 1e3:>8.2f}ms {r.iqr_us / 1e3:>7.2f}ms "
            f"{ratios[0]:>8} {ratios[1]:>8}  {r.note}"
        )
    if rows:
        lines.append(
            ratio_notes(
                "the same layer's loop over samples (vs loop), and of nn.LSTM by the same "
                "method (vs LSTM)",
                any_noisy,
            )
        )
        lines.append(
            "per-sample gradients of every parameter, each sample a sequence (batch of one), "
            "its loss the sum of its outputs squared; loop: one forward and backward per "
            "sample from Python"
        )
    return "\n".join(lines)
