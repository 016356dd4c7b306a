"""What the multi-process tests share: one spawn of workers that save a report each,
ended within a time limit, a worker's gloo group, and a single torch thread for the tiny
references."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def spawn_reports(worker: Callable, args: tuple, nprocs: int, folder: Path, limit_s: float):
    """Starts `nprocs` workers, `worker(rank, *args)`, and returns each rank's report,
    ``folder/rank{r}.pt``. A worker that raises ends the others; any still running after
    `limit_s` seconds are killed and the test fails, so a hang cannot block the suite."""
    context = mp.start_processes(worker, args=args, nprocs=nprocs, join=False, start_method="spawn")
    deadline = time.monotonic() + limit_s
    try:
        # join() returns False whenever one process ends but others still run, and
        # raises as soon as one fails.
        while not context.join(timeout=max(deadline - time.monotonic(), 0.0)):
            if time.monotonic() >= deadline:
                pytest.fail(f"spawned workers still running after {limit_s} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
                process.join()
    return [torch.load(folder / f"rank{r}.pt", weights_only=True) for r in range(nprocs)]


def join_gloo_group(folder: str, rank: int, world_size: int, timeout) -> None:
    """A spawned worker joins the gloo group of `world_size` ranks whose file store lies
    in `folder`, over loopback only, with one torch thread (several processes share a
    small machine); a collective waits at most `timeout` (a timedelta)."""
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        "gloo",
        init_method=f"file://{folder}/store",
        rank=rank,
        world_size=world_size,
        timeout=timeout,
    )


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """The references are tiny: a second thread only costs, most of all on a busy machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def assert_all_close(got: dict, want: dict, tol: dict) -> None:
    """The same names, dtypes and shapes, and values within tol. (torch.allclose rather
    than torch.testing.assert_close, whose first call imports sympy, over a second, when
    a file runs alone.)"""
    assert got.keys() == want.keys()
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, name
        assert torch.allclose(g, w, **tol), (
            f"{name}: largest difference {(g - w).abs().max().item():.3g}"
        )
