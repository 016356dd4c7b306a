"""MetadataTensor against its peer, MONAI's ``MetaTensor``, side by side: the per-call
cost of add, sin and conv2d, indexing a batch, and a batch's round trip (collate 16
samples, a small conv model, one output per sample); and the calls on a batch of 16
samples (:func:`batch_rows`). MONAI is optional: without it only
the plain and MetadataTensor rows are timed."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.data import default_collate

from tensortools.bench.timing import Row, interleaved, ratio_notes, time_call, time_ratio

__all__ = [
    "BATCH",
    "ROUND_TRIP_SAMPLES",
    "batch_rows",
    "format_peer_table",
    "monai_version",
    "peer_rows",
]

#: Samples per batch in the round trip.
ROUND_TRIP_SAMPLES = 16
#: The batch of batch_rows: ROUND_TRIP_SAMPLES samples of 3x32x32, collated.
BATCH = f"{ROUND_TRIP_SAMPLES}x3x32x32"
#: The per-call shapes: one element, and one 3-channel 256x256 image.
SHAPES = {"1 element": (1, 1, 1, 1), "1x3x256x256": (1, 3, 256, 256)}


def monai_version() -> str | None:
    """MONAI's version, or None where it is not installed."""
    try:
        import monai
    except ImportError:
        return None
    return monai.__version__


def _instances(shape: tuple) -> dict[str, torch.Tensor]:
    """The tensor of `shape` as each variant: plain, MetadataTensor and MONAI's MetaTensor
    (where installed), each as one tensor and as a batch of its dim 0 (collated)."""
    from tensortools import MetadataTensor

    x = torch.randn(shape)
    meta = {"id": "s0", "spacing": (1.0, 1.0)}
    out = {
        "plain Tensor": x,
        "MetadataTensor": MetadataTensor(x, meta),
        "MetadataTensor batch": default_collate([MetadataTensor(t, meta) for t in x.unbind(0)]),
    }
    if monai_version() is not None:
        from monai.data import MetaTensor, list_data_collate

        out["monai MetaTensor"] = MetaTensor(x, meta=dict(meta))
        samples = [MetaTensor(t, meta=dict(meta)) for t in x.unbind(0)]
        out["monai MetaTensor batch"] = list_data_collate(samples)
    return out


def _samples(n: int) -> tuple[list, list]:
    """n samples of 3x32x32 with per-sample metadata, for each library."""
    from tensortools import MetadataTensor

    images = [torch.randn(3, 32, 32) for _ in range(n)]
    ours = [MetadataTensor(t, {"id": i, "spacing": (1.0, 0.5)}) for i, t in enumerate(images)]
    peers = []
    if monai_version() is not None:
        from monai.data import MetaTensor

        peers = [MetaTensor(t, meta={"id": i, "spacing": (1.0, 0.5)}) for i, t in enumerate(images)]
    return ours, peers


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3, padding=1),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
    ).eval()


def _round_trips(n: int) -> dict[str, Callable[[], object]]:
    """collate n samples -> model -> one output per sample, for each library (and plain
    tensors, whose outputs carry no metadata)."""
    from tensortools import decollate

    model = _model()
    ours, peers = _samples(n)
    plain = [t.as_subclass(torch.Tensor) for t in ours]

    @torch.no_grad()
    def plain_trip():
        return list(model(default_collate(plain)).unbind(0))

    @torch.no_grad()
    def our_trip():
        return decollate(model(default_collate(ours)))

    trips = {"plain Tensor": plain_trip, "MetadataTensor": our_trip}
    if peers:
        from monai.data import decollate_batch, list_data_collate

        @torch.no_grad()
        def peer_trip():
            return decollate_batch(model(list_data_collate(peers)))

        trips["monai MetaTensor"] = peer_trip
    return trips


def peer_rows(*, min_run_time: float = 0.3, rounds: int = 3) -> list[Row]:
    """The timings, all interleaved: per call (torch.add, torch.sin, F.conv2d at each of
    SHAPES, and ``b[1]`` on a batch of 2), and the round trip of ROUND_TRIP_SAMPLES
    samples."""
    measures: dict = {}
    weight = {label: torch.randn(8, shape[1], 3, 3) for label, shape in SHAPES.items()}
    for label, shape in SHAPES.items():
        for name, t in _instances(shape).items():
            w = weight[label]
            measures[label, "torch.add", name] = lambda t=t: time_call(
                lambda: torch.add(t, t), min_run_time
            )
            measures[label, "torch.sin", name] = lambda t=t: time_call(
                lambda: torch.sin(t), min_run_time
            )
            measures[label, "F.conv2d", name] = lambda t=t, w=w: time_call(
                lambda: F.conv2d(t, w, padding=1), min_run_time
            )
    for name, t in _instances((2, 3, 8, 8)).items():
        measures["batch of 2", "b[1]", name] = lambda t=t: time_call(lambda: t[1], min_run_time)
    for name, trip in _round_trips(ROUND_TRIP_SAMPLES).items():
        measures[f"{ROUND_TRIP_SAMPLES}x3x32x32", "round trip", name] = lambda f=trip: time_call(
            f, min_run_time
        )
    pooled = interleaved(measures, rounds)
    return [Row.of((k[0],), "float32", "cpu", k[2], k[1], p) for k, p in pooled.items()]


