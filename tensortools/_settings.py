"""A context manager for the process-wide switches of tensortools' types."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator


@contextlib.contextmanager
def temporarily(setter: Callable[[Any], Any], value: Any) -> Iterator[None]:
    """Call ``setter(value)``, which returns the previous value, and restore that value
    when the block ends."""
    previous = setter(value)
    try:
        yield
    finally:
        setter(previous)
