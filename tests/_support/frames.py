"""Which Python functions a call runs: the compiled paths' tests assert that a call never
enters the Python path."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def python_calls(run: Callable[[], Any], under: str = "tensortools") -> tuple[list[str], Any]:
    """The names of the Python functions in files whose path holds `under` that `run()`
    calls, and its result."""
    names: list[str] = []

    def profile(frame, event, arg):
        if event == "call" and under in frame.f_code.co_filename:
            names.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        result = run()
    finally:
        sys.setprofile(None)
    return names, result
