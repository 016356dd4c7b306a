"""Override coverage: how a type built on :mod:`tensortools.dispatch` answers the
overridable PyTorch API.

:func:`report` classifies every function of ``torch.overrides.get_overridable_functions()``
(less ``get_ignored_functions()``) for a type: answered by a table entry (``handled``),
by the fallback (``fallback``), or refused with a ``TypeError`` (``refused``). Where
PyTorch's operator database (``op_db``, the sample inputs PyTorch tests itself with; it
needs the ``expecttest`` package) has samples for a function, and the type says how it
stands in for a sample (its :class:`~tensortools.coverage.spec.CoverageSpec`, registered
with :func:`~tensortools.coverage.spec.register`),
each sample is also run through the type and compared with the plain computation:
``correct``, ``wrong`` (a value, dtype or shape differs, or a result breaks the type's
rules), ``refused`` (a clear ``TypeError``) or ``error`` (any other exception).

``python -m tensortools.coverage ScalarTensor`` prints the table and the counts (also
``MetadataTensor``, ``LoggingTensor``, or a type by dotted path, ``pkg.module.Type``).

Modules: ``spec`` (what each type registers: how it stands in for a sample, how its
results are judged, what its outcomes mean), ``classify`` (the functions and their
outcomes), ``samples`` (running op_db samples through a type), ``report`` (the report and
its formats), ``cli`` (the command).
"""

from tensortools.coverage.classify import OUTCOMES, outcome, overridable_functions
from tensortools.coverage.cli import main, resolve_type
from tensortools.coverage.report import CoverageReport, FunctionCoverage, report
from tensortools.coverage.samples import SAMPLE_RESULTS, SampleResult, check_sample, sample_cases
from tensortools.coverage.spec import CoverageSpec, register, spec_for

__all__ = [
    "FunctionCoverage",
    "CoverageReport",
    "SampleResult",
    "overridable_functions",
    "report",
    "sample_cases",
    "check_sample",
    "main",
    "resolve_type",
    "outcome",
    "OUTCOMES",
    "SAMPLE_RESULTS",
    "CoverageSpec",
    "register",
    "spec_for",
]
