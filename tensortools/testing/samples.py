"""The samples :func:`~tensortools.testing.check_type` runs: PyTorch's own operator
samples (``op_db``, which needs the ``expecttest`` package), CPU and strided.

A sample's tensors may sit anywhere in its call: the input itself, a list or tuple given
as the input (``torch.cat([a, b])``), further arguments (``torch.add(a, b)``,
``torch.block_diag(a, b, c)``), containers among them (``index_put(x, (i,), v)``). Which of
them become instances of the type is the sample's ``picks``; :func:`op_samples` gives one
sample per choice that `instances` asks for (:data:`INSTANCES`)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map_only

from tensortools._samples import OpSample, op_db, op_db_samples

__all__ = [
    "INSTANCES",
    "Sample",
    "SampleHook",
    "function_names",
    "generated",
    "op_samples",
    "shaped",
    "tensor_leaves",
]

#: Which of a sample's tensors become instances: ``"every"`` tensor at once, the
#: ``"first"`` alone (the input, or the first tensor of an input list; the first strided
#: one where the input is sparse), or ``"each"`` one alone in turn (one sample per
#: tensor).
INSTANCES = ("every", "first", "each")


def _is_size(x: Any) -> bool:
    return isinstance(x, torch.Size)


def tensor_leaves(call: Any) -> list[Tensor]:
    """The tensors of a call's ``(input, args, kwargs)``, in pytree order: the positions
    that a sample's ``picks`` count."""
    return [t for t in tree_leaves(call, is_leaf=_is_size) if isinstance(t, Tensor)]


@dataclasses.dataclass
class Sample:
    """One op_db sample of a function: its OpInfo, input, further arguments, and which of
    its tensors (positions in :func:`tensor_leaves` of ``(input, args, kwargs)``) become
    instances."""

    name: str
    info: Any  # the OpInfo
    index: int
    input: Any  # a tensor, or a list or tuple holding tensors
    args: tuple
    kwargs: dict
    picks: tuple[int, ...] = (0,)
    variant: str = ""  # which tensors are instances, where the sample has several

    @property
    def call(self) -> tuple:
        return (self.input, self.args, self.kwargs)

    @property
    def input_only(self) -> bool:
        """Whether every instance sits in the input (the input, or inside an input list):
        the arguments after it stay as op_db gives them."""
        return max(self.picks) < len(tensor_leaves(self.input))

    def map_tensors(self, fn: Callable[[Tensor], Tensor], variant: str | None = None) -> Sample:
        """This sample with every tensor of its call (the input, further arguments,
        containers among them) as ``fn(tensor)``: what a ``samples=`` hook of
        :func:`~tensortools.testing.check_type` returns to shape op_db's samples (an
        integer type's non-negative inputs: ``s.map_tensors(torch.abs)``); `variant`
        names the change in failures' labels."""
        inp, args, kwargs = tree_map_only(Tensor, fn, self.call, is_leaf=_is_size)
        changes = {"variant": variant} if variant is not None else {}
        return dataclasses.replace(self, input=inp, args=tuple(args), kwargs=kwargs, **changes)

    @property
    def label(self) -> str:
        if isinstance(self.input, Tensor):
            what = f"{self.input.dtype} {tuple(self.input.shape)}"
        else:
            tensors = tensor_leaves(self.input)
            shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
            what = f"{tensors[0].dtype} [{shapes}]"
        variant = f", {self.variant}" if self.variant else ""
        return f"{self.name} sample {self.index} {what}{variant}"


def _variants(eligible: list[int], instances: Sequence[str]) -> list[tuple[tuple[int, ...], str]]:
    """(picks, label) for each choice in `instances` among the `eligible` positions, a
    choice that repeats an earlier one's picks dropped (a sample with one tensor runs
    once)."""
    chosen: list[tuple[tuple[int, ...], str]] = []
    for how in instances:
        if how == "every":
            found = [(tuple(eligible), "every tensor an instance")]
        elif how == "first":
            found = [((eligible[0],), "the first tensor an instance")]
        else:
            found = [((k,), f"tensor {k} alone an instance") for k in eligible]
        for picks, label in found:
            if all(picks != p for p, _ in chosen):
                chosen.append((picks, label))
    if len(eligible) == 1:
        return [(picks, "") for picks, _ in chosen]
    return chosen


