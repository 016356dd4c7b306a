"""Every overridable torch function, called with one of our types in its tensor
positions (signatures from torch.overrides.get_testing_overrides and torch's annotated
argument lists), reaches that type's __torch_function__."""

import collections
import functools
import inspect
import keyword
import warnings

import pytest
import torch
from _support import tiers
from _support.override_probe import call_through, example_args, probe_type
from torch.overrides import get_ignored_functions, get_testing_overrides
from torch.utils._pytree import tree_map, tree_map_only

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor
from tensortools.coverage.samples import UNDEFINED_VALUES, compare_results, seeded
from tensortools.dispatch import TensorWrapper, aliases_of
from tensortools.dispatch.signatures import torch_positions

PROBES = {
    "MetadataTensor": (MetadataTensor, lambda P: P(torch.ones(2, 2), {})),
    "LoggingTensor": (LoggingTensor, lambda P: P(torch.ones(2, 2))),
    "ScalarTensor": (ScalarTensor, lambda P: P(2, 1.0)),
}

# Tensor.set_() with no source resets the tensor in C++ without asking __torch_function__.
KNOWN_BYPASSES = {"torch.Tensor.set_"}


@pytest.mark.parametrize("name", sorted(PROBES))
def test_every_overridable_function_reaches_the_type(name):
    base, make = PROBES[name]
    instance = make(probe_type(base))
    outcomes = collections.defaultdict(list)
    ignored = get_ignored_functions()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation warnings of the functions called
        for func, override in get_testing_overrides().items():
            if func in ignored:
                continue
            args = example_args(func, override, instance)
            if args is None:
                outcomes["no example"].append(func)
                continue
            outcomes[call_through(func, args, instance)].append(func)
    names = {
        k: sorted(torch.overrides.resolve_name(f) or repr(f) for f in v)
        for k, v in outcomes.items()
    }
    # none returns an answer without the type seeing the call
    assert set(names.get("bypassed", [])) <= KNOWN_BYPASSES, names.get("bypassed")
    # "no call": our generic example arguments did not fit the function's signature
    # (einsum wants an equation, say). "own": ScalarTensor's own attributes (shape, dim).
    tried = len(outcomes["reached"]) + len(outcomes["no call"])
    assert len(outcomes["reached"]) >= 1300
    assert len(outcomes["reached"]) / tried >= (0.99 if base is not ScalarTensor else 0.95)
    if base is ScalarTensor:
        assert set(names.get("own", [])) <= {
            "torch.Tensor.__len__",
            "torch.Tensor.__repr__",
            "torch.Tensor.device.__get__",
            "torch.Tensor.dtype.__get__",
            "torch.Tensor.shape.__get__",
            "torch.Tensor.dim",
            "torch.Tensor.size",
            "torch.Tensor.__setstate__",
        }  # (the last: its unpickling)


# -- handlers receive calls as torch binds them ---------------------------------------
#
# Every overridable function, in each form it is called in (the torch function and its
# Tensor method), positionally, with its positional arguments by torch's names, with the
# parameters it leaves out given at torch's defaults and, for a method taking a list of
# ints, with the ints spread out (x.flip(0, 1)). Each form goes to three handlers
# registered for the function: one of (*args, **kwargs), which must get the call as torch
# passed it; one with torch's whole signature; one naming only the parameters the call
# gives (as a user writes `def _flip(input, dims)`). Each handler runs the function it was
# registered for on plain tensors with what it got, so a call bound wrongly (dims=-1, the
# dtype as out=, unbiased as dim) gives another answer or raises; under the strict policy a
# call the handler is not given raises. The reference is plain torch with the same form.


_UNSET = object()


class _Probe(TensorWrapper):
    policy = "strict"


def _plain(x):
    return x.as_subclass(torch.Tensor)


def _typed(cls, value):
    return tree_map_only(torch.Tensor, lambda t: t.as_subclass(cls), value)


def _layout(form, call, make):
    """torch's names of form's positions, for the call: where overloads name a position
    differently, those of the overload whose names, passed as keywords to plain torch,
    give the positional call's answer."""
    positions = torch_positions(form)
    layout = ["input", *positions.layout[1:]]
    args, kwargs = make()
    if len(args) <= positions.ambiguous_from:
        return layout
    want = seeded(lambda: call(*make()))
    for overload in positions.overloads:
        names = [name for name, _, _ in overload]
        if len(names) < len(args) or set(names[1 : len(args)]) & set(kwargs):
            continue
        by_name = dict(zip(names[1:], args[1:]))
        try:
            got = seeded(lambda: form(args[0], **by_name, **kwargs))  # noqa: B023
        except Exception:
            continue
        if not compare_results(got, want, exact=True):
            return ["input", *names[1:], *layout[len(names) :]]
    return layout


