"""The batch rule's rules for calls that move dims or rows: whether dim 0 stays in front
(``permute``, ``transpose``, ``movedim``, ``mT``, ``t``: predicates for
:func:`~tensortools.types.metadata.batch_verdict.leading`), and for the permutations and
selections of dim 0 (``flip``, ``roll``, ``sort`` of a 1-D batch, ``gather`` of whole
rows, ``repeat``, ...), the sample each row of the result holds."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensortools.types.metadata.batch_verdict import (
    ALL,
    DROP,
    KEEP,
    Call,
    argument_of,
    dim_of,
    dims_of,
    kept_rows,
    plain_shape,
)

__all__ = [
    "flip",
    "flipud",
    "front_after_diag_embed",
    "front_after_diagonal",
    "front_after_layer_norm",
    "front_after_matrix_transpose",
    "front_after_movedim",
    "front_after_permute",
    "front_after_pad",
    "front_after_t",
    "front_after_transpose",
    "gather",
    "repeat",
    "repeat_interleave",
    "roll",
    "rot90",
    "sort",
    "take_along_dim",
    "tile",
    "topk",
]


# -- dim-moving calls: does dim 0 stay in front? ----------------------------------------


def front_after_permute(call: Call) -> bool:
    dims = call.args[1:] if len(call.args) > 2 else argument_of(call, 1, None, "dims")
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    return bool(dims) and dim_of(dims[0], call.ndim) == 0


def front_after_transpose(call: Call) -> bool:
    a, b = (
        dim_of(argument_of(call, 1, None, "dim0"), call.ndim),
        dim_of(argument_of(call, 2, None, "dim1"), call.ndim),
    )
    return (a == 0) == (b == 0) and a is not None and b is not None


def front_after_movedim(call: Call) -> bool:
    src = dims_of(argument_of(call, 1, None, "source"), call.ndim)
    dst = dims_of(argument_of(call, 2, None, "destination"), call.ndim)
    if None in src or None in dst:
        return False
    if 0 in src:
        return dst[src.index(0)] == 0
    rest = [d for d in range(call.ndim) if d not in src]
    return 0 not in dst and rest[:1] == [0]


def front_after_matrix_transpose(call: Call) -> bool:  # mT, mH, adjoint: the last two dims
    return call.ndim >= 3


def front_after_t(call: Call) -> bool:  # t(), T: a 1-D tensor's is itself
    return call.ndim < 2


def front_after_pad(call: Call) -> bool:
    return len(argument_of(call, 1, (), "pad")) // 2 < call.ndim


def front_after_layer_norm(call: Call) -> bool:
    shape = argument_of(call, 1, (), "normalized_shape")
    return len(shape if isinstance(shape, (list, tuple, torch.Size)) else [shape]) < call.ndim


def front_after_diag_embed(call: Call) -> bool:
    new = dims_of(
        (argument_of(call, 2, -2, "dim1"), argument_of(call, 3, -1, "dim2")), call.ndim + 1
    )
    return 0 not in new


def front_after_diagonal(call: Call) -> bool:
    return 0 not in dims_of(
        (argument_of(call, 2, 0, "dim1"), argument_of(call, 3, 1, "dim2")), call.ndim
    )


# -- permutations and selections of dim 0: the samples each row holds -------------------


def flip(call: Call) -> Any:
    dims = call.args[1:] if len(call.args) > 2 else argument_of(call, 1, None, "dims")
    if 0 not in dims_of(dims, call.ndim):
        return kept_rows(call)
    return list(range(call.size - 1, -1, -1))


def flipud(call: Call) -> Any:
    return list(range(call.size - 1, -1, -1))


def roll(call: Call) -> Any:
    shifts, dims = argument_of(call, 1, None, "shifts"), argument_of(call, 2, None, "dims")
    shifts = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    if dims is None:
        if call.ndim != 1 or len(shifts) != 1:
            return DROP  # (rolled over the flattened elements)
        dims = [0]
    dims = dims_of(dims, call.ndim)
    shift = sum(operator.index(s) for s, d in zip(shifts, dims) if d == 0)
    n = call.size
    return [(r - shift) % n for r in range(n)] if n else KEEP


def rot90(call: Call) -> Any:
    k = operator.index(argument_of(call, 1, 1, "k")) % 4
    dims = dims_of(argument_of(call, 2, (0, 1), "dims"), call.ndim)
    if 0 not in dims or k == 0:
        return kept_rows(call)
    return list(range(call.size - 1, -1, -1)) if k == 2 else DROP


def _order_values_only(call: Call, dim: Any, index_of: Callable) -> Any:
    """sort/topk: over dim 0 of a 1-D batch the values are the samples they came from
    (the indices say which); the indices, ranks among all the samples, are not. Over dim
    0 of a larger batch each column is ordered apart: not a batch."""
    if 0 not in dims_of(dim, call.ndim):
        return kept_rows(call)
    if call.ndim != 1:
        return DROP
    values, indices = call.results[0], call.results[1]
    with torch._C.DisableTorchFunctionSubclass():
        order = index_of(indices.as_subclass(Tensor)).tolist()
    return [order if t is values else DROP for t in call.results]


def sort(call: Call) -> Any:
    return _order_values_only(call, argument_of(call, 1, -1, "dim"), lambda i: i)


def topk(call: Call) -> Any:
    return _order_values_only(call, argument_of(call, 2, -1, "dim"), lambda i: i)


def _whole_rows(index: Tensor) -> list[int] | None:
    """The sample each row of `index` takes where every entry of a row names the same
    sample (a gather of whole rows); else None."""
    with torch._C.DisableTorchFunctionSubclass():
        index = index.as_subclass(Tensor)
        if index.dim() == 0:
            return None
        rows = index.reshape(index.shape[0], -1)
        if rows.shape[1] == 0 or not bool((rows == rows[:, :1]).all()):
            return None
        return rows[:, 0].tolist()


def gather(call: Call) -> Any:
    dim, index = (
        dim_of(argument_of(call, 1, None, "dim"), call.ndim),
        argument_of(call, 2, None, "index"),
    )
    if not isinstance(index, Tensor) or index.dim() != call.ndim:
        return DROP
    if dim != 0:
        if len(call.samplers) > 1:  # (an index of the same samples, b.argsort(1): row by row)
            return kept_rows(call, rows=ALL)
        return list(range(plain_shape(index)[0]))  # row r of the result: from sample r
    rows = _whole_rows(index)
    return DROP if rows is None else [r % call.size for r in rows]


def take_along_dim(call: Call) -> Any:
    indices, dim = argument_of(call, 1, None, "indices"), argument_of(call, 2, None, "dim")
    if dim is None or not isinstance(indices, Tensor) or indices.dim() != call.ndim:
        return DROP
    if dim_of(dim, call.ndim) != 0:
        return kept_rows(call, rows=ALL)  # (indices of the same samples: row by row)
    rows = _whole_rows(indices)
    return DROP if rows is None else [r % call.size for r in rows]


def repeat(call: Call) -> Any:
    sizes = call.args[1:] if len(call.args) > 2 else argument_of(call, 1, None, "repeats")
    sizes = list(sizes) if isinstance(sizes, (list, tuple, torch.Size)) else [sizes]
    if len(sizes) != call.ndim:
        return DROP  # (new dims in front)
    return list(range(call.size)) * operator.index(sizes[0])


def tile(call: Call) -> Any:
    sizes = argument_of(call, 1, None, "dims")
    sizes = list(sizes) if isinstance(sizes, (list, tuple, torch.Size)) else [sizes]
    if len(sizes) > call.ndim:
        return DROP
    first = sizes[0] if len(sizes) == call.ndim else 1
    return list(range(call.size)) * operator.index(first)


def repeat_interleave(call: Call) -> Any:
    repeats, dim = argument_of(call, 1, None, "repeats"), argument_of(call, 2, None, "dim")
    if dim is None:
        return DROP  # (over the flattened elements)
    if dim_of(dim, call.ndim) != 0:
        return kept_rows(call)
    if isinstance(repeats, Tensor):
        counts = repeats.tolist() if repeats.dim() else [int(repeats)] * call.size
    else:
        counts = [operator.index(repeats)] * call.size
    return [i for i, c in enumerate(counts) for _ in range(c)]
