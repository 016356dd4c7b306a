"""The ``threads`` check: calls on instances shared by 8 threads give the eager results,
and each setting's block restores its value and never leaks into another thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from tensortools._samples import compare_results, seeded
from tensortools.testing.report import Failure
from tensortools.testing.run import Run
from tensortools.testing.samples import Sample

__all__ = ["check_setting_restores", "check_threads"]


def check_threads(run: Run, samples: list[Sample]) -> None:
    calls = []
    for s in samples:
        if len(calls) == 16:
            break
        if _seeds_itself(s.info.op):
            continue  # it reseeds the generator all threads share: a race of its own
        if run.typed_call(s) is None:
            continue
        try:
            want = run.plain(seeded(lambda s=s: _call(s, run.typed_call(s))))
            torch.default_generator.manual_seed(1)
            again = run.plain(_call(s, run.typed_call(s)))
        except Exception:
            continue
        if compare_results(again, want, exact=True):
            continue  # random results (the generator is shared by the threads)
        calls.append((s, want))
    errors: list[tuple[Sample | None, str]] = []
    start = threading.Barrier(8, timeout=60)
    # One set of instances per call (every instance of an input list or of the other
    # arguments), shared by every thread (calls that change their input in place, such
    # as op_db's lambdas around in-place methods, get their own).
    shared = {id(s): run.typed_call(s) for s, _ in calls}

    def instance(s: Sample) -> Any:
        return run.typed_call(s) if s.info.name.endswith("_") else shared[id(s)]

    def work(k: int) -> None:
        try:
            start.wait()
        except threading.BrokenBarrierError:
            return
        order = calls[k % max(1, len(calls)) :] + calls[: k % max(1, len(calls))]
        for s, want in order * 4:
            try:
                got = run.plain(_call(s, instance(s)))
            except Exception as err:
                errors.append((s, f"raised {type(err).__name__} in a thread: {err}"))
                continue
            reason = compare_results(got, want, exact=False)
            if reason:
                errors.append((s, "in a thread: " + reason))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s, reason in errors[:10]:
        run.fail("threads", s, reason)
    for name, (enter, read) in run.settings.items():
        check_setting_restores(run, name, enter, read)


def check_setting_restores(run: Run, name: str, enter: Callable, read: Callable) -> None:
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
                    problems.append(f"changed by another thread's block ({inner!r} -> {read()!r})")
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
        run.failures.append(Failure("threads", f"setting {name}", "8 threads", p))


def _call(s: Sample, typed_call: tuple) -> Any:
    inp, args, kwargs = typed_call
    return s.info.op(inp, *args, **kwargs)


def _seeds_itself(fn: Callable) -> bool:
    """Whether an op_db function seeds the global generator for each call (its random
    samples do, to be reproducible)."""
    code = getattr(fn, "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names
