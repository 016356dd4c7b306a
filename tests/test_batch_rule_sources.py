"""The batch rule judges every argument that holds samples: a call
keeps a MetadataTensor batch only where every batch among its arguments holds the same
samples in the same rows of the result; rows written from another batch, or two batches
in different orders meeting in one call, give one tensor (not a batch), whatever the
order of the arguments; in-place forms end as their out-of-place forms do.

Each call runs with its source (the second tensor) in four kinds: the batch itself (the
same object), another batch of the same samples in the same order, a batch of the same
samples permuted, and a plain tensor. Every result is checked row by row against the
per-sample truth: a row labelled sample s must be what plain torch gives for that row
when every row of every batch argument is sample s (plain arguments unchanged), so a
row that holds another sample's values, or mixes samples, fails; and whether the result
is a batch is checked against what the rule says for that kind of source.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._pytree import tree_leaves

from tensortools import MetadataTensor, ops

N = 4
IDS = list(range(N))
PERM = [2, 0, 3, 1]
KINDS = ("itself", "batch", "permuted", "plain")


def table(*shape: int, seed: int = 0) -> torch.Tensor:
    """Sample s's values are table[s] (rows pairwise different)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, *shape, generator=g, dtype=torch.float64)


def plain(t):
    return t.as_subclass(torch.Tensor) if isinstance(t, torch.Tensor) else t


def build(specs: list, s: int | None = None, typed: bool = True) -> list:
    """The call's tensors for `specs` (kind, table): batches (typed), their plain values,
    or (s given) every batch's rows replaced by sample s."""
    out = []
    for kind, tab in specs:
        if kind == "itself":
            out.append(out[0])
            continue
        if kind == "plain":
            out.append(tab * 0.5 + 1)
            continue
        ids = PERM if kind == "permuted" else IDS
        data = tab[ids].clone() if s is None else tab[s].expand_as(tab).clone()
        out.append(MetadataTensor.wrap_batch(data, {"id": list(ids)}, N) if typed else data)
    return out


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True)


def judge(f, specs: list) -> tuple[list, list[str]]:
    """(each tensor result's batch size, the problems found) of f over `specs`."""
    args = build(specs)
    got, want = tree_leaves(f(*args)), tree_leaves(f(*build(specs, typed=False)))
    sizes, problems = [], []
    for k, (g, w) in enumerate(zip(got, want)):
        if not isinstance(g, MetadataTensor):
            continue
        sizes.append(g.batch_size)
        if not same(plain(g), w):
            problems.append(f"result {k}: values differ from plain torch's")
        if g.batch_size is None:
            continue
        ids = g.metadata["id"]
        if len(ids) != g.shape[0]:
            problems.append(f"result {k}: {len(ids)} labels for {g.shape[0]} rows")
            continue
        for r, s in enumerate(ids):
            truth = tree_leaves(f(*build(specs, s, typed=False)))[k]
            if not same(plain(g)[r], truth[r]):
                problems.append(f"result {k}: row {r} labelled sample {s} holds other values")
    return sizes, problems


# -- calls of a batch (first) and a source (second) --------------------------------------

