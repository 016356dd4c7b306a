"""The batch rule's common verdicts on the compiled path (csrc/python/batch_plan.cpp): for
every declared record it judges (elementwise and other ``Rows``, ``OverDims``), a call
through MetadataTensor's ``__torch_function__`` gives what the Python path gives
(``MetadataTensor._python_torch_function``, the fallback and ``batch_settle``): the same
values, class, metadata and batch size of every result, over the forms a call can take
(the batch by position or keyword, at a row position or elsewhere, dims as ints, negative,
tuples, lists, None, bools, NumPy ints and tensors, keepdim/dtype/out= keywords, other
batches of the same or other samples, broadcasting that adds dims or repeats a batch of
one, 0-d and tuple results). And the common calls are judged in C: no Python frame of
the fallback runs for them."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _support.frames import python_calls
from torch import Tensor
from torch.utils._pytree import tree_leaves

from tensortools import MetadataTensor, ops
from tensortools.dispatch.batch_rules import COMPILED, RECORDS, OverDims, Rows
from tensortools.types.metadata.results import batch_size_of

torch.manual_seed(0)
B = 6


def _batch(x: Tensor, ids: list | None = None) -> MetadataTensor:
    ids = list(range(x.shape[0])) if ids is None else ids
    return MetadataTensor.wrap_batch(x, {"id": ids, "tag": [f"s{i}" for i in ids]}, x.shape[0])


b = _batch(torch.randn(B, 3, 4, 5))
same = _batch(torch.randn(B, 3, 4, 5))  # (another batch of the same samples)
other = _batch(torch.randn(B, 3, 4, 5), list(range(10, 10 + B)))
one = _batch(torch.randn(1, 3, 4, 5))
b2 = _batch(torch.randn(B, 7))
b3 = _batch(torch.randn(B, 4, 5))
img = _batch(torch.randn(B, 3, 8, 8))
single = MetadataTensor(torch.randn(3, 4, 5), {"id": 99})
p = torch.randn(3, 4, 5)
W = torch.randn(2, 7)

# (name, func, args, kwargs); `OUT` in kwargs is replaced by a fresh plain tensor per call
OUT = object()
CASES = [
    # elementwise (Rows(ALL))
    ("add number", torch.add, (b, 1), {}),
    ("add alpha", torch.add, (b, p), {"alpha": 2}),
    ("method", Tensor.__mul__, (b, p), {}),
    ("reflected", Tensor.__rsub__, (b, 2.0), {}),
    ("b + b", torch.add, (b, b), {}),
    ("b + batch of the same samples", torch.add, (b, same), {}),
    ("b + batch of other samples", torch.add, (b, other), {}),
    ("plain first", torch.add, (p, b), {}),
    ("broadcast rows", torch.mul, (b, torch.randn(B, 1, 1, 1)), {}),
    ("broadcast adds dims", torch.mul, (b, torch.randn(2, B, 3, 4, 5)), {}),
    ("batch of one repeated", torch.mul, (one, torch.randn(B, 3, 4, 5)), {}),
    ("keywords", torch.add, (), {"input": b, "other": 1.5}),
    ("out=", torch.add, (b, 1), {"out": OUT}),
    ("maximum", torch.maximum, (b, p), {}),
    ("loss per element", F.mse_loss, (b, p.expand(B, 3, 4, 5)), {"reduction": "none"}),
    ("loss reduced", F.mse_loss, (b, p.expand(B, 3, 4, 5)), {}),
    ("non-batch carrier first", torch.add, (single, b), {}),
    ("batch then non-batch carrier", torch.add, (b, single), {}),
    # declared rows at positions
    ("linear", F.linear, (b2, W), {}),
    ("linear bias", F.linear, (b2, W, torch.randn(2)), {}),
    ("linear by keyword", F.linear, (), {"input": b2, "weight": W}),
    ("linear batch as weight", F.linear, (torch.randn(3, 7), b2), {}),
    ("linear batch twice", F.linear, (b2, b2), {}),
    ("conv2d", F.conv2d, (img, torch.randn(4, 3, 3, 3)), {"padding": 1}),
    ("conv2d unbatched input", F.conv2d, (b3[:3], torch.randn(2, 3, 3, 3)), {}),
    ("addmm", torch.addmm, (torch.randn(2), b2, W.t()), {}),
    ("axpby", ops.axpby, (b, torch.randn(B, 3, 4, 5), 2.0, 3.0), {}),
    ("scale", ops.scale, (b, 2.0), {}),
    # over dims (OverDims)
    ("sum dim", torch.sum, (b, 1), {}),
    ("sum method", Tensor.sum, (b, -1), {}),
    ("sum keyword", Tensor.sum, (b,), {"dim": 2}),
    ("sum axis", torch.sum, (b,), {"axis": 2}),
    ("sum tuple", torch.sum, (b, (1, 2)), {}),
    ("sum list", torch.sum, (b, [1, -1]), {}),
    ("sum over the samples", torch.sum, (b, 0), {}),
    ("sum over the samples, negative", torch.sum, (b, -4), {}),
    ("sum tuple with 0", torch.sum, (b, (0, 1)), {}),
    ("sum of all", torch.sum, (b,), {}),
    ("sum dim None", Tensor.sum, (b,), {"dim": None}),
    ("sum keepdim", torch.sum, (b, 1), {"keepdim": True}),
    ("sum dtype", torch.sum, (b, 1), {"dtype": torch.float64}),
    ("sum out=", torch.sum, (b, 1), {"out": OUT}),
    ("mean NumPy int", torch.mean, (b, np.int64(1)), {}),
    ("mean tuple of one", torch.mean, (b, (1,)), {}),
    ("max dim (tuple result)", torch.max, (b, 1), {}),
    ("max over samples (tuple result)", torch.max, (b, 0), {}),
    ("max with a tensor", torch.max, (b, p), {}),
    ("amax", torch.amax, (b, 0), {}),
    ("softmax", torch.softmax, (b, 1), {}),
    ("cumsum keyword", torch.cumsum, (b,), {"dim": 2}),
    ("std", Tensor.std, (b, 1), {}),
    ("logsumexp", torch.logsumexp, (b, (1, 2)), {}),
    ("argmax", torch.argmax, (b, 1), {}),
    ("vector_norm", torch.linalg.vector_norm, (b, 2, (1, 2)), {}),
    ("norm default dims", torch.norm, (b, 2), {}),
    ("kthvalue", torch.kthvalue, (b, 2, 1), {}),
    ("count_nonzero", torch.count_nonzero, (b, 3), {}),
    ("unfold named dimension", Tensor.unfold, (b, 3, 2, 1), {}),
    ("unfold over the samples", Tensor.unfold, (b, 0, 2, 1), {}),
]


def _run(func, args, kwargs, python: bool):
    kwargs = {k: (torch.empty(0) if v is OUT else v) for k, v in kwargs.items()}
    if python:
        types = (MetadataTensor,)
        return MetadataTensor._python_torch_function(func, types, args, kwargs)
    return func(*args, **kwargs)


def _summary(result) -> list:
    return [
        (
            type(t),
            t.as_subclass(Tensor).clone(),
            getattr(t, "metadata", None),
            batch_size_of(t),
        )
        for t in tree_leaves(result)
        if isinstance(t, Tensor)
    ]


@pytest.mark.parametrize(("name", "func", "args", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_the_compiled_path_gives_what_the_python_path_gives(name, func, args, kwargs):
    via_c = _summary(_run(func, args, kwargs, python=False))
    via_python = _summary(_run(func, args, kwargs, python=True))
    assert len(via_c) == len(via_python) > 0
    for c, py in zip(via_c, via_python):
        assert c[0] is py[0], name
        torch.testing.assert_close(c[1], py[1], equal_nan=True)
        assert c[2] == py[2], name
        assert c[3] == py[3], name


def test_the_cases_meet_both_verdicts_and_every_kind_of_declared_record():
    kept = dropped = 0
    for _, func, args, kwargs in CASES:
        sizes = [s for _, _, _, s in _summary(_run(func, args, kwargs, python=True))]
        kept += any(s is not None for s in sizes)
        dropped += any(s is None for s in sizes)
    assert kept >= 20 and dropped >= 15
    kinds = {type(RECORDS[f].verdict) for _, f, _, _ in CASES}
    assert {Rows, OverDims} <= kinds


def test_every_declared_record_is_in_the_table_the_compiled_path_reads():
    for func, record in RECORDS.items():
        declared = type(record.verdict) is OverDims or (
            type(record.verdict) is Rows and record.verdict.results is None
        )
        if record.runs is None and record.compiled != "handler" and declared:
            assert COMPILED[func] is record.verdict, func
        elif record.compiled != "keeps":
            assert func not in COMPILED, func


COMMON = [
    ("add", lambda: torch.add(b, 1)),
    ("mul by a plain tensor", lambda: b * p),
    ("sum over a dim", lambda: b.sum(1)),
    ("mean over dims", lambda: b.mean((1, 2))),
    ("sum of all", lambda: b.sum()),
    ("softmax", lambda: torch.softmax(b, -1)),
    ("linear", lambda: F.linear(b2, W)),
    ("conv2d", lambda: F.conv2d(img, torch.randn(4, 3, 3, 3))),
    ("axpby", lambda: ops.axpby(b, b, 2.0, 3.0)),
]


@pytest.mark.parametrize(("name", "call"), COMMON, ids=[c[0] for c in COMMON])
def test_the_common_calls_are_judged_in_c(name, call):
    seen, result = python_calls(call, under="tensortools/types/metadata")
    assert not [n for n in seen if n in ("fallback", "settle", "_settle_batch")], seen
    assert isinstance(result, MetadataTensor)


@torch.library.custom_op("batchcpath::rowsum", mutates_args=())
def _rowsum(x: Tensor, dim: int) -> Tensor:
    return x.sum(dim)


@_rowsum.register_fake
def _(x, dim):
    return x.sum(dim)


MetadataTensor.batch_rule(_rowsum)(OverDims(1, None))


@pytest.mark.parametrize("dim", [0, 1, -1, -3, 2])
def test_a_users_declared_record_is_judged_alike_on_both_paths(dim):
    op = torch.ops.batchcpath.rowsum.default  # (what __torch_function__ is given)
    c = _summary(_run(op, (b, dim), {}, python=False))
    py = _summary(_run(op, (b, dim), {}, python=True))
    assert [(s[0], s[2], s[3]) for s in c] == [(s[0], s[2], s[3]) for s in py]
    torch.testing.assert_close(c[0][1], b.as_subclass(Tensor).sum(dim))
    assert (c[0][3] is None) == (dim % b.dim() == 0)


@pytest.mark.parametrize(
    "rule",
    [
        Rows((0, "x")),
        Rows((-1,)),
        Rows(None, 1.5),
        Rows((0,), 1, ()),
        OverDims(-1),
        OverDims(True),
        OverDims(1, None, "dim"),
        OverDims(1, None, ("dim", 2)),
    ],
    ids=repr,
)
def test_a_malformed_declared_record_is_refused_naming_its_fields(rule):
    with pytest.raises(TypeError, match="Rows needs|OverDims needs"):
        MetadataTensor.batch_rule(_rowsum)(rule)
    assert RECORDS[_rowsum._opoverload].verdict == OverDims(1, None)


HOSTILE_TABLE = """
import torch
from tensortools import MetadataTensor
from tensortools.dispatch.batch_rules import COMPILED, OverDims, Rows

