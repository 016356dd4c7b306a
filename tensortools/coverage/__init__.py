"""Override coverage: how a type built on :mod:`tensortools.dispatch` answers the
overridable PyTorch API.

:func:`report` classifies every function of ``torch.overrides.get_overridable_functions()``
(less ``get_ignored_functions()``) for a type: answered by a table entry (``handled``),
by the fallback (``fallback``), or refused with a ``TypeError`` (``refused``). Where
PyTorch's operator database (``op_db``, the sample inputs PyTorch tests itself with; it
needs the ``expecttest`` package) has samples for a function, and the type says how it
stands in for a sample (its :class:`~tensortools.coverage.spec.TypeSpec`, registered
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

import importlib
import sys
import types
from typing import Any

# Each public name and the module that defines it. They are imported on first use: the
# types register their specs (spec.py) when tensortools is imported, and that must not
# import the report and the command too.
_SOURCES = {
    "FunctionCoverage": "report",
    "CoverageReport": "report",
    "SampleResult": "samples",
    "overridable_functions": "classify",
    "report": "report",
    "sample_cases": "samples",
    "check_sample": "samples",
    "main": "cli",
    "resolve_type": "cli",
    "outcome": "classify",
    "OUTCOMES": "classify",
    "SAMPLE_RESULTS": "samples",
    "CoverageSpec": "spec",
    "TypeSpec": "spec",
    "register": "spec",
    "spec_for": "spec",
}

__all__ = list(_SOURCES)


def __getattr__(name: str) -> Any:
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_SOURCES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SOURCES))


class _Package(types.ModuleType):
    # The import system sets each submodule as an attribute of this package when it is
    # first imported; `report` is the function here (as `from ... import report` has always
    # given), never the module of the same name, whichever is imported first.
    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _SOURCES.get(name) == name:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