MASK = torch.tensor([[1, 0, 1], [0, 0, 1], [1, 1, 0], [0, 1, 1]], dtype=torch.bool)
IDX0 = torch.tensor([[1, 2, 3], [3, 0, 2], [0, 3, 1], [2, 1, 0]])  # (each column a permutation)
IDX1 = torch.tensor([[2, 0, 1], [1, 2, 0], [0, 1, 2], [2, 1, 0]])
ROWS = torch.tensor([1, 3, 0, 2])
# (ops.lltm's weights and bias, state size 5 and 3 features: 3S x (S + F), 3S)
CELL_W = torch.linspace(-1, 1, 15 * 8, dtype=torch.float64).reshape(15, 8).sin()
CELL_B = torch.linspace(-0.5, 0.5, 15, dtype=torch.float64)
# (function, its form with the arguments the other way round, source table, whether a
# batch of the same samples in the same rows as a source keeps the batch)
ALIGNED, ALONG_0 = True, False
CASES = {
    "add": (lambda t, s: t + s, lambda t, s: s + t, (3,), ALIGNED),
    "mul": (torch.mul, lambda t, s: s.mul(t), (3,), ALIGNED),
    "maximum": (torch.maximum, lambda t, s: torch.maximum(s, t), (3,), ALIGNED),
    "where": (
        lambda t, s: torch.where(MASK, t, s),
        lambda t, s: torch.where(~MASK, s, t),
        (3,),
        ALIGNED,
    ),
    "lerp": (
        lambda t, s: torch.lerp(t, s, 0.25),
        lambda t, s: torch.lerp(s, t, 0.75),
        (3,),
        ALIGNED,
    ),
    "addcmul": (
        lambda t, s: torch.addcmul(t, s, s),
        lambda t, s: torch.addcmul(s, t, t),
        (3,),
        ALIGNED,
    ),
    "cat(1)": (lambda t, s: torch.cat([t, s], 1), lambda t, s: torch.cat([s, t], 1), (3,), ALIGNED),
    "stack(1)": (
        lambda t, s: torch.stack([t, s], 1),
        lambda t, s: torch.stack([s, t], 1),
        (3,),
        ALIGNED,
    ),
    "scatter(0)": (lambda t, s: t.scatter(0, IDX0, s), None, (3,), ALONG_0),
    "scatter(1)": (lambda t, s: t.scatter(1, IDX1, s), None, (3,), ALIGNED),
    "scatter_add(0)": (lambda t, s: t.scatter_add(0, IDX0, s), None, (3,), ALONG_0),
    "scatter_reduce(0)": (lambda t, s: t.scatter_reduce(0, IDX0, s, "amax"), None, (3,), ALONG_0),
    "scatter_reduce(1)": (
        lambda t, s: torch.scatter_reduce(t, 1, IDX1, s, "sum"),
        None,
        (3,),
        ALIGNED,
    ),
    "index_copy(0)": (lambda t, s: t.index_copy(0, ROWS, s), None, (3,), ALONG_0),
    "index_copy(1)": (
        lambda t, s: t.index_copy(1, torch.tensor([2, 0, 1]), s),
        None,
        (3,),
        ALIGNED,
    ),
    "index_add(0)": (lambda t, s: torch.index_add(t, 0, ROWS, s), None, (3,), ALONG_0),
    "index_put": (lambda t, s: t.index_put((ROWS,), s), None, (3,), ALONG_0),
    "masked_scatter": (lambda t, s: t.masked_scatter(MASK, s), None, (3,), ALONG_0),
    "slice_scatter(0)": (lambda t, s: t.slice_scatter(s, 0), None, (3,), ALONG_0),
    "slice_scatter(1)": (lambda t, s: t.slice_scatter(s, 1, 1, 3), None, (2,), ALIGNED),
    "select_scatter(1)": (lambda t, s: torch.select_scatter(t, s, 1, 2), None, (), ALIGNED),
    "gather(1) by the source's order": (
        lambda t, s: torch.gather(t, 1, s.argsort(1)),
        None,
        (3,),
        ALIGNED,
    ),
    "take_along_dim(1) by the source's order": (
        lambda t, s: torch.take_along_dim(t, s.argsort(1), 1),
        None,
        (3,),
        ALIGNED,
    ),
    "masked_fill by the source's mask": (
        lambda t, s: t.masked_fill(s > 0, 0.0),
        None,
        (3,),
        ALIGNED,
    ),
    "ops.lltm, the source as the state": (
        lambda t, s: ops.lltm(t, CELL_W, CELL_B, s, s.exp()),
        None,
        (5,),
        ALIGNED,
    ),
    "matmul of batches of matrices": (
        lambda t, s: t.reshape(N, 1, 3) @ s.mT,
        None,
        (2, 3),
        ALIGNED,
    ),
    "bilinear": (
        lambda t, s: torch.nn.functional.bilinear(t, s, torch.ones(2, 3, 3, dtype=torch.float64)),
        None,
        (3,),
        ALIGNED,
    ),
}


