"""The checks of the modules' constructor arguments: errors that name the module and the
argument."""

from __future__ import annotations

__all__ = ["positive_int", "positive_pair"]


def positive_int(module: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{module}: '{name}' must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{module}: '{name}' must be positive, got {value}")
    return value


def positive_pair(module: str, name: str, value: object, minimum: int = 1) -> tuple[int, int]:
    values = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(values) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise TypeError(f"{module}: '{name}' must be an int or a pair of ints, got {value!r}")
    if min(values) < minimum:
        raise ValueError(f"{module}: '{name}' must be >= {minimum}, got {value!r}")
    return values
