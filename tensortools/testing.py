"""Checks for tensor types, as ``torch.library.opcheck`` is for operators.

:func:`check_type` runs PyTorch's own operator samples (``op_db``, which needs the
``expecttest`` package) through a type and compares every answer with the plain
computation, then checks the method and operator forms, autograd, serialization, threads
and ``torch.compile``. It raises one :class:`TypeCheckError` that lists every failure
(check, function, sample, what differed). :func:`parametrize` gives one pytest test per
function, so a suite reports failures by name. ``docs/testing-a-type.md`` has a worked
example.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import pickle
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves, tree_map

from tensortools.coverage.samples import _UNDEFINED_VALUES, _compare, _plain, _seeded

__all__ = [
    "CHECKS",
    "Failure",
    "TypeCheckError",
    "TypeCheckReport",
    "check_type",
    "parametrize",
    "function_names",
    "options_from_coverage_hooks",
]

#: Every check, in the order they run.
CHECKS = ("values", "types", "aliases", "autograd", "serialization", "threads", "compile")

Make = Callable[[Tensor], Any]
Settings = Mapping[str, tuple[Callable[[], AbstractContextManager], Callable[[], Any]]]


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


@dataclasses.dataclass
class _Sample:
    name: str
    info: Any  # the OpInfo
    index: int
    input: Tensor
    args: tuple
    kwargs: dict

    @property
    def label(self) -> str:
        return f"{self.name} sample {self.index} {self.input.dtype} {tuple(self.input.shape)}"


def _samples(
    ops: Iterable[str] | None, dtypes: Sequence[torch.dtype], max_samples: int
) -> Iterator[_Sample]:
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = None if ops is None else set(ops)
    for info in op_db:
        if wanted is not None and info.name not in wanted:
            continue
        for dtype in dtypes:
            if dtype not in info.supported_dtypes("cpu"):
                continue
            try:
                for i, s in enumerate(info.sample_inputs("cpu", dtype)):
                    if i >= max_samples:
                        break
                    if isinstance(s.input, Tensor) and s.input.layout == torch.strided:
                        yield _Sample(info.name, info, i, s.input, tuple(s.args), dict(s.kwargs))
            except Exception:  # a sample generator that fails on this build
                continue


def function_names(
    ops: Iterable[str] | None = None, dtypes: Sequence[torch.dtype] = (torch.float32,)
) -> list[str]:
    """The op_db names that have a sample :func:`check_type` can run for `dtypes` (all,
    or those among `ops`)."""
    return sorted({s.name for s in _samples(ops, dtypes, 1)})


class _Run:
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

    def refuse(self, check: str, s: _Sample, err: BaseException) -> None:
        first = str(err).splitlines()[0] if str(err) else ""
        self.refused.append(Failure(check, s.name, s.label, f"{type(err).__name__}: {first}"[:300]))

    def guarded(self, check: str, sample: _Sample | None, step: Callable[[], None]) -> None:
        """Run one check; if `make`, `densify` or `rule` (or the check itself) raises where
        it should not, that is a failure of this check, not a crash of the run."""
        try:
            step()
        except Exception as err:
            self.fail(check, sample, f"the check could not run: {type(err).__name__}: {err}")

    def fail(self, check: str, sample: _Sample | None, reason: str) -> None:
        name = sample.name if sample else "(type)"
        label = sample.label if sample else "-"
        self.failures.append(Failure(check, name, label, reason[:300]))

    # -- helpers -----------------------------------------------------------------------

    def plain(self, obj: Any) -> Any:
        def one(x):
            return self.densify(x) if isinstance(x, self.cls) else x

        return _plain(tree_map(one, obj, is_leaf=lambda x: isinstance(x, torch.Size)))

    def want(self, fn: Callable, s: _Sample, inp: Tensor) -> Any:
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

    def typed(self, s: _Sample) -> Any:
        return self.make(s.input.detach().clone())

    def stands_for(self, s: _Sample) -> Tensor | None:
        """The plain tensor an instance made from the sample's input stands for (the input
        itself for a wrapper; the dense matrix for a structured type)."""
        x = self.typed(s)
        return None if x is None else self.plain(x).detach().clone()

    # -- the checks --------------------------------------------------------------------

    def values_and_types(self, s: _Sample, checks: tuple[str, ...]) -> None:
        fn = s.info.op
        x, plain = self.typed(s), self.stands_for(s)
        if x is None:
            return
        try:
            want = _seeded(lambda: self.want(fn, s, plain))
        except Exception:
            return  # the plain call refuses the sample: nothing to compare
        try:
            got = _seeded(lambda: fn(x, *s.args, **s.kwargs))
        except Exception as err:
            if self.refused_call(err):
                self.refuse("values", s, err)
            else:
                self.fail("values", s, f"raised {type(err).__name__}: {err}")
            return
        if "values" in checks:
            values = self.plain(got)
            if s.name in _UNDEFINED_VALUES:  # uninitialised memory: dtype and shape only
                values, want = _tensors(values), _tensors(want)
                want = [w.copy_(g) if g.shape == w.shape else w for g, w in zip(values, want)]
            reason = _compare(values, want, exact=False)
            if reason:
                self.fail("values", s, reason)
            self.in_place(s)
        if "types" in checks:
            problem = self.type_problem(x, got)
            if problem:
                self.fail("types", s, problem)

    def in_place(self, s: _Sample) -> None:
        variant = s.info.inplace_variant
        if variant is None:
            return
        x, plain = self.typed(s), self.stands_for(s)
        try:
            _seeded(lambda: variant(plain, *s.args, **s.kwargs))
        except Exception:
            return
        try:
            returned = _seeded(lambda: _method(x, variant)(*s.args, **s.kwargs))
        except Exception as err:
            if self.refused_call(err):
                self.refuse("values", s, err)
            else:
                self.fail("values", s, f"in-place form raised {type(err).__name__}: {err}")
            return
        reason = _compare(self.plain(x), plain, exact=False)
        if reason:
            self.fail("values", s, "in-place form: " + reason)
        elif returned is not x:
            self.fail("values", s, f"in-place form returned a new {type(returned).__name__}")

    def aliases(self, s: _Sample) -> None:
        """Each other form of the call, on the type, against the same form on the plain
        tensor (so a form is checked even where the function form was refused)."""
        forms = {}
        if s.info.method_variant is not None:
            forms["method"] = lambda x: _method(x, s.info.method_variant)(*s.args, **s.kwargs)
        op = s.info.operator_variant
        if op is not None and len(s.args) == 1 and not s.kwargs:
            other = s.args[0]
            forms["operator"] = lambda x: op(x, other)
            # number <op> x: Python asks the number first, then x's reflected method
            forms["reflected operator"] = lambda x: op(1.5, x)
        for form, call in forms.items():
            try:  # the plain tensor's answer; none where it has no such form either
                expected = _seeded(lambda: call(self.stands_for(s)))
            except Exception:
                continue
            x = self.typed(s)
            try:
                got = _seeded(lambda: call(x))
            except Exception as err:
                if form == "method" and self.refused_call(err):
                    self.refuse("aliases", s, err)
                else:
                    self.fail("aliases", s, f"{form} form raised {type(err).__name__}: {err}")
                continue
            # (uninitialised memory: only the rule, no values)
            same = "" if s.name in _UNDEFINED_VALUES else _compare(self.plain(got), expected, False)
            problem = same or self.type_problem(x, got)
            if problem:
                self.fail("aliases", s, f"{form} form: {problem}")

    def autograd(self, s: _Sample, gradcheck: bool) -> None:
        if self.structured:  # the instance's gradient is not the dense tensor's
            return
        if not (s.info.supports_autograd and s.input.dtype.is_floating_point):
            return
        plain = self.stands_for(s)
        if plain is None:
            return
        plain.requires_grad_()
        try:
            want_out = [t for t in _tensors(_seeded(lambda: s.info.op(plain, *s.args, **s.kwargs)))]
            want_out = [t for t in want_out if t.requires_grad]
            if not want_out:
                return
            weights = [torch.randn_like(t) for t in want_out]
            (want,) = torch.autograd.grad(_dot(want_out, weights), plain, allow_unused=True)
        except Exception:
            return
        x = self.make(s.input.detach().clone())
        if x is None:
            return
        try:
            x.requires_grad_()
            got_out = [t for t in _tensors(_seeded(lambda: s.info.op(x, *s.args, **s.kwargs)))]
            got_out = [t for t in got_out if t.requires_grad]
            if len(got_out) != len(want_out):
                self.fail(
                    "autograd",
                    s,
                    f"{len(got_out)} results require grad where the plain run has {len(want_out)}",
                )
                return
            (got,) = torch.autograd.grad(
                _dot([self.plain(t) for t in got_out], weights), x, allow_unused=True
            )
        except Exception as err:
            self.fail("autograd", s, f"backward raised {type(err).__name__}: {err}")
            return
        if want is None or got is None:
            if (want is None) != (got is None):
                self.fail("autograd", s, f"gradient {got!r} where the plain run gives {want!r}")
            return
        reason = _compare(self.plain(got), want, exact=False)
        if reason:
            self.fail("autograd", s, "gradient: " + reason)
        if gradcheck:
            self.gradcheck(s)

    def gradcheck(self, s: _Sample) -> None:
        """gradcheck through the type on the function's first float64 sample, where the
        plain function passes gradcheck on it (op_db's own float64 samples: converting a
        float32 one can make it invalid, e.g. no longer positive definite)."""
        try:
            sample = next(iter(s.info.sample_inputs("cpu", torch.float64)))
        except Exception:
            return
        if not isinstance(sample.input, Tensor) or sample.input.layout != torch.strided:
            return
        x64 = sample.input.detach().clone().requires_grad_()
        args, kwargs = tuple(sample.args), dict(sample.kwargs)

        def outputs(t):
            return tuple(
                t for t in _tensors(s.info.op(t, *args, **kwargs)) if t.is_floating_point()
            )

        try:
            if not torch.autograd.gradcheck(outputs, (x64,), raise_exception=False, fast_mode=True):
                return  # the plain function does not pass it on this sample either
        except Exception:
            return

        def through_type(t):
            return tuple(self.plain(o) for o in outputs(self.make(t)))

        try:
            torch.autograd.gradcheck(through_type, (x64,), raise_exception=True, fast_mode=True)
        except Exception as err:
            self.fail("autograd", s, f"gradcheck (float64): {str(err).splitlines()[0]}")

    def serialization(self, s: _Sample) -> None:
        x = self.typed(s)
        if x is None:
            return
        rounds = {
            "pickle": lambda: pickle.loads(pickle.dumps(x)),
            "deepcopy": lambda: copy.deepcopy(x),
            "torch.save/torch.load(weights_only=True)": lambda: _save_load(x),
        }
        for form, call in rounds.items():
            try:
                back = call()
            except Exception as err:
                self.fail("serialization", s, f"{form} raised {type(err).__name__}: {err}")
                continue
            if type(back) is not type(x):
                self.fail("serialization", s, f"{form} gave a {type(back).__name__}")
                continue
            reason = (
                _compare(self.plain(back), self.plain(x), exact=True)
                or _state_differs(back, x)
                or self.type_problem(x, back)
            )
            if reason:
                self.fail("serialization", s, f"{form}: {reason}")
        self.crafted_state_refused(s)

    def crafted_state_refused(self, s: _Sample) -> None:
        """An instance whose state holds an object that runs code when unpickled: loading
        it with ``torch.load(weights_only=True)`` must refuse, never run it."""
        x = self.typed(s)
        if x is None or not hasattr(x, "__dict__"):
            return
        try:
            x.__dict__["crafted"] = _Crafted()
            buf = io.BytesIO()
            torch.save(x, buf)
        except Exception:
            return  # the type will not even save such state
        _Crafted.ran = False
        buf.seek(0)
        try:
            back = torch.load(buf, weights_only=True)
        except pickle.UnpicklingError:
            pass
        except Exception as err:
            self.fail("serialization", s, f"crafted state: {type(err).__name__}: {err}")
        else:
            if "crafted" in getattr(back, "__dict__", {}):  # (a type may not save it)
                self.fail("serialization", s, "crafted state accepted by weights_only loading")
        if _Crafted.ran:
            self.fail("serialization", s, "crafted state ran code while loading")

    def threads(self, samples: list[_Sample]) -> None:
        calls = []
        for s in samples:
            if len(calls) == 16:
                break
            if _seeds_itself(s.info.op):
                continue  # it reseeds the generator all threads share: a race of its own
            try:
                want = self.plain(
                    _seeded(lambda s=s: s.info.op(self.typed(s), *s.args, **s.kwargs))
                )
                torch.default_generator.manual_seed(1)
                again = self.plain(s.info.op(self.typed(s), *s.args, **s.kwargs))
            except Exception:
                continue
            if _compare(again, want, exact=True):
                continue  # random results (the generator is shared by the threads)
            calls.append((s, want))
        errors: list[tuple[_Sample | None, str]] = []
        start = threading.Barrier(8, timeout=60)
        # One instance per call, shared by every thread (calls that change their input in
        # place, such as op_db's lambdas around in-place methods, get their own).
        shared = {id(s): self.typed(s) for s, _ in calls}

        def instance(s: _Sample) -> Any:
            return self.typed(s) if s.info.name.endswith("_") else shared[id(s)]

        def work(k: int) -> None:
            try:
                start.wait()
            except threading.BrokenBarrierError:
                return
            order = calls[k % max(1, len(calls)) :] + calls[: k % max(1, len(calls))]
            for s, want in order * 4:
                try:
                    got = self.plain(s.info.op(instance(s), *s.args, **s.kwargs))
                except Exception as err:
                    errors.append((s, f"raised {type(err).__name__} in a thread: {err}"))
                    continue
                reason = _compare(got, want, exact=False)
                if reason:
                    errors.append((s, "in a thread: " + reason))

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s, reason in errors[:10]:
            self.fail("threads", s, reason)
        for name, (enter, read) in self.settings.items():
            self.setting_restores(name, enter, read)

    def setting_restores(self, name: str, enter: Callable, read: Callable) -> None:
        """A setting's block, in 8 threads at once: inside, each sees its own value; after,
        the value is what it was; other threads never see a block they are not in."""
        before = read()
        problems: list[str] = []
        inside = threading.Barrier(8, timeout=30)

        def work() -> None:
            try:
                with enter():
                    inner = read()
                    inside.wait()
                    if read() != inner:
                        problems.append(
                            f"changed by another thread's block ({inner!r} -> {read()!r})"
                        )
                    inside.wait()
            except threading.BrokenBarrierError:
                problems.append("a thread's block did not reach the others' (one raised?)")
                return
            except Exception as err:
                inside.abort()
                problems.append(f"entering or leaving the block raised {type(err).__name__}: {err}")
                return
            if read() != before:
                problems.append(f"not restored in the thread: {read()!r} instead of {before!r}")

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if read() != before:
            problems.append(f"not restored: {read()!r} instead of {before!r}")
        for p in sorted(set(problems)):
            self.failures.append(Failure("threads", f"setting {name}", "8 threads", p))

    def compile(self, s: _Sample) -> None:
        try:
            want = self.plain(_seeded(lambda: s.info.op(self.typed(s), *s.args, **s.kwargs)))
        except Exception:
            return
        torch._dynamo.reset()
        fn = torch.compile(lambda t: s.info.op(t, *s.args, **s.kwargs), backend="eager")
        x = self.typed(s)
        try:
            got = _seeded(lambda: fn(x))
        except Exception as err:
            self.fail("compile", s, f"raised {type(err).__name__}: {str(err).splitlines()[0]}")
            return
        reason = _compare(self.plain(got), want, exact=False) or self.type_problem(x, got)
        if reason:
            self.fail("compile", s, reason)


def _state_differs(back: Any, x: Any) -> str:
    """'' when back's attributes (its __dict__) equal x's, else which differ."""
    a, b = getattr(back, "__dict__", {}), getattr(x, "__dict__", {})
    for key in sorted(set(a) | set(b), key=str):
        try:
            same = key in a and key in b and bool(a[key] == b[key])
        except Exception:  # tensors or objects without a plain ==
            same = key in a and key in b
        if not same:
            got, want = a.get(key, "(missing)"), b.get(key, "(missing)")
            return f"attribute {key!r} is {got!r} instead of {want!r}"
    return ""


def _seeds_itself(fn: Callable) -> bool:
    """Whether an op_db function seeds the global generator for each call (its random
    samples do, to be reproducible)."""
    code = getattr(fn, "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names


class _Crafted:
    """State that runs code when unpickled (it only records that it ran)."""

    ran = False

    def __reduce__(self):
        return (_crafted_ran, ())


def _crafted_ran() -> None:
    _Crafted.ran = True


def _tensors(obj: Any) -> list[Tensor]:
    return [
        t
        for t in tree_leaves(obj, is_leaf=lambda x: isinstance(x, torch.Size))
        if isinstance(t, Tensor)
    ]


def _method(x: Any, variant: Callable) -> Callable:
    """The bound method `variant` (an unbound ``torch.Tensor`` method) names, on x: how
    user code calls it, on a subclass or on a tensor-like type alike."""
    return getattr(x, getattr(variant, "__name__", ""), None) or (
        lambda *a, **k: variant(x, *a, **k)
    )


def _dot(outs: list[Tensor], weights: list[Tensor]) -> Tensor:
    return sum((o.as_subclass(Tensor) * w).sum() for o, w in zip(outs, weights))


def _save_load(x: Any) -> Any:
    buf = io.BytesIO()
    torch.save(x, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def check_type(
    cls: type,
    make: Make | tuple[Make, Callable[[Any], Tensor]],
    *,
    reference: Callable[[Callable, Tensor, tuple, dict], Any] | None = None,
    rule: Callable[[Any, Any], str] | None = None,
    checks: Iterable[str] = CHECKS,
    ops: Iterable[str] | None = None,
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    max_samples: int = 2,
    gradcheck_samples: int = 1,
    compile_samples: int = 1,
    serialization_samples: int = 1,
    settings: Settings | None = None,
    refusals: tuple[type[BaseException], ...] | Callable[[BaseException], bool] = (),
    raise_on_failure: bool = True,
) -> TypeCheckReport:
    """Check that `cls` behaves like the plain computation wherever PyTorch's samples reach.

    `make(plain_tensor)` builds an instance (None where the type has no stand-in for that
    tensor); a structured type passes ``(make, densify)``, ``densify(instance)`` giving the
    plain tensor it stands for (default: the instance as a plain tensor). `reference`,
    when given, computes the expected result from ``(function, plain input, args,
    kwargs)``; by default the function runs on the plain input. `rule(instance, result)`
    says what breaks the type's rules in a result ('' when nothing does; by default:
    floating-point results must be of the type). `ops` restricts the
    functions (op_db names such as ``"exp"``, ``"flip"``); `dtypes` and `max_samples`
    pick each function's samples. `checks` is any of :data:`CHECKS`:

    - ``values``: the sample on the type equals the plain run (the sample dtype's
      tolerance); the in-place form has the same effect;
    - ``types``: results follow the type's rules (`rule`);
    - ``aliases``: method, operator and reflected-operator forms agree with the function;
    - ``autograd``: the input's gradient equals the plain one; ``torch.autograd.gradcheck``
      (fast mode) in float64 on the first `gradcheck_samples` samples of each function (for a
      ``(make, densify)`` type the gradients are of different tensors: not compared);
    - ``serialization``: pickle, deepcopy and ``torch.save`` + ``torch.load(weights_only=
      True)`` give back an instance of the type with equal values and attributes that
      follows the rule (`serialization_samples` per function); state crafted to run code
      when loaded is refused by ``weights_only`` loading, never run;
    - ``threads``: up to 16 deterministic calls, each on one instance shared by 8 threads
      and repeated, give the eager results, and
      each of `settings` (name -> (context-manager factory, reader of the current value))
      restores its value and never leaks into another thread;
    - ``compile``: the first `compile_samples` samples of each function under
      ``torch.compile`` equal eager (each compiles afresh: this check is the slow one).

    A function named in `ops` that has no sample to run is a failure (it would otherwise
    pass untested).

    `refusals` (exception classes, or a predicate on the exception) are the type's
    deliberate "not supported" answers: such a call, where the plain call succeeds, is
    listed in the report's ``refused``, not as a failure. None by default: a handler bug
    raises TypeError too.

    Returns a :class:`TypeCheckReport`; raises a :class:`TypeCheckError` listing every
    failure unless ``raise_on_failure=False``.
    """
    checks = tuple(checks)
    unknown = [c for c in checks if c not in CHECKS]
    if unknown:
        raise ValueError(f"check_type: unknown checks {unknown}; known: {list(CHECKS)}")
    structured = isinstance(make, tuple)
    if structured:
        make, densify = make
    else:

        def densify(x: Any) -> Tensor:
            return x.as_subclass(Tensor) if isinstance(x, Tensor) else x.tensor()

    if not callable(make):
        raise TypeError(f"check_type: 'make' must be callable, got {type(make).__name__}")
    started = time.perf_counter()
    run = _Run(cls, make, densify, reference, rule, settings, refusals)
    run.structured = structured
    samples = list(_samples(ops, dtypes, max_samples))
    if ops is not None:  # a function asked for and never run must not pass unseen
        for name in sorted(set(ops) - {s.name for s in samples}):
            run.failures.append(
                Failure("values", name, "-", "no op_db sample of this name could be run")
            )
    seen: dict[str, int] = {}  # samples so far per function: the costly checks take the first
    for s in samples:
        k = seen[s.name] = seen.get(s.name, -1) + 1
        steps = [
            (
                "values",
                lambda: run.values_and_types(s, checks),
                "values" in checks or "types" in checks,
            ),
            ("aliases", lambda: run.aliases(s), "aliases" in checks),
            (
                "autograd",
                lambda: run.autograd(s, gradcheck=k < gradcheck_samples),
                "autograd" in checks,
            ),
            (
                "serialization",
                lambda: run.serialization(s),
                "serialization" in checks and k < serialization_samples,
            ),
            ("compile", lambda: run.compile(s), "compile" in checks and k < compile_samples),
        ]
        for check, step, wanted in steps:
            if wanted:
                run.guarded(check, s, step)
    if "threads" in checks:
        run.guarded("threads", None, lambda: run.threads(samples))
    report = TypeCheckReport(
        cls.__name__,
        checks,
        sorted({s.name for s in samples}),
        len(samples),
        run.failures,
        time.perf_counter() - started,
        run.refused,
    )
    if raise_on_failure and report.failures:
        raise TypeCheckError(report)
    return report


def options_from_coverage_hooks(cls: type) -> dict[str, Any]:
    """``make`` and ``rule`` for :func:`check_type` from the hooks a type on
    :mod:`tensortools.dispatch` gives the coverage report (``coverage_substitute`` stands
    an instance in for a tensor, ``coverage_result_problem`` judges a result): what
    ``python -m tensortools.coverage TYPE --check`` runs."""

    def make(t: Tensor) -> Any:
        substituted = cls.coverage_substitute(t, (), {})
        return None if substituted is None else substituted[0]

    # The coverage report counts a TypeError as the type refusing the call: so does this.
    return {
        "make": make,
        "rule": lambda x, result: cls.coverage_result_problem(result),
        "refusals": (TypeError,),
    }


def parametrize(cls: type, make: Any, *, ops: Iterable[str] | None = None, **options: Any):
    """A pytest decorator giving one test per function: the test takes an argument
    ``check``, a function that runs :func:`check_type` on that function alone::

        @tensortools.testing.parametrize(Quantity, Quantity.wrap, ops=["add", "exp"])
        def test_quantity(check):
            check()
    """
    import pytest

    names = function_names(ops, options.get("dtypes", (torch.float32,)))

    def case(name: str) -> Callable[[], TypeCheckReport]:
        return lambda: check_type(cls, make, ops=[name], **options)

    return pytest.mark.parametrize("check", [case(n) for n in names], ids=names)
