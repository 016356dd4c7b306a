"""The batch registry: one record per function, saying what a call of it does to the samples
of a batch among its arguments (a MetadataTensor batch: one sample per row of dim 0), and
what the compiled path may do with such a call.

A record is registered beside the function it serves, by the public decorator
``MetadataTensor.batch_rule`` (the same as :func:`batch_rule` here, which the operators of
``tensortools.ops``, below the types, call themselves), as ``torch.library.register_vmap``
registers a vmap rule beside its operator. The class's Python path
(``MetadataTensor.fallback`` and ``metadata.batch_settle``) and the compiled path
(:data:`COMPILED`, read by ``csrc/python/wrapper_dispatch.cpp`` through
``MetadataTensor._fast_batch_rules``) read these records alone. See Note [Batch rules] in
docs/design.md.

What a call does to the samples (``BatchRule.does``):

- ``"keep"``: every result is the batch, row for row, whatever the arguments (the
  shape-preserving calls of one tensor: ``exp``, ``relu``, ``clone``); the compiled path
  runs such a call itself and keeps the batch;
- ``"rows"``: a result's rows are the rows of the arguments at given positions, once the
  batch has enough dims (:class:`Rows`: ``F.linear``'s input, an elementwise operator's
  every tensor): the batch is kept where every argument that holds samples holds the same
  ones there, else dropped;
- ``"dims"``: a call over the dims of one argument (:class:`OverDims`: ``sum``, ``mean``,
  ``softmax``, ``cumsum``): the batch is kept where dim 0 is not among them, else dropped;
- ``"judge"``: a rule ``rule(call) -> verdict`` reads the call and its results and keeps
  the batch, moves its samples (a list: the sample each row holds) or drops it (the
  verdicts and the ``call`` are ``tensortools.types.metadata.batch_verdict``'s);
- ``"apart"`` / ``"join"`` / ``"runs"``: a rule ``rule(cls, func, types, args, kwargs)``
  runs the call itself and gives each piece its samples (``unbind``, indexing), joins
  batches (``torch.cat`` along dim 0) or keeps or drops the batch itself (``b.grad``,
  ``b[i] = v``); it returns ``NotImplemented`` to leave a call to the record's verdict
  (``torch.cat`` along dim 1). ``torch.stack`` joins through a handler of
  the class (``by_handler``: every call of it takes the Python path).

A function without a record drops the batch: its results keep the batch's metadata whole.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = [
    "ALL",
    "COMPILED",
    "DROP",
    "KEEP",
    "KEEPS",
    "RECORDS",
    "OverDims",
    "RUNNERS",
    "BatchRule",
    "Rows",
    "batch_rule",
    "record_of",
]

#: Rows: every tensor argument's rows are the result's (broadcast, elementwise).
ALL = None

#: A verdict: every row of the result is the sample of the same row of the batch.
KEEP = None


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


#: A verdict: the result is not a batch (its metadata is the batch's, whole).
DROP = _Drop()

# (a list of ints is the third kind of verdict: row r holds sample list[r])


class Rows(NamedTuple):
    """A declarative verdict (``does == "rows"``): the results' rows are those of the
    arguments at `positions` (ALL: every tensor argument, broadcast elementwise, the
    result with the batch's number of dims) where the batch is one of them with at least
    `min_ndim` dims; `results`: the indices of the results that keep the batch (None:
    every result), the others drop it."""

    positions: tuple | None = ALL
    min_ndim: int = 1
    results: tuple | None = None


class OverDims(NamedTuple):
    """A declarative verdict (``does == "dims"``): a call over the dims given at argument
    `position` or by one of the keywords `names` (`default` where the call gives neither;
    None: every dim). KEEP where those are other dims than 0 and every result keeps the
    batch's dim 0 (a tensor there: elementwise, as ``torch.max(b, other)``); DROP where dim 0
    is among them (a reduction or scan over the samples) or they are every dim."""

    position: int
    default: Any = None
    names: tuple = ("dim",)


class _Keeps:
    def __repr__(self) -> str:
        return "KEEPS"


#: The verdict of a ``"keep"`` record: every result is the batch, row for row.
KEEPS = _Keeps()


class BatchRule(NamedTuple):
    """What a call of `func` does to a batch among its arguments (module docstring)."""

    func: Callable
    does: str  # "keep", "rows", "judge", "apart", "join" or "runs"
    verdict: Any  # KEEPS, a Rows, a rule(call) -> verdict, or None (the batch dropped)
    runs: Callable | None  # rule(cls, func, types, args, kwargs): "apart", "join", "runs"
    # "keeps" (runs it itself), "judged" (runs and judges it itself where it can),
    # "python" (a batch's call takes the Python path), "handler" (every call does)
    compiled: str


#: The records, by function.
RECORDS: dict[Callable, BatchRule] = {}

#: The functions whose calls with a batch the compiled path may run and judge itself
#: (a view of RECORDS, kept in step with it, that csrc/python/batch_plan.cpp reads): None
#: for a ``"keep"`` record, its Rows (every result judged alike: ``results`` None) or its
#: OverDims for a declared one. C tells the last two apart by their first field (an int:
#: OverDims' position) and leaves every call it cannot judge by position, dims and shape
#: alone to the Python path, before running it.
COMPILED: dict[Callable, Rows | OverDims | None] = {}

#: The rules of the records that run their calls themselves ("apart", "join", "runs"), by
#: function: the view the class's fallback reads on every call (a view of RECORDS, kept in
#: step with it; a dict of the few functions that have one, which torch.compile traces
#: without reading every record).
RUNNERS: dict[Callable, Callable] = {}

_LOCK = threading.Lock()


def record_of(func: Callable) -> BatchRule | None:
    """func's record, or None."""
    return RECORDS.get(func)


def batch_rule(
    *funcs: Callable,
    keep: bool = False,
    rows: Any = (),
    min_ndim: int = 1,
    results: tuple | None = None,
    apart: bool = False,
    join: bool = False,
    runs: bool = False,
    by_handler: bool = False,
) -> Callable[[Callable], Callable]:
    """Register what calls of `funcs` do to a batch's samples (one record per function;
    a later registration replaces the part it gives). Each function is registered as
    given: list its method and operator forms too (``torch.add``, ``Tensor.add``,
    ``Tensor.__add__``); an operator of ``torch.library`` (an ``OpOverloadPacket`` or a
    ``custom_op``) brings each of its overloads.

    Declared, registered at once: ``keep=True`` (every result is the batch, row for row,
    whatever the arguments; the compiled path runs the call itself) or ``rows=`` (the
    positions of the arguments whose rows the results' are, or ALL for elementwise, with
    `min_ndim` and `results`: :class:`Rows`); with no function, a decorator of the
    function served (``@batch_rule(rows=ALL)`` over ``def my_op``). Otherwise a
    decorator: of ``rule(call) -> verdict`` (KEEP, DROP, the sample each row holds, or one
    of these per result; a :class:`Rows` or an :class:`OverDims` is taken too), or with
    ``apart=True``, ``join=True`` or ``runs=True`` of ``rule(cls, func, types, args,
    kwargs)``, which runs the call itself (NotImplemented: the record's verdict judges it);
    ``by_handler=True`` marks the verdict of a function that a handler of the class joins
    (``torch.stack``: every call of it takes the Python path). Returns the decorator
    (which returns the rule) or, declared, the functions' records."""
    name = "batch_rule()"
    declared = keep or rows != ()
    if not funcs and not declared:
        raise TypeError(f"{name} needs at least one function")
    for func in funcs:
        if not callable(func):
            raise TypeError(f"{name}: {func!r} is not callable")
    if sum(bool(m) for m in (keep, rows != (), apart, join, runs)) > 1:
        raise TypeError(f"{name}: give one of 'keep', 'rows', 'apart', 'join' and 'runs'")
    if not isinstance(min_ndim, int) or isinstance(min_ndim, bool) or min_ndim < 0:
        raise TypeError(f"{name}: 'min_ndim' must be a non-negative int, got {min_ndim!r}")
    targets = [f for func in funcs for f in _forms(func)]
    if declared:
        if rows is not ALL and rows != () and not _positions(rows):
            raise TypeError(
                f"{name}: 'rows' must be ALL (None) or a tuple of positions, got {rows!r}"
            )
        if results is not None and (not _positions(results) or not results):
            raise TypeError(f"{name}: 'results' must be a tuple of positions, got {results!r}")
        does, verdict = ("keep", KEEPS) if keep else ("rows", Rows(rows, min_ndim, results))
        if not funcs:  # (a decorator of the function served: returns it unchanged)

            def serve(func: Callable) -> Callable:
                for f in _forms(func):
                    _register(f, does, verdict=verdict)
                return func

            return serve
        return tuple(_register(f, does, verdict=verdict) for f in targets)

    def register(rule: Callable) -> Callable:
        runner = "apart" if apart else "join" if join else "runs" if runs else None
        declared = type(rule) in (Rows, OverDims) and runner is None
        if not callable(rule) and not declared:
            raise TypeError(f"{name}: the rule must be callable, got {rule!r}")
        if type(rule) is Rows and not _declared_rows(rule):
            raise TypeError(
                f"{name}: Rows needs positions (ALL or a tuple of non-negative ints), a "
                f"min_ndim (a non-negative int) and results (None or a tuple of "
                f"non-negative ints), got {rule!r}"
            )
        if type(rule) is OverDims and not (
            type(rule.position) is int
            and rule.position >= 0
            and isinstance(rule.names, tuple)
            and all(type(n) is str for n in rule.names)
        ):
            raise TypeError(
                f"{name}: OverDims needs a position (a non-negative int) and names (a tuple "
                f"of str), got {rule!r}"
            )
        kind = "dims" if type(rule) is OverDims else "rows"
        does = "join" if by_handler else kind if declared else "judge"
        for f in targets:
            if runner is not None:
                _register(f, runner, runs=rule)
            else:
                _register(f, does, verdict=rule, handler=by_handler)
        return rule

    return register


def _declared_rows(rows: Rows) -> bool:
    return (
        (rows.positions is ALL or _positions(rows.positions))
        and type(rows.min_ndim) is int
        and rows.min_ndim >= 0
        and (rows.results is None or (_positions(rows.results) and bool(rows.results)))
    )


def _positions(value: Any) -> bool:
    return isinstance(value, tuple) and all(type(p) is int and p >= 0 for p in value)


def _forms(func: Callable) -> list[Callable]:
    """func; for a torch.library operator's packet (or a custom_op), it and each of its
    overloads (an overload given alone is itself alone)."""
    op = getattr(func, "_opoverload", None)  # (torch.library.custom_op's CustomOpDef)
    packet = func if op is None else op.overloadpacket
    if type(packet).__name__ != "OpOverloadPacket":
        return [func]
    return [packet, *(getattr(packet, n) for n in packet.overloads())]


def _register(
    func: Callable,
    does: str,
    verdict: Any = None,
    runs: Callable | None = None,
    handler: bool = False,
) -> BatchRule:
    with _LOCK:
        old = RECORDS.get(func)
        if old is not None and runs is None and old.runs is not None:
            does, runs = old.does, old.runs  # (a verdict added to a record that runs calls)
        elif old is not None and runs is not None:
            verdict = old.verdict  # (a runner added to a record with a verdict)
        handler = handler or (old is not None and old.compiled == "handler")
        compiled = "handler" if handler else "python" if runs else _compiled(verdict)
        record = RECORDS[func] = BatchRule(func, does, verdict, runs, compiled)
        if compiled != "python" and compiled != "handler":
            COMPILED[func] = None if verdict is KEEPS else verdict
        else:
            COMPILED.pop(func, None)
        if runs is not None:
            RUNNERS[func] = runs
    return record


def _compiled(verdict: Any) -> str:
    """What the compiled path does with a batch's call of a record that runs no call."""
    if verdict is KEEPS:
        return "keeps"
    if type(verdict) is OverDims or (type(verdict) is Rows and verdict.results is None):
        return "judged"
    return "python"
