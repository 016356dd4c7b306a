"""One :func:`~tensortools.testing.check_type` run: the type, how to make an instance and
read the plain tensor it stands for, what the run expects, and the failures it records.
Each check (values, aliases, autograd, serialization, threads, compiled) is a module of
functions ``check_*(run, sample)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves, tree_map

from tensortools.coverage.samples import plain_values
from tensortools.testing.report import Failure
from tensortools.testing.samples import Sample

__all__ = ["Run", "method_of", "result_tensors"]


class Run:
    """One check_type run: the type, how to make and densify it, and the failures."""

    def __init__(self, cls, make, densify, reference, rule, settings, refusals) -> None:
        self.cls, self.make, self.densify = cls, make, densify
        self.reference, self.rule = reference, rule
        self.settings = settings or {}
        self.refusals = refusals
        self.structured = False  # a (make, densify) type
        self.failures: list[Failure] = []
        self.refused: list[Failure] = []

    def refused_call(self, err: BaseException) -> bool:
        """Whether err is one of the type's declared refusals."""
        r = self.refusals
        return bool(r(err)) if callable(r) and not isinstance(r, type) else isinstance(err, r)

    def refuse(self, check: str, s: Sample, err: BaseException) -> None:
        first = str(err).splitlines()[0] if str(err) else ""
        self.refused.append(Failure(check, s.name, s.label, f"{type(err).__name__}: {first}"[:300]))

    def guarded(self, check: str, sample: Sample | None, step: Callable[[], None]) -> None:
        """Run one check; if `make`, `densify` or `rule` (or the check itself) raises where
        it should not, that is a failure of this check, not a crash of the run."""
        try:
            step()
        except Exception as err:
            self.fail(check, sample, f"the check could not run: {type(err).__name__}: {err}")

    def fail(self, check: str, sample: Sample | None, reason: str) -> None:
        name = sample.name if sample else "(type)"
        label = sample.label if sample else "-"
        self.failures.append(Failure(check, name, label, reason[:300]))

    def plain(self, obj: Any) -> Any:
        def one(x):
            return self.densify(x) if isinstance(x, self.cls) else x

        return plain_values(tree_map(one, obj, is_leaf=lambda x: isinstance(x, torch.Size)))

    def want(self, fn: Callable, s: Sample, inp: Tensor) -> Any:
        if self.reference is not None:
            return self.reference(fn, inp, s.args, s.kwargs)
        return fn(inp, *s.args, **s.kwargs)

    def type_problem(self, x: Any, result: Any) -> str:
        if self.rule is not None:
            return self.rule(x, result)
        for t in tree_leaves(result, is_leaf=lambda x: isinstance(x, torch.Size)):
            if isinstance(t, Tensor) and t.is_floating_point() and not isinstance(t, self.cls):
                return f"a {type(t).__name__} result, not a {self.cls.__name__}"
        return ""

    def typed(self, s: Sample) -> Any:
        return self.make(s.input.detach().clone())

    def stands_for(self, s: Sample) -> Tensor | None:
        """The plain tensor an instance made from the sample's input stands for (the input
        itself for a wrapper; the dense matrix for a structured type)."""
        x = self.typed(s)
        return None if x is None else self.plain(x).detach().clone()


def result_tensors(obj: Any) -> list[Tensor]:
    return [
        t
        for t in tree_leaves(obj, is_leaf=lambda x: isinstance(x, torch.Size))
        if isinstance(t, Tensor)
    ]


def method_of(x: Any, variant: Callable) -> Callable:
    """The bound method `variant` (an unbound ``torch.Tensor`` method) names, on x: how
    user code calls it, on a subclass or on a tensor-like type alike."""
    return getattr(x, getattr(variant, "__name__", ""), None) or (
        lambda *a, **k: variant(x, *a, **k)
    )