def _signatures(form, layout, given: int, keywords):
    """(torch's whole signature, the one naming only the call's parameters) of `form`."""
    positions = torch_positions(form)
    if any(keyword.iskeyword(n) for n in positions.names):
        return None, None  # (random_'s from=: no Python handler names it)
    if positions.parsed:
        if not positions.names:
            return None, None  # (a method torch binds without a schema: Tensor.double)
        layout = layout or ["input", *positions.layout[1:]]
        if len(set(layout)) < len(layout):
            return None, None  # (Tensor.to: memory_format first and fourth)
        params = [inspect.Parameter(layout[0], inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        params += [
            inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=_UNSET)
            for n in layout[1:]
        ]
        params += [
            inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=_UNSET)
            for n in sorted((positions.names | set(keywords)) - set(layout))
        ]  # (with the keywords torch's parser knows beyond the schema: nonzero's as_tuple)
        whole = inspect.Signature(params)
    else:
        try:
            whole = inspect.signature(form)
        except (TypeError, ValueError):
            return None, None
    named = list(whole.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY) for p in named[:given]):
        return whole, None
    # (the parameters the call gives, in torch's order: `def _flip(input, dims)`)
    least = [
        p.replace(default=_UNSET if i else inspect.Parameter.empty)
        for i, p in enumerate(named)
        if p.kind is p.POSITIONAL_OR_KEYWORD and (i < given or p.name in keywords)
    ]
    least += [
        inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=_UNSET)
        for k in keywords
        if k not in {p.name for p in least}
    ]
    return whole, inspect.Signature(least)


def _handler(form, signature, seen):
    """A handler that runs form with what it got: as given for (*args, **kwargs), else each
    argument by the name of the handler's parameter it reached (torch's)."""
    kinds = signature and {p.kind for p in signature.parameters.values()}
    by_name = kinds and not kinds & {
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.VAR_KEYWORD,
    }

    def handler(*args, **kwargs):
        if signature is not None:
            bound = signature.bind(*args, **kwargs)  # (what the table passed fits the handler)
        seen.append((args, kwargs))
        if by_name:
            first, *rest = bound.arguments.items()
            args, kwargs = (first[1],), dict(rest)
        return form(*tree_map_only(_Probe, _plain, args), **tree_map_only(_Probe, _plain, kwargs))

    if signature is not None:
        handler.__signature__ = signature
    return handler


def _as_passed(args, kwargs):
    return tree_map(lambda v: "tensor" if isinstance(v, torch.Tensor) else v, (args, kwargs))


class _Passed(torch.Tensor):
    """Records what torch passes __torch_function__."""

    seen: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append((func, args, kwargs or {}))
        raise _Stop


class _Stop(Exception):
    pass


def _op_db():
    pytest.importorskip("expecttest")  # (op_db needs it)
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def _samples(form):
    """(input, args, kwargs) makers for form: op_db's first CPU float32 samples where op_db
    has form, else torch's annotated example arguments on a 2x3 tensor."""
    infos = [i for i in _op_db() if form in (i.op, i.method_variant, i.inplace_variant)]
    for info in infos[:1]:
        try:
            samples = list(info.sample_inputs("cpu", torch.float32))[:2]
        except Exception:
            samples = []
        for s in samples:
            yield lambda s=s: tree_map_only(torch.Tensor, torch.clone, (s.input, s.args, s.kwargs))
    if not infos:
        override = get_testing_overrides().get(form)
        args = override and example_args(form, override, "tensor")
        if args and args[0] == "tensor":
            yield lambda: tree_map(
                lambda v: torch.arange(6.0).reshape(2, 3) if v == "tensor" else v,
                (args[0], tuple(args[1:]), {}),
            )


def _forms(func, form, x, args, kwargs):
    """(label, positional arguments, keywords) of the call in `func`'s spellings."""
    yield "positional", (x, *args), kwargs
    positions = torch_positions(form)
    layout = positions.layout
    if 0 < len(args) < len(layout):
        by_name = dict(zip(layout[1 : len(args) + 1], args, strict=True))
        if not set(by_name) & set(kwargs):
            yield "by torch's names", (x,), {**by_name, **kwargs}
    given = set(layout[: len(args) + 1]) | set(kwargs)
    defaults = {k: v for k, v in positions.defaults.items() if k not in given}
    if defaults:
        yield "with defaults", (x, *args), {**kwargs, **defaults}
    method = torch_positions(func)
    if method.spread and len(args) == 1 and isinstance(args[0], (list, tuple)) and args[0]:
        yield "spread", (x, *args[0]), kwargs


