"""ScalarTensor's reductions (tensortools/types/scalar/reductions.py and closed_forms.py)
against the same call on the dense matrix: every registered function, with each of its
argument sets, over dtypes, special values (0, -0, the dtype's extremes, inf, NaN) and
sizes (0 to 3 and 17, where the handlers widen the 2x2 small matrix or use a closed form,
and 64, where torch's reductions vectorise)."""

import math

import pytest
import torch
from _support.scalar_cases import (
    SWEEP_DTYPES,
    interleaved_failures,
    matches_dense,
    same_result,
    sweep_against_dense,
)

from tensortools import ScalarTensor
from tensortools.types.scalar import closed_forms, reductions

DTYPES = SWEEP_DTYPES
SIZES = [0, 1, 2, 3, 17, 64]
INF = math.inf

# Argument sets for each function (every function also runs without); the dims in every
# form torch takes: an int, a negative one, a tuple of both, a list, keepdim.
ARGUMENTS = {
    torch.amax: [{"dim": 0}, {"dim": 1, "keepdim": True}, {"dim": (0, 1)}, {"dim": [-1]}],
    torch.amin: [{"dim": -2}, {"dim": (1, 0), "keepdim": True}],
    torch.aminmax: [{"dim": 0}, {"dim": 1, "keepdim": True}],
    torch.max: [(0,), (1, True), {"dim": -2}],
    torch.min: [(0,), (1, True), {"dim": -1}],
    torch.argmax: [(0,), {"dim": 1, "keepdim": True}],
    torch.argmin: [(0,), {"dim": -1}],
    torch.all: [(0,), {"dim": 1, "keepdim": True}, {"dim": (0, 1)}],
    torch.any: [(1,), {"dim": (0, 1), "keepdim": True}],
    torch.prod: [(0,), (1, True), {"dim": 0, "dtype": torch.float64}],
    torch.sum: [
        (0,),
        {"dim": 1, "keepdim": True},
        {"dim": (0, 1)},
        {"dim": (0, 1), "keepdim": True},
        {"dtype": torch.float64},
        {"dim": -1, "dtype": torch.float32},
    ],
    torch.nansum: [(0,), {"dim": (0, 1)}],
    torch.count_nonzero: [(0,), {"dim": (0, 1)}],
    torch.mean: [(0,), {"dim": 1, "keepdim": True}, {"dim": (0, 1)}, {"dtype": torch.float64}],
    torch.nanmean: [(0,), {"dim": (1, 0)}],
    torch.var: [
        (0,),
        (1, False),
        (False,),
        {"dim": 0, "correction": 0},
        {"dim": (0, 1), "correction": 2},
        {"dim": 1, "unbiased": False, "keepdim": True},
        {"correction": 0.5},
    ],
    torch.std: [(0,), (1, True, True), {"dim": (0, 1), "correction": 0}],
    torch.var_mean: [(0,), {"dim": 1, "correction": 0, "keepdim": True}],
    torch.std_mean: [(1,), {"correction": 3}],
    torch.logsumexp: [(0,), (1, True), ((0, 1),)],
    torch.norm: [
        ("fro",),
        ("nuc",),
        (1,),
        (3,),
        (INF,),
        (-INF,),
        (-1,),
        (0,),
        (2, 0),
        (2, 1, True),
        {"p": 1, "dim": (0, 1)},
        {"p": -INF, "dim": 0},
        {"p": "fro", "dim": 1},
        {"dtype": torch.float64},
    ],
    torch.nuclear_norm: [(True,)],
    torch.linalg.norm: [
        (2,),
        ("fro",),
        ("nuc",),
        (-2,),
        (1,),
        (INF,),
        (-INF,),
        {"ord": 3, "dim": 0},
        {"dim": 1},
        {"ord": -1, "dim": (0, 1)},
        {"ord": 0.5, "dim": -1, "keepdim": True},
    ],
    torch.linalg.vector_norm: [
        (1,),
        (0,),
        (-1,),
        (3.5,),
        (INF,),
        (-INF,),
        {"ord": 2, "dim": 0, "keepdim": True},
        {"dtype": torch.float64},
    ],
    torch.linalg.matrix_norm: [("nuc",), (2,), (-2,), (1,), (-INF,), {"keepdim": True}],
}
REDUCTIONS = (
    *reductions.EXTREMES,
    *reductions.SUMS,
    *closed_forms.CLOSED_FORMS,
    *closed_forms.NORMS,
)


