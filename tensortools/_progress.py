"""A progress bar for the long runs (the coverage report, check_type, the demo and the
benchmarks): tqdm on stderr, or nothing where tqdm is missing or progress is off."""

from __future__ import annotations

import sys


class Progress:
    """A tqdm bar of `total` steps (None: a count of unknown end) on stderr, drawn only
    once the run has taken `delay` seconds (a short run shows none), or nothing where tqdm
    is missing or `enabled` is false. Redrawn in place on a terminal; in a log, every ten
    seconds."""

    def __init__(
        self, total: int | None, desc: str, enabled: bool, *, unit: str = "it", delay: float = 0.0
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

    @classmethod
    def on_terminal(cls, total: int | None, desc: str, *, unit: str = "it", delay: float = 2.0):
        """A bar drawn only where stderr is a terminal: the runs whose output is a table
        (the demo, the benchmarks) stay silent in a pipe or a log."""
        return cls(total, desc, sys.stderr.isatty(), unit=unit, delay=delay)

    def step(self, desc: str | None = None) -> None:
        """One step done; `desc`, when given, names the next one."""
        if self.bar is not None:
            if desc is not None:
                self.bar.set_description_str(desc, refresh=False)
            self.bar.update()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
