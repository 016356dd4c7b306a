"""The batch registry (tensortools/dispatch/batch_rules.py): one record per function, registered
by ``MetadataTensor.batch_rule`` beside the function it serves, read by the Python path and
(through ``BATCH_CALLS``) by the compiled one. A user's ``torch.library`` operator gets a rule
like torch's own functions; tensortools' operators register their own rows; every result is
checked row by row against the operator run on each sample alone, as plain tensors."""

import pathlib
import warnings

import pytest
import torch
from _support.frames import python_calls
from _support.packages import imports
from torch import Tensor

import tensortools
from tensortools import MetadataTensor
from tensortools.dispatch import batch_rules
from tensortools.dispatch.batch_rules import ALL, DROP, RECORDS
from tensortools.types import metadata
from tensortools.types.metadata.tensor import BATCH_CALLS

NS = "tt_batch_registry"


@torch.library.custom_op(f"{NS}::scaled", mutates_args=())
def scaled(x: Tensor, s: float) -> Tensor:
    return x * s


@torch.library.custom_op(f"{NS}::rowmix", mutates_args=())
def rowmix(x: Tensor, w: Tensor) -> Tensor:
    return x @ w


@torch.library.custom_op(f"{NS}::reversed_rows", mutates_args=())
def reversed_rows(x: Tensor) -> Tensor:
    return x.flip(0)


@torch.library.custom_op(f"{NS}::colsum", mutates_args=())
def colsum(x: Tensor) -> Tensor:
    return x.sum(0, keepdim=True).expand_as(x).clone()


@torch.library.custom_op(f"{NS}::negated", mutates_args=())
def negated(x: Tensor) -> Tensor:
    return -x


scaled(torch.zeros(1), 1.0)  # (torch.library's one-time setup of a first call, at import)
MetadataTensor.batch_rule(scaled, rows=ALL)
MetadataTensor.batch_rule(rowmix, rows=(0,), min_ndim=2)


@MetadataTensor.batch_rule(reversed_rows)
def _reversed(call):
    """Row r of the result holds sample size - 1 - r (a move of the samples)."""
    return list(range(call.size))[::-1]


@MetadataTensor.batch_rule(colsum)
def _mixed(call):
    return DROP  # (every row sums all samples: one tensor)


W = torch.randn(4, 3, dtype=torch.float64)

#: (operator, extra arguments, plain per-batch reference, the sample each row holds or None)
CASES = {
    "scaled": (scaled, (2.5,), lambda x: x * 2.5, lambda n: list(range(n))),
    "rowmix": (rowmix, (W,), lambda x: x @ W, lambda n: list(range(n))),
    "reversed_rows": (reversed_rows, (), lambda x: x.flip(0), lambda n: list(range(n))[::-1]),
    "colsum": (colsum, (), lambda x: x.sum(0, keepdim=True).expand_as(x), lambda n: None),
}


def _forms(op, name):
    """The spellings of the custom op `name`: the CustomOpDef, its packet, its overload."""
    packet = getattr(getattr(torch.ops, NS), name)
    return {"custom_op": op, "packet": packet, "overload": packet.default}


def _batch(n, labels):
    data = torch.randn(n, 4, dtype=torch.float64)
    ids = [10 * k + 1 for k in range(n)]
    meta = {"id": ids if labels == "list" else torch.tensor(ids)}
    return MetadataTensor.wrap_batch(data, meta, n), data, ids


