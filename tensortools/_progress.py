"""A progress bar for the long runs (the coverage report, check_type): tqdm on stderr, or
nothing where tqdm is missing or progress is off."""

from __future__ import annotations

import sys


class Progress:
    """A tqdm bar of `total` steps on stderr, drawn only once the run has taken `delay`
    seconds (a short run shows none), or nothing where tqdm is missing or `enabled` is
    false. Redrawn in place on a terminal; in a log, every ten seconds."""

    def __init__(
        self, total: int, desc: str, enabled: bool, *, unit: str = "it", delay: float = 0.0
    ) -> None:
        self.bar = None
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:  # progress bars are a nicety; the runs do not need them
            return
        interval = 0.1 if sys.stderr.isatty() else 10.0
        self.bar = tqdm(
            total=total,
            desc=desc,
            unit=unit,
            file=sys.stderr,
            leave=False,
            mininterval=interval,
            miniters=1,
            delay=delay,
        )

    def step(self) -> None:
        if self.bar is not None:
            self.bar.update()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
