"""What a type does where no answer is right or wrong, reported rather than checked:
:func:`export_report` (what ``torch.export`` makes of a small function over an instance)
and :func:`overhead_report` (what a common call costs on an instance against plain
torch)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensortools._samples import compare_results, plain_values
from tensortools.testing.report import Unsupported

__all__ = ["ExportReport", "OVERHEAD_CALLS", "OverheadReport", "export_report", "overhead_report"]


def _small(x: Any) -> Any:
    """The function :func:`export_report` exports by default: pointwise calls, an
    operator and a reduction."""
    return (x * 2 + 1).sin().sum(0)


class _Module(torch.nn.Module):
    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Any) -> Any:
        return self.fn(x)


@dataclasses.dataclass
class ExportReport:
    """What ``torch.export.export`` made of a function over an instance: ``exported``, the
    aten operators of its graph, and whether the exported program run on the instance
    equals the eager call (``equal``) and what type it returns; or, refused, the error's
    type and first line (``message``)."""

    type_name: str
    exported: bool
    message: str = ""
    operators: list[str] = dataclasses.field(default_factory=list)
    equal: bool | None = None
    result_type: str = ""

    def __str__(self) -> str:
        if not self.exported:
            return f"{self.type_name}: torch.export refused: {self.message}"
        ops = ", ".join(self.operators)
        same = "equals" if self.equal else "differs from"
        return (
            f"{self.type_name}: torch.export passed ({len(self.operators)} aten operators: "
            f"{ops}); the program run on the instance gives a {self.result_type} that "
            f"{same} the eager call" + (f" ({self.message})" if self.message else "")
        )


def _made(cls: type, make: Callable, shape: tuple[int, ...]) -> Any:
    """An instance of a seeded float32 tensor of `shape`; TypeError where make gives none."""
    g = torch.Generator().manual_seed(0)
    try:
        x = make(torch.randn(shape, generator=g))
    except Unsupported as err:
        raise TypeError(f"make gave no {cls.__name__} of a {shape} float32 tensor: {err}") from err
    if x is None:
        raise TypeError(f"make gave no {cls.__name__} of a {shape} float32 tensor")
    return x


def export_report(
    cls: type, make: Callable[[Tensor], Any], fn: Callable[[Any], Any] = _small, *, shape=(4, 4)
) -> ExportReport:
    """``torch.export.export`` of `fn` (default ``(x * 2 + 1).sin().sum(0)``) over
    ``make(tensor)`` (a seeded float32 tensor of `shape`), as a module's forward.

    Export traces a ``torch.Tensor`` subclass down to aten operators: the graph holds no
    trace of the type, and the program returns the type only where it runs on an
    instance again. A type that is no tensor (a tensor-like) is refused as an input
    (export takes tensors and pytree containers of them). Either is reported, not judged.
    """
    x = _made(cls, make, tuple(shape))
    try:
        program = torch.export.export(_Module(fn), (x,))
    except Exception as err:
        first = str(err).splitlines()[0] if str(err) else ""
        return ExportReport(cls.__name__, False, f"{type(err).__name__}: {first}"[:300])
    operators = [
        str(node.target).removeprefix("aten.")
        for node in program.graph.nodes
        if node.op == "call_function"
    ]
    try:
        got = program.module()(x)
    except Exception as err:
        first = str(err).splitlines()[0] if str(err) else ""
        note = f"the program raised {type(err).__name__} on the instance: {first}"[:300]
        return ExportReport(cls.__name__, True, note, operators, False, "")
    reason = compare_results(plain_values(got), plain_values(fn(x)), exact=False)
    return ExportReport(cls.__name__, True, reason, operators, not reason, type(got).__name__)


#: The calls :func:`overhead_report` times: name -> call of (x, the same shape's other).
OVERHEAD_CALLS: dict[str, Callable[[Any, Any], Any]] = {
    "x + y": lambda x, y: x + y,
    "x * 2": lambda x, y: x * 2,
    "x.sum()": lambda x, y: x.sum(),
    "x @ y": lambda x, y: x @ y,
    "x[0]": lambda x, y: x[0],
}


@dataclasses.dataclass
class OverheadReport:
    """Per-call times of :data:`OVERHEAD_CALLS` on instances and on plain tensors:
    ``rows`` of (call, plain µs, the type's µs, ratio), medians of interleaved rounds;
    ``noisy`` names the calls whose runs spread (a busy machine)."""

    type_name: str
    shape: tuple[int, ...]
    rows: list[tuple[str, float, float, float]]
    noisy: list[str] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        size = "x".join(map(str, self.shape))
        head = f"{'call':<10} {'plain':>10} {self.type_name:>16} {'ratio':>8}"
        lines = [f"per-call time, {size} float32 (median of interleaved rounds)", head]
        for call, plain, typed, ratio in self.rows:
            mark = "?" if call in self.noisy else " "
            lines.append(f"{call:<10} {plain:>8.2f}us {typed:>14.2f}us {ratio:>7.2f}x{mark}")
        if self.noisy:
            lines.append("?: the machine was busy, or the runs spread: the ratio is uncertain")
        return "\n".join(lines)


def overhead_report(
    cls: type,
    make: Callable[[Tensor], Any],
    densify: Callable[[Any], Tensor] | None = None,
    *,
    shape: tuple[int, int] = (16, 16),
    min_run_time: float = 0.05,
    rounds: int = 3,
) -> OverheadReport:
    """What each of :data:`OVERHEAD_CALLS` costs on instances (``make`` of two seeded
    float32 tensors of `shape`, square for ``x @ y``) against the plain tensors they
    stand for (``densify``, by default the instance as a plain tensor), timed with
    ``torch.utils.benchmark`` in `rounds` interleaved rounds of `min_run_time` seconds
    each (a slow spell of the machine falls on both alike); a call the type refuses is
    left out. About a second with the defaults."""
    from tensortools.bench.timing import interleaved, time_call

    x, y = _made(cls, make, tuple(shape)), _made(cls, make, tuple(shape))
    if densify is None:
        densify = plain_values
    px, py = densify(x).detach().clone(), densify(y).detach().clone()
    measures = {}
    for name, call in OVERHEAD_CALLS.items():
        try:
            call(x, y)
        except Exception:
            continue
        for kind, a, b in (("plain", px, py), ("type", x, y)):
            measures[name, kind] = lambda call=call, a=a, b=b: time_call(
                lambda: call(a, b), min_run_time
            )
    pooled = interleaved(measures, rounds, extra_budget=0)
    rows, noisy = [], []
    for name in OVERHEAD_CALLS:
        if (name, "type") not in pooled:
            continue
        plain, typed = pooled[name, "plain"], pooled[name, "type"]
        rows.append((name, plain.median_us, typed.median_us, typed.median_us / plain.median_us))
        if plain.noisy or typed.noisy:
            noisy.append(name)
    return OverheadReport(cls.__name__, tuple(shape), rows, noisy)