class Mine(MetadataTensor):
    _fast_batch_calls = {
        **COMPILED,
        torch.sum: OverDims(-1),
        torch.mean: OverDims(-5, None, ("dim",)),
        torch.add: Rows((-1, 2**70), "x", None),
        torch.mul: (1, 2),
        torch.amax: OverDims(2**70),
    }

b = Mine.wrap_batch(torch.randn(6, 3), {"id": list(range(6))}, 6)
for func, args in ((torch.sum, (b, 1)), (torch.mean, (b, 1)), (torch.add, (b, 1)),
                   (torch.mul, (b, 2)), (torch.amax, (b, 1))):
    got = func(*args)
    want = Mine._python_torch_function(func, (Mine,), args, {})
    assert type(got) is type(want) and got.batch_size == want.batch_size == 6, func
    assert got.metadata == want.metadata and torch.equal(got, want), func
print("ok")
"""


def test_a_class_table_of_entries_c_cannot_read_takes_the_python_path():
    # A class's own _fast_batch_calls may hold anything: negative or huge positions, a
    # position list of the wrong kind, a plain tuple. Run apart: a bad read would crash.
    result = subprocess.run(
        [sys.executable, "-c", HOSTILE_TABLE], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]


def test_threads_calling_while_another_registers_records_get_the_python_paths_results():
    # The registry's table is shared: one thread replaces a record again and again while
    # others call through C; every result must be what the Python path gives.
    import threading

    stop, problems = threading.Event(), []
    op = torch.ops.batchcpath.rowsum.default

    def register():
        while not stop.is_set():
            MetadataTensor.batch_rule(_rowsum)(OverDims(1, None))
            MetadataTensor.batch_rule(torch.sum)(OverDims(1, None))

    def call():
        for i in range(30):
            for func, args in ((op, (b, 1 + i % 2)), (torch.sum, (b, i % 3)), (torch.add, (b, 1))):
                got = _summary(func(*args))
                want = _summary(
                    MetadataTensor._python_torch_function(func, (MetadataTensor,), args, {})
                )
                if [(g[0], g[2], g[3]) for g in got] != [(w[0], w[2], w[3]) for w in want]:
                    problems.append((func, args[1:]))

    writer = threading.Thread(target=register)
    callers = [threading.Thread(target=call) for _ in range(3)]
    writer.start()
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    stop.set()
    writer.join()
    assert not problems, problems[:5]
