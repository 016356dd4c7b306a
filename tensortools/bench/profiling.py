"""What a call runs and keeps, for the benchmarks: the kernels it launches (from
torch.profiler) and the bytes its autograd graph saves for backward."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from tensortools.bench.timing import sync

__all__ = ["kernel_count", "quiet_profiler", "saved_for_backward"]


def saved_for_backward(
    step: Callable[[], object], leave_out: tuple[torch.Tensor, ...] = ()
) -> tuple[int, int]:
    """(bytes of distinct storages, tensors) that step()'s autograd graph saves for
    backward; storages of the tensors in `leave_out` (the arguments, say) not counted."""
    known = {t.untyped_storage().data_ptr() for t in leave_out}
    storages: dict[int, int] = {}
    count = 0

    def pack(t):
        nonlocal count
        count += 1
        storage = t.untyped_storage()
        if storage.data_ptr() not in known:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = step()
    del out
    return sum(storages.values()), count


# Operators that only make views or allocate: no kernel runs for them.
_NOT_KERNELS = frozenset(
    f"aten::{name}"
    for name in (
        "empty",
        "empty_strided",
        "empty_like",
        "zeros_like",
        "as_strided",
        "view",
        "t",
        "transpose",
        "permute",
        "expand",
        "slice",
        "narrow",
        "select",
        "unsqueeze",
        "squeeze",
        "reshape",
        "_reshape_alias",
        "alias",
        "detach",
        "lift_fresh",
        "chunk",
        "split",
        "split_with_sizes",
        "unbind",
        "contiguous",
        "resolve_conj",
        "resolve_neg",
        "numpy_T",
        "result_type",
        "to",
        "_to_copy_noop",
    )
)


def quiet_profiler() -> None:
    """Keep torch.profiler's own progress lines (one per session, on stderr) out of a
    command's output, unless the user set ``KINETO_LOG_LEVEL``. Entry points call it."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "99")


def kernel_count(fn: Callable[[], object], device: str = "cpu") -> int:
    """Kernels one call of `fn` runs, from torch.profiler (after a warm-up call).

    On a GPU: the device's own events (kernels, copies, fills). On the CPU: the operator
    calls made from Python or by autograd, that is the outermost operators that compute
    (an operator inside another is part of its kernel; operators that only make views or
    allocate are left out). Loops that torch.compile generates for the CPU are not
    operators, so a compiled function's count holds only the library calls it makes.
    """
    fn()
    cuda = torch.device(device).type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        fn()
        sync(device)
    events = prof.events()
    if cuda:
        return sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)

    def computes(e) -> bool:
        return e.name.startswith(("aten::", "tensortools::")) and e.name not in _NOT_KERNELS

    def outermost(e) -> bool:
        parent = e.cpu_parent
        while parent is not None:
            if computes(parent):
                return False
            parent = parent.cpu_parent
        return True

    return sum(1 for e in events if computes(e) and outermost(e))
