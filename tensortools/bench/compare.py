"""A run against a saved one (``python -m tensortools.bench --compare BASELINE.json``):
every table's ratios, row by row, today's beside the baseline's, and which moved beyond
their noise.

Ratios, not times, are compared: each row's median over its table's baseline row in the
same case (eager PyTorch, a plain Tensor, nn.LSTM, ...), so that two machines, or one
machine on two days, still compare. A ratio's spread is its two rows' relative spreads
combined (each row's IQR over its median, or its rounds' disagreement where larger); a
ratio moved when today's differs from the baseline's by more than both runs' spreads
combined, and by at least :data:`MIN_MOVE`. Rows that only one run has are listed. Files
written before the rounds' disagreement and the stall flag were saved still compare (on
their IQRs alone).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable

from tensortools.bench.lltm import EAGER
from tensortools.bench.lltm_sequence import EAGER_LOOP, NO_INPUT_GRAD
from tensortools.bench.scalar import DENSE

__all__ = [
    "MIN_MOVE",
    "RULES",
    "RatioRow",
    "Change",
    "ratio_rows",
    "compare",
    "format_comparison",
    "load_results",
]

#: The smallest change of a ratio that counts as a move, however steady both runs were:
#: two processes on one machine differ by a few percent (memory layout, clocks).
MIN_MOVE = 0.05
PLAIN = "plain Tensor"


@dataclasses.dataclass(frozen=True)
class _Rule:
    """How a section's rows form ratios: the fields naming a case (in the order printed),
    the field naming a variant, and the variant a row is divided by."""

    case: tuple[str, ...]
    variant: str
    base: Callable[[dict], str]


def _sequence_base(row: dict) -> str:
    return (
        f"{EAGER_LOOP}, {NO_INPUT_GRAD}" if row["variant"].endswith(NO_INPUT_GRAD) else EAGER_LOOP
    )


_BY_CALL = _Rule(("size", "phase"), "variant", lambda r: PLAIN)
#: Each section of the JSON and its rule: the ratios its table prints.
RULES = {
    "lltm": _Rule(("size", "dtype", "device", "phase"), "variant", lambda r: EAGER),
    "sequence": _Rule(("size", "steps", "dtype", "device"), "variant", _sequence_base),
    "conv_bn": _Rule(("batch",), "variant", lambda r: "Conv2d + BatchNorm2d"),
    "scalar": _Rule(("size", "dtype", "device", "phase"), "variant", lambda r: DENSE),
    "dispatch": _BY_CALL,
    "compiled": _BY_CALL,
    "batch": _BY_CALL,
    "peers": _BY_CALL,
    "recurrent": _Rule(
        ("kind", "size", "steps", "dtype", "device", "phase"), "layer", lambda r: "LSTM"
    ),
    "per_sample": _Rule(("size", "steps", "dtype", "device", "layer"), "method", lambda r: "loop"),
}


@dataclasses.dataclass(frozen=True)
class RatioRow:
    """One row's time ratio to its baseline row in one run, the ratio's relative spread,
    and whether either row was noisy (any cause) or stalled by the machine's load."""

    name: str
    ratio: float
    spread: float
    noisy: bool = False
    stalled: bool = False


def _field(name: str, value) -> str:
    if isinstance(value, (list, tuple)):
        return "/".join(map(str, value))
    return f"{_PREFIX.get(name, '')}{value}"


_PREFIX = {"steps": "T=", "batch": "batch "}


def _spread(row: dict) -> float:
    """A row's relative spread: its IQR over its median, or its rounds' disagreement."""
    median = row.get("median_us") or 0.0
    iqr = (row.get("iqr_us") or 0.0) / median if median > 0 else 0.0
    return max(iqr, row.get("round_spread") or 0.0)


def ratio_rows(results: dict) -> dict[str, RatioRow]:
    """The ratios of every section of a run's JSON that :data:`RULES` knows, by name
    (``"<section> <case>: <variant> / <baseline variant>"``); rows without a time, and
    the baseline rows themselves, give none. Unknown sections are left out."""
    out = {}
    for section, rule in RULES.items():
        rows = [r for r in results.get(section) or [] if r.get("median_us")]
        index = {(tuple(_field(f, r.get(f)) for f in rule.case), r[rule.variant]): r for r in rows}
        for (case, variant), row in index.items():
            base_name = rule.base(row)
            base = index.get((case, base_name))
            if variant == base_name or base is None:
                continue
            name = f"{section} {' '.join(c for c in case if c not in ('None', 'cpu'))}: "
            name += f"{variant} / {base_name}"
            out[name] = RatioRow(
                name,
                row["median_us"] / base["median_us"],
                math.hypot(_spread(row), _spread(base)),
                bool(row.get("noisy") or base.get("noisy")),
                bool(row.get("stalled") or base.get("stalled")),
            )
    return out


