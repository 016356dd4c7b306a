"""The ``layouts`` check: a sample whose instances are made of non-contiguous tensors
(transposed, strided, expanded) equals the plain run on tensors of the same layout.

op_db's samples are contiguous, so a handler that reads its input's storage as if it
were contiguous (a view of the data, a kernel that ignores strides) passes every other
check; ``torch.library.opcheck`` runs operators on such layouts for the same reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_map

from tensortools._samples import UNDEFINED_VALUES, compare_results, plain_values, seeded
from tensortools.testing.run import Run, is_size
from tensortools.testing.samples import Sample

__all__ = ["LAYOUTS", "check_layouts"]


def _transposed(t: Tensor) -> Tensor:
    """Same values, the last two dims stored the other way round (column-major)."""
    if t.dim() < 2 or t.shape[-1] < 2 or t.shape[-2] < 2:
        return t
    return t.mT.contiguous().mT


def _strided(t: Tensor) -> Tensor:
    """Same values, every other element of a larger tensor (the gaps hold NaN or a
    value the tensor does not: a handler reading them shows it)."""
    # (op_db, which every sample comes from, has imported torch's test utilities already)
    from torch.testing._internal.common_utils import noncontiguous_like

    return noncontiguous_like(t)


def _expanded(t: Tensor) -> Tensor:
    """The first slice along the first dim of more than one element, expanded over that
    dim (stride 0): other values than the sample's, so floating-point tensors only (an
    index tensor of repeated entries means another call)."""
    if not t.is_floating_point():
        return t
    dim = next((d for d, n in enumerate(t.shape) if n > 1), None)
    if dim is None:
        return t
    return t.narrow(dim, 0, 1).expand(t.shape)


#: The layouts each sample also runs with: name -> form of a tensor (itself where the
#: layout does not apply to it).
LAYOUTS: dict[str, Callable[[Tensor], Tensor]] = {
    "transposed": _transposed,
    "strided": _strided,
    "expanded": _expanded,
}


def _twin(t: Tensor) -> Tensor:
    """A copy of t with its layout (size, strides, offset into a storage of its own)."""
    t = t.detach()
    twin = torch.empty(0, dtype=t.dtype, device=t.device)
    return twin.set_(t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride())


def check_layouts(run: Run, s: Sample) -> None:
    """Run `s` once per layout with its picked tensors in that layout before ``make``;
    compare with the plain call on tensors of the same layout."""
    if s.name in UNDEFINED_VALUES:
        return
    fn = s.info.op
    for name, form in LAYOUTS.items():
        typed = run.typed_call(s, form=form)
        if typed is None or not _changes_a_layout(run, typed):
            continue
        plain = plain_values(tree_map(lambda x: _plain(run, x), typed, is_leaf=is_size))
        try:
            want = seeded(lambda: run.want(fn, plain))
        except Exception:
            continue  # the function refuses this layout
        x, args, kwargs = typed
        try:
            got = seeded(lambda: fn(x, *args, **kwargs))
        except Exception as err:
            run.raised("layouts", s, err, f"{name} input:")
            continue
        reason = compare_results(run.plain(got), want, exact=False)
        if reason:
            run.fail("layouts", s, f"{name} input: {reason}")


def _plain(run: Run, x: Any) -> Any:
    return _twin(run.densify(x)) if isinstance(x, run.cls) else x


def _changes_a_layout(run: Run, typed: tuple) -> bool:
    """Whether an instance of the call stands for a non-contiguous tensor (a form that
    applies to none of the sample's tensors runs nothing new)."""
    found = []

    def one(x: Any) -> Any:
        if isinstance(x, run.cls):
            found.append(not run.densify(x).is_contiguous())
        return x

    tree_map(one, typed, is_leaf=is_size)
    return any(found)
