"""Checks for tensor types, as ``torch.library.opcheck`` is for operators.

:func:`check_type` runs PyTorch's own operator samples (``op_db``, which needs the
``expecttest`` package) through a type and compares every answer with the plain
computation (also on non-contiguous layouts and under type promotion), then checks that
calls leave their inputs unchanged and unreferenced, the method and operator forms,
autograd, the edge conditions samples never set (grad, conjugate bits, views, inference
mode, random functions, unknown types), serialization, threads and ``torch.compile``
(and, asked for by name, that batches keep each sample's state under every index form).
It raises one
:class:`TypeCheckError` that lists every failure (check, function, sample, what
differed). :func:`parametrize` gives one pytest test per function, so a suite reports
failures by name. :func:`export_report` and :func:`overhead_report` report what
``torch.export`` does with an instance and what common calls cost against plain torch.
``docs/testing-a-type.md`` has a worked example.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import Tensor

from tensortools._optional import tool_import
from tensortools.testing.hooks import Make, options_from_coverage_hooks, own_rule
from tensortools.testing.report import (
    Failure,
    FailureGroup,
    TypeCheckError,
    TypeCheckReport,
    Unsupported,
)
from tensortools.testing.run import Run, _process_state, _restore_process_state
from tensortools.testing.samples import Sample, SampleHook, function_names
from tensortools.testing.steps import run_checks
from tensortools.testing.surveys import ExportReport, OverheadReport, export_report, overhead_report

__all__ = [
    "CHECKS",
    "DEFAULT_CHECKS",
    "ON_REQUEST",
    "ExportReport",
    "Failure",
    "FailureGroup",
    "TypeCheckError",
    "TypeCheckReport",
    "Sample",
    "Unsupported",
    "check_type",
    "parametrize",
    "function_names",
    "options_from_coverage_hooks",
    "OverheadReport",
    "export_report",
    "overhead_report",
]

#: Every check, in the order they run.
CHECKS = (
    "values",
    "types",
    "layouts",
    "mutation",
    "promotion",
    "aliases",
    "binding",
    "autograd",
    "func",
    "edges",
    "serialization",
    "leaks",
    "threads",
    "compile",
    "modules",
    "batches",
)

#: Checks run only when named: ``compile`` (each function compiles afresh, about ten
#: minutes per backend over all of op_db, against a minute for the rest) and ``batches``
#: (only a type with batch semantics passes it).
ON_REQUEST = ("compile", "batches")

#: The checks :func:`check_type` runs unless told which: every one but :data:`ON_REQUEST`.
DEFAULT_CHECKS = tuple(c for c in CHECKS if c not in ON_REQUEST)

#: Seconds a run takes before its progress bar is drawn (shorter runs show none).
PROGRESS_DELAY = 3.0

Settings = Mapping[str, tuple[Callable[[], AbstractContextManager], Callable[[], Any]]]


def check_type(
    cls: type,
    make: Make | tuple[Make, Callable[[Any], Tensor]],
    *,
    reference: Callable[[Callable, Tensor, tuple, dict], Any] | None = None,
    rule: Callable[..., str] | None = None,
    checks: Iterable[str] = DEFAULT_CHECKS,
    ops: Iterable[str] | None = None,
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    max_samples: int | None = 2,
    instances: Sequence[str] = ("every", "first"),
    gradcheck_samples: int = 1,
    compile_samples: int = 1,
    serialization_samples: int = 1,
    settings: Settings | None = None,
    refusals: tuple[type[BaseException], ...] | Callable[[BaseException], bool] = (),
    safe_globals: Sequence[Any] = (),
    volatile_attrs: Iterable[str] = (),
    compile_backends: Sequence[str] = ("eager", "aot_eager"),
    samples: SampleHook | None = None,
    sample_state: Callable[[Any], Any] | None = None,
    collate_fn: Callable[[list], Any] | None = None,
    views_copy: bool = False,
    progress: bool = True,
    raise_on_failure: bool = True,
) -> TypeCheckReport:
    """Check that `cls` behaves like the plain computation wherever PyTorch's samples reach.

    `make(plain_tensor)` builds an instance: None where the type has no stand-in for that
    tensor (it stays plain), or it raises :class:`Unsupported` to decline the sample (a
    dtype, shape or layout the type does not hold): a sample that holds no instance is
    listed in the report's ``declined``, not failed; a `make` that raises anything else
    fails that sample alone (check ``make``), and a run in which `make` gave no instance
    at all fails. `make` runs once per sample and check: the plain tensors a check
    compares with are those its instances stand for. A structured type passes
    ``(make, densify)``, ``densify(instance)`` giving the
    plain tensor it stands for (default: the instance as a plain tensor). `reference`,
    when given, computes the expected result from ``(function, plain input, args,
    kwargs)``; by default the function runs on the plain input. `rule(instance, result)`
    says what breaks the type's rules in a result ('' when nothing does); `instance` is
    the call's first instance; a rule with parameters named ``func``, ``args`` and
    ``kwargs`` is also given the call (``args`` with the input first; ``func`` None and
    ``args`` empty for a result that is not one call's, as a round trip's), so that
    "flip flips the mask too" can be said. By default floating-point results must be of the type,
    and where the type registered a rule with its coverage hooks
    (:func:`tensortools.coverage.spec.register`, ``result_problem``), the ``types`` check
    also judges results by it: on the run's own instances where the rule holds for them,
    else on a second run of the sample on instances the hooks make (a rule written for
    the hooks' instances, as MetadataTensor's is for their metadata).
    `ops` restricts the functions (op_db names such as ``"exp"``, ``"flip"``); `dtypes`
    and `max_samples` (2 by default; None: every sample op_db has) pick each function's
    samples (generated once per process, from a seeded generator, and shared by the
    checks). Once per function, ``values``, ``types`` and ``mutation`` also judge three
    forms no sample takes: an empty instance (dim 0 of size 0), Python numbers in place
    of the further tensors (``clamp(x, 0.1, 0.8)``), and the ``out=`` form (it returns
    its ``out``, an instance, holding the plain values, and follows the rule).
    `samples`, a function of one :class:`Sample`, shapes them: it returns the sample to
    run (``s.map_tensors(fn)``, say), several, or None to leave it out.

    `instances` says which of a sample's tensors become instances, wherever they sit (the
    input, a list given as the input as in ``torch.cat([a, b])``, further arguments and
    lists among them): each of ``"every"`` (all at once), ``"first"`` (the first alone, the
    others plain) and ``"each"`` (each alone in turn) runs the sample once more, unless it
    picks the same tensors as an earlier one. Results that are lists or tuples of tensors
    (``split``, ``meshgrid``) are compared element by element. ``binding`` and
    ``compile`` run only the samples whose instances all sit in the input.

    `checks` is any of :data:`CHECKS` (by default :data:`DEFAULT_CHECKS`: all but
    ``compile``, which costs ten times the rest, and ``batches``, which a type without
    batch semantics cannot pass; name them to run them):

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
      `volatile_attrs` (names of attributes the type changes on its own, as a cache);
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
      (fast mode) in float64 on the first `gradcheck_samples` samples of each function (for a
      ``(make, densify)`` type the gradients are of different tensors: not compared);
    - ``edges``: the conditions op_db's samples never set, each against the plain
      computation: instances of tensors requiring grad (values, ``requires_grad`` and
      ``grad_fn`` of the results; an instance that hides its tensor's ``requires_grad``),
      calls under ``torch.inference_mode()`` (values, inference results), complex
      instances with the conjugate or negative bit (values; ``resolve_conj``), each on
      the first sample of the functions named in `ops`, or of
      :data:`~tensortools.testing.edges.EDGE_FUNCTIONS` (38 common ones) where `ops` is
      not given; and fixed calls on a 4x4 instance: 25 views (a write through the view
      reaches the base and back; `views_copy=True` says the type's views are copies,
      listed in the report's ``copies``, not failed, as are results made in inference
      mode where plain's are views of their input), random functions (the same values
      and generator state, ``generator=`` too), and calls mixed with a type that
      overrides nothing (they end in TypeError; the type's ``__torch_function__``
      answers NotImplemented or passes the call on to it);
    - ``serialization``: pickle, deepcopy and ``torch.save`` + ``torch.load(weights_only=
      True)`` give back an instance of the type with equal values and attributes that
      follows the rule (`serialization_samples` per function); state crafted to run code
      when loaded is refused by ``weights_only`` loading, never run; `safe_globals`
      (classes, as for ``torch.serialization.safe_globals``) are allowed to load during
      this check, for a type that does not declare itself with
      ``torch.serialization.add_safe_globals``;
    - ``leaks``: after each function's first sample on fresh instances, its result
      dropped, nothing keeps the instances, their memory (a plain view of their data)
      or the tensors they hold as attributes alive;
    - ``threads``: up to 16 deterministic calls, each on one instance shared by 8 threads
      and repeated, give the eager results, and
      each of `settings` (name -> (context-manager factory, reader of the current value))
      restores its value and never leaks into another thread;
    - ``compile``: the first `compile_samples` samples of each function under
      ``torch.compile`` with each of `compile_backends` (``"eager"`` and
      ``"aot_eager"`` by default; add ``"inductor"`` for the full form) equal eager on
      the same instances (each compiles afresh: this check is the slow one); torch's
      logs are held back while it runs, and a failure gives the real exception;
    - ``batches`` (only when named): six samples of shape (2, 3), sample k holding the
      values ``6k .. 6k+5`` (of ``dtypes[0]``), each made an instance by `make` (whose
      state must tell them apart: ``{"id": t.flatten()[0].item()}``, say), collated by
      `collate_fn` (``torch.utils.data.default_collate`` by default) all at once and
      three at a time through a ``DataLoader``, the loader's two batches joined by
      ``torch.cat`` (the second first); on each batch, ``b[1]``, ``b[-1]``,
      ``b[-3:-1]``, ``b[[2, 0, 2]]``, a tensor index, a bool mask, ``b.unbind(0)``,
      iteration and a ``torch.save``/``torch.load`` round trip (``weights_only=True``
      where the type loads so, with `safe_globals`) give rows of the type (with `rule`,
      what the rule accepts), each holding the values and the state of the sample it
      came from. A sample's state is ``sample_state(instance)`` where given, else its
      attributes (a row may hold more, as a batch's bookkeeping); samples that hold no
      state, or that `make` declines, are listed in ``declined``. The collated batch
      joined or indexed with a tensor of a type that overrides nothing ends in torch's
      TypeError, as a plain batch does.

    Each check puts back the random generator (the checks seed it), warning filters and
    torch's process-wide settings (default dtype, gradient mode, deterministic
    algorithms, anomaly detection, threads) as they were; a setting the type's calls
    changed is a failure.

    A function named in `ops` that has no sample to run is a failure (it would otherwise
    pass untested).

    `refusals` (exception classes, or a predicate on the exception) are the type's
    deliberate "not supported" answers: such a call, where the plain call succeeds, is
    listed in the report's ``refused``, not as a failure. None by default: a handler bug
    raises TypeError too.

    `progress` shows a bar of the samples on stderr (tqdm, where installed) once the run
    has taken :data:`PROGRESS_DELAY` seconds.

    Returns a :class:`TypeCheckReport` (``summary()``: the failures grouped by cause);
    raises a :class:`TypeCheckError` with that summary unless ``raise_on_failure=False``.
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
    if max_samples is not None:
        if not isinstance(max_samples, int) or isinstance(max_samples, bool):
            raise TypeError(
                f"check_type: 'max_samples' must be an int or None (all), got {max_samples!r}"
            )
        if max_samples < 1:
            raise ValueError(
                f"check_type: 'max_samples' must be >= 1 or None (all), got {max_samples}"
            )
    started = time.perf_counter()
    compile_backends = tuple(compile_backends)
    if isinstance(volatile_attrs, str) or not all(isinstance(a, str) for a in volatile_attrs):
        raise TypeError("check_type: 'volatile_attrs' must be attribute names (strings)")
    if samples is not None and not callable(samples):
        raise TypeError(
            f"check_type: 'samples' must be a function of a Sample, got {type(samples).__name__}"
        )
    for name, hook in (("sample_state", sample_state), ("collate_fn", collate_fn)):
        if hook is not None and not callable(hook):
            raise TypeError(f"check_type: '{name}' must be callable, got {type(hook).__name__}")
    if not compile_backends or not all(isinstance(b, str) for b in compile_backends):
        raise TypeError("check_type: 'compile_backends' must name torch.compile backends")
    run = Run(cls, make, densify, reference, rule, settings, refusals, volatile_attrs)
    run.structured = structured
    run.compile_backends = compile_backends
    if rule is None:
        run.own_rule = own_rule(cls)
    # (the random generator, which the checks seed, and torch's settings, which a type's
    # calls may change, are put back after the run: no code after it inherits them)
    options = {
        "gradcheck_samples": gradcheck_samples,
        "serialization_samples": serialization_samples,
        "compile_samples": compile_samples,
        "safe_globals": safe_globals,
        "progress": progress,
        "samples": samples,
        "sample_state": sample_state,
        "collate_fn": collate_fn,
        "dtypes": tuple(dtypes),
        "ops_given": ops is not None,
        "views_copy": bool(views_copy),
        "progress_delay": PROGRESS_DELAY,
    }
    state = _process_state()
    try:
        samples = run_checks(run, checks, ops, dtypes, max_samples, instances, options)
    finally:
        _restore_process_state(state)
    if not run.made and (samples or "modules" in checks):
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
        sorted({s.name for s in samples}),
        len(samples),
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


def parametrize(cls: type, make: Any, *, ops: Iterable[str] | None = None, **options: Any):
    """A pytest decorator giving one test per function: the test takes an argument
    ``check``, a function that runs :func:`check_type` on that function alone::

        @tensortools.testing.parametrize(Quantity, Quantity.wrap, ops=["add", "exp"])
        def test_quantity(check):
            check()
    """
    pytest = tool_import("pytest", "tensortools.testing.parametrize")
    names = function_names(ops, options.get("dtypes", (torch.float32,)))

    def case(name: str) -> Callable[[], TypeCheckReport]:
        return lambda: check_type(cls, make, ops=[name], **options)

    return pytest.mark.parametrize("check", [case(n) for n in names], ids=names)