def batch_rows(
    *,
    min_run_time: float = 0.3,
    rounds: int = 3,
    threads: int | None = 1,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """The calls on a batch, against the same on plain
    tensors: ``torch.add(b, b)`` and ``F.conv2d(b, w, padding=1)`` (8 3x3 filters) on the
    collated :data:`BATCH` (a MetadataTensor batch with per-sample metadata; MONAI's where
    installed), and the batch's round trip of :func:`peer_rows`. All interleaved, on
    `threads` intra-op threads (default one, as the issue measured them: a call's own
    cost, not how two threads share a small tensor; None: torch's)."""
    ours, peers = _samples(ROUND_TRIP_SAMPLES)
    batches = {
        "plain Tensor": default_collate([t.as_subclass(torch.Tensor) for t in ours]),
        "MetadataTensor batch": default_collate(ours),
    }
    if peers:
        from monai.data import list_data_collate

        batches["monai MetaTensor batch"] = list_data_collate(peers)
    weight = torch.randn(8, 3, 3, 3)
    calls = {
        "torch.add": lambda b: torch.add(b, b),
        "F.conv2d": lambda b: F.conv2d(b, weight, padding=1),
    }
    measures: dict = {}
    for (call, fn), (name, b) in itertools.product(calls.items(), batches.items()):
        measures[call, name] = lambda fn=fn, b=b: time_call(lambda: fn(b), min_run_time)
    for name, trip in _round_trips(ROUND_TRIP_SAMPLES).items():
        measures["round trip", name] = lambda f=trip: time_call(f, min_run_time)
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        pooled = interleaved(measures, rounds, progress, lambda key: f"{BATCH} {key[0]} {key[1]}")
    finally:
        torch.set_num_threads(before)
    return [Row.of((BATCH,), "float32", "cpu", k[1], k[0], p) for k, p in pooled.items()]


def _index_note(rows: list[Row]) -> str:
    """b[1] of a batch against b[1] of a MetadataTensor that is not one (what a batch
    adds: the per-sample metadata of the index)."""
    index = {r.variant: r for r in rows if r.phase == "b[1]"}
    batch, single = index.get("MetadataTensor batch"), index.get("MetadataTensor")
    if batch is None or single is None:
        return ""
    ratio = time_ratio(batch.median_us, single.median_us, batch.noisy or single.noisy)
    return (
        f"b[1]: a MetadataTensor batch's costs {ratio.strip()} a MetadataTensor's that is not one"
    )


def format_peer_table(rows: list[Row]) -> str:
    """A text table of peer_rows, each median's ratio to plain Tensor's in the same call."""
    base = {(r.size, r.phase): r for r in rows if r.variant == "plain Tensor"}
    lines = [f"{'tensors':<14} {'call':<12} {'type':<22} {'median':>11} {'IQR':>10} {'ratio':>7}"]
    any_noisy = False
    for r in rows:
        b = base[(r.size, r.phase)]
        noisy = r.noisy or b.noisy
        any_noisy |= noisy
        lines.append(
            f"{r.size[0]:<14} {r.phase:<12} {r.variant:<22} {r.median_us:>9.2f}us "
            f"{r.iqr_us:>8.2f}us {time_ratio(r.median_us, b.median_us, noisy):>7}"
        )
    version = monai_version()
    note = _index_note(rows)
    if note:
        lines.append(note)
    lines.append(
        ratio_notes("a plain Tensor in the same call", any_noisy)
        + (
            f"\nmonai {version}"
            if version
            else "\nmonai is not installed: its rows are left out (pip install --no-deps monai)"
        )
        + "\nround trip: default_collate -> conv model -> tensortools.decollate (MONAI: "
        "list_data_collate -> model -> decollate_batch; plain: unbind), no grad"
    )
    return "\n".join(lines)