def _targets():
    """(the function a handler is registered for, the forms calls reach it in)."""
    ignored = get_ignored_functions()
    found = []
    for func in get_testing_overrides():
        name = getattr(func, "__name__", "_")
        if func in ignored or not callable(func) or name.startswith("_"):
            continue
        owner = getattr(torch, name, None)
        if getattr(torch.Tensor, name, None) is func and any(
            a is func for a, _ in aliases_of(owner)
        ):
            continue  # (the method form of a torch function: swept with it)
        methods = [a for a, reflected in aliases_of(func) if not reflected]
        found.append((func, [func, *[m for m in methods if not m.__name__.startswith("__")]]))
    return sorted(found, key=lambda t: torch.overrides.resolve_name(t[0]) or repr(t[0]))


def _run(form, called, call, make, probe_of):
    """Each handler's failures for one call."""
    failures = []
    try:
        want = seeded(lambda: call(*make()))
    except Exception:
        return failures  # (a spelling torch refuses: nothing to bind)
    _Passed.seen = []
    try:
        call(*_typed(_Passed, make()))
    except _Stop:
        pass
    if not _Passed.seen or _Passed.seen[0][0] != called:
        return failures  # (torch calls another function first: x.ndimension() is x.dim())
    passed = [_Passed.seen[0][1:]]
    name = form.__name__
    values = name not in UNDEFINED_VALUES and not ("data_ptr" in name or "fbgemm" in name)
    for kind, (cls, seen) in probe_of.items():
        seen.clear()
        try:
            got = seeded(lambda: call(*_typed(cls, make())))
        except Exception as err:
            failures.append(f"{kind}: raised {type(err).__name__}: {str(err)[:150]}")
            continue
        if len(seen) != 1:
            failures.append(f"{kind}: the handler ran {len(seen)} times")
            continue
        reason = values and compare_results(got, want, exact=True)
        if reason:
            failures.append(f"{kind}: {reason}")
        if kind == "(*args, **kwargs)" and passed and getattr(call, "untouched", True):
            if _as_passed(*seen[0]) != _as_passed(*passed[0]):
                failures.append(
                    f"{kind}: got {_as_passed(*seen[0])}, torch passed {_as_passed(*passed[0])}"
                )
    return failures


def _fresh(call):
    return tree_map_only(torch.Tensor, torch.clone, call)


def _sweep(func, forms):
    checked, failures = 0, []
    for make in _samples(func):
        x, args, kwargs = make()
        try:
            layout = _layout(func, lambda a, k: func(*a, **k), lambda: _fresh(((x, *args), kwargs)))
        except Exception:
            layout = None  # (torch refuses the sample's function form)
        for kind_of_form in forms:
            method = kind_of_form is not func
            for label, f_args, f_kwargs in _forms(kind_of_form, func, x, args, kwargs):
                if method and not isinstance(f_args[0], torch.Tensor):
                    continue

                def call(a, k, m=kind_of_form, method=method):
                    return getattr(a[0], m.__name__)(*a[1:], **k) if method else m(*a, **k)

                probes = {}
                given = len(f_args) if label != "spread" else 2
                sigs = _signatures(func, layout, given, f_kwargs)
                for kind, signature in zip(("whole", "least"), sigs, strict=True):
                    if signature is not None:
                        probes[kind] = signature
                probes["(*args, **kwargs)"] = None
                probe_of = {}
                for kind, signature in probes.items():
                    cls = type(f"Probe_{len(probe_of)}", (_Probe,), {})
                    seen = []
                    cls.implements(func)(_handler(func, signature, seen))
                    probe_of[kind] = (cls, seen)

                # (a Tensor method written in Python whose parameters differ from the
                # function's, as Tensor.norm's dtype sits where torch.norm has out, reaches
                # the handler in the function's form)
                layouts = (torch_positions(kind_of_form).layout, torch_positions(func).layout)
                call.untouched = label != "spread" and layouts[0][1:] == layouts[1][1:]
                fresh = functools.partial(_fresh, (f_args, f_kwargs))
                for problem in _run(func, kind_of_form, call, fresh, probe_of):
                    form_name = "method" if method else "function"
                    failures.append(f"{func.__name__} {form_name} {label}: {problem}")
                checked += 1
    return checked, failures


@pytest.mark.slow
def test_handlers_get_every_call_as_torch_binds_it():
    targets = tiers.sample(_targets(), 150, "binding sweep")
    checked, failures = 0, []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for func, forms in targets:
            n, found = _sweep(func, forms)
            checked += n
            failures += found
    assert checked >= (2000 if tiers.full() else 150)
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)