@dataclasses.dataclass(frozen=True)
class Change:
    """One ratio in both runs (None on the side that lacks it)."""

    name: str
    before: RatioRow | None
    now: RatioRow | None

    @property
    def change(self) -> float | None:
        """Today's ratio over the baseline's (above 1: the row lost ground)."""
        if self.before is None or self.now is None:
            return None
        return self.now.ratio / self.before.ratio

    @property
    def tolerance(self) -> float | None:
        """How far the ratio may move within the noise: both runs' spreads combined, and
        at least MIN_MOVE."""
        if self.before is None or self.now is None:
            return None
        return max(MIN_MOVE, math.hypot(self.before.spread, self.now.spread))

    @property
    def uncertain(self) -> bool:
        """Whether either run measured a row of this ratio noisy or stalled."""
        return any(r is not None and (r.noisy or r.stalled) for r in (self.before, self.now))

    @property
    def verdict(self) -> str:
        """ "slower", "faster" or "within noise" (with "?" where uncertain), or which run
        alone has the row."""
        if self.before is None:
            return "only today"
        if self.now is None:
            return "only in the baseline"
        moved = abs(math.log(self.change)) > math.log1p(self.tolerance)
        word = ("slower" if self.change > 1 else "faster") if moved else "within noise"
        return word + ("?" if self.uncertain else "")


def compare(baseline: dict, today: dict) -> list[Change]:
    """Every ratio of either run's JSON, in the baseline's order, then today's new ones."""
    before, now = ratio_rows(baseline), ratio_rows(today)
    names = list(before) + [n for n in now if n not in before]
    return [Change(n, before.get(n), now.get(n)) for n in names]


def _ratio(row: RatioRow | None) -> str:
    if row is None:
        return "-"
    return f"{row.ratio:.3g}x" + ("?" if row.noisy or row.stalled else "")


def format_comparison(changes: Iterable[Change], baseline: dict, today: dict) -> str:
    """The comparison as a table, one line per ratio, with the notes that say how to read
    it and a count of each verdict. A section that only one run measured is one line
    (its ratios counted), not a line per ratio."""
    changes = list(changes)
    sections = {
        side: {c.name.split(" ", 1)[0] for c in changes if getattr(c, side)}
        for side in ("before", "now")
    }
    alone = {s: "not measured today" for s in sections["before"] - sections["now"]}
    alone |= {s: "not in the baseline" for s in sections["now"] - sections["before"]}
    shown = [c for c in changes if c.name.split(" ", 1)[0] not in alone]
    width = max([len(c.name) for c in shown] + [10])
    lines = [f"baseline: {_recorded(baseline)}", f"today:    {_recorded(today)}"]
    if baseline.get("machine") != today.get("machine"):
        lines.append("(another machine: the ratios compare only roughly)")
    lines.append(
        f"{'ratio':<{width}} {'baseline':>10} {'today':>10} {'change':>8} {'noise':>7}  verdict"
    )
    counts: dict[str, int] = {}
    for c in changes:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    for c in shown:
        change = "" if c.change is None else _change(c.change)
        noise = "" if c.tolerance is None else f"±{c.tolerance:.0%}"
        lines.append(
            f"{c.name:<{width}} {_ratio(c.before):>10} {_ratio(c.now):>10} {change:>8} "
            f"{noise:>7}  {c.verdict}"
        )
    for section, why in sorted(alone.items()):
        n = sum(c.name.split(" ", 1)[0] == section for c in changes)
        lines.append(f"{section}: {why} ({n} ratio{'s' * (n != 1)})")
    lines.append("; ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no ratios")
    lines.append(
        "ratio: the row's median over its table's baseline row in the same case; change: "
        "today's ratio over the baseline's; noise: both runs' spreads combined (each ratio's "
        "rows' IQR over the median, or their rounds' disagreement where larger), at least "
        f"{MIN_MOVE:.0%}: a change beyond it is 'slower' or 'faster'; ?: a row of the ratio "
        "was noisy, or stalled by the machine's load, in either run: the verdict is uncertain"
    )
    return "\n".join(lines)


def _change(change: float) -> str:
    return f"{change - 1:+.1%}" if 0.5 <= change <= 2 else f"{change:.3g}x"


def _recorded(results: dict) -> str:
    recorded = results.get("recorded") or {}
    when = recorded.get("date", "date not recorded")
    return f"{results.get('machine', 'machine not recorded')}, {when}"


def load_results(path: str) -> dict:
    """A saved run's JSON; ValueError naming the file where it is not one."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--compare: cannot read {path!r}: {exc}") from None
    if not isinstance(data, dict) or not any(isinstance(data.get(s), list) for s in RULES):
        raise ValueError(
            f"--compare: {path!r} holds no benchmark rows (expected the JSON of "
            "python -m tensortools.bench --json, with sections such as 'lltm' or 'dispatch')"
        )
    return data
