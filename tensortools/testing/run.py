"""One :func:`~tensortools.testing.check_type` run: the type, how to make an instance and
read the plain tensor it stands for, what the run expects, and the failures it records.
Each check (values, aliases, autograd, serialization, threads, compiled) is a module of
functions ``check_*(run, sample)``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves, tree_map, tree_map_only

from tensortools._samples import plain_values
from tensortools._spec import TypeSpec
from tensortools.testing.report import Failure, Unsupported
from tensortools.testing.samples import Sample, tensor_leaves

__all__ = ["Run", "first_instance", "is_size", "method_of", "result_tensors", "same_value"]


class _NoInstance(Exception):
    """`make` declined a tensor (raised Unsupported) or failed on it: the sample is not
    run on the type (recorded once, as declined or as a failure)."""


class Run:
    """One check_type run: the type, how to make and densify it, and the failures."""

    def __init__(
        self, cls, make, densify, reference, rule, settings, refusals, volatile_attrs=()
    ) -> None:
        self.cls, self.make, self.densify = cls, make, densify
        self.reference = reference
        self.rule = None if rule is None else _rule_taking_calls(rule)
        #: attributes that the type changes on its own (caches): not compared as state
        self.volatile_attrs = frozenset(volatile_attrs)
        self.settings = settings or {}
        self.refusals = refusals
        self.structured = False  # a (make, densify) type
        self.compile_backends: tuple[str, ...] = ("eager",)
        #: (make, judge(result)) from the type's coverage hooks, where the user gave no
        #: rule and the type registered one (see values.own_rule_problem)
        self.own_rule: tuple[Callable[[Tensor], Any], Callable[[Any], str]] | None = None
        self.failures: list[Failure] = []
        self.refused: list[Failure] = []
        #: samples `make` declined (it raised Unsupported, or gave no instance for any
        #: tensor the sample picks); one entry per sample
        self.declined: list[Failure] = []
        self._declined_keys: set = set()
        #: compiled calls that fail for a bare torch.Tensor subclass as well (torch's
        #: limits, not the type's): reported apart from the failures
        self.upstream: list[Failure] = []
        #: views that copy where the type says its views do (``views_copy=True``)
        self.copies: list[Failure] = []
        self._make_failed: set = set()
        self.made = 0  # instances `make` gave: none in a whole run is a failure
        #: the type as check_type was given it
        self.spec = TypeSpec(cls, make=make, densify=densify, rule=rule, reference=reference)
        #: what the run asks for: its checks, functions (None: all), dtypes, samples
        self.checks: tuple[str, ...] = ()
        self.ops: tuple[str, ...] | None = None
        self.dtypes: tuple[torch.dtype, ...] = (torch.float32,)
        self.max_samples: int | None = 2
        self.sample_hook: Callable | None = None
        #: one step of the run's progress bar (a sample of a check done)
        self.tick: Callable[[], None] = lambda: None

    @classmethod
    def of(cls, spec: TypeSpec, densify: Callable[[Any], Tensor]) -> Run:
        """The run of a spec bound to its class (``make`` and ``rule`` given it)."""
        run = cls(
            spec.cls,
            spec.make_for(spec.cls),
            densify,
            spec.reference,
            spec.rule_for(spec.cls),
            spec.settings,
            spec.refusals,
            spec.volatile_attrs,
        )
        run.spec = spec
        run.structured = spec.densify is not None
        return run

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
        it should not, that is a failure of this check, not a crash of the run. The
        process-wide state the check's calls may change (the random generator, which the
        kit seeds; torch's settings; warning filters) is put back after it, so no later
        check, and no code after the run, inherits it; a setting of torch's that the
        type's calls changed is also a failure."""
        before = _process_state()
        try:
            step()
        except Exception as err:
            self.fail(check, sample, f"the check could not run: {type(err).__name__}: {err}")
        finally:
            changed = _restore_process_state(before)
        for what in changed:
            self.fail(check, sample, f"the calls left {what} (put back)")

    def instance(self, t: Tensor, s: Any = None, make: Callable | None = None) -> Any:
        """`make(t)` (the run's make by default): an instance, or None where make gave
        none, declined t (raised :class:`Unsupported`) or raised; a decline is recorded
        once per sample, a raise once per sample as a failure of ``make``."""
        try:
            return self._made(t, s, make or self.make)
        except _NoInstance:
            return None

    def _made(self, t: Tensor, s: Any, make: Callable) -> Any:
        try:
            x = make(t)
        except Unsupported as err:
            self.decline(s, str(err) or "make raised Unsupported")
            raise _NoInstance from err
        except Exception as err:
            key = (getattr(s, "name", None), getattr(s, "label", None))
            if key not in self._make_failed:
                self._make_failed.add(key)
                self.fail("make", s, f"make raised {type(err).__name__}: {err}")
            raise _NoInstance from err
        if x is not None:
            self.made += 1
        return x

    def decline(self, s: Any, reason: str) -> None:
        key = (getattr(s, "name", None), getattr(s, "label", None))
        if key not in self._declined_keys:
            self._declined_keys.add(key)
            name = s.name if s is not None else "(type)"
            label = s.label if s is not None else "-"
            self.declined.append(Failure("make", name, label, reason[:300]))

    def fail(self, check: str, sample: Sample | None, reason: str) -> None:
        name = sample.name if sample else "(type)"
        label = sample.label if sample else "-"
        self.failures.append(Failure(check, name, label, reason[:300]))

    def state(self, x: Any) -> dict:
        """x's attributes (its ``__dict__``) less the type's volatile ones (caches)."""
        attributes = getattr(x, "__dict__", None) or {}
        return {k: v for k, v in attributes.items() if k not in self.volatile_attrs}

    def plain(self, obj: Any) -> Any:
        def one(x):
            return self.densify(x) if isinstance(x, self.cls) else x

        return plain_values(tree_map(one, obj, is_leaf=is_size))

    def want(self, fn: Callable, plain_call: tuple) -> Any:
        inp, args, kwargs = plain_call
        if self.reference is not None:
            return self.reference(fn, inp, args, kwargs)
        return fn(inp, *args, **kwargs)

    def type_problem(self, x: Any, result: Any, func: Any = None, call: tuple | None = None) -> str:
        """What breaks the type's rule in `result` of a call on `x` (an instance, or a call
        or container holding instances: the rule is given the first). `func` and `call`
        (``(input, args, kwargs)``) are the call, where the result is one call's (a rule
        that takes them is given ``func``, ``args`` with the input first, and ``kwargs``)."""
        x = first_instance(self.cls, x)
        if self.rule is not None:
            inp, args, kwargs = call if call is not None else (None, (), {})
            return self.rule(x, result, func, (inp, *args) if call else (), kwargs)
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
            x = self._made(form(t) if form is not None else t, s, make)
            if x is None:  # no stand-in for this tensor: it stays plain
                return t
            made.append(x)
            return x

        try:
            call = tree_map_only(Tensor, one, s.call, is_leaf=is_size)
        except _NoInstance:
            return None
        if not made and form is None and make is self.make:
            self.decline(s, "make gave no instance for the tensors this sample picks")
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


