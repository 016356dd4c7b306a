"""The run of :func:`~tensortools.testing.check_type`'s checks over its samples: which
check runs on which sample, in what order, and the checks that take the whole run."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from tensortools._progress import Progress
from tensortools.testing.aliases import check_aliases
from tensortools.testing.autograd import check_autograd
from tensortools.testing.batches import check_batches
from tensortools.testing.binding import check_binding
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


def run_checks(
    run: Run,
    checks: tuple[str, ...],
    ops: Iterable[str] | None,
    dtypes: Sequence[torch.dtype],
    max_samples: int | None,
    instances: Sequence[str],
    options: dict[str, Any],
) -> list[Sample]:
    """Every check the run asks for, over the samples; returns the samples."""
    gradcheck_samples = options["gradcheck_samples"]
    serialization_samples = options["serialization_samples"]
    compile_samples = options["compile_samples"]
    safe_globals = options["safe_globals"]
    hook = options["samples"]
    # (the batches check makes its own samples: run alone, it needs no op_db)
    sampled = bool(set(checks) - {"batches"})
    samples = (
        shaped(op_samples(ops, dtypes, max_samples, tuple(instances)), hook) if sampled else []
    )
    if ops is not None and sampled:  # a function asked for and never run must not pass unseen
        for name in sorted(set(ops) - {s.name for s in samples}):
            run.failures.append(
                Failure("values", name, "-", "no op_db sample of this name could be run")
            )
    seen: dict = {}  # samples so far per function: the costly checks take the first
    # (the forms op_db's samples never take: empty, Python numbers, out=; once per function)
    forms_done: dict[str, set] = {form: set() for form in FORMS}
    judged = {"values", "types", "mutation"} & set(checks)
    if "promotion" in checks:  # (integer and bool samples: for this check alone)
        for s in shaped(promotion_samples(ops), hook):
            run.guarded("promotion", s, lambda: check_promotion(run, s))
    # (a bar on stderr once the run has taken PROGRESS_DELAY seconds; tqdm where installed)
    bar = Progress(
        len(samples),
        f"check_type({run.cls.__name__})",
        options["progress"],
        unit="sample",
        delay=options["progress_delay"],
    )
    for s in samples:
        bar.step()
        k = seen[s.name] = seen.get(s.name, -1) + 1
        if s.input_only:  # (compile's count: the samples it can run)
            k_input = seen[s.name, "input"] = seen.get((s.name, "input"), -1) + 1
        steps = [
            (
                "values",
                lambda: check_values_and_types(run, s, checks),
                "values" in checks or "types" in checks,
            ),
            ("layouts", lambda: check_layouts(run, s), "layouts" in checks and k == 0),
            # (with values or types, the mutation check watches their calls)
            (
                "mutation",
                lambda: check_mutation(run, s),
                "mutation" in checks and not {"values", "types"} & set(checks),
            ),
            ("promotion", lambda: check_promotion(run, s), "promotion" in checks and k == 0),
            ("aliases", lambda: check_aliases(run, s), "aliases" in checks),
            # (these two call the function on the sample's input and its further
            # arguments as op_db gives them: only instances in the input reach them)
            ("binding", lambda: check_binding(run, s), "binding" in checks and s.input_only),
            (
                "autograd",
                lambda: check_autograd(run, s, gradcheck=k < gradcheck_samples),
                "autograd" in checks,
            ),
            ("func", lambda: check_func(run, s), "func" in checks),
            (
                "serialization",
                lambda: with_safe_globals(safe_globals, lambda: check_serialization(run, s)),
                "serialization" in checks and k < serialization_samples,
            ),
            (
                "compile",
                lambda: check_compile(run, s),
                "compile" in checks and s.input_only and k_input < compile_samples,
            ),
        ]
        for check, step, wanted in steps:
            if wanted:
                run.guarded(check, s, step)
        if judged:
            check_forms(run, s, checks, forms_done)
    bar.close()
    if "edges" in checks:
        check_edges(run, samples, options)
    if "leaks" in checks:
        run.guarded("leaks", None, lambda: check_leaks(run, samples))
    if "threads" in checks:
        run.guarded("threads", None, lambda: check_threads(run, samples))
    if "modules" in checks:
        run.guarded("modules", None, lambda: check_modules(run, dtypes, max_samples))
    if "batches" in checks:
        state, collate = options["sample_state"], options["collate_fn"]
        run.guarded(
            "batches",
            None,
            lambda: with_safe_globals(
                safe_globals, lambda: check_batches(run, dtypes, state, collate)
            ),
        )
    return samples


def with_safe_globals(classes: Sequence[Any], step: Callable[[], None]) -> None:
    # torch's context manager removes on exit every class it was given, also one that
    # was declared before it (tensortools' own types): give it only the new ones.
    declared = torch.serialization.get_safe_globals()
    with torch.serialization.safe_globals([c for c in classes if c not in declared]):
        step()
