"""The samples :func:`~tensortools.testing.check_type` runs: PyTorch's own operator
samples (``op_db``, which needs the ``expecttest`` package), CPU and strided."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["Sample", "function_names", "op_samples"]


@dataclasses.dataclass
class Sample:
    """One op_db sample of a function: its OpInfo, input, further arguments."""

    name: str
    info: Any  # the OpInfo
    index: int
    input: Tensor
    args: tuple
    kwargs: dict

    @property
    def label(self) -> str:
        return f"{self.name} sample {self.index} {self.input.dtype} {tuple(self.input.shape)}"


def op_samples(
    ops: Iterable[str] | None, dtypes: Sequence[torch.dtype], max_samples: int
) -> Iterator[Sample]:
    """The first `max_samples` strided CPU samples of each op_db function (all, or those
    named in `ops`) for each of `dtypes` it supports."""
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
                        yield Sample(info.name, info, i, s.input, tuple(s.args), dict(s.kwargs))
            except Exception:  # a sample generator that fails on this build
                continue


def function_names(
    ops: Iterable[str] | None = None, dtypes: Sequence[torch.dtype] = (torch.float32,)
) -> list[str]:
    """The op_db names that have a sample :func:`check_type` can run for `dtypes` (all,
    or those among `ops`)."""
    return sorted({s.name for s in op_samples(ops, dtypes, 1)})
