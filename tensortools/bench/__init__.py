"""Benchmarks of tensortools against plain PyTorch, timed with torch.utils.benchmark.

``python -m tensortools.bench`` runs them and prints a table; :func:`lltm_rows` is the
library form the demo uses. Modules: ``timing`` (the shared utilities) and ``load`` (whether
the machine's load stalled a measurement), one per benchmark (``lltm``, ``lltm_sequence``,
``conv_bn``, ``dispatch``, ``scalar``, ``peers``, ``recurrent``, ``per_sample``,
``bandwidth``), ``plot``, ``options`` (the command line) and ``compare`` (a run against a
saved baseline: ``--compare``).
Numbers are medians over many runs after warm-up; they are measurements of this machine,
never assertions.
"""

from tensortools.bench.conv_bn import ConvBNRow, conv_bn_rows, format_conv_bn_table
from tensortools.bench.dispatch import compiled_chain_rows, dispatch_rows, format_dispatch_table
from tensortools.bench.lltm import LLTM_SIZES, PHASES, format_table, lltm_rows, lltm_verdict
from tensortools.bench.lltm_sequence import (
    SEQUENCE_SIZES,
    SEQUENCE_STEPS,
    SequenceRow,
    format_sequence_table,
    sequence_rows,
)
from tensortools.bench.profiling import kernel_count, quiet_profiler
from tensortools.bench.timing import Row, machine_summary

__all__ = [
    "LLTM_SIZES",
    "PHASES",
    "Row",
    "machine_summary",
    "quiet_profiler",
    "kernel_count",
    "lltm_rows",
    "format_table",
    "lltm_verdict",
    "SEQUENCE_SIZES",
    "SEQUENCE_STEPS",
    "SequenceRow",
    "sequence_rows",
    "format_sequence_table",
    "compiled_chain_rows",
    "dispatch_rows",
    "format_dispatch_table",
    "ConvBNRow",
    "conv_bn_rows",
    "format_conv_bn_table",
]
