"""Whether the machine's load stalled a measurement: the time this process's threads were
ready to run but had no CPU, against the wall time the measurement took.

A loaded machine can stall a two-thread operation by a whole scheduler slice (several
milliseconds): its second thread waits for a core while the first waits for it. Every call
then takes about that long, steadily, so the runs agree with each other and their spread
says nothing; the share of the time the threads waited for a CPU says it. On Linux that
wait is read from each thread's ``/proc/self/task/*/schedstat`` (its run-queue delay).
Elsewhere the calling thread's CPU time against the wall time stands in: the share of the
time it was off the CPU (preempted, or waiting for a worker thread that had no core); it
misses a stall the calling thread spends spinning.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping

__all__ = ["STALL_SHARE", "Reading", "read", "run_queue_waits", "stall_share"]

#: A measurement during whose wall time this process's threads waited for a CPU, summed
#: over the threads, for more than this share of it was stalled by the machine's load: its
#: median may be off by about that share or, for a parallel operation, by far more.
STALL_SHARE = 0.1


@dataclasses.dataclass(frozen=True)
class Reading:
    """One reading of the clocks: wall seconds, the calling thread's CPU seconds, and per
    thread of this process the seconds it has waited for a CPU (None where unknown)."""

    wall: float
    thread_cpu: float
    waits: Mapping[int, float] | None


def run_queue_waits(task_dir: str = "/proc/self/task") -> dict[int, float] | None:
    """Seconds each thread of this process has spent ready to run but off every CPU, by
    thread id (the second field of Linux's per-thread schedstat); None where unreadable."""
    waits = {}
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return None
    for tid in tids:
        try:
            with open(os.path.join(task_dir, tid, "schedstat")) as f:
                waits[int(tid)] = int(f.read().split()[1]) / 1e9
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        except (OSError, ValueError, IndexError):
            return None
    return waits or None


def read(
    clock: Callable[[], float] = time.perf_counter,
    thread_cpu: Callable[[], float] = time.thread_time,
    waits: Callable[[], Mapping[int, float] | None] = run_queue_waits,
) -> Reading:
    """The clocks now (each one replaceable, for tests)."""
    return Reading(clock(), thread_cpu(), waits())


def stall_share(before: Reading, after: Reading) -> float | None:
    """The share of the wall time between two readings that this process's threads waited
    for a CPU (summed over the threads, so up to their number), or, without run-queue
    waits, that the calling thread was off the CPU; None for no time between them."""
    wall = after.wall - before.wall
    if wall <= 0:
        return None
    if before.waits is not None and after.waits is not None:
        # threads that ended meanwhile are left out; threads that began count from zero
        waited = sum(w - before.waits.get(tid, 0.0) for tid, w in after.waits.items())
    else:
        waited = wall - (after.thread_cpu - before.thread_cpu)
    return max(0.0, waited) / wall
