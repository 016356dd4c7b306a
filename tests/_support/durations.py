"""What the `slow` marker means, kept honest: `.ci/durations.json` holds each test's time
from a whole run (`--update-durations`, or TENSORTOOLS_UPDATE_DURATIONS=1, rewrites it),
and every run lists the tests over `SLOW_S` seconds, by that file or by this run, that are
not marked `slow`, so the quick subset (`-m "not slow"`) stays quick. It is information in
the output, never an assertion: a test fails only where the code is wrong, not where the
machine is busy. (The file lies outside tests/ so that refreshing it keeps the sample's
seed: tiers.py.)"""

from __future__ import annotations

import json
from pathlib import Path

FILE = Path(__file__).resolve().parents[2] / ".ci" / "durations.json"
SLOW_S = 3.0


def kept() -> dict[str, float]:
    try:
        return json.loads(FILE.read_text())
    except (OSError, ValueError):
        return {}


def write(times: dict[str, float]) -> None:
    """The kept file with this run's times (those over a second: the rest cannot come
    near SLOW_S, and a small file reads well in a diff)."""
    merged = kept() | {k: round(v, 1) for k, v in times.items()}
    merged = {k: v for k, v in merged.items() if v >= 1.0}
    FILE.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")


def unmarked_slow(times: dict[str, float], marked: dict[str, bool]) -> list[tuple[str, float]]:
    """(test, seconds) of the tests run now that take over SLOW_S (now, or by the kept file)
    without the `slow` marker, slowest first."""
    known = kept()
    found = {}
    for nodeid, is_slow in marked.items():
        seconds = max(times.get(nodeid, 0.0), known.get(nodeid, 0.0))
        if seconds > SLOW_S and not is_slow:
            found[nodeid] = seconds
    return sorted(found.items(), key=lambda item: -item[1])
