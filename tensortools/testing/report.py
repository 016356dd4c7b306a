"""What :func:`~tensortools.testing.check_type` found: one :class:`Failure` per thing that
went wrong, gathered in a :class:`TypeCheckReport`, raised as a :class:`TypeCheckError`."""

from __future__ import annotations

import dataclasses

__all__ = ["Failure", "TypeCheckError", "TypeCheckReport"]


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
class TypeCheckReport:
    """What :func:`check_type` ran and found."""

    type_name: str
    checks: tuple[str, ...]
    functions: list[str]
    samples: int
    failures: list[Failure]
    seconds: float
    refused: list[Failure] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def failed_functions(self) -> list[str]:
        return sorted({f.function for f in self.failures})

    def summary(self) -> str:
        head = (
            f"{self.type_name}: {len(self.functions)} functions, {self.samples} samples, "
            f"checks {', '.join(self.checks)}: {len(self.failures)} failures, "
            f"{len(self.refused)} calls refused ({self.seconds:.1f} s)"
        )
        return "\n".join([head, *(f"  {f}" for f in self.failures)])


class TypeCheckError(AssertionError):
    """Raised by :func:`check_type` with every failure of a run; ``report`` holds them."""

    def __init__(self, report: TypeCheckReport) -> None:
        super().__init__(report.summary())
        self.report = report