@pytest.mark.parametrize("labels", ["list", "tensor"])
@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("form", ["custom_op", "packet", "overload"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_user_operator_follows_its_rule_row_by_row(name, form, n, labels):
    op, extra, reference, rows = CASES[name]
    b, data, ids = _batch(n, labels)
    out = _forms(op, name)[form](b, *extra)
    want = reference(data)
    torch.testing.assert_close(out.as_subclass(Tensor), want)
    held = rows(n)
    if held is None:  # (dropped: one tensor with the batch's metadata whole)
        assert out.batch_size is None
        assert [int(i) for i in out.metadata["id"]] == ids
        return
    assert out.batch_size == n
    for r, s in enumerate(held):
        row = out[r]
        assert int(row.metadata["id"]) == ids[s]
        # (row r is what the operator gives sample s alone)
        alone = reference(data[s : s + 1])[0] if name != "reversed_rows" else data[s]
        torch.testing.assert_close(row.as_subclass(Tensor), alone)


def test_an_operator_without_a_rule_drops_the_batch():
    b, data, ids = _batch(3, "list")
    out = negated(b)
    torch.testing.assert_close(out.as_subclass(Tensor), -data)
    assert out.batch_size is None and out.metadata == {"id": ids}


@pytest.mark.parametrize("form", ["custom_op", "packet", "overload"])
def test_a_keep_record_is_read_by_the_compiled_path_and_the_python_one(form):
    @torch.library.custom_op(f"{NS}::kept_{form}", mutates_args=())
    def kept(x: Tensor) -> Tensor:
        return x + 1

    forms = _forms(kept, f"kept_{form}")
    overload = forms["overload"]
    b, data, ids = _batch(3, "list")
    assert kept(b).batch_size is None and overload not in BATCH_CALLS  # (no record yet)
    assert "fallback" in _python_calls(lambda: kept(b))
    MetadataTensor.batch_rule(forms[form], keep=True)
    assert overload in BATCH_CALLS and RECORDS[overload].does == "keep"
    assert "fallback" not in _python_calls(lambda: kept(b))  # (the compiled path read it)
    compiled = kept(b)
    with MetadataTensor.using_merge_policy("union"):  # (a thread's setting: the Python path)
        assert "fallback" in _python_calls(lambda: kept(b))
        python = kept(b)
    for out in (compiled, python):
        torch.testing.assert_close(out.as_subclass(Tensor), data + 1)
        assert out.batch_size == 3 and out.metadata == {"id": ids}
        assert [int(out[r].metadata["id"]) for r in range(3)] == ids


def _python_calls(run):
    """The names of the Python functions of tensortools that `run()` calls."""
    return python_calls(run)[0]


def _keep_functions():
    return [f for f, r in RECORDS.items() if r.compiled == "keeps"]


def test_every_keep_record_gives_the_same_batch_on_both_paths():
    # The sweep over every function the compiled path keeps batches through: what it gives
    # is what the Python path gives from the same record, against the plain call's values.
    keeps = {f for f, entry in BATCH_CALLS.items() if entry is None}
    assert keeps == set(_keep_functions()) and len(keeps) > 200
    b, data, ids = _batch(3, "list")
    ran = 0
    warnings.simplefilter("ignore")  # (dropout2d of a 2-D input, ...; pytest restores it)
    for f in _keep_functions():
        try:
            with torch.random.fork_rng():
                torch.manual_seed(0)
                plain = f(data)
        except Exception:
            continue  # (a function that takes no such tensor: float64, 2-D)
        outs = []
        for policy in ("first", "union"):
            with torch.random.fork_rng(), MetadataTensor.using_merge_policy(policy):
                torch.manual_seed(0)
                outs.append(f(b))
        for out in outs:
            if not isinstance(plain, Tensor) or plain.dim() == 0:
                continue
            assert isinstance(out, MetadataTensor), f
            assert out.batch_size == 3 and out.metadata == {"id": ids}, f
            if f is not torch.empty_like:  # (values undefined: its shape alone)
                torch.testing.assert_close(out.as_subclass(Tensor), plain, equal_nan=True)
            assert out.shape == plain.shape and out.dtype == plain.dtype, f
        ran += 1
    assert ran > 200, ran


def test_tensortools_operators_register_their_own_rows():
    served = [getattr(tensortools.ops, n) for n in tensortools.ops.__all__]
    served.append(tensortools.ops.lltm.__globals__["lltm_sequence_batch_first"])
    for op in served:
        assert op in RECORDS, op
        assert RECORDS[op].does == "rows"
    # ... and the MetadataTensor package imports nothing of tensortools.ops
    root = pathlib.Path(metadata.__file__).parent
    found = [
        f"{path.name} imports {name}"
        for path in sorted(root.glob("*.py"))
        for name, names in imports(path)
        if name.startswith("tensortools.ops") or (name == "tensortools" and "ops" in names)
    ]
    assert not found


def test_a_record_joins_its_parts():
    # torch.cat: joined along dim 0 by a rule that runs the call, judged along other dims
    record = RECORDS[torch.cat]
    assert record.does == "join" and record.runs is not None and callable(record.verdict)
    assert RECORDS[torch.stack].compiled == "handler"  # (torch.stack of samples: a handler)
    assert batch_rules.record_of(torch.Tensor.__getitem__).does == "apart"
    # (the views both paths read: the rules that run calls, the calls C keeps batches in)
    assert batch_rules.RUNNERS == {f: r.runs for f, r in RECORDS.items() if r.runs}
    assert BATCH_CALLS == {
        f: None if r.compiled == "keeps" else r.verdict
        for f, r in RECORDS.items()
        if r.compiled in ("keeps", "judged")
    }


@pytest.mark.parametrize(
    "call, names",
    [
        (lambda: MetadataTensor.batch_rule(), "at least one function"),
        (lambda: MetadataTensor.batch_rule(1, keep=True), "1 is not callable"),
        (lambda: MetadataTensor.batch_rule(negated, rows="x"), "'rows'"),
        (lambda: MetadataTensor.batch_rule(negated, rows=(-1,)), "'rows'"),
        (lambda: MetadataTensor.batch_rule(negated, rows=(0,), results=1), "'results'"),
        (lambda: MetadataTensor.batch_rule(negated, rows=(0,), min_ndim=-1), "'min_ndim'"),
        (lambda: MetadataTensor.batch_rule(negated, keep=True, rows=(0,)), "one of"),
        (lambda: MetadataTensor.batch_rule(negated, apart=True, join=True), "one of"),
        (lambda: MetadataTensor.batch_rule(negated, runs=True, rows=ALL), "one of"),
        (lambda: MetadataTensor.batch_rule(negated)(3), "must be callable"),
    ],
)
def test_bad_registrations_name_the_argument(call, names):
    before = dict(RECORDS)
    with pytest.raises(TypeError, match=names):
        call()
    assert RECORDS == before
