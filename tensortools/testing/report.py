"""What :func:`~tensortools.testing.check_type` found: one :class:`Failure` per thing that
went wrong, gathered in a :class:`TypeCheckReport`, raised as a :class:`TypeCheckError`;
failures of one cause are grouped (:meth:`TypeCheckReport.groups`)."""

from __future__ import annotations

import dataclasses
import re

__all__ = ["Failure", "FailureGroup", "TypeCheckError", "TypeCheckReport", "Unsupported"]


class Unsupported(Exception):
    """Raised by a type's ``make`` for a tensor it has no instance for (a dtype, a shape or
    a layout the type does not hold): the sample is declined, listed in the report's
    ``declined``, not failed. (``make`` returning None for every tensor a sample picks
    declines it alike.)"""


@dataclasses.dataclass
class Failure:
    """One thing that went wrong: which check, on which function and sample, and how."""

    check: str
    function: str
    sample: str
    reason: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.function} ({self.sample}): {self.reason}"


@dataclasses.dataclass
class FailureGroup:
    """Failures of one cause: the check and the reason with its particulars (numbers,
    shapes, dtypes, quoted values) masked, how many, the functions, and one in full."""

    check: str
    cause: str
    count: int
    functions: list[str]
    example: Failure

    def __str__(self) -> str:
        names = ", ".join(self.functions[:8]) + (", ..." if len(self.functions) > 8 else "")
        n = len(self.functions)
        return (
            f"[{self.check}] {self.cause}: {self.count} failure{'s' * (self.count != 1)} in "
            f"{n} function{'s' * (n != 1)} ({names})\n      e.g. {self.example}"
        )


# The particulars that make one cause's failures differ: quoted text, dtypes, shapes and
# numbers (in that order: a shape's numbers go with it).
_PARTICULARS = [
    (re.compile(r"'[^']*'|\"[^\"]*\""), "'…'"),
    (re.compile(r"torch\.\w+"), "torch.…"),
    (re.compile(r"\((?:\d+,? ?)*\)|\[(?:\d+,? ?)*\]"), "(…)"),
    (re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"), "N"),
]


def cause_of(reason: str) -> str:
    """A failure's reason with its particulars masked: failures of one cause share it."""
    cause = reason.splitlines()[0] if reason else ""
    for pattern, mask in _PARTICULARS:
        cause = pattern.sub(mask, cause)
    return cause[:160]


@dataclasses.dataclass
class TypeCheckReport:
    """What :func:`check_type` ran and found."""

    type_name: str
    checks: tuple[str, ...]
    functions: list[str]
    samples: int
    failures: list[Failure]
    seconds: float
    refused: list[Failure] = dataclasses.field(default_factory=list)
    #: samples the type's ``make`` declined (see :class:`Unsupported`)
    declined: list[Failure] = dataclasses.field(default_factory=list)
    #: compiled calls that fail for a bare ``torch.Tensor`` subclass as well under the same
    #: backend: torch's limits, not the type's, so not failures
    upstream: list[Failure] = dataclasses.field(default_factory=list)
    #: writes through a view (or into its base) that the other did not see, where the type
    #: says its views are copies (``views_copy=True``): the ``edges`` check lists them here
    copies: list[Failure] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def failed_functions(self) -> list[str]:
        return sorted({f.function for f in self.failures})

    def groups(self) -> list[FailureGroup]:
        """The failures grouped by cause (check and masked reason), largest first."""
        grouped: dict[tuple[str, str], list[Failure]] = {}
        for f in self.failures:
            grouped.setdefault((f.check, cause_of(f.reason)), []).append(f)
        groups = [
            FailureGroup(check, cause, len(fs), sorted({f.function for f in fs}), fs[0])
            for (check, cause), fs in grouped.items()
        ]
        return sorted(groups, key=lambda g: -g.count)

    def summary(self, groups: int = 20) -> str:
        """The counts, then the failures grouped by cause (the first `groups` groups,
        each with its functions and one failure in full); every failure is in
        ``failures``."""
        declined = f", {len(self.declined)} samples declined" if self.declined else ""
        if self.upstream:
            declined += (
                f", {len(self.upstream)} compiled calls failing for any Tensor subclass (upstream)"
            )
        if self.copies:
            n = len({f.function for f in self.copies})
            declined += (
                f", {n} view{'s' * (n != 1)} that cop{'y' if n != 1 else 'ies'} (views_copy)"
            )
        head = (
            f"{self.type_name}: {len(self.functions)} functions, {self.samples} samples, "
            f"checks {', '.join(self.checks)}: {len(self.failures)} failures, "
            f"{len(self.refused)} calls refused{declined} ({self.seconds:.1f} s)"
        )
        found = self.groups()
        lines = [head]
        if found:
            lines.append(f"{len(found)} causes:")
            lines += [f"  {g}" for g in found[:groups]]
            if len(found) > groups:
                lines.append(f"  ... {len(found) - groups} more causes (report.groups())")
        return "\n".join(lines)


class TypeCheckError(AssertionError):
    """Raised by :func:`check_type` with every failure of a run; ``report`` holds them."""

    def __init__(self, report: TypeCheckReport) -> None:
        super().__init__(report.summary())
        self.report = report
