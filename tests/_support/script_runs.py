"""Run one of the test scripts beside this file in a separate process (a crash must not
take pytest down) and check that it ended normally."""

import subprocess
import sys
from pathlib import Path


def run_script(name: str, timeout: int) -> list[str]:
    """The lines the script printed before its last one, "done"; fails the test where
    the process died (a negative status: killed by that signal) or stopped early."""
    script = Path(__file__).with_name(name)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=script.parent,
    )
    assert done.returncode == 0, (
        f"exit status {done.returncode} (negative: killed by that signal)\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    lines = done.stdout.splitlines()
    assert lines and lines[-1] == "done", done.stdout[-3000:]
    return lines[:-1]