#: torch's process-wide settings a call may change: name -> (read, write).
_SETTINGS: dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]] = {
    "torch's default dtype": (torch.get_default_dtype, torch.set_default_dtype),
    "gradient mode": (torch.is_grad_enabled, torch.set_grad_enabled),
    "deterministic algorithms": (
        torch.are_deterministic_algorithms_enabled,
        torch.use_deterministic_algorithms,
    ),
    "anomaly detection": (torch.is_anomaly_enabled, torch.set_anomaly_enabled),
    "intra-op threads": (torch.get_num_threads, torch.set_num_threads),
}


def _process_state() -> dict:
    import warnings

    state = {name: read() for name, (read, _) in _SETTINGS.items()}
    state["(generator)"] = torch.default_generator.get_state()
    state["(warnings)"] = list(warnings.filters)
    return state


def _restore_process_state(state: dict) -> list[str]:
    """Put `state` back; the settings of torch's that had changed, as words."""
    import warnings

    torch.default_generator.set_state(state["(generator)"])
    if warnings.filters != state["(warnings)"]:
        warnings.filters[:] = state["(warnings)"]
        getattr(warnings, "_filters_mutated", lambda: None)()
    changed = []
    for name, (read, write) in _SETTINGS.items():
        now = read()
        if now != state[name]:
            changed.append(f"{name} {now!r} (was {state[name]!r})")
            write(state[name])
    return changed


def _rule_taking_calls(rule: Callable) -> Callable:
    """The rule as ``rule(x, result, func, args, kwargs)``: a rule that names ``func``
    (or takes more than two arguments) is given the call; a two-argument
    ``rule(x, result)`` is not."""
    try:
        params = inspect.signature(rule).parameters.values()
    except (TypeError, ValueError):
        return lambda x, result, func, args, kwargs: rule(x, result)
    names = {p.name for p in params}
    if any(p.kind is p.VAR_KEYWORD for p in params) or "func" in names:
        return lambda x, result, func, args, kwargs: rule(
            x, result, func=func, args=args, kwargs=kwargs
        )
    return lambda x, result, func, args, kwargs: rule(x, result)


def same_value(a: Any, b: Any, unknown: bool = True) -> bool:
    """Whether a and b hold the same value: tensors by dtype, shape and values (NaN
    equal to NaN), containers element by element, NumPy arrays and other objects whose
    ``==`` answers elementwise by every element, objects whose ``==`` raises by their
    pickled bytes; `unknown` where none of that can tell."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
            return False
        with torch._C.DisableTorchFunctionSubclass():
            if a.shape != b.shape or a.dtype != b.dtype or a.layout != b.layout:
                return False
            if a.layout != torch.strided:
                a, b = a.to_dense(), b.to_dense()
            if torch.equal(a, b):
                return True
            floating = a.is_floating_point() or a.is_complex()  # (NaN equals NaN here)
            return floating and bool(torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k], unknown) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(same_value(x, y, unknown) for x, y in zip(a, b))
        )
    if a is b:
        return True
    try:
        equal = a == b
        if isinstance(equal, bool):
            return equal
        if getattr(a, "shape", None) != getattr(b, "shape", None):
            return False  # (arrays of other shapes: == may broadcast)
        if hasattr(equal, "all"):  # elementwise (NumPy): every element, NaN equal to NaN
            if bool(equal.all()):
                return True
            import numpy

            return bool(numpy.array_equal(a, b, equal_nan=True))
        return bool(equal)
    except Exception:
        pass
    try:
        import pickle

        return pickle.dumps(a) == pickle.dumps(b)
    except Exception:
        return unknown


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
