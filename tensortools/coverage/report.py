"""The coverage report of a type: per function, its outcome and its samples' results,
and the report's formats (text, markdown, JSON)."""

from __future__ import annotations

import dataclasses
import json
import textwrap
import warnings
from collections.abc import Callable, Iterable

from tensortools._progress import Progress
from tensortools.coverage.classify import OUTCOMES, outcome, overridable_functions
from tensortools.coverage.samples import (
    SAMPLE_RESULTS,
    SampleResult,
    check_sample,
    op_db_size,
    sample_cases,
)
from tensortools.coverage.spec import spec_for
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
    #: per result other than "correct": why the first sample with that result had it
    reasons: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """Whether a sample was not answered correctly (wrong, refused or an error)."""
        return any(self.samples.get(r) for r in _FAILED)

    @property
    def worst(self) -> str:
        """The most serious result among the samples ("error", then "wrong", "refused";
        "correct" if nothing failed; "" without samples)."""
        return next((r for r in _FAILED if self.samples.get(r)), "correct" if self.samples else "")

    @property
    def reason(self) -> str:
        """Why the first sample with the most serious result had it ('' if none failed)."""
        return self.reasons.get(self.worst, "")


#: What each sample result means, for the reports.
_SAMPLE_MEANS = {
    "correct": "the plain call's answer",
    "wrong": "another answer, or one that breaks the type's rules",
    "refused": "a TypeError",
    "error": "another exception",
}
#: "wrong" for a type that registered no rule for its results.
_WRONG_WITHOUT_RULE = "another value, dtype or shape (no rule judges the results)"


@dataclasses.dataclass
class CoverageReport:
    type_name: str
    functions: list[FunctionCoverage]
    note: str = ""  # why samples were not run, if they were asked for and not run
    #: what each outcome means for this type (see TypeSpec.handled_means)
    means: dict[str, str] = dataclasses.field(default_factory=dict)
    max_samples: int = 0  # op_db samples per operator (0: none run)
    #: whether the type registered a rule for its results (TypeSpec.rule):
    #: without one, samples are judged by their values alone
    rule: bool = True

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

    def failure_groups(self) -> list[tuple[str, str, list[FunctionCoverage]]]:
        """(result, reason, functions) for the samples not answered correctly: functions
        whose first such sample failed alike share a group; errors and wrong answers
        first."""
        groups: dict[tuple[str, str], list[FunctionCoverage]] = {}
        for f in self.failures():
            groups.setdefault((f.worst, f.reason), []).append(f)
        return [
            (result, reason, fs)
            for (result, reason), fs in sorted(
                groups.items(), key=lambda kv: _FAILED.index(kv[0][0])
            )
        ]

    def summary(self) -> list[str]:
        """The counts, each with what it means for this type: the report's first lines."""
        c = self.counts()
        total = sum(c[o] for o in OUTCOMES)
        lines = [
            f"{self.type_name}: {total} overridable functions (torch.overrides, tensortools.ops)"
        ]
        lines += [f"  {c[o]:>5} {o:<9} {self.means.get(o, '')}".rstrip() for o in OUTCOMES]
        run = sum(c[f"samples {r}"] for r in SAMPLE_RESULTS)
        if self.note:
            lines.append(self.note)
        elif self.max_samples:
            lines.append(
                f"op_db samples (up to {self.max_samples} per operator, float32, CPU) that a "
                f"{self.type_name} can stand in for: {run} run"
            )
            means = _SAMPLE_MEANS if self.rule else {**_SAMPLE_MEANS, "wrong": _WRONG_WITHOUT_RULE}
            lines += [f"  {c[f'samples {r}']:>5} {r:<9} {means[r]}" for r in SAMPLE_RESULTS]
            if not self.rule:
                lines.append(self.no_rule())
        return lines

    def no_rule(self) -> str:
        """What the counts leave out for a type that registered no rule for its results."""
        return (
            f"No rule registered for {self.type_name}'s results "
            "(tensortools.coverage.spec.register(..., rule=...)): only values, "
            "dtypes and shapes were compared; a result that loses the type or its state "
            "counts as correct here (tensortools.testing.check_type judges that)."
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "type": self.type_name,
                "counts": self.counts(),
                "means": self.means,
                "max_samples": self.max_samples,
                "note": self.note,
                "rule": self.rule,
                "functions": [dataclasses.asdict(f) for f in self.functions],
            },
            indent=1,
        )

    def to_text(self, full: bool = False) -> str:
        """The summary, then the samples not answered correctly grouped by reason; with
        `full`, every function too, grouped by outcome."""
        lines = self.summary()
        groups = self.failure_groups()
        if groups:
            rows = sum(len(fs) for _, _, fs in groups)
            samples = sum(f.samples.get(r, 0) for _, _, fs in groups for f in fs for r in _FAILED)
            lines += [
                "",
                f"Not answered correctly: {_plural(samples, 'sample')} in {_plural(rows, 'row')} "
                "(functions or op_db entries), by reason:",
            ]
            for result, reason, fs in groups:
                lines += textwrap.wrap(
                    f"{result}: {reason}", width=92, initial_indent="  ", subsequent_indent="    "
                )
                lines += textwrap.wrap(
                    ", ".join(f.name for f in fs),
                    width=92,
                    initial_indent="      ",
                    subsequent_indent="      ",
                )
        elif self.max_samples and not self.note:
            ran = sum(f.samples.get(r, 0) for f in self.functions for r in SAMPLE_RESULTS)
            lines += [
                "",
                "Every sample was answered correctly."
                if ran
                else f"No op_db sample ran: {self.type_name} stands in for none of them "
                "(see tensortools.coverage.spec.TypeSpec.substitute).",
            ]
        if full:
            header = f"  {'function':<60} samples correct/wrong/refused/error"
            for o in OUTCOMES:
                rows = [f for f in self.functions if f.outcome == o and f.overridable]
                if rows:
                    lines += ["", f"{o} ({len(rows)}): {self.means.get(o, '')}", header]
                    lines += [_text_row(f) for f in rows]
            extra = [f for f in self.functions if not f.overridable]
            if extra:
                lines += ["", "op_db entries that are not overridable functions themselves:"]
                lines += [header] + [_text_row(f) for f in extra]
        else:
            lines += ["", "every function and its samples: --all"]
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """The summary and the samples not answered correctly, as a markdown section."""
        c = self.counts()
        run = sum(c[f"samples {r}"] for r in SAMPLE_RESULTS)
        lines = [
            f"## {self.type_name}",
            "",
            "| functions | | what it means here |",
            "| ---: | --- | --- |",
        ]
        lines += [f"| {c[o]} | {o} | {self.means.get(o, '')} |" for o in OUTCOMES]
        lines += [
            "",
            f"op_db samples: {run} run, {c['samples correct']} correct, "
            f"{c['samples wrong']} wrong, {c['samples refused']} refused with a "
            f"TypeError, {c['samples error']} other errors.",
            "",
        ]
        if run and not self.rule:
            lines += [self.no_rule(), ""]
        groups = self.failure_groups()
        if not groups:
            lines.append("Every sample was answered correctly." if run else "No op_db sample ran.")
            return "\n".join(lines)
        lines += [
            "Samples not answered correctly, by reason:",
            "",
            "| result | reason | functions |",
            "| --- | --- | --- |",
        ]
        for result, reason, fs in groups:
            reason = reason.replace("|", "\\|").replace("\n", " ")
            names = ", ".join(f"`{f.name}`" for f in fs)
            lines.append(f"| {result} | {reason} | {names} |")
        return "\n".join(lines)


