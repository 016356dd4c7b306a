"""ScalarTensor's arithmetic and the calls its handlers compose
(tensortools/types/scalar/arithmetic.py): add, sub, mul, div, neg, matmul with numbers,
ScalarTensors and dense tensors, against the same computation on the dense matrix, over
drawn sizes, values (with special ones) and dtypes; structured where the answer is
value * I, exact dense answers where it is not, gradients through the structured paths."""

import pytest
import torch
from _support.scalar_cases import CASES
from _support.scalar_cases import assert_same as _assert_same
from _support.scalar_cases import outcome as _run
from hypothesis import given
from hypothesis import strategies as st

from tensortools import ScalarTensor, ops

SPECIAL = [0.0, -0.0, 1.0, -2.5, 1e-30, 3e38, float("inf"), -float("inf"), float("nan")]
values = st.one_of(st.floats(-1e3, 1e3, allow_nan=False), st.sampled_from(SPECIAL))


@given(
    n=st.integers(1, 6),
    v=values,
    w=values,
    s=values,
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 999),
)
@pytest.mark.slow
def test_structured_results_equal_dense(n, v, w, s, dtype, seed):
    torch.manual_seed(seed)
    d, e = ScalarTensor(n, v, dtype=dtype), ScalarTensor(n, w, dtype=dtype)
    t = torch.randn(n, n, dtype=dtype)
    if seed % 3 == 0:
        t[0, -1] = float("inf")  # a non-finite dense operand
    for name, fn, exact in CASES:
        got, got_error = _run(fn, d, e, t, s)
        want, want_error = _run(fn, d.tensor(), e.tensor(), t, s)
        assert got_error == want_error, (name, got_error, want_error)
        if want_error is None:
            try:
                _assert_same(got, want, exact)
            except AssertionError as err:
                raise AssertionError(f"{name}: N={n} v={v} w={w} s={s} {dtype}") from err


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_dtypes(dtype):
    d, e = ScalarTensor(3, 4, dtype=dtype), ScalarTensor(3, -7, dtype=dtype)
    t = torch.randint(-5, 5, (3, 3), dtype=dtype)
    for got, want in [
        (d + e, d.tensor() + e.tensor()),
        (d * e, d.tensor() * e.tensor()),
        (t + d, t + d.tensor()),
        (d @ t, d.tensor() @ t),
        (d.sum(), d.tensor().sum()),
        (torch.trace(d), torch.trace(d.tensor())),
        (d / 2, d.tensor() / 2),
        (torch.div(d, 3, rounding_mode="floor"), torch.div(d.tensor(), 3, rounding_mode="floor")),
    ]:
        _assert_same(got, want, exact=True)


def test_finite_calls_stay_structured(monkeypatch):
    # With finite values every listed case is answered without the dense fallback.
    def no_fallback(func, types, args, kwargs):
        raise AssertionError(f"{func} fell back to dense")

    monkeypatch.setattr(
        ScalarTensor,
        "fallback",
        classmethod(lambda cls, func, types, args, kwargs: no_fallback(func, types, args, kwargs)),
    )
    d, e, t = ScalarTensor(4, 1.5), ScalarTensor(4, -2.0), torch.randn(4, 4)
    for name, fn, _ in CASES:
        if name == "dense + alpha d":
            continue
        fn(d, e, t, 3.0)
    assert isinstance(d @ e, ScalarTensor) and isinstance(torch.inverse(d), ScalarTensor)


def test_non_finite_cases_fall_back_to_exact_dense():
    d = ScalarTensor(3, 2.0)
    got = d * float("inf")  # off the diagonal 0 * inf is NaN
    assert not isinstance(got, ScalarTensor) and got[0, 1].isnan()
    t = torch.ones(3, 3)
    t[2, 0] = float("nan")
    torch.testing.assert_close(d @ t, d.tensor() @ t, equal_nan=True)
    with pytest.raises(torch.linalg.LinAlgError):
        torch.inverse(ScalarTensor(3, 0.0))


def test_gradients_flow_through_structured_paths():
    d = ScalarTensor(3, -1.5, dtype=torch.float64)
    t = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    sq = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    g1, g2 = torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64)
    got = torch.autograd.grad(((d @ t) * g1).sum() + ((sq + d) * g2).sum(), (t, sq))
    want = torch.autograd.grad(
        ((d.tensor() @ t) * g1).sum() + ((sq + d.tensor()) * g2).sum(), (t, sq)
    )
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_lltm_with_scalar_tensor_arguments():
    # old_h and old_cell as value * I (batch = state size): same as their dense matrices.
    torch.manual_seed(0)
    S, F = 4, 3
    x, w, b = torch.randn(S, F), torch.randn(3 * S, S + F), torch.randn(3 * S)
    h, c = ScalarTensor(S, 0.5), ScalarTensor(S, -1.25)
    got = ops.lltm(x, w, b, h, c)
    want = ops.lltm(x, w, b, h.tensor(), c.tensor())
    for a, r in zip(got, want):
        torch.testing.assert_close(a, r, rtol=0, atol=0)