def expected(kind: str, rule: bool) -> bool:
    """Whether the result is a batch: a plain source never changes it; a batch source
    keeps it where written row for row and holding the same samples in the same rows."""
    return kind == "plain" or (rule is ALIGNED and kind in ("itself", "batch"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_batch_among_the_arguments_is_judged_row_by_row(name, kind):
    f, swapped, shape, rule = CASES[name]
    if kind == "itself" and shape != (3,):
        pytest.skip("the source has another shape than the batch")
    specs = [("batch", table(3)), (kind, table(*shape, seed=1))]
    for form in [f] if swapped is None else [f, swapped]:
        sizes, problems = judge(form, specs)
        assert not problems, (name, kind, problems)
        assert sizes[0] == (N if expected(kind, rule) else None), (name, kind, sizes)
    if shape == (3,) and kind != "itself":  # (the batch as the source of the other kind)
        sizes, problems = judge(f, specs[::-1])
        assert not problems, (name, kind, "reversed", problems)


def test_the_same_samples_in_another_order_drop_the_batch_in_either_order():
    """b + b.flip(0) and b.flip(0) + b: the same answer, not the first argument's."""
    b = build([("batch", table(3))])[0]
    for f in (lambda x, y: x + y, lambda x, y: torch.where(MASK, x, y)):
        one, other = f(b, b.flip(0)), f(b.flip(0), b)
        assert one.batch_size is None and other.batch_size is None
        assert one.metadata == {"id": IDS} and other.metadata == {"id": IDS[::-1]}


# -- tensortools.ops and matrix products --------------------------------------------------

SINGLE = {  # (call, table of the batch, whether it keeps the batch; docs/metadata-tensor.md)
    "ops.scale": (lambda t: ops.scale(t, 2.0), (3,), True),
    "b * 2": (lambda t: t * 2, (3,), True),
    "ops.add_diagonal of matrices": (lambda t: ops.add_diagonal(t, 2.0), (3, 3), True),
    "ops.add_diagonal of a square batch": (lambda t: ops.add_diagonal(t, 2.0), (N,), True),
    "ops.graph_conv, adjacency rows": (
        lambda t: ops.graph_conv(
            t, torch.ones(N, 2, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64)
        ),
        (N,),
        True,
    ),
    "b3 @ v": (lambda t: t @ torch.ones(3, dtype=torch.float64), (2, 3), True),
    "u @ b3": (lambda t: torch.arange(2.0, dtype=torch.float64) @ t, (2, 3), True),
    "b3 @ w": (lambda t: torch.matmul(t, torch.ones(3, 5, dtype=torch.float64)), (2, 3), True),
    "w @ b3": (lambda t: torch.ones(5, 2, dtype=torch.float64) @ t, (2, 3), True),
    "b2 @ v": (lambda t: t @ torch.arange(3.0, dtype=torch.float64), (3,), True),
    "b2 @ w": (lambda t: t @ torch.ones(3, 2, dtype=torch.float64), (3,), True),
    "u @ b2": (lambda t: torch.arange(4.0, dtype=torch.float64) @ t, (3,), False),
    "w @ b2": (lambda t: torch.ones(2, 4, dtype=torch.float64) @ t, (3,), False),
    "v @ b3 of 4-D": (lambda t: torch.ones(2, dtype=torch.float64) @ t, (3, 2, 3), True),
}


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_operators_and_products_follow_the_table(name):
    f, shape, keeps = SINGLE[name]
    sizes, problems = judge(f, [("batch", table(*shape))])
    assert not problems, (name, problems)
    assert sizes == [N if keeps else None], (name, sizes)


@pytest.mark.parametrize("steps", [0, N - 1, N, N + 1])
@pytest.mark.parametrize("kind", ["batch", "permuted", "plain"])
def test_lltm_sequence_state_batches_do_not_read_the_number_of_steps(steps, kind):
    S, F = 5, 2
    g = torch.Generator().manual_seed(3)
    x = torch.randn(steps, N, F, generator=g, dtype=torch.float64)
    w = torch.randn(3 * S, S + F, generator=g, dtype=torch.float64) * 0.3
    bias = torch.randn(3 * S, generator=g, dtype=torch.float64)
    keeps = N if kind != "permuted" else None
    for f in (
        lambda h, c: ops.lltm_sequence(x, w, bias, h, c),
        lambda h, c: ops.lltm_sequence(x, w, bias, c, h),  # (the batch as c0, the source as h0)
    ):
        sizes, problems = judge(f, [("batch", table(S)), (kind, table(S, seed=1))])
        assert not problems, (steps, kind, problems)
        assert sizes == [None, keeps, keeps], (steps, kind, sizes)


# -- in-place forms end as their out-of-place forms ---------------------------------------

IN_PLACE = {  # in-place call, its out-of-place form (False: none, not a batch), batch table
    "t_": (lambda t: t.t_(), lambda t: t.t(), (3,)),
    "transpose_(0, 1)": (lambda t: t.transpose_(0, 1), lambda t: t.transpose(0, 1), (3,)),
    "transpose_(1, 2)": (lambda t: t.transpose_(1, 2), lambda t: t.transpose(1, 2), (2, 3)),
    "swapdims_(0, 1)": (lambda t: t.swapdims_(0, 1), lambda t: t.swapdims(0, 1), (3,)),
    "swapaxes_(0, 1)": (lambda t: t.swapaxes_(0, 1), lambda t: t.swapaxes(0, 1), (3,)),
    "unsqueeze_(0)": (lambda t: t.unsqueeze_(0), lambda t: t.unsqueeze(0), (3,)),
    "unsqueeze_(1)": (lambda t: t.unsqueeze_(1), lambda t: t.unsqueeze(1), (3,)),
    "squeeze_(1)": (lambda t: t.squeeze_(1), lambda t: t.squeeze(1), (1, 3)),
    "resize_": (lambda t: t.resize_(3, N), False, (3,)),
    "resize_ to its own shape": (lambda t: t.resize_(N, 3), False, (3,)),
    "set_": (lambda t: t.set_(torch.zeros(3, N, dtype=t.dtype)), False, (3,)),
    "exp_": (lambda t: t.exp_(), torch.exp, (3,)),
}


@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_an_in_place_form_ends_as_its_out_of_place_form(name):
    f_, f, shape = IN_PLACE[name]
    b, other = build([("batch", table(*shape))])[0], build([("batch", table(*shape))])[0]
    assert f_(b) is b
    assert b.batch_size == (None if f is False else f(other).batch_size), name
    assert b.metadata == {"id": IDS}, name
    assert f_(plain(other)).shape == b.shape


WRITES = {  # in-place write of a source, its out-of-place form
    "add_": (lambda t, s: t.add_(s), torch.add),
    "+=": (lambda t, s: t.__iadd__(s), lambda t, s: t + s),
    "copy_": (lambda t, s: t.copy_(s), lambda t, s: torch.where(MASK | True, s, t)),
    "index_copy_(0)": (
        lambda t, s: t.index_copy_(0, ROWS, s),
        lambda t, s: t.index_copy(0, ROWS, s),
    ),
    "scatter_(0)": (lambda t, s: t.scatter_(0, IDX0, s), lambda t, s: t.scatter(0, IDX0, s)),
    "scatter_(1)": (lambda t, s: t.scatter_(1, IDX1, s), lambda t, s: t.scatter(1, IDX1, s)),
    "masked_scatter_": (
        lambda t, s: t.masked_scatter_(MASK, s),
        lambda t, s: t.masked_scatter(MASK, s),
    ),
    "b[rows] = s[rows]": (
        lambda t, s: t.__setitem__(ROWS[:2], s[ROWS[:2]]) or t,
        lambda t, s: torch.where((ROWS[:2] == torch.arange(N)[:, None]).any(1)[:, None], s, t),
    ),
    "b[:, 1:] = s[:, 1:]": (
        lambda t, s: t.__setitem__((slice(None), slice(1, None)), s[:, 1:]) or t,
        lambda t, s: torch.cat([t[:, :1], s[:, 1:]], 1),
    ),
}


@pytest.mark.parametrize("kind", ["batch", "permuted", "plain"])
@pytest.mark.parametrize("name", sorted(WRITES))
def test_an_in_place_write_of_a_source_is_judged_as_its_out_of_place_form(name, kind):
    f_, f = WRITES[name]
    specs = [("batch", table(3)), (kind, table(3, seed=1))]
    sizes, problems = judge(f_, specs)
    assert not problems, (name, kind, problems)
    assert sizes[0] == judge(f, specs)[0][0], (name, kind, sizes)


# -- a NumPy integer is a dim as an int is -------------------------------------------------

DIMS = {
    "sum": lambda b, d: b.sum(d),
    "mean": lambda b, d: torch.mean(b, d),
    "softmax": lambda b, d: b.softmax(d),
    "cumsum": lambda b, d: b.cumsum(d),
    "max": lambda b, d: b.max(d).values,
    "argmax": lambda b, d: b.argmax(d),
    "kthvalue": lambda b, d: b.kthvalue(1, d).values,
    "transpose": lambda b, d: b.transpose(d, -1),
    "F.softmax": lambda b, d: torch.nn.functional.softmax(b, d),
}


@pytest.mark.parametrize("as_dim", [np.int64, np.int32, np.int16], ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", sorted(DIMS))
def test_a_numpy_integer_dim_is_read_as_the_int(name, as_dim):
    f = DIMS[name]
    for d in (0, 1, -1):
        b = build([("batch", table(2, 3))])[0]
        want, got = f(b, d), f(b, as_dim(d))
        assert got.batch_size == want.batch_size and got.metadata == want.metadata, (name, d)
        assert torch.equal(plain(got), plain(want))
        assert not judge(lambda t: f(t, as_dim(d)), [("batch", table(2, 3))])[1], (name, d)


@pytest.mark.parametrize("dim", [0, np.int64(0), np.int32(0), -2, np.int64(-2)], ids=repr)
def test_stack_of_samples_with_a_numpy_dim_is_a_batch(dim):
    samples = [MetadataTensor(table(3)[i], {"id": i}) for i in range(N)]
    b = torch.stack(samples, dim)
    assert b.batch_size == N and b.metadata == {"id": IDS}
    assert torch.equal(plain(b), table(3))


def _set(t, index, value):
    t[index] = value
    return t


SETITEM = {  # b[index] = value with a value made of the batch: whether b stays a batch
    "b[m] = b[m] * 2": (lambda t: _set(t, t.sum(1) > 0, t[t.sum(1) > 0] * 2), True),
    "b[rows] *= 2": (lambda t: _set(t, ROWS[:2], t[ROWS[:2]].mul_(2)), True),
    "b[1:3] = b[1:3] + 1": (lambda t: _set(t, slice(1, 3), t[1:3] + 1), True),
    "b[0] = b[0] * 2": (lambda t: _set(t, 0, t[0] * 2), True),
    "b[:, 0] = b[:, 1]": (lambda t: _set(t, (slice(None), 0), t[:, 1]), True),
    "b[0] = b[1]": (lambda t: _set(t, 0, t[1]), False),
    "b[:2] = b[2:]": (lambda t: _set(t, slice(None, 2), t[2:]), False),
    "b[:] = b.flip(0)": (lambda t: _set(t, slice(None), t.flip(0)), False),
    "b[[0, 2]] = b[[2, 0]]": (lambda t: _set(t, [0, 2], t[[2, 0]]), False),
    "b[:, 0] = b.flip(0)[:, 1]": (lambda t: _set(t, (slice(None), 0), t.flip(0)[:, 1]), False),
}


@pytest.mark.parametrize("name", sorted(SETITEM))
def test_rows_written_by_index_keep_the_batch_only_over_their_own_samples(name):
    f, keeps = SETITEM[name]
    sizes, problems = judge(f, [("batch", table(3))])
    assert not problems, (name, problems)
    assert sizes == [N if keeps else None], (name, sizes)