_FAILED = ("error", "wrong", "refused")  # most serious first


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _text_row(f: FunctionCoverage) -> str:
    s = "/".join(str(f.samples.get(r, 0)) for r in SAMPLE_RESULTS) if f.samples else "-"
    why = "; ".join(f"{r}: {f.reasons[r]}" for r in _FAILED if r in f.reasons)
    return f"  {f.name:<60} {s}" + (f"  {why}" if why else "")


def _means(cls: type) -> dict[str, str]:
    if cls.refuses_unhandled():
        why = "the policy is 'strict'" if cls.policy == "strict" else "the type has no fallback"
        refused = f"a TypeError without trying: {why}"
    else:
        refused = "a TypeError without trying (none under the 'fallback' policy)"
    spec = spec_for(cls)
    return {"handled": spec.handled_means, "fallback": spec.fallback_means, "refused": refused}


def report(
    cls: type,
    *,
    samples: bool = True,
    max_samples: int = 2,
    progress: bool = False,
    ops: Iterable[str] | None = None,
) -> CoverageReport:
    """Classify every overridable function for `cls` (a type built on
    tensortools.dispatch) and, where op_db has samples and the type says how it stands in
    for them (its TypeSpec.substitute), check each sample's answer: of every op_db
    entry, or of the entries named in `ops`."""
    if not (isinstance(cls, type) and issubclass(cls, TorchFunctionTable)):
        raise TypeError(
            "coverage.report: 'cls' must be a type built on "
            f"tensortools.dispatch.TorchFunctionTable, got {cls!r}"
        )
    # keyed by function; op_db entries that are not overridable functions, by their name
    entries: dict[Callable | str, FunctionCoverage] = {}
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
            ops = None if ops is None else list(ops)
            bar = Progress(op_db_size(ops), f"{cls.__name__}: op_db", progress, unit="op")
            try:
                cases = sample_cases(max_samples, on_entry=bar.step, ops=ops)
                for opname, op, inp, args, kwargs in cases:
                    result = check_sample(cls, op, inp, args, kwargs, opname)
                    _record(entries, cls, op, opname, result)
            finally:
                bar.close()
    return CoverageReport(
        cls.__name__,
        sorted(entries.values(), key=lambda e: e.name),
        note,
        _means(cls),
        max_samples if samples else 0,
        spec_for(cls).rule is not None,
    )


def _record(
    entries: dict, cls: type, op: Callable, opname: str, result: SampleResult | None
) -> None:
    if result is None:
        return
    entry = entries.get(op)
    if entry is None:  # an op_db entry outside the overridable list (often a lambda)
        # (one row per name: op_db has several entries of one name, polygamma's five)
        entry = entries.get(f"op_db {opname}")
        if entry is None:
            entry = entries[f"op_db {opname}"] = FunctionCoverage(
                f"op_db {opname}", outcome(cls, op), overridable=False
            )
    entry.samples[result.result] = entry.samples.get(result.result, 0) + 1
    if result.result != "correct":
        entry.reasons.setdefault(result.result, result.reason)
