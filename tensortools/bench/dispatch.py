"""The per-call cost of each tensor type against a plain tensor, beside the floor of the
__torch_function__ protocol itself."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from tensortools.bench.timing import Row, interleaved, ratio_notes, time_call, time_ratio

__all__ = ["PROTOCOL", "compiled_chain_rows", "dispatch_rows", "format_dispatch_table"]

#: The row of the protocol's own cost: a subclass that returns without computing.
PROTOCOL = "the protocol alone (no work)"


class _PassThrough(torch.Tensor):
    """A Tensor subclass with torch's default __torch_function__, nothing added."""


class _ProtocolOnly(torch.Tensor):
    """The floor of any __torch_function__ type: the protocol's own cost. It returns its
    first argument without computing anything, so it is only a yardstick (timed on one
    element, where the call itself costs little)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return args[0]


def _user_type() -> type:
    """A type as a user writes it: a TensorWrapper with a handler (for a call not timed)."""
    from tensortools.dispatch import TensorWrapper

    class UserType(TensorWrapper):
        pass

    @UserType.implements(torch.abs)
    def _abs(input):
        with torch._C.DisableTorchFunctionSubclass():
            return UserType._make(torch.abs(input))

    return UserType


def dispatch_rows(
    sizes: Iterable[int] = (1, 1000), *, min_run_time: float = 0.3, rounds: int = 3
) -> list[Row]:
    """Per-call cost of torch.add and torch.sin on each tensor type against a plain
    tensor: 1-element tensors (size 1) and size×size ones.

    "the protocol alone" (size 1 only) is a subclass whose __torch_function__ returns at
    once without running the call: the floor for any type built on the protocol. MetadataTensor,
    LoggingTensor and the user type (a TensorWrapper with a handler for abs) have a
    handler for neither call: both take the common path, compiled in C. MetadataTensor
    with tracking off runs the plain call alone: the cost of reaching a plain call from
    __torch_function__ with instances of a type as arguments. ScalarTensor is
    ScalarTensor(size, 2.0): both calls are structured (the matrix is never formed); sin
    takes the compiled path for size 1000 and the Python one for size 1, where the pair
    is cut to one entry; for size 1, ``d + d`` on ScalarTensor(2, 2.0) is timed too (as a
    torch.add row).
    """
    from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, capture_logs

    user_type = _user_type()
    rows = []
    for n in sizes:
        shape = (1,) if n == 1 else (n, n)
        x = torch.randn(shape)
        cases = {
            "plain Tensor": x,
            PROTOCOL: x.as_subclass(_ProtocolOnly),
            "pass-through subclass": x.as_subclass(_PassThrough),
            "MetadataTensor": MetadataTensor(x, {"k": 1}),
            "LoggingTensor (no listener)": LoggingTensor(x),
            "user TensorWrapper type": user_type._make(x),
            "ScalarTensor": ScalarTensor(n, 2.0),  # both structured
        }
        if n != 1:
            del cases[PROTOCOL]  # computes nothing: a yardstick for the per-call cost only
        measures = {}
        for name, t in cases.items():
            measures[name, "torch.add"] = lambda t=t: time_call(
                lambda: torch.add(t, t), min_run_time
            )
            measures[name, "torch.sin"] = lambda t=t: time_call(lambda: torch.sin(t), min_run_time)

        def untracked(op, t=cases["MetadataTensor"]):
            # (set_tracking, process-wide: a using_tracking(False) block, which holds in one
            # thread, sends that thread's calls through the Python path)
            previous = MetadataTensor.set_tracking(False)
            try:
                return time_call(lambda: op(t), min_run_time)
            finally:
                MetadataTensor.set_tracking(previous)

        measures["MetadataTensor (tracking off)", "torch.add"] = lambda: untracked(
            lambda t: torch.add(t, t)
        )
        measures["MetadataTensor (tracking off)", "torch.sin"] = lambda: untracked(torch.sin)
        if n == 1:
            small = ScalarTensor(2, 2.0)
            measures["ScalarTensor N=2, as d + d", "torch.add"] = lambda: time_call(
                lambda: small + small, min_run_time
            )

        def logged_add(t=cases["LoggingTensor (no listener)"]):
            with capture_logs() as logs:
                m = time_call(lambda: torch.add(t, t), min_run_time)
                logs.clear()
            return m

        measures["LoggingTensor (capturing)", "torch.add"] = logged_add
        for (name, op), p in interleaved(measures, rounds).items():
            rows.append(Row.of((n,), "float32", "cpu", name, op, p))
    return rows


def chain(t):
    # ten pointwise operations
    t = torch.sin(t) * 1.5
    t = t + 0.25
    t = torch.cos(t) - 0.5
    t = torch.exp(t) / 3.0
    t = torch.tanh(t) + t
    return torch.sigmoid(t)


def compiled_chain_rows(
    n: int = 1000, *, backend: str = "inductor", min_run_time: float = 0.3, rounds: int = 3
) -> list[Row]:
    """A ten-operation pointwise function on n-element float32 tensors, compiled with
    ``torch.compile(fullgraph=True)``, on a MetadataTensor against the same compiled on a
    plain tensor (and both eager). The `kernels` field holds the number of graphs
    torch.compile made (one per compiled variant; None for eager)."""
    from torch._dynamo.utils import counters

    from tensortools import MetadataTensor

    x = torch.randn(n)
    inputs = {"plain Tensor": x, "MetadataTensor": MetadataTensor(x, {"k": 1})}
    graphs, measures = {}, {}
    for name, t in inputs.items():
        compiled = torch.compile(chain, fullgraph=True, backend=backend)
        counters.clear()
        compiled(t)  # compiles (fullgraph: a break would raise)
        graphs[name] = counters["stats"]["unique_graphs"]
        measures[name, "compiled chain"] = lambda f=compiled, t=t: time_call(
            lambda: f(t), min_run_time
        )
        measures[name, "eager chain"] = lambda t=t: time_call(lambda: chain(t), min_run_time)
    rows = []
    for (name, phase), p in interleaved(measures, rounds).items():
        count = graphs[name] if phase == "compiled chain" else None
        rows.append(Row.of((n,), "float32", "cpu", name, phase, p, count))
    return rows


def format_dispatch_table(rows: list[Row]) -> str:
    """A text table of dispatch_rows (or compiled_chain_rows), with each median's time
    ratio to plain Tensor's in the same call and size."""
    base = {(r.size, r.phase): r for r in rows if r.variant == "plain Tensor"}
    lines = [
        f"{'tensors':<14} {'call':<15} {'type':<30} {'median':>10} {'IQR':>9} {'time ratio':>10}"
    ]
    any_noisy = False
    for r in rows:
        if r.size == (1,) or r.phase.endswith("chain"):  # (the chains' size: elements)
            size = "1 element" if r.size == (1,) else f"{r.size[0]} elements"
        else:
            size = f"{r.size[0]}x{r.size[0]}"
        b = base[(r.size, r.phase)]
        noisy = r.noisy or b.noisy
        any_noisy |= noisy
        graphs = f"  ({r.kernels} graph{'s' * (r.kernels != 1)})" if r.kernels else ""
        lines.append(
            f"{size:<14} {r.phase:<15} {r.variant:<30} {r.median_us:>8.2f}us "
            f"{r.iqr_us:>7.2f}us {time_ratio(r.median_us, b.median_us, noisy):>10}" + graphs
        )
    lines.append(ratio_notes("a plain Tensor in the same call and size", any_noisy))
    return "\n".join(lines)
