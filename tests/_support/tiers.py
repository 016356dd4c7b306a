"""The suite's two tiers. The default (CI's, the README's test command) runs every test
module with each exhaustive sweep cut to a seeded sample; the full tier (`--full`, or
TENSORTOOLS_FULL=1: `bash scripts/run.sh test --full`) runs every sweep whole and the
tests marked `full`.

The sample's seed comes from the code checked out (the git trees of tensortools/, csrc/
and tests/: the same code always tests the same sample, a commit that changes only docs
keeps it, and CI tests what its author ran), or `--seed N` to replay or vary it; pytest's
header prints it.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_state = {"full": os.environ.get("TENSORTOOLS_FULL") == "1", "seed": None}


def configure(full: bool, seed: int | None) -> None:
    """Set by conftest from the command line, before collection."""
    _state["full"] = full or _state["full"]
    _state["seed"] = seed


def full() -> bool:
    """Whether this run is the full tier."""
    return bool(_state["full"])


def seed() -> int:
    """The sample's seed: --seed, else from the code checked out, else 0."""
    if _state["seed"] is None:
        _state["seed"] = _code_seed()
    return int(_state["seed"])


def _code_seed() -> int:
    try:
        trees = subprocess.run(
            ["git", "rev-parse", "HEAD:tensortools", "HEAD:csrc", "HEAD:tests"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.split()
        return int(hashlib.sha1(" ".join(trees).encode()).hexdigest()[:8], 16) if trees else 0
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def sample(items: Sequence[T], k: int, key: str) -> list[T]:
    """All of `items` in the full tier; else `k` of them drawn with the run's seed (and
    `key`, so two sweeps draw independently), in their original order."""
    items = list(items)
    if full() or k >= len(items):
        return items
    picked = set(random.Random(f"{seed()}:{key}").sample(range(len(items)), k))
    return [item for i, item in enumerate(items) if i in picked]


def op_db_names(fraction: int = 5) -> list[str]:
    """op_db's function names, sorted: every one in the full tier; by default a seeded
    1/`fraction` of them. Every op_db sweep of the suite takes its functions from this
    one draw (a smaller fraction is the start of a larger one), so the samples op_db
    generates for a function, the costly part of a walk, are generated once per process
    and shared (tensortools.coverage.samples.op_db_samples)."""
    from tensortools.coverage.samples import op_db

    names = sorted({info.name for info in op_db()})
    if full():
        return names
    order = list(range(len(names)))
    random.Random(f"{seed()}:op_db").shuffle(order)
    picked = set(order[: max(1, len(names) // fraction)])
    return [name for i, name in enumerate(names) if i in picked]


def describe() -> str:
    if full():
        return "tier: full (every sweep whole, tests marked full included)"
    return (
        f"tier: default, sweeps sampled with seed {seed()} (--seed N replays another; "
        "--full or TENSORTOOLS_FULL=1 runs every sweep whole)"
    )
