"""Checks for tensor types, as ``torch.library.opcheck`` is for operators.

:func:`check_type` runs PyTorch's own operator samples (``op_db``, which needs the
``expecttest`` package) through a type and compares every answer with the plain
computation (also on non-contiguous layouts and under type promotion), then checks that
calls leave their inputs unchanged and unreferenced, the method and operator forms,
autograd, the edge conditions samples never set (grad, conjugate bits, views, inference
mode, random functions, unknown types), serialization, threads and ``torch.compile``
(and, asked for by name, that batches keep each sample's state under every index form).
The type is one ``TypeSpec`` (:class:`tensortools.coverage.spec.TypeSpec`, importable
from here too: the object the coverage report reads); the checks
are a registry (:func:`register_check` adds one of your own); each check's options are
one mapping. It raises one :class:`TypeCheckError` that lists every failure (check,
function, sample, what differed). :func:`parametrize` gives one pytest test per
function, so a suite reports failures by name. :func:`export_report` and
:func:`overhead_report` report what ``torch.export`` does with an instance and what common
calls cost against plain torch. ``docs/testing-a-type.md`` has a worked example.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from tensortools._optional import tool_import
from tensortools._spec import TypeSpec
from tensortools.testing import steps
from tensortools.testing.checks import (
    Check,
    check_names,
    default_checks,
    known_checks,
    register_check,
    resolve_options,
    unregister_check,
)
from tensortools.testing.hooks import (
    Make,
    coverage_spec,
    options_from_coverage_hooks,
    own_rule,
    registered_spec,
)
from tensortools.testing.legacy import translate
from tensortools.testing.report import (
    Failure,
    FailureGroup,
    TypeCheckError,
    TypeCheckReport,
    Unsupported,
)
from tensortools.testing.run import Run, _process_state, _restore_process_state
from tensortools.testing.samples import Sample, SampleHook, function_names
from tensortools.testing.surveys import ExportReport, OverheadReport, export_report, overhead_report

__all__ = [
    "CHECKS",
    "Check",
    "DEFAULT_CHECKS",
    "ON_REQUEST",
    "ExportReport",
    "Failure",
    "FailureGroup",
    "TypeCheckError",
    "TypeCheckReport",
    "Sample",
    "Unsupported",
    "check_names",
    "check_type",
    "coverage_spec",
    "default_checks",
    "parametrize",
    "function_names",
    "options_from_coverage_hooks",
    "OverheadReport",
    "export_report",
    "overhead_report",
    "register_check",
    "unregister_check",
]

#: The kit's own checks, in the order they run (:func:`check_names`: with users' too).
CHECKS = check_names()

#: Checks run only when named: ``compile`` (each function compiles afresh, about ten
#: minutes per backend over all of op_db, against a minute for the rest) and ``batches``
#: (only a type with batch semantics passes it).
ON_REQUEST = tuple(c for c in CHECKS if c not in default_checks())

#: The kit's checks :func:`check_type` runs unless told which: every one but
#: :data:`ON_REQUEST` (:func:`default_checks`: with users' default checks too).
DEFAULT_CHECKS = default_checks()

#: Seconds a run takes before its progress bar is drawn (shorter runs show none).
PROGRESS_DELAY = 3.0


def check_type(
    spec: TypeSpec | type,
    make: Make | None = None,
    *,
    checks: Iterable[str] | None = None,
    ops: Iterable[str] | None = None,
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    max_samples: int | None = 2,
    instances: Sequence[str] = ("every", "first"),
    samples: SampleHook | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: bool = True,
    raise_on_failure: bool = True,
    **deprecated: Any,
) -> TypeCheckReport:
    """Check that a type behaves like the plain computation wherever PyTorch's samples
    reach.

    `spec` is the type's :class:`~tensortools.coverage.spec.TypeSpec`
    (``TypeSpec(cls, make=..., densify=..., rule=...)``), or the class: with `make` as
    ``TypeSpec(cls, make=make)``, alone the spec the class registered
    (:func:`tensortools.coverage.spec.register`, the one the coverage report reads). The
    spec's ``make(plain_tensor)`` builds an instance: None
    where the type has no stand-in for that tensor (it stays plain), or it raises
    :class:`Unsupported` to decline the sample (a dtype, shape or layout the type does
    not hold): a sample that holds no instance is listed in the report's ``declined``,
    not failed; a `make` that raises anything else fails that sample alone (check
    ``make``), and a run in which `make` gave no instance at all fails. `make` runs once
    per sample and check: the plain tensors a check compares with are those its
    instances stand for. A structured type gives ``densify(instance)``, the plain tensor
    it stands for (default: the instance as a plain tensor). ``reference``, when given,
    computes the expected result from ``(function, plain input, args, kwargs)``; by
    default the function runs on the plain input. ``rule(instance, result)`` says what
    breaks the type's rules in a result ('' when nothing does); `instance` is the call's
    first instance; a rule with parameters named ``func``, ``args`` and ``kwargs`` is
    also given the call (``args`` with the input first; ``func`` None and ``args`` empty
    for a result that is not one call's, as a round trip's), so that "flip flips the mask
    too" can be said. Without a rule, floating-point results must be of the type, and
    where the class registered a rule, the ``types`` check also judges results by it: on
    the run's own instances where the rule holds for them, else on a second run of the
    sample on instances the registered ``make`` makes (a rule written for those
    instances, as MetadataTensor's is for their metadata). ``refusals`` (exception
    classes, or a predicate on the exception) are the type's deliberate "not supported"
    answers: such a call, where the plain call succeeds, is listed in the report's
    ``refused``, not as a failure (none by default: a handler bug raises TypeError too).

    `ops` restricts the functions (op_db names such as ``"exp"``, ``"flip"``); `dtypes`
    and `max_samples` (2 by default; None: every sample op_db has) pick each function's
    samples (generated once per process, from a seeded generator, and shared by the
    checks). A function named in `ops` that has no sample to run is a failure (it would
    otherwise pass untested). Once per function, ``values``, ``types`` and ``mutation``
    also judge three forms no sample takes: an empty instance (dim 0 of size 0), Python
    numbers in place of the further tensors (``clamp(x, 0.1, 0.8)``), and the ``out=``
    form (it returns its ``out``, an instance, holding the plain values, and follows the
    rule). `samples`, a function of one :class:`Sample`, shapes them: it returns the
    sample to run (``s.map_tensors(fn)``, say), several, or None to leave it out.

    `instances` says which of a sample's tensors become instances, wherever they sit (the
    input, a list given as the input as in ``torch.cat([a, b])``, further arguments and
    lists among them): each of ``"every"`` (all at once), ``"first"`` (the first alone, the
    others plain) and ``"each"`` (each alone in turn) runs the sample once more, unless it
    picks the same tensors as an earlier one. Results that are lists or tuples of tensors
    (``split``, ``meshgrid``) are compared element by element. ``binding`` and
    ``compile`` run only the samples whose instances all sit in the input.

    `checks` names registered checks (:func:`check_names`; by default
    :func:`default_checks`: all but ``compile``, which costs ten times the rest, and
    ``batches``, which a type without batch semantics cannot pass; name them to run
    them); :func:`register_check` adds one. `options` sets the checks' options, one
    mapping per check: ``{"autograd": {"gradcheck_samples": 1}, "serialization":
    {"samples": 1}, "compile": {"samples": 1, "backends": ("eager", "aot_eager")}}``
    (those are the defaults; a check or option not registered is a ValueError naming
    it). The kit's checks:

    - ``values``: the sample on the type equals the plain run (the sample dtype's
      tolerance); the in-place form has the same effect;
    - ``types``: results follow the type's rules (`rule`), the instance an in-place form
      returns too (judged against the instance as the call found it);
    - ``layouts``: each function's first sample, its instances made of non-contiguous
      tensors (transposed where they have two dims or more, every other element of a
      larger tensor, a floating-point tensor expanded from a size-1 slice), equals the
      plain run on tensors of the same layout (op_db's samples are contiguous);
    - ``mutation``: each sample leaves its instances as they were: the values they
      stand for, size, strides, dtype, ``requires_grad`` and their attributes (objects
      without an ``==`` of their own compared by identity), less
      the spec's ``volatile_attrs`` (names of attributes the type changes on its own, as a cache);
      in-place and ``out=`` forms, and calls whose plain run changes its input, are left
      out;
    - ``promotion``: each function's first int64 and bool sample, its first float32
      sample with the other floating-point tensors as float64, int64, a 0-d float64
      tensor or a Python number, and its int64 sample with the other int64 tensors as a
      float Python number or a float32 tensor (``int * 2.5``), give the plain run's
      result dtype and values;
    - ``aliases``: method, operator and reflected-operator forms, and the method's
      varargs spelling (``x.flip(0, 1)`` for ``dims=(0, 1)``), agree with the function;
    - ``binding``: the function and method forms with their positional arguments passed
      by torch's names (``torch.linalg.det(A=x)``, ``x.sum(dim=0)``) and by the NumPy
      aliases torch accepts (``axis=``, ``keepdims=``) agree with the positional call;
    - ``autograd``: the input's gradient equals the plain one; ``torch.autograd.gradcheck``
      (fast mode) in float64 on the first ``gradcheck_samples`` samples of each function
      (option; for a type with ``densify`` the gradients are of different tensors: not
      compared);
    - ``edges``: the conditions op_db's samples never set, each against the plain
      computation: instances of tensors requiring grad (values, ``requires_grad`` and
      ``grad_fn`` of the results; an instance that hides its tensor's ``requires_grad``),
      calls under ``torch.inference_mode()`` (values, inference results), complex
      instances with the conjugate or negative bit (values; ``resolve_conj``), each on
      the first sample of the functions named in `ops`, or of
      :data:`~tensortools.testing.edges.EDGE_FUNCTIONS` (38 common ones) where `ops` is
      not given; and fixed calls on a 4x4 instance: 25 views (a write through the view
      reaches the base and back; the spec's ``views_copy=True`` says the type's views are copies,
      listed in the report's ``copies``, not failed, as are results made in inference
      mode where plain's are views of their input), random functions (the same values
      and generator state, ``generator=`` too), and calls mixed with a type that
      overrides nothing (they end in TypeError; the type's ``__torch_function__``
      answers NotImplemented or passes the call on to it);
    - ``serialization``: pickle, deepcopy and ``torch.save`` + ``torch.load(weights_only=
      True)`` give back an instance of the type with equal values and attributes that
      follows the rule (option ``samples`` per function); state crafted to run code
      when loaded is refused by ``weights_only`` loading, never run; the spec's ``safe_globals``
      (classes, as for ``torch.serialization.safe_globals``) are allowed to load during
      this check, for a type that does not declare itself with
      ``torch.serialization.add_safe_globals``;
    - ``leaks``: after each function's first sample on fresh instances, its result
      dropped, nothing keeps the instances, their memory (a plain view of their data)
      or the tensors they hold as attributes alive;
    - ``threads``: up to 16 deterministic calls, each on one instance shared by 8 threads
      and repeated, give the eager results, and each of the spec's ``settings`` (name ->
      (context-manager factory, reader of the current value)) restores its value and never
      leaks into another thread;
    - ``compile``: the first ``samples`` (option) of each function under
      ``torch.compile`` with each of the option ``backends`` (``"eager"`` and
      ``"aot_eager"`` by default; add ``"inductor"`` for the full form) equal eager on
      the same instances (each compiles afresh: this check is the slow one); torch's
      logs are held back while it runs, and a failure gives the real exception;
    - ``batches`` (only when named): six samples of shape (2, 3), sample k holding the
      values ``6k .. 6k+5`` (of ``dtypes[0]``), each made an instance by `make` (whose
      state must tell them apart: ``{"id": t.flatten()[0].item()}``, say), collated by
      the spec's ``collate_fn`` (``torch.utils.data.default_collate`` by default) all at once and
      three at a time through a ``DataLoader``, the loader's two batches joined by
      ``torch.cat`` (the second first); on each batch, ``b[1]``, ``b[-1]``,
      ``b[-3:-1]``, ``b[[2, 0, 2]]``, a tensor index, a bool mask, ``b.unbind(0)``,
      iteration and a ``torch.save``/``torch.load`` round trip (``weights_only=True``
      where the type loads so, with ``safe_globals``) give rows of the type (with `rule`,
      what the rule accepts), each holding the values and the state of the sample it
      came from. A sample's state is the spec's ``sample_state(instance)`` where given, else its
      attributes (a row may hold more, as a batch's bookkeeping); samples that hold no
      state, or that `make` declines, are listed in ``declined``. The collated batch
      joined or indexed with a tensor of a type that overrides nothing ends in torch's
      TypeError, as a plain batch does.

    Each check puts back the random generator (the checks seed it), warning filters and
    torch's process-wide settings (default dtype, gradient mode, deterministic
    algorithms, anomaly detection, threads) as they were; a setting the type's calls
    changed is a failure.

    `progress` shows a bar of the samples on stderr (tqdm, where installed) once the run
    has taken :data:`PROGRESS_DELAY` seconds. The keywords of earlier versions
    (``rule=``, ``gradcheck_samples=``, a ``(make, densify)`` pair, ...) still work, each
    with a DeprecationWarning naming what to write instead.

    Returns a :class:`TypeCheckReport` (``summary()``: the failures grouped by cause);
    raises a :class:`TypeCheckError` with that summary unless ``raise_on_failure=False``.
    """
    spec, densify = _the_spec(spec, make)
    spec, options = translate(spec, densify, options, deprecated)
    cls = spec.cls
    checks = default_checks() if checks is None else known_checks(checks)
    options = resolve_options(options)
    steps.validate_options(options)
    if spec.make_for(cls) is None:
        raise TypeError(
            f"check_type: no 'make' for {cls.__name__}: give TypeSpec({cls.__name__}, "
            "make=...) (or register one with tensortools.coverage.spec.register)"
        )
    if max_samples is not None:
        if not isinstance(max_samples, int) or isinstance(max_samples, bool):
            raise TypeError(
                f"check_type: 'max_samples' must be an int or None (all), got {max_samples!r}"
            )
        if max_samples < 1:
            raise ValueError(
                f"check_type: 'max_samples' must be >= 1 or None (all), got {max_samples}"
            )
    if samples is not None and not callable(samples):
        raise TypeError(
            f"check_type: 'samples' must be a function of a Sample, got {type(samples).__name__}"
        )
    started = time.perf_counter()
    run = Run.of(spec, spec.densify or _as_plain)
    if spec.rule is None:
        run.own_rule = own_rule(cls)
    run.checks, run.dtypes, run.max_samples = checks, tuple(dtypes), max_samples
    run.ops, run.sample_hook = (None if ops is None else tuple(ops)), samples
    # (the random generator, which the checks seed, and torch's settings, which a type's
    # calls may change, are put back after the run: no code after it inherits them)
    state = _process_state()
    try:
        ran = steps.run_checks(
            run, run.ops, max_samples, instances, options, progress, PROGRESS_DELAY
        )
    finally:
        _restore_process_state(state)
    if not run.made and (ran or "modules" in checks):
        # (a run on no instance checks nothing: it must not pass)
        run.failures.append(
            Failure(
                "make",
                "(type)",
                "-",
                f"make gave no {cls.__name__} for any sample: nothing was checked "
                f"({len(run.declined)} samples declined)",
            )
        )
    report = TypeCheckReport(
        cls.__name__,
        checks,
        sorted({s.name for s in ran}),
        len(ran),
        run.failures,
        time.perf_counter() - started,
        run.refused,
        run.declined,
        run.upstream,
        run.copies,
    )
    if raise_on_failure and report.failures:
        raise TypeCheckError(report)
    return report


def _the_spec(spec: Any, make: Any) -> tuple[TypeSpec, Callable | None]:
    """check_type's first two arguments as one spec, and a ``(make, densify)`` pair's
    densify (None where none was given: an old form, translated with a warning)."""
    if isinstance(spec, TypeSpec):
        if make is not None:
            raise TypeError("check_type: give 'make' in the TypeSpec, not beside it")
        if spec.cls is None:
            raise TypeError("check_type: the TypeSpec names no class ('cls')")
        return spec, None
    if not isinstance(spec, type):
        raise TypeError(
            f"check_type: 'spec' must be a TypeSpec or a class, got {type(spec).__name__}"
        )
    if make is None:
        return registered_spec(spec), None
    densify = None
    if isinstance(make, tuple):
        if len(make) != 2:
            raise TypeError("check_type: 'make' as a pair must be (make, densify)")
        make, densify = make
    if not callable(make):
        raise TypeError(f"check_type: 'make' must be callable, got {type(make).__name__}")
    return TypeSpec(spec, make=make), densify


def _as_plain(x: Any) -> Tensor:
    return x.as_subclass(Tensor) if isinstance(x, Tensor) else x.tensor()


def parametrize(
    spec: TypeSpec | type,
    make: Make | None = None,
    *,
    ops: Iterable[str] | None = None,
    **options: Any,
):
    """A pytest decorator giving one test per function: the test takes an argument
    ``check``, a function that runs :func:`check_type` (with `spec`, `make` and `options`)
    on that function alone::

        @tensortools.testing.parametrize(TypeSpec(Quantity, make=Quantity.wrap), ops=["add"])
        def test_quantity(check):
            check()
    """
    pytest = tool_import("pytest", "tensortools.testing.parametrize")
    names = function_names(ops, options.get("dtypes", (torch.float32,)))

    def case(name: str) -> Callable[[], TypeCheckReport]:
        return lambda: check_type(spec, make, ops=[name], **options)

    return pytest.mark.parametrize("check", [case(n) for n in names], ids=names)
