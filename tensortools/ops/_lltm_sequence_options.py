"""Which recurrence the LLTM sequence runs on CUDA: a process-wide setting of the compiled
kernels, set here and passed to C once per change (a call reads it without asking Python
or the environment).

``mode`` is ``"auto"`` (the persistent kernels where the state fits on chip, else the
per-step loop), ``"loop"`` (always the loop) or ``"persistent"`` (always the persistent
kernels: a RuntimeError saying why where they do not apply); ``max_blocks`` caps the
persistent kernels' grid (``None``: one block per multiprocessor, or per column of a
smaller state). Both exist for tests and benchmarks of the two paths; the CPU kernels have
one path and read neither. The environment variables ``TENSORTOOLS_LLTM_SEQUENCE`` (a
mode) and ``TENSORTOOLS_LLTM_SEQUENCE_BLOCKS`` (a cap) are read once, when tensortools is
imported; :func:`set_lltm_sequence_options` changes the setting after that.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple

from tensortools._native import C as _C

__all__ = [
    "LLTM_SEQUENCE_MODES",
    "LLTMSequenceOptions",
    "lltm_sequence_options",
    "set_lltm_sequence_options",
]

#: The values of ``mode``.
LLTM_SEQUENCE_MODES = ("auto", "loop", "persistent")

MODE_VARIABLE = "TENSORTOOLS_LLTM_SEQUENCE"
BLOCKS_VARIABLE = "TENSORTOOLS_LLTM_SEQUENCE_BLOCKS"


class LLTMSequenceOptions(NamedTuple):
    """The LLTM sequence's CUDA path: ``mode`` and ``max_blocks`` (None: no cap)."""

    mode: str = "auto"
    max_blocks: int | None = None


def _from_c(options: tuple[str, int]) -> LLTMSequenceOptions:
    mode, max_blocks = options
    return LLTMSequenceOptions(mode, max_blocks or None)


def lltm_sequence_options() -> LLTMSequenceOptions:
    """The options in force, as the CUDA kernels read them."""
    return _from_c(_C._lltm_sequence_options())


def set_lltm_sequence_options(
    *, mode: str = "auto", max_blocks: int | None = None
) -> LLTMSequenceOptions:
    """Set the LLTM sequence's CUDA path for every thread (both options: one left out
    returns to its default) and return the previous options, which
    ``set_lltm_sequence_options(**previous._asdict())`` restores."""
    if not isinstance(mode, str):
        raise TypeError(f"set_lltm_sequence_options: 'mode' must be a str, got {mode!r}")
    if mode not in LLTM_SEQUENCE_MODES:
        raise ValueError(
            f"set_lltm_sequence_options: 'mode' must be one of {LLTM_SEQUENCE_MODES}, got {mode!r}"
        )
    if max_blocks is not None and (isinstance(max_blocks, bool) or not isinstance(max_blocks, int)):
        raise TypeError(
            f"set_lltm_sequence_options: 'max_blocks' must be an int or None, got {max_blocks!r}"
        )
    if max_blocks is not None and not 1 <= max_blocks < 2**61:
        raise ValueError(
            f"set_lltm_sequence_options: 'max_blocks' must be >= 1 (None: no cap), "
            f"got {max_blocks!r}"
        )
    return _from_c(_C._set_lltm_sequence_options(mode, max_blocks or 0))


def options_from_environment(environ: Mapping[str, str] = os.environ) -> LLTMSequenceOptions:
    """The options that ``TENSORTOOLS_LLTM_SEQUENCE`` and ``TENSORTOOLS_LLTM_SEQUENCE_BLOCKS``
    give (unset or empty: the default); a ValueError naming the variable for any other
    value than a mode, or than a whole number >= 1."""
    mode = environ.get(MODE_VARIABLE, "").strip() or "auto"
    if mode not in LLTM_SEQUENCE_MODES:
        raise ValueError(
            f"{MODE_VARIABLE} must be auto, loop or persistent, not {environ[MODE_VARIABLE]!r}"
        )
    blocks = environ.get(BLOCKS_VARIABLE, "").strip()
    if not blocks:
        return LLTMSequenceOptions(mode)
    if not (blocks.isascii() and blocks.isdigit()) or not 1 <= int(blocks) < 2**61:
        raise ValueError(
            f"{BLOCKS_VARIABLE} must be a whole number >= 1, not {environ[BLOCKS_VARIABLE]!r}"
        )
    return LLTMSequenceOptions(mode, int(blocks))


set_lltm_sequence_options(**options_from_environment()._asdict())