def test_every_registered_reduction_is_swept():
    assert set(REDUCTIONS) <= set(ARGUMENTS) | {torch.nuclear_norm}
    for func in REDUCTIONS:
        assert ScalarTensor.handler_for(func) is not None, func


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")  # var's "degrees of freedom <= 0", dense too
@pytest.mark.parametrize("func", list(ARGUMENTS), ids=lambda f: f.__name__)
def test_every_reduction_equals_the_dense_call(func):
    structured = sweep_against_dense(func, ARGUMENTS, DTYPES, SIZES)
    assert structured > 0, f"{func.__name__}: never structured"


def test_reductions_answer_without_the_dense_matrix():
    n = 100_000  # the dense matrix would take 40 GB
    d = ScalarTensor(n, -2.0)
    assert torch.amax(d).item() == 0 and torch.amin(d).item() == -2
    assert torch.equal(d.sum(0), torch.full((n,), -2.0))
    assert torch.equal(d.argmin(1), torch.arange(n))
    assert d.max(0).indices[:3].tolist() == [1, 0, 0]  # the first zero of each column
    assert d.norm().item() == pytest.approx(2 * math.sqrt(n))
    assert torch.linalg.matrix_norm(d, "nuc").item() == pytest.approx(2 * n)
    assert d.var().item() == pytest.approx(4 * (n - 1) / (n * n - 1) * n / n, rel=1e-4)
    assert torch.logsumexp(d, 0)[0].item() == pytest.approx(math.log(math.exp(-2) + n - 1))


def test_arguments_the_handlers_do_not_take_go_to_the_dense_call():
    d = ScalarTensor(5, 1.5)
    other = torch.randn(5, 5)
    torch.testing.assert_close(torch.max(d, other), torch.max(d.tensor(), other))
    torch.testing.assert_close(
        torch.linalg.pinv(d, rtol=0.5), torch.linalg.pinv(d.tensor(), rtol=0.5)
    )
    for bad in ({"dim": 2}, {"dim": (0, 0)}, {"dim": "x"}):
        with pytest.raises((IndexError, RuntimeError, TypeError)) as dense_error:
            torch.amax(d.tensor(), **bad)
        with pytest.raises(dense_error.type):
            torch.amax(d, **bad)
    out = torch.empty(5)
    assert torch.sum(d, 0, out=out) is out and torch.equal(out, torch.full((5,), 1.5))
    # on the meta device there are no values: the dense call answers, with its shape
    meta = ScalarTensor(5, 1.5, device="meta")
    assert torch.amax(meta, 0).shape == (5,) and torch.linalg.svdvals(meta).shape == (5,)


@pytest.mark.slow
def test_threads_sharing_one_scalar_tensor_get_their_own_reductions():
    d = ScalarTensor(9, -0.75)
    calls = {
        "amax": (lambda: d.amax(0), d.tensor().amax(0)),
        "argmin": (lambda: d.argmin(1), d.tensor().argmin(1)),
        "var": (lambda: d.var(0), d.tensor().var(0)),
        "norm": (lambda: d.norm(p=3), d.tensor().norm(p=3)),
        "eigvalsh": (lambda: torch.linalg.eigvalsh(d), torch.linalg.eigvalsh(d.tensor())),
        "sum dense": (lambda: torch.sum(d, 0, dtype=torch.float64), d.tensor().double().sum(0)),
    }
    failures = interleaved_failures(calls, 150, torch.allclose)
    assert not failures and d.value == -0.75


def test_trace_refuses_the_dtypes_the_dense_trace_refuses():
    for dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.int8, torch.bool):
        d = ScalarTensor(3, 1, dtype=dtype)
        matches_dense(
            lambda d=d: torch.trace(d),
            lambda d=d: torch.trace(d.tensor()),
            f"trace {dtype}",
            lambda got, want: same_result(got, want, f"trace {dtype}"),
        )
