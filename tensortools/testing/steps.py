"""The kit's own checks, registered in the order they run (:mod:`.checks`), and the run of
the checks a :func:`~tensortools.testing.check_type` call asks for over its samples."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from tensortools._progress import Progress
from tensortools.testing.aliases import check_aliases
from tensortools.testing.autograd import check_autograd
from tensortools.testing.batches import check_batches
from tensortools.testing.binding import check_binding
from tensortools.testing.checks import check_names, each_sample, register_check, registered
from tensortools.testing.compiled import check_compile
from tensortools.testing.edges import check_edges
from tensortools.testing.forms import FORMS, check_forms
from tensortools.testing.func import check_func
from tensortools.testing.layouts import check_layouts
from tensortools.testing.leaks import check_leaks
from tensortools.testing.modules import check_modules
from tensortools.testing.mutation import check_mutation
from tensortools.testing.promotion import check_promotion, promotion_samples
from tensortools.testing.report import Failure
from tensortools.testing.run import Run
from tensortools.testing.samples import Sample, op_samples, shaped
from tensortools.testing.serialization import check_serialization
from tensortools.testing.threads import check_threads
from tensortools.testing.values import check_values_and_types

# values, types and mutation judge the same calls (with values or types, the mutation
# check watches their calls), and the forms no sample takes (empty, Python numbers, out=):
# the first of them the run asks for runs them all.
_JUDGED = ("values", "types", "mutation")


def _judge(name: str) -> Callable[[Run, Sequence[Sample], Mapping[str, Any]], None]:
    def check(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
        asked = [c for c in _JUDGED if c in run.checks]
        if asked[0] != name:
            return
        forms_done: dict[str, set] = {form: set() for form in FORMS}
        for s in samples:
            if {"values", "types"} & set(run.checks):
                run.guarded("values", s, lambda s=s: check_values_and_types(run, s, run.checks))
            else:
                run.guarded("mutation", s, lambda s=s: check_mutation(run, s))
            check_forms(run, s, run.checks, forms_done)
            run.tick()

    check.__name__ = f"check_{name}"
    return check


register_check("values")(_judge("values"))
register_check("types")(_judge("types"))


@register_check("layouts")
def _layouts(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    each_sample(run, "layouts", samples, lambda s, k: check_layouts(run, s), first=1)


register_check("mutation")(_judge("mutation"))


@register_check("promotion")
def _promotion(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    for s in shaped(promotion_samples(run.ops), run.sample_hook):  # (integer and bool)
        run.guarded("promotion", s, lambda s=s: check_promotion(run, s))
    each_sample(run, "promotion", samples, lambda s, k: check_promotion(run, s), first=1)


@register_check("aliases")
def _aliases(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    each_sample(run, "aliases", samples, lambda s, k: check_aliases(run, s))


@register_check("binding")
def _binding(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    # (it calls the function on the sample's input and its further arguments as op_db
    # gives them: only instances in the input reach it)
    each_sample(run, "binding", samples, lambda s, k: check_binding(run, s), input_only=True)


@register_check("autograd", options={"gradcheck_samples": 1})
def _autograd(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    n = options["gradcheck_samples"]
    each_sample(run, "autograd", samples, lambda s, k: check_autograd(run, s, gradcheck=k < n))


@register_check("func")
def _func(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    each_sample(run, "func", samples, lambda s, k: check_func(run, s))


@register_check("edges")
def _edges(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    check_edges(
        run,
        list(samples),
        {
            "ops_given": run.ops is not None,
            "views_copy": bool(run.spec.views_copy),
            "dtypes": run.dtypes,
            "samples": run.sample_hook,
        },
    )


@register_check("serialization", options={"samples": 1})
def _serialization(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    n = options["samples"]
    with_safe_globals(
        run.spec.safe_globals,
        lambda: each_sample(
            run, "serialization", samples, lambda s, k: check_serialization(run, s), first=n
        ),
    )


@register_check("leaks")
def _leaks(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    run.guarded("leaks", None, lambda: check_leaks(run, list(samples)))


@register_check("threads")
def _threads(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    run.guarded("threads", None, lambda: check_threads(run, list(samples)))


#: Each function compiles afresh (about ten minutes per backend over all of op_db,
#: against a minute for the rest): run only when named.
@register_check(
    "compile", default=False, options={"samples": 1, "backends": ("eager", "aot_eager")}
)
def _compile(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    run.compile_backends = tuple(options["backends"])
    each_sample(
        run,
        "compile",
        samples,
        lambda s, k: check_compile(run, s),
        first=options["samples"],
        input_only=True,
    )


@register_check("modules")
def _modules(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    run.guarded("modules", None, lambda: check_modules(run, run.dtypes, run.max_samples))


#: Only a type with batch semantics passes it: run only when named.
@register_check("batches", default=False, uses_samples=False)
def _batches(run: Run, samples: Sequence[Sample], options: Mapping[str, Any]) -> None:
    spec = run.spec
    run.guarded(
        "batches",
        None,
        lambda: with_safe_globals(
            spec.safe_globals,
            lambda: check_batches(run, run.dtypes, spec.sample_state, spec.collate_fn),
        ),
    )


def validate_options(options: Mapping[str, Mapping[str, Any]]) -> None:
    """A clear error for a value the kit's own checks cannot take, naming the option."""
    for check, name, least in (
        ("autograd", "gradcheck_samples", 0),
        ("serialization", "samples", 1),
        ("compile", "samples", 1),
    ):
        n = options[check][name]
        if not isinstance(n, int) or isinstance(n, bool) or n < least:
            raise ValueError(
                f"check_type: options[{check!r}][{name!r}] must be an int >= {least}, got {n!r}"
            )
    backends = options["compile"]["backends"]
    if isinstance(backends, str) or not backends or not all(isinstance(b, str) for b in backends):
        raise TypeError(
            "check_type: options['compile']['backends'] must name torch.compile backends, "
            f"got {backends!r}"
        )


