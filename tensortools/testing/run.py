"""One :func:`~tensortools.testing.check_type` run: the type, how to make an instance and
read the plain tensor it stands for, what the run expects, and the failures it records.
Each check (values, aliases, autograd, serialization, threads, compiled) is a module of
functions ``check_*(run, sample)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves, tree_map, tree_map_only

from tensortools.coverage.samples import plain_values
from tensortools.testing.report import Failure
from tensortools.testing.samples import Sample, tensor_leaves

__all__ = ["Run", "first_instance", "is_size", "method_of", "result_tensors"]


class Run:
    """One check_type run: the type, how to make and densify it, and the failures."""

    def __init__(self, cls, make, densify, reference, rule, settings, refusals) -> None:
        self.cls, self.make, self.densify = cls, make, densify
        self.reference, self.rule = reference, rule
        self.settings = settings or {}
        self.refusals = refusals
        self.structured = False  # a (make, densify) type
        #: (make, judge(result)) from the type's coverage hooks, where the user gave no
        #: rule and the type registered one (see values.own_rule_problem)
        self.own_rule: tuple[Callable[[Tensor], Any], Callable[[Any], str]] | None = None
        self.failures: list[Failure] = []
        self.refused: list[Failure] = []

    def refused_call(self, err: BaseException) -> bool:
        """Whether err is one of the type's declared refusals."""
        r = self.refusals
        return bool(r(err)) if callable(r) and not isinstance(r, type) else isinstance(err, r)

    def refuse(self, check: str, s: Sample, err: BaseException) -> None:
        first = str(err).splitlines()[0] if str(err) else ""
        self.refused.append(Failure(check, s.name, s.label, f"{type(err).__name__}: {first}"[:300]))

    def raised(self, check: str, s: Sample, err: BaseException, what: str = "") -> None:
        """A call on instances raised where the plain call did not: the type's declared
        refusal (listed in ``refused``), or a failure ('<what> raised ...')."""
        if self.refused_call(err):
            self.refuse(check, s, err)
        else:
            self.fail(check, s, f"{what + ' ' if what else ''}raised {type(err).__name__}: {err}")

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

        return plain_values(tree_map(one, obj, is_leaf=is_size))

    def want(self, fn: Callable, plain_call: tuple) -> Any:
        inp, args, kwargs = plain_call
        if self.reference is not None:
            return self.reference(fn, inp, args, kwargs)
        return fn(inp, *args, **kwargs)

    def type_problem(self, x: Any, result: Any) -> str:
        """What breaks the type's rule in `result` of a call on `x` (an instance, or a call
        or container holding instances: the rule is given the first)."""
        x = first_instance(self.cls, x)
        if self.rule is not None:
            return self.rule(x, result)
        for t in tree_leaves(result, is_leaf=is_size):
            if isinstance(t, Tensor) and t.is_floating_point() and not isinstance(t, self.cls):
                return f"a {type(t).__name__} result, not a {self.cls.__name__}"
        return ""

    def typed_call(
        self,
        s: Sample,
        make: Callable[[Tensor], Any] | None = None,
        form: Callable[[Tensor], Tensor] | None = None,
    ) -> tuple | None:
        """The sample's ``(input, args, kwargs)`` with the tensors it picks made into fresh
        instances (by `make`, the run's by default, of each tensor as `form` gives it:
        the tensor itself by default); None where `make` has an instance for none of
        them."""
        make = make or self.make
        picks, position, made = set(s.picks), iter(range(len(tensor_leaves(s.call)))), []

        def one(t: Tensor) -> Any:
            if next(position) not in picks:
                return t
            t = t.detach().clone()
            x = make(form(t) if form is not None else t)
            if x is None:  # no stand-in for this tensor: it stays plain
                return t
            made.append(x)
            return x

        call = tree_map_only(Tensor, one, s.call, is_leaf=is_size)
        return call if made else None

    def plain_call(self, typed_call: tuple) -> tuple:
        """A typed call's plain counterpart: each instance as the plain tensor it stands
        for (a copy: the plain run may change it in place)."""

        def one(x):
            return self.densify(x).detach().clone() if isinstance(x, self.cls) else x

        return plain_values(tree_map(one, typed_call, is_leaf=is_size))

    def typed(self, s: Sample) -> Any:
        """The sample's input with its picked tensors as instances (a tensor, or a list
        or tuple); None where it holds no instance (see :meth:`typed_call`)."""
        call = self.typed_call(s)
        return None if call is None or first_instance(self.cls, call[0]) is None else call[0]

    def stands_for(self, s: Sample) -> Any:
        """The plain counterpart of :meth:`typed` (the input itself for a wrapper; the
        dense matrix for a structured type)."""
        x = self.typed(s)
        return None if x is None else self.plain_call((x, (), {}))[0]


def is_size(x: Any) -> bool:
    """torch.Size, a leaf for the kit's pytree walks (a node of torch's pytree)."""
    return isinstance(x, torch.Size)


def first_instance(cls: type, obj: Any) -> Any:
    """obj if it is an instance of cls, else the first instance inside it (None if none)."""
    if isinstance(obj, cls):
        return obj
    leaves = tree_leaves(obj, is_leaf=lambda x: is_size(x) or isinstance(x, cls))
    return next((x for x in leaves if isinstance(x, cls)), None)


def result_tensors(obj: Any) -> list[Tensor]:
    return [t for t in tree_leaves(obj, is_leaf=is_size) if isinstance(t, Tensor)]


def method_of(x: Any, variant: Callable) -> Callable:
    """The bound method `variant` (an unbound ``torch.Tensor`` method) names, on x: how
    user code calls it, on a subclass or on a tensor-like type alike."""
    return getattr(x, getattr(variant, "__name__", ""), None) or (
        lambda *a, **k: variant(x, *a, **k)
    )
