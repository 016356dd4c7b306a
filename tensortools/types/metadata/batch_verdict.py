"""The words the batch rule (:mod:`~tensortools.types.metadata.batch_rule`) is written in:
a call with a batch among its arguments (:class:`Call`), the verdicts on its results
(``KEEP``, ``DROP``, or the sample each row holds), how a rule reads the call's arguments
and dims, and the kinds of rule its records are made of (elementwise, over dims, batched
from a number of dims, dim 0 kept in front)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from tensortools.dispatch.batch_rules import ALL, DROP, KEEP, KEEPS, OverDims, Rows
from tensortools.dispatch.binding import argument
from tensortools.types.metadata.dicts import metadata_of, same_metadata
from tensortools.types.metadata.results import batch_size_of

__all__ = [
    "ALL",
    "DROP",
    "KEEP",
    "Call",
    "aligned",
    "argument_of",
    "batched",
    "cdist",
    "dim_of",
    "dims_of",
    "elementwise",
    "is_input",
    "kept_rows",
    "leading",
    "matmul",
    "nn_softmax",
    "of_input",
    "operand",
    "over_dims",
    "over_dims_verdict",
    "plain_shape",
    "quantile",
    "row_major",
    "rows_verdict",
    "same_samples",
    "unchanged",
    "verdict_of",
    "where",
    "written",
]


# (the verdicts KEEP, DROP and a list of ints, the sample each row holds, and ALL, every
# tensor argument's rows, are the registry's: tensortools.dispatch.batch_rules)


def plain_shape(t: Tensor) -> torch.Size:
    """t's shape, read without a call through __torch_function__ (a batch's own calls
    would come back here)."""
    with torch._C.DisableTorchFunctionSubclass():
        return t.shape


class Call(NamedTuple):
    """A call with a batch among its arguments, and its results."""

    func: Callable
    args: tuple
    kwargs: dict
    batch: Tensor  # the first metadata-carrying argument, a batch
    ndim: int  # the batch's
    size: int  # the batch's (its dim 0)
    results: list  # the call's tensor results that are not its arguments
    # every argument tensor that holds samples (a batch), once per place it is passed
    samplers: tuple = ()


def argument_of(call: Call, position: int, default: Any = None, name: str | None = None) -> Any:
    """The argument torch binds to `position`, or the keyword `name` (a parameter some
    overloads take by keyword only: ``sort(b, stable=True, dim=0)``, ``aminmax(b, dim=1)``)."""
    names = _NAMES.get(name, (name,)) if name is not None else ()
    return _argument_named(call, position, default, names)


def _argument_named(call: Call, position: int, default: Any, names: tuple) -> Any:
    for key in names:
        if key in call.kwargs:
            return call.kwargs[key]
    return argument(call.func, call.args, call.kwargs, position, default)


# (the NumPy spellings torch's argument parser also takes)
_NAMES = {"dim": ("dim", "axis"), "input": ("input", "x", "a")}


def dim_of(d: Any, ndim: int) -> int | None:
    try:
        return operator.index(d) % max(ndim, 1)
    except TypeError:
        return None  # a dimension name: not dim 0 of a batch of unnamed dims


def dims_of(d: Any, ndim: int) -> list[int | None]:
    return [dim_of(x, ndim) for x in (d if isinstance(d, (list, tuple)) else [d])]


def is_input(call: Call, position: int = 0) -> bool:
    return argument_of(call, position) is call.batch


def same_samples(a: Tensor, b: Tensor) -> bool:
    """Whether batches `a` and `b` hold the same samples in the same rows: the same batch,
    or batches of one size whose metadata (the per-sample labels) are equal."""
    if a is b:
        return True
    if batch_size_of(a) != batch_size_of(b):
        return False
    return same_metadata(metadata_of(a, {}), metadata_of(b, {}))


def _tensors(value: Any) -> list:
    if isinstance(value, Tensor):
        return [value]
    return [t for t in value if isinstance(t, Tensor)] if isinstance(value, (list, tuple)) else []


def aligned(call: Call, rows: tuple | None = ALL, others_unused: bool = False) -> bool:
    """Whether every argument that holds samples puts them in the result's rows as the
    batch does: each one passed at a position of `rows` (ALL: any, the arguments
    broadcast against each other) and holding the batch's samples in the same rows.
    A batch passed elsewhere (a source whose rows a call writes into other rows, a
    matrix whose rows it contracts) mixes samples: False; others_unused: the arguments
    elsewhere give no values (``b.view_as(other)``) and are not judged."""
    samplers = call.samplers
    if len(samplers) < 2:  # (the common call: one batch, which the rule placed)
        return True
    if rows is not ALL:
        at = [
            t for p in rows for t in _tensors(argument_of(call, p)) if batch_size_of(t) is not None
        ]
        if not others_unused and len(at) != len(samplers):
            return False
        samplers = at
    return all(same_samples(t, call.batch) for t in samplers)


def kept_rows(
    call: Call,
    same_ndim: bool = False,
    rows: tuple | None = (0,),
    others_unused: bool = False,
    results: list | None = None,
) -> Any:
    """KEEP where every result's dim 0 has the batch's size (and, where asked, the
    batch's number of dims) and every argument that holds samples is `aligned` at
    `rows`, else DROP: a check that the call's structure holds (of `results` where
    given, else of all the call's results)."""
    if len(call.samplers) > 1 and not aligned(call, rows, others_unused):
        return DROP
    for t in call.results if results is None else results:
        shape = plain_shape(t)
        if not shape or shape[0] != call.size or (same_ndim and len(shape) != call.ndim):
            return DROP
    return KEEP


# -- the kinds of rule ------------------------------------------------------------------


def elementwise(call: Call) -> Any:
    """Elementwise over broadcast arguments: the batch's rows stay in front unless
    broadcasting adds dims before them or repeats a batch of one; every argument that holds
    samples (``b + b.flip(0)``, ``torch.where(m, b, b2)``) must hold the batch's, row by
    row."""
    return kept_rows(call, same_ndim=True, rows=ALL)


def where(call: Call) -> Any:
    # (torch.where(cond) alone is nonzero: indices, not samples)
    return elementwise(call) if len(call.args) + len(call.kwargs) > 1 else DROP


def unchanged(call: Call) -> Any:
    """The input's elements as they are, in a new dtype or device or broadcast to a shape
    (``to``, ``type_as``, ``expand_as``): another tensor argument gives none of them."""
    return kept_rows(call, same_ndim=True, others_unused=True)


def written(sources: tuple, *dims: tuple, rows: tuple = (0,)) -> Callable:
    """A call that writes tensors into a copy of its input (``scatter``, ``index_copy``,
    ``slice_scatter``, ...) along its dims (each a (position, name, default)); none: a
    flat write (``put``, ``masked_scatter``): the input's rows stay its samples', and so
    do those of the arguments at `rows` (a mask, elementwise). The arguments at
    positions `sources` are written row for row where the write is along other dims
    than 0; along dim 0, or flat, they go to other rows (their samples then sit in rows
    of other samples), so a batch among them is not the result's."""

    def rule(call: Call) -> Any:
        if not is_input(call):
            return DROP
        along = [dim_of(argument_of(call, p, d, n), call.ndim) for p, n, d in dims]
        into = rows if not dims or 0 in along or None in along else (*rows, *sources)
        return kept_rows(call, same_ndim=True, rows=into)

    rule.__name__ = f"written({sources}, {dims})"
    return rule


def of_input(rule: Callable) -> Callable:
    """`rule` where the batch is the call's first argument; DROP where it is another
    (``t.view_as(b)`` holds t's values, not b's samples)."""

    def checked(call: Call) -> Any:
        return rule(call) if is_input(call) else DROP

    checked.__name__ = checked.__doc__ = f"of_input({rule.__name__})"
    return checked


def row_major(call: Call) -> Any:
    """A reshape: the elements in their order, so a result whose dim 0 has the batch's
    size holds sample r in row r (``view``, ``reshape``, ``flatten``, ``squeeze``); the
    tensor of ``view_as``/``reshape_as`` gives only its shape."""
    return kept_rows(call, others_unused=True)


def over_dims(position: int, default: Any = None, name: str = "dim") -> OverDims:
    """A call over the dims of its argument at `position` (default `default`; None: every
    dim): KEEP unless dim 0 is among them (a reduction or scan over the samples). A
    declared verdict (:class:`~tensortools.dispatch.batch_rules.OverDims`), which the
    compiled path judges too; :func:`over_dims_verdict` is its verdict."""
    return OverDims(position, default, _NAMES.get(name, (name,)))


def over_dims_verdict(rule: OverDims, call: Call) -> Any:
    """The verdict of a declared :class:`~tensortools.dispatch.batch_rules.OverDims`
    (csrc/python/batch_plan.cpp judges the same calls alike)."""
    dim = _argument_named(call, rule.position, rule.default, rule.names)
    if isinstance(dim, Tensor):  # torch.max(b, other) and the like
        return elementwise(call)
    if dim is None or isinstance(dim, (bool, list, tuple)) and not dim:
        return DROP  # (std(b, True), sum(b, ()): every dim)
    dims = dims_of(dim, call.ndim)
    if 0 in dims or None in dims:
        return DROP
    return kept_rows(call, rows=ALL)  # (cross(b, other, 1), diff(b, append=a))


def batched(min_ndim: int) -> Callable:
    """A call whose dim 0 is a batch dim once its input has `min_ndim` dims (Linear on
    ≥2-D, conv2d on 4-D, a loss over (N, C)): KEEP there, else DROP (an unbatched
    input's dim 0 is channels or features)."""

    def rule(call: Call) -> Any:
        return kept_rows(call, rows=ALL) if call.ndim >= min_ndim else DROP

    rule.__name__ = f"batched({min_ndim})"
    return rule


def leading(keep: Callable[[Call], bool]) -> Callable:
    """A call that moves dims: KEEP where `keep(call)` says dim 0 stays in front."""

    def rule(call: Call) -> Any:
        return kept_rows(call) if is_input(call) and keep(call) else DROP

    rule.__name__ = f"leading({keep.__name__})"
    return rule


def _scalar_q(call: Call) -> bool:
    q = argument_of(call, 1, None, "q")
    return not isinstance(q, Tensor) or q.dim() == 0


def nn_softmax(call: Call) -> Any:
    """F.softmax, softmin, log_softmax: with no dim, torch's implicit one (dim 0 for 0-,
    1- and 3-D inputs, else dim 1)."""
    dim = argument_of(call, 1, None, "dim")
    if dim is None:
        dim = 0 if call.ndim in (0, 1, 3) else 1
    return DROP if dim_of(dim, call.ndim) in (0, None) else kept_rows(call)


def quantile(call: Call) -> Any:
    return over_dims_verdict(over_dims(2), call) if _scalar_q(call) else DROP


def matmul(first: int) -> Callable:
    """matmul and @ (the left operand at `first`): a 2-D batch on the left times a
    matrix or a vector (its rows), or a batch of matrices of ≥3 dims on either side,
    times a matrix, a vector (``b @ v``, ``u @ b``: one dim less) or another batch of
    matrices (the two batched row by row)."""

    def rule(call: Call) -> Any:
        left, right = argument_of(call, first), argument_of(call, 1 - first)
        mine, other = (first, right) if left is call.batch else (1 - first, left)
        other_ndim = other.dim() if isinstance(other, Tensor) else 0
        if call.ndim == 2 and mine == first:
            return kept_rows(call, rows=(mine,)) if other_ndim <= 2 else DROP
        if call.ndim < 3:
            return DROP
        if other_ndim >= 3:
            return kept_rows(call, same_ndim=True, rows=ALL)
        want = call.ndim - (other_ndim == 1)
        if any(len(plain_shape(t)) != want for t in call.results):
            return DROP
        return kept_rows(call, rows=(mine,))

    rule.__name__ = f"matmul(left={first})"
    return rule


def operand(positions: tuple, min_ndim: int = 1) -> Rows:
    """A call whose result's rows are those of its arguments at `positions` (``addmm``'s
    input and mat1, not mat2; ``F.linear``'s input, not its weight): KEEP where the
    batch is one of them with at least `min_ndim` dims (a declared verdict: Rows)."""
    return Rows(positions, min_ndim)


def rows_verdict(rows: Rows, call: Call) -> Any:
    """The verdict of declared rows (:class:`~tensortools.dispatch.batch_rules.Rows`)."""
    positions = rows.positions
    if positions is ALL:
        return elementwise(call)
    if call.ndim < rows.min_ndim or not any(argument_of(call, p) is call.batch for p in positions):
        return DROP
    if rows.results is None:
        return kept_rows(call, rows=positions)
    if len(call.results) <= max(rows.results):  # (a result that is an argument: not its own)
        return DROP
    kept = [call.results[i] for i in rows.results]
    state = kept_rows(call, rows=positions, results=kept)
    return [state if any(t is k for k in kept) else DROP for t in call.results]


def verdict_of(rule: Any, call: Call) -> Any:
    """The verdict of a record's rule on `call` (None: DROP; KEEPS: KEEP; declared rows; or
    the rule called)."""
    if rule is KEEPS:
        return KEEP
    if rule is None:
        return DROP
    if type(rule) is Rows:
        return rows_verdict(rule, call)
    if type(rule) is OverDims:
        return over_dims_verdict(rule, call)
    return rule(call)


def cdist(call: Call) -> Any:
    return rows_verdict(operand((0,), 2), call) if call.ndim == 2 else batched(3)(call)
