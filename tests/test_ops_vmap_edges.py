"""The operators' batching rules at their edges, against a per-sample loop of the float64
reference (tensortools.reference): the LLTM's state (and every other argument) vmapped
at every dim it has, with a batch B that differs from the vmap size; a vmapped dim of
size 0 in each argument of every operator; and jacrev of every operator on 0 rows."""

from __future__ import annotations

import itertools

import pytest
import torch
from _support import tiers
from test_ops_func import CASES
from torch import func

from tensortools import ops, reference

D = torch.float64
# B, V (the vmap size), T, F and S all differ: a size read from the wrong dim shows.
B, V, T, F, S = 3, 5, 2, 4, 6


def _inference(*args):
    return torch.ops.tensortools.lltm_sequence_inference(*args)


def _forward(*args):
    return torch.ops.tensortools.lltm_forward(*args)[:2]


# name: (operator, reference, one sample's argument shapes)
OPERATORS = {
    "lltm": (ops.lltm, reference.lltm, [(B, F), (3 * S, S + F), (3 * S,), (B, S), (B, S)]),
    "lltm_forward": (_forward, reference.lltm, [(B, F), (3 * S, S + F), (3 * S,), (B, S), (B, S)]),
    "lltm_sequence": (
        ops.lltm_sequence,
        reference.lltm_sequence,
        [(T, B, F), (3 * S, S + F), (3 * S,), (B, S), (B, S)],
    ),
    "lltm_sequence_inference": (
        _inference,
        reference.lltm_sequence,
        [(T, B, F), (3 * S, S + F), (3 * S,), (B, S), (B, S)],
    ),
}


def _dims(ndim):
    """Every dim a vmapped argument of ndim sample dims can be vmapped at, and None."""
    return [*range(ndim + 1), -1, None]


def _in_dims_cases():
    """Per operator: each argument at each of its dims with the others shared, and the
    product of every argument's dims (all of them in the full tier, a seeded sample by
    default)."""
    cases = []
    for name, (_, _, shapes) in OPERATORS.items():
        options = [_dims(len(s)) for s in shapes]
        single = {
            tuple(d if j == i else None for j in range(len(shapes)))
            for i, dims in enumerate(options)
            for d in dims
        }
        product = set(itertools.product(*options)) - single
        chosen = sorted(single - {(None,) * len(shapes)}, key=str)
        chosen += tiers.sample(sorted(product - {(None,) * len(shapes)}, key=str), 40, name)
        cases += [(name, in_dims) for in_dims in chosen]
    return cases


def _batched(shapes, in_dims, size, gen):
    """One sample's arguments, and the batched arguments (size samples stacked at each
    vmapped dim)."""

    def make(shape):
        return torch.randn(shape, dtype=D, generator=gen)

    batched = tuple(
        make(s)
        if d is None
        else torch.stack([make(s) for _ in range(size)], d)
        if size
        else make(s).unsqueeze(d % (len(s) + 1)).narrow(d % (len(s) + 1), 0, 0)
        for s, d in zip(shapes, in_dims)
    )
    return batched


def _per_sample(ref, batched, in_dims, size):
    """ref called on each sample, its results stacked at dim 0 (vmap's out_dims)."""
    samples = [
        ref(*(a if d is None else a.select(d, i) for a, d in zip(batched, in_dims)))
        for i in range(size)
    ]
    return tuple(torch.stack(outs) for outs in zip(*samples))


@pytest.mark.parametrize(
    ("name", "in_dims"), _in_dims_cases(), ids=lambda x: x if isinstance(x, str) else str(x)
)
def test_vmap_at_every_dim_equals_the_per_sample_reference(name, in_dims):
    op, ref, shapes = OPERATORS[name]
    gen = torch.Generator().manual_seed(sum(map(ord, f"{name}{in_dims}")))
    batched = _batched(shapes, in_dims, V, gen)
    got = func.vmap(op, in_dims=in_dims)(*batched)
    want = _per_sample(ref, batched, in_dims, V)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)


def _empty_cases():
    """Every operator of test_ops_func (and the raw LLTM operators) with a vmapped dim of
    size 0 in each argument, the others shared."""
    ops_by_name = {n: (c.fn, c.reference, c.shapes) for n, c in CASES.items()}
    ops_by_name.update(OPERATORS)
    return [
        (name, tuple(0 if j == i else None for j in range(len(shapes))))
        for name, (_, _, shapes) in sorted(ops_by_name.items())
        for i in range(len(shapes))
    ]


def _operator(name):
    if name in OPERATORS:
        return OPERATORS[name]
    case = CASES[name]
    return case.fn, case.reference, case.shapes


@pytest.mark.parametrize(
    ("name", "in_dims"), _empty_cases(), ids=lambda x: x if isinstance(x, str) else str(x)
)
def test_vmap_over_no_samples_gives_empty_results(name, in_dims):
    op, ref, shapes = _operator(name)
    gen = torch.Generator().manual_seed(0)
    batched = _batched(shapes, in_dims, 0, gen)
    got = func.vmap(op, in_dims=in_dims)(*batched)
    # one sample's results, from the reference on one sample
    one = ref(
        *(a if d is None else torch.zeros(s, dtype=D) for a, d, s in zip(batched, in_dims, shapes))
    )
    got, one = (got, one) if isinstance(one, tuple) else ((got,), (one,))
    assert len(got) == len(one)
    for g, w in zip(got, one):
        assert g.shape == (0, *w.shape) and g.dtype == w.dtype, (g.shape, w.shape)


# jacrev where the output has no entries: torch.func vmaps the backward over 0 cotangents.
ZERO_ROWS = {
    "lltm": (ops.lltm, reference.lltm, [(0, F), (3 * S, S + F), (3 * S,), (0, S), (0, S)]),
    "lltm_sequence_no_batch": (
        ops.lltm_sequence,
        reference.lltm_sequence,
        [(T, 0, F), (3 * S, S + F), (3 * S,), (0, S), (0, S)],
    ),
    "lltm_sequence_no_steps": (
        ops.lltm_sequence,
        reference.lltm_sequence,
        [(0, B, F), (3 * S, S + F), (3 * S,), (B, S), (B, S)],
    ),
    "graph_conv": (ops.graph_conv, reference.graph_conv, [(0, 0), (0, 3), (3, 2), (2,)]),
    "axpby": (
        lambda x, y: ops.axpby(x, y, 2.0, -3.0),
        lambda x, y: reference.axpby(x, y, 2.0, -3.0),
        [(0, 4), (4,)],
    ),
    "scale": (ops.scale, lambda x, v: v * x, [(0, 4), ()]),
    "add_diagonal": (
        ops.add_diagonal,
        lambda x, v: x + v * torch.eye(x.shape[-1], dtype=x.dtype),
        [(0, 0), ()],
    ),
}


@pytest.mark.parametrize("name", sorted(ZERO_ROWS))
def test_jacrev_on_zero_rows(name):
    op, ref, shapes = ZERO_ROWS[name]
    gen = torch.Generator().manual_seed(1)
    args = tuple(torch.randn(s, dtype=D, generator=gen) for s in shapes)
    argnums = tuple(range(len(args)))
    got = torch.utils._pytree.tree_leaves(func.jacrev(op, argnums=argnums)(*args))
    want = torch.utils._pytree.tree_leaves(func.jacrev(ref, argnums=argnums)(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w)
