"""Progress bars (tensortools._progress): drawn on a terminal, silent in a pipe.

The demo and the benchmarks print tables on stdout and a bar on stderr only where stderr is
a terminal (a pty here); a pipe or a log gets the tables alone."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios

import pytest

pytest.importorskip("tqdm", reason="the progress bars are tqdm's")

# Three steps of a bar made as the demo and the benchmarks make theirs, named as they go.
# (A pause longer than the bar's redraw interval on a terminal between steps.)
_RUN = """
import time
from tensortools._progress import Progress
bar = Progress.on_terminal(3, "first-step", unit="step", delay=0)
for name in ("second-step", "third-step", None):
    time.sleep(0.15)
    bar.step(name)
bar.close()
"""


def _stderr_of(code: str, *, terminal: bool) -> str:
    """What the child writes to stderr, with stderr a pty or a pipe."""
    if not terminal:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()
        return done.stderr.decode()
    parent, child = pty.openpty()
    # A terminal of 24 rows and 100 columns, as a user's is (a new pty has 0 columns).
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        proc = subprocess.Popen([sys.executable, "-c", code], stderr=child)
        os.close(child)
        chunks = []
        while True:
            ready, _, _ = select.select([parent], [], [], 120)
            if not ready:
                break
            try:
                data = os.read(parent, 4096)
            except OSError:  # the child closed its end
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=120) == 0
        return b"".join(chunks).decode(errors="replace")
    finally:
        os.close(parent)


def test_a_bar_is_drawn_on_a_terminal_with_each_steps_name():
    text = _stderr_of(_RUN, terminal=True)
    assert "first-step" in text and "second-step" in text and "third-step" in text
    assert "3/3" in text


def test_nothing_is_written_to_a_pipe():
    assert _stderr_of(_RUN, terminal=False) == ""


def test_the_demo_draws_its_bar_only_on_a_terminal(monkeypatch, capsys):
    """The demo asks for its bar through on_terminal: with stderr not a terminal it makes
    none (the whole demo on a pty is the clean room's and a user's run, too slow here)."""
    from tensortools import _progress, demo

    made = []
    real = _progress.Progress.on_terminal.__func__

    def spy(cls, *args, **kwargs):
        bar = real(cls, *args, **kwargs)
        made.append(bar)
        return bar

    monkeypatch.setattr(demo.Progress, "on_terminal", classmethod(spy))
    monkeypatch.setattr(demo, "lltm_timings", lambda quick, progress: None)
    monkeypatch.setattr(demo, "coverage_counts", lambda: None)
    assert demo.main([]) == 0
    assert len(made) == 1 and made[0].bar is None  # pytest's stderr is no terminal
    assert "tqdm" not in capsys.readouterr().err


@pytest.mark.slow
def test_the_bench_names_each_case_on_a_terminal_and_is_silent_in_a_pipe():
    """`python -m tensortools.bench` on one tiny section: its stderr on a terminal holds
    the bar with the case being timed; in a pipe it is empty (the tables go to stdout)."""
    code = (
        "import sys; from tensortools.bench.__main__ import main; sys.exit(main(["
        "'--size', '2/3/4', '--no-compile', '--no-sequence', '--no-conv-bn', '--no-scalar',"
        "'--no-dispatch', '--no-batch', '--no-recurrent', '--min-run-time', '0.01',"
        "'--rounds', '1']))"
    )
    assert "timing" in _stderr_of(code, terminal=True)
    assert _stderr_of(code, terminal=False) == ""
