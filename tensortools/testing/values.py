"""The ``values`` and ``types`` checks: a sample on the type equals the plain run (its
in-place form has the same effect), and its results follow the type's rule (the user's,
or where they gave none, the one the type registered with its coverage hooks), the
in-place form's too."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from torch import Tensor

from tensortools._samples import UNDEFINED_VALUES, compare_results, seeded
from tensortools.testing.mutation import watch
from tensortools.testing.run import Run, first_instance, method_of, result_tensors
from tensortools.testing.samples import Sample

__all__ = ["check_in_place", "check_values_and_types", "own_rule_problem"]


def check_values_and_types(run: Run, s: Sample, checks: tuple[str, ...]) -> None:
    """The sample's typed call against its plain one (``values``), its result against
    the rule (``types``); where ``mutation`` is among `checks` too, the same two calls
    are watched for what the typed one changes in its instances."""
    fn = s.info.op
    typed = run.typed_call(s)
    if typed is None:
        return
    plain = run.plain_call(typed)  # (of the same instances: `make` runs once per sample)
    # (the mutation check watches these very calls: no third and fourth call)
    mutation = watch(run, s, typed, plain) if "mutation" in checks else None
    try:
        want = seeded(lambda: run.want(fn, plain))
    except Exception:
        return  # the plain call refuses the sample: nothing to compare
    x, args, kwargs = typed
    try:
        got = seeded(lambda: fn(x, *args, **kwargs))
    except Exception as err:
        run.raised("values", s, err)
        return
    if mutation is not None:
        run.guarded("mutation", s, mutation)
    if "values" in checks:
        values = run.plain(got)
        if s.name in UNDEFINED_VALUES:  # uninitialised memory: dtype and shape only
            values, want = result_tensors(values), result_tensors(want)
            want = [w.copy_(g) if g.shape == w.shape else w for g, w in zip(values, want)]
        reason = compare_results(values, want, exact=False)
        if reason:
            run.fail("values", s, reason)
    check_in_place(run, s, checks)
    if "types" in checks:
        problem = run.type_problem(typed, got, fn, typed) or own_rule_problem(run, s, typed, got)
        if problem:
            run.fail("types", s, problem)


def own_rule_problem(
    run: Run, s: Sample, typed: tuple, got: Any, again: Callable[..., Any] | None = None
) -> str:
    """What breaks the rule the type registered with its coverage hooks, where the user
    gave no rule of their own. The rule may be written for the instances the hooks make
    (MetadataTensor's asks for the metadata its hooks give): where it does not hold for
    the run's own instances themselves, the sample runs once more on the hooks', by
    `again(input, *args, **kwargs)` (by default the sample's function)."""
    if run.own_rule is None:
        return ""
    make, judge = run.own_rule
    if not judge(first_instance(run.cls, typed)):
        return judge(got)
    hooked = run.typed_call(s, make=make)
    if hooked is None:
        return ""
    x, args, kwargs = hooked
    again = again or s.info.op
    try:
        result = seeded(lambda: again(x, *args, **kwargs))
    except Exception:
        return ""  # (the values check reports calls that raise)
    problem = judge(result)
    return problem and f"{problem} (the type's own rule, on an instance its coverage hooks make)"


def check_in_place(run: Run, s: Sample, checks: tuple[str, ...] = ("values",)) -> None:
    """The in-place form (``x.exp_()``) changes the instance as it changes the plain
    tensor, and returns it (``values``), and the instance it returns follows the type's
    rule (``types``: the rule's `x` is the instance as the call found it); only where the
    input is itself an instance (a method of a list, or of a plain tensor, is not the
    type's)."""
    variant = s.info.inplace_variant
    if variant is None or not {"values", "types"} & set(checks):
        return
    typed = run.typed_call(s)
    if typed is None or not isinstance(typed[0], run.cls):
        return
    x, args, kwargs = typed
    before = None
    if "types" in checks:
        try:
            before = copy.deepcopy(x)  # (the instance as the call finds it)
        except Exception:
            before = None  # (a type that cannot be copied: its rule is not applied here)
    plain, p_args, p_kwargs = run.plain_call(typed)
    if not isinstance(plain, Tensor):
        return
    try:
        seeded(lambda: variant(plain, *p_args, **p_kwargs))
    except Exception:
        return
    try:
        returned = seeded(lambda: method_of(x, variant)(*args, **kwargs))
    except Exception as err:
        run.raised("values", s, err, "in-place form")
        return
    if "values" in checks:
        reason = compare_results(run.plain(x), plain, exact=False)
        if reason:
            run.fail("values", s, "in-place form: " + reason)
        elif returned is not x:
            run.fail("values", s, f"in-place form returned a new {type(returned).__name__}")
    if before is not None and returned is x:
        call = (before, args, kwargs)
        problem = run.type_problem(call, x, variant, call)
        problem = problem or own_rule_problem(run, s, call, x, _in_place(run, variant))
        if problem:
            run.fail("types", s, "in-place form: " + problem)


def _in_place(run: Run, variant: Callable) -> Callable[..., Any]:
    """The in-place form as a call giving the instance it changed (on an instance of the
    type only: a plain tensor's method is not the type's)."""

    def call(x: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(x, run.cls):
            raise TypeError("not an instance")  # (not judged: see own_rule_problem)
        method_of(x, variant)(*args, **kwargs)
        return x

    return call