def op_samples(
    ops: Iterable[str] | None,
    dtypes: Sequence[torch.dtype],
    max_samples: int | None,
    instances: Sequence[str] = ("every", "first"),
) -> Iterator[Sample]:
    """The first `max_samples` (None: all) strided CPU samples of each op_db function (all,
    or those named in `ops`) for each of `dtypes` it supports, whose input is a tensor or a
    list or tuple of tensors and which holds a strided tensor; each once per choice of
    :data:`INSTANCES` in `instances`."""
    unknown = [how for how in instances if how not in INSTANCES]
    if unknown or not instances:
        raise ValueError(f"check_type: 'instances' takes some of {list(INSTANCES)}, got {unknown}")
    wanted = None if ops is None else set(ops)
    for info in op_db():
        if wanted is not None and info.name not in wanted:
            continue
        for dtype in dtypes:
            if dtype not in info.supported_dtypes("cpu"):
                continue
            try:
                for i, s in enumerate(generated(info, dtype, max_samples)):
                    if not _runs(s.input):
                        continue
                    args, kwargs = s.args, s.kwargs
                    # A sparse tensor among the arguments stays as it is (the type need
                    # not hold every layout): only strided ones become instances.
                    tensors = tensor_leaves((s.input, args, kwargs))
                    eligible = [k for k, t in enumerate(tensors) if t.layout == torch.strided]
                    if not eligible:
                        continue
                    for picks, variant in _variants(eligible, instances):
                        yield Sample(info.name, info, i, s.input, args, kwargs, picks, variant)
            except Exception:  # a sample generator that fails on this build
                continue


SampleHook = Callable[["Sample"], "Sample | Iterable[Sample] | None"]


def shaped(samples: Iterable[Sample], hook: SampleHook | None) -> list[Sample]:
    """Each sample as `hook` gives it (a sample, several, or None: dropped); the
    samples themselves without a hook."""
    if hook is None:
        return list(samples)
    out: list[Sample] = []
    for s in samples:
        given = hook(s)
        if given is None:
            continue
        given = [given] if isinstance(given, Sample) else list(given)
        wrong = [type(g).__name__ for g in given if not isinstance(g, Sample)]
        if wrong:
            raise TypeError(
                f"check_type: 'samples' must return a Sample, Samples or None, got {wrong[0]}"
            )
        out.extend(given)
    return out


def generated(info: Any, dtype: torch.dtype, n: int | None) -> list[OpSample]:
    """The first `n` (None: all) of an OpInfo's CPU samples of `dtype`: the same whatever
    ran before, generated once per process and shared by every walk over op_db
    (:func:`tensortools.coverage.samples.op_db_samples`)."""
    return op_db_samples(info, dtype, sys.maxsize if n is None else n)


def _runs(input: Any) -> bool:
    """Whether a sample's input is one the kit can run: a tensor, or a list or tuple of
    tensors (factories, whose input is a size or a number, are not)."""
    if isinstance(input, Tensor):
        return True
    leaves, _ = tree_flatten(input)
    return (
        isinstance(input, (list, tuple))
        and bool(leaves)
        and all(isinstance(t, Tensor) for t in leaves)
    )


def function_names(
    ops: Iterable[str] | None = None, dtypes: Sequence[torch.dtype] = (torch.float32,)
) -> list[str]:
    """The op_db names that have a sample :func:`check_type` can run for `dtypes` (all,
    or those among `ops`)."""
    return sorted({s.name for s in op_samples(ops, dtypes, 1, ("first",))})