def run_checks(
    run: Run,
    ops: Iterable[str] | None,
    max_samples: int | None,
    instances: Sequence[str],
    options: dict[str, dict[str, Any]],
    progress: bool,
    progress_delay: float,
) -> list[Sample]:
    """Every check the run asks for (``run.checks``), in the registry's order, over the
    samples; returns the samples."""
    sampled = any(registered(c).uses_samples for c in run.checks)
    # (checks that make their own samples, run alone, need no op_db)
    samples = (
        shaped(op_samples(ops, run.dtypes, max_samples, tuple(instances)), run.sample_hook)
        if sampled
        else []
    )
    if ops is not None and sampled:  # a function asked for and never run must not pass unseen
        for name in sorted(set(ops) - {s.name for s in samples}):
            run.failures.append(
                Failure("values", name, "-", "no op_db sample of this name could be run")
            )
    order = [c for c in check_names() if c in run.checks]
    # (a bar on stderr once the run has taken progress_delay seconds; tqdm where installed)
    bar = Progress(
        len(samples) * len(order),
        f"check_type({run.cls.__name__})",
        progress,
        unit="sample",
        delay=progress_delay,
    )
    run.tick = bar.step
    try:
        for i, name in enumerate(order):
            check = registered(name)
            run.guarded(name, None, lambda: check.function(run, samples, options[name]))
            while bar.bar is not None and bar.bar.n < len(samples) * (i + 1):
                bar.step()  # (a check that does not tick per sample: its share at once)
    finally:
        run.tick = _no_tick
        bar.close()
    return samples


def _no_tick() -> None:
    pass


def with_safe_globals(classes: Sequence[Any], step: Callable[[], None]) -> None:
    # torch's context manager removes on exit every class it was given, also one that
    # was declared before it (tensortools' own types): give it only the new ones.
    declared = torch.serialization.get_safe_globals()
    with torch.serialization.safe_globals([c for c in classes if c not in declared]):
        step()
