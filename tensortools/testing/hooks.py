"""What a type registered with the coverage report (:mod:`tensortools._spec`), as
options of :func:`~tensortools.testing.check_type`: one registration serves both tools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from tensortools._spec import CoverageSpec, spec_for

Make = Callable[[Tensor], Any]


def own_rule(cls: type) -> tuple[Make, Callable[[Any], str]] | None:
    """The rule cls registered with its coverage hooks, with the hooks' ``make``; None
    where it registered none (the spec's default judges nothing)."""
    spec = spec_for(cls)
    if spec.result_problem is CoverageSpec.result_problem:
        return None
    return options_from_coverage_hooks(cls)["make"], lambda result: spec.result_problem(cls, result)


def options_from_coverage_hooks(cls: type) -> dict[str, Any]:
    """``make`` and ``rule`` for :func:`check_type` from the spec a type registers with
    the coverage report (:func:`tensortools.coverage.spec.register`: ``substitute`` stands
    an instance in for a tensor, ``result_problem`` judges a result): what
    ``python -m tensortools.coverage TYPE --check`` runs."""
    spec = spec_for(cls)

    def make(t: Tensor) -> Any:
        substituted = spec.substitute(cls, t, (), {})
        return None if substituted is None else substituted[0]

    # The coverage report counts a TypeError as the type refusing the call: so does this.
    return {
        "make": make,
        "rule": lambda x, result: spec.result_problem(cls, result),
        "refusals": (TypeError,),
    }
