"""The per-call cost of each tensor type against a plain tensor, beside the floor of the
__torch_function__ protocol itself."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from tensortools.bench.timing import Row, interleaved, time_call

__all__ = ["dispatch_rows", "format_dispatch_table"]


class _PassThrough(torch.Tensor):
    """A Tensor subclass with torch's default __torch_function__, nothing added."""


class _ProtocolOnly(torch.Tensor):
    """The floor of any __torch_function__ type: the protocol's own cost. It returns its
    first argument without computing anything, so it is only a yardstick."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return args[0]


def dispatch_rows(
    sizes: Iterable[int] = (1, 1000), *, min_run_time: float = 0.3, rounds: int = 3
) -> list[Row]:
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
            measures[name, "torch.add"] = lambda t=t: time_call(
                lambda: torch.add(t, t), min_run_time
            )
            measures[name, "torch.sin"] = lambda t=t: time_call(lambda: torch.sin(t), min_run_time)

        def logged_add(t=cases["LoggingTensor (no listener)"]):
            with capture_logs() as logs:
                m = time_call(lambda: torch.add(t, t), min_run_time)
                logs.clear()
            return m

        measures["LoggingTensor (capturing)", "torch.add"] = logged_add
        for (name, op), p in interleaved(measures, rounds).items():
            rows.append(Row((n,), "float32", "cpu", name, op, p.median_us, p.iqr_us, p.calls))
    return rows


def format_dispatch_table(rows: list[Row]) -> str:
    """A text table of dispatch_rows, with each median as a multiple of plain Tensor's."""
    base = {(r.size, r.phase): r.median_us for r in rows if r.variant == "plain Tensor"}
    lines = [f"{'tensors':<10} {'call':<10} {'type':<28} {'median':>10} {'vs plain':>9}"]
    for r in rows:
        size = "1 element" if r.size == (1,) else f"{r.size[0]}x{r.size[0]}"
        ratio = r.median_us / base[(r.size, r.phase)]
        lines.append(
            f"{size:<10} {r.phase:<10} {r.variant:<28} {r.median_us:>8.2f}us {ratio:>8.2f}x"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# fused Conv2d + BatchNorm2d
