"""The :class:`~tensortools._spec.TypeSpec` a type registered (:mod:`tensortools._spec`),
as :func:`~tensortools.testing.check_type` reads it: one registration serves both tools."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from torch import Tensor

from tensortools._spec import TypeSpec, spec_for

Make = Callable[[Tensor], Any]


def registered_spec(cls: type) -> TypeSpec:
    """The spec cls registered (or its nearest parent's), for cls."""
    return spec_for(cls).for_class(cls)


def own_rule(cls: type) -> tuple[Make, Callable[[Any], str]] | None:
    """The rule cls registered, with the registered ``make``; None where it registered
    none (or no way to make an instance)."""
    spec = registered_spec(cls)
    rule, make = spec.rule_for(cls), spec.make_for(cls)
    if rule is None or make is None:
        return None
    return make, lambda result: rule(None, result)


def options_from_coverage_hooks(cls: type) -> dict[str, Any]:
    """``make`` and ``rule`` of the spec cls registered (a rule that accepts every result
    where it registered none, as the coverage report judges), with ``refusals`` the
    coverage report's (a TypeError is the type refusing the call). Prefer
    ``check_type(coverage_spec(cls))``, which gives the same as one object."""
    spec = coverage_spec(cls)
    return {"make": spec.make, "rule": spec.rule, "refusals": spec.refusals}


def coverage_spec(cls: type) -> TypeSpec:
    """The spec cls registered, bound to cls, refusing as the coverage report counts
    refusals (a TypeError): what ``python -m tensortools.coverage TYPE --check`` runs."""
    spec = registered_spec(cls)
    make = spec.make_for(cls) or _no_instance  # (a type with no stand-in: none, said so)
    # (where it registered no rule, the report judges values alone: so does this)
    rule = spec.rule_for(cls) or _any_result
    return dataclasses.replace(spec, make=make, rule=rule, refusals=(TypeError,))


def _no_instance(tensor: Tensor) -> None:
    return None


def _any_result(x: Any, result: Any) -> str:
    return ""
