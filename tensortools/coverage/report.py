"""The coverage report of a type: per function, its outcome and its samples' results,
and the report's formats (text, markdown, JSON)."""

from __future__ import annotations

import dataclasses
import json
import sys
import warnings
from collections.abc import Callable, Iterable

from tensortools.coverage.classify import OUTCOMES, outcome, overridable_functions
from tensortools.coverage.samples import SAMPLE_RESULTS, SampleResult, check_sample, sample_cases
from tensortools.dispatch import TorchFunctionTable

__all__ = ["FunctionCoverage", "CoverageReport", "report"]


@dataclasses.dataclass
class FunctionCoverage:
    """How a type answers one function, and what its op_db samples gave."""

    name: str
    outcome: str
    samples: dict[str, int] = dataclasses.field(default_factory=dict)
    # False for op_db entries that are not themselves overridable functions (lambdas
    # around a method, say): their samples count, they do not count as functions.
    overridable: bool = True
    reason: str = ""  # why the first sample that was not correct was not

    @property
    def failed(self) -> bool:
        """Whether a sample was not answered correctly (wrong, refused or an error)."""
        return any(self.samples.get(r) for r in ("wrong", "refused", "error"))


@dataclasses.dataclass
class CoverageReport:
    type_name: str
    functions: list[FunctionCoverage]
    note: str = ""  # why samples were not run, if they were asked for and not run

    def counts(self) -> dict[str, int]:
        """Functions per outcome, and samples per result."""
        counts = {o: 0 for o in OUTCOMES}
        for f in self.functions:
            if f.overridable:
                counts[f.outcome] += 1
        for r in SAMPLE_RESULTS:
            counts[f"samples {r}"] = sum(f.samples.get(r, 0) for f in self.functions)
        return counts

    def failures(self) -> list[FunctionCoverage]:
        return [f for f in self.functions if f.failed]

    def to_json(self) -> str:
        return json.dumps(
            {
                "type": self.type_name,
                "counts": self.counts(),
                "functions": [dataclasses.asdict(f) for f in self.functions],
            },
            indent=1,
        )

    def to_text(self, only_failures: bool = False) -> str:
        rows = self.failures() if only_failures else self.functions
        lines = [f"{'function':<56} {'outcome':<9} samples (correct/wrong/refused/error)"]
        for f in rows:
            s = "/".join(str(f.samples.get(r, 0)) for r in SAMPLE_RESULTS) if f.samples else "-"
            lines.append(f"{f.name:<56} {f.outcome:<9} {s}" + (f"  {f.reason}" if f.reason else ""))
        lines.append("")
        lines.append(
            f"{self.type_name}: " + ", ".join(f"{k} {v}" for k, v in self.counts().items())
        )
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    def to_markdown(self, only_failures: bool = True) -> str:
        c = self.counts()
        run = sum(c[f"samples {r}"] for r in SAMPLE_RESULTS)
        lines = [
            f"## {self.type_name}",
            "",
            f"Functions: {c['handled']} handled by a table entry, {c['fallback']} served "
            f"by the fallback, {c['refused']} refused with a TypeError.",
            "",
            f"op_db samples: {run} run, {c['samples correct']} correct, "
            f"{c['samples wrong']} wrong, {c['samples refused']} refused with a "
            f"TypeError, {c['samples error']} other errors.",
            "",
        ]
        rows = self.failures() if only_failures else self.functions
        if rows:
            lines += [
                "Samples not answered correctly:",
                "",
                "| function | outcome | wrong / refused / error | reason |",
                "| --- | --- | --- | --- |",
            ]
            for f in rows:
                reason = f.reason.replace("|", "\\|").replace("\n", " ")
                lines.append(
                    f"| `{f.name}` | {f.outcome} | {f.samples.get('wrong', 0)} / "
                    f"{f.samples.get('refused', 0)} / {f.samples.get('error', 0)} "
                    f"| {reason} |"
                )
        else:
            lines.append("Every sample was answered correctly.")
        return "\n".join(lines)


def _progress(items: Iterable, total: int | None, desc: str, enabled: bool) -> Iterable:
    if not enabled:
        return items
    try:
        from tqdm import tqdm
    except ImportError:  # progress bars are a nicety; the report does not need them
        return items
    return tqdm(items, total=total, desc=desc, file=sys.stderr, leave=False)


def report(
    cls: type, *, samples: bool = True, max_samples: int = 2, progress: bool = False
) -> CoverageReport:
    """Classify every overridable function for `cls` (a type built on
    tensortools.dispatch) and, where op_db has samples and the type says how it stands in
    for them (its coverage_substitute), check each sample's answer."""
    if not (isinstance(cls, type) and issubclass(cls, TorchFunctionTable)):
        raise TypeError(
            "coverage.report: 'cls' must be a type built on "
            f"tensortools.dispatch.TorchFunctionTable, got {cls!r}"
        )
    entries: dict[Callable, FunctionCoverage] = {}
    for name, func in overridable_functions():
        entries[func] = FunctionCoverage(name, outcome(cls, func))
    note = ""
    if samples:
        try:
            import expecttest  # noqa: F401  (op_db imports it)
        except ImportError:
            note = "op_db samples not run: they need the expecttest package"
            samples = False
    if samples:
        with warnings.catch_warnings():
            # The ops' own deprecation and beta warnings, once per sample otherwise.
            warnings.simplefilter("ignore")
            cases = list(sample_cases(max_samples))
            for opname, op, inp, args, kwargs in _progress(
                cases, len(cases), cls.__name__, progress
            ):
                _record(entries, cls, op, opname, check_sample(cls, op, inp, args, kwargs, opname))
    return CoverageReport(cls.__name__, sorted(entries.values(), key=lambda e: e.name), note)


def _record(
    entries: dict, cls: type, op: Callable, opname: str, result: SampleResult | None
) -> None:
    if result is None:
        return
    entry = entries.get(op)
    if entry is None:  # an op_db entry outside the overridable list (often a lambda)
        entry = entries[op] = FunctionCoverage(
            f"op_db {opname}", outcome(cls, op), overridable=False
        )
    entry.samples[result.result] = entry.samples.get(result.result, 0) + 1
    if result.result != "correct" and not entry.reason:
        entry.reason = result.reason
