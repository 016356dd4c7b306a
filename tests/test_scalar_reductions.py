"""ScalarTensor's reductions (tensortools/types/scalar/reductions.py and closed_forms.py)
against the same call on the dense matrix: every registered function, with each of its
argument sets, over dtypes, special values (0, -0, the dtype's extremes, inf, NaN) and
sizes (0 to 3 and 17, where the handlers widen the 2x2 small matrix or use a closed form,
and 64, where torch's reductions vectorise)."""

import json
import math

import pytest
import torch
from _support.scalar_cases import (
    SWEEP_DTYPES,
    call_outcome,
    edge_values,
    forbid_dense,
    interleaved_failures,
    matches_dense,
    same_result,
    special_values,
    sweep_against_dense,
)
from _support.script_runs import run_script

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


#: The reductions computed from the value by a formula (the others pick an entry).
COMPUTED = [f for f in ARGUMENTS if f not in reductions.EXTREMES or f is torch.prod]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")  # var's "degrees of freedom <= 0", dense too
@pytest.mark.parametrize("func", COMPUTED, ids=lambda f: f.__name__)
def test_every_reduction_at_both_ends_of_the_range_equals_the_dense_call(func):
    # the closed forms' squares, powers and products of a tiny value underflow and of a
    # huge one overflow, in the dense call as in float64 (at other magnitudes): to the
    # dtype's relative tolerance, so that a tiny number where the dense answer is 0 fails
    dtypes = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex128]
    sweep_against_dense(func, ARGUMENTS, dtypes, [1, 2, 3, 17, 64], edge_values, relative=True)


#: Orders of every kind: 0, fractional, 1, 2, others above, the infinities, negative.
ORDERS = [0, 0.5, 1, 1.5, 2, 3, 3.5, INF, -INF, -0.5, -1, -2, -3.5]


def _vector_norm_calls():
    """(func, args, kwargs) of every function computing a vector norm, for every order,
    over the whole matrix and along each dim, with keepdim."""
    for p in ORDERS:
        yield torch.linalg.vector_norm, (p,), {}
        yield torch.linalg.vector_norm, (p, 0), {}
        yield torch.linalg.vector_norm, (p,), {"dim": 1, "keepdim": True}
        yield torch.linalg.vector_norm, (), {"ord": p, "dim": (1, 0)}
        yield torch.linalg.vector_norm, (p,), {"dim": -1, "dtype": torch.float64}
        yield torch.norm, (), {"p": p}
        yield torch.norm, (p, 1, True), {}
        yield torch.norm, (p, (0, 1)), {}
        yield torch.linalg.norm, (p, 0), {}
        yield torch.linalg.norm, (), {"ord": p, "dim": -1, "keepdim": True}


VECTOR_NORMS = list(_vector_norm_calls())


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64, torch.complex64])
def test_vector_norms_of_every_order_equal_the_dense_call(dtype):
    for value in [*special_values(dtype), *edge_values(dtype)]:
        for n in [0, 1, 2, 3, 17, 64]:
            d = ScalarTensor(n, value, dtype=dtype)
            for func, args, kwargs in VECTOR_NORMS:
                where = f"{func.__name__}(ScalarTensor({n}, {value!r}, {dtype}), {args} {kwargs})"
                matches_dense(
                    lambda: func(d, *args, **kwargs),
                    lambda: func(d.tensor(), *args, **kwargs),
                    where,
                    lambda got, want: same_result(got, want, where, relative=True),
                )


def test_vector_norms_of_every_order_answer_without_the_dense_matrix(monkeypatch):
    calls = []
    for dtype, value in ((torch.float32, -1.5), (torch.float64, 1e-3), (torch.complex64, 3j)):
        d = ScalarTensor(17, value, dtype=dtype)
        for func, args, kwargs in VECTOR_NORMS:
            if call_outcome(func, d.tensor(), args, kwargs)[1] is None:  # (dtype= of a complex d)
                calls.append((d, func, args, kwargs))
    forbid_dense(monkeypatch)
    for d, func, args, kwargs in calls:
        assert func(d, *args, **kwargs).isfinite().all(), (func, args, kwargs)
    assert len(calls) > 100


@pytest.mark.slow
def test_vector_norms_of_every_order_at_n_10_12_stay_structured():
    # N^(1/p) |v| for the whole matrix's N values (and its zeros), under a memory cap
    n, answered = 10**12, 0
    for line in run_script("scalar_norms_huge.py", timeout=300):
        label, p, dtype, answer = json.loads(line)
        assert isinstance(answer, list), (label, p, dtype, answer)
        value = {"torch.float32": 0.75, "torch.float64": 3.25, "torch.complex64": 5.0}[dtype]
        if p == 0:
            want = n
        elif p == -INF or p < 0:
            want = 0.0  # a zero among the entries
        elif p == INF:
            want = value
        else:
            want = n ** (1 / p) * value
        assert answer[2] == pytest.approx(want, rel=1e-6), (label, p, dtype, answer)
        assert answer[1] == ([1, 1] if label in ("vector_norm keepdim", "norm dims") else [])
        answered += 1
    assert answered == 3 * 7 * len(ORDERS)


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
