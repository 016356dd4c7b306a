"""ScalarTensor's linear algebra (tensortools/types/scalar/linalg.py) against the same
call on the dense matrix: every handler over LAPACK's dtypes, special values and sizes,
solves with dense right-hand sides, and the dense routines' own rounding where the
handlers follow it (matrix_power's squarings, matrix_exp's range, logdet's branch)."""

import cmath
import math

import pytest
import torch
from _support.scalar_cases import (
    call_outcome,
    edge_values,
    matches_dense,
    same_power,
    same_result,
    special_values,
    sweep_against_dense,
)

from tensortools import ScalarTensor


def test_every_linear_algebra_handler_is_swept():
    for func in (*LINALG, torch.linalg.solve, torch.linalg.lstsq):
        assert ScalarTensor.handler_for(func) is not None, func


def test_linear_algebra_answers_without_the_dense_matrix():
    n = 100_000  # the dense matrix would take 40 GB
    d = ScalarTensor(n, -2.0)
    assert torch.equal(torch.linalg.eigvalsh(d), torch.full((n,), -2.0))
    sign, logabs = torch.linalg.slogdet(d)
    assert sign.item() == 1 and logabs.item() == pytest.approx(n * math.log(2), rel=1e-6)
    assert isinstance(torch.matrix_exp(d), ScalarTensor)
    assert torch.matrix_exp(d).value == pytest.approx(math.exp(-2), rel=1e-6)
    b = torch.randn(n, 3)
    torch.testing.assert_close(torch.linalg.solve(d, b), b / -2)


# sizes where a LAPACK call costs little: the linear algebra runs at these only
LINALG = {
    torch.det: [],
    torch.linalg.det: [],
    torch.slogdet: [],
    torch.linalg.slogdet: [],
    torch.logdet: [],
    torch.inverse: [],
    torch.linalg.inv: [],
    torch.matrix_power: [(0,), (1,), (3,), (-2,)],
    torch.linalg.matrix_power: [(5,), (-1,)],
    torch.matrix_exp: [],
    torch.linalg.matrix_exp: [],
    torch.linalg.eigvals: [],
    torch.linalg.eigvalsh: [("U",)],
    torch.linalg.svdvals: [],
    torch.linalg.cholesky: [{"upper": True}],
    torch.pinverse: [],
    torch.linalg.pinv: [{"hermitian": True}],
}


@pytest.mark.slow
@pytest.mark.parametrize("func", list(LINALG), ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_every_linear_algebra_handler_equals_the_dense_call(func):
    dtypes = [torch.float32, torch.float64, torch.complex64, torch.complex128, torch.int64]
    structured = sweep_against_dense(func, LINALG, dtypes, [0, 1, 2, 5, 33])
    assert structured > 0, f"{func.__name__}: never structured"


@pytest.mark.slow
@pytest.mark.parametrize("func", list(LINALG), ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_every_linear_algebra_handler_at_both_ends_of_the_range_equals_the_dense_call(func):
    # vᴺ, exp(v) and the eigenvalue forms of a tiny or huge value: to the dtype's relative
    # tolerance, so that a tiny number where the dense answer is 0 fails
    dtypes = [torch.float32, torch.float64, torch.complex64, torch.complex128]
    sweep_against_dense(func, LINALG, dtypes, [1, 2, 3, 5], edge_values, relative=True)


def test_a_dense_right_hand_side_that_is_not_finite_goes_to_the_dense_solve():
    d = ScalarTensor(4, 2.0)
    for bad in (math.inf, math.nan):
        b = torch.ones(4, 2)
        b[1, 0] = bad
        torch.testing.assert_close(
            torch.linalg.solve(d, b), torch.linalg.solve(d.tensor(), b), equal_nan=True
        )
    for b, left in ((torch.ones(3, 4), False), (torch.ones(2, 4, 5), True), (torch.ones(4), True)):
        torch.testing.assert_close(
            torch.linalg.solve(d, b, left=left), torch.linalg.solve(d.tensor(), b, left=left)
        )
    layouts = {
        "transposed": torch.randn(2, 4).t(),
        "expanded": torch.randn(4, 1).expand(4, 3),
        "a strided slice": torch.randn(4, 6)[:, ::2],
        "batched, channels last": torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
        "empty": torch.randn(4, 0),
        "float64 beside a float32 matrix": torch.randn(4, 2, dtype=torch.float64),
    }
    for name, b in layouts.items():
        want, want_error = call_outcome(torch.linalg.solve, d.tensor(), (b,), {})
        got, got_error = call_outcome(torch.linalg.solve, d, (b,), {})
        if want_error is not None:
            assert isinstance(got_error, type(want_error)), (name, got_error)
        else:
            same_result(got, want, name)
    with pytest.raises(RuntimeError):
        torch.linalg.solve(ScalarTensor(4, 0.0), torch.ones(4, 2))  # singular, as dense
    with pytest.raises(RuntimeError):
        torch.linalg.solve(d, torch.ones(3, 2))  # the sizes disagree, as dense


#: The dtype a float32 (complex64) answer is checked in where the dense call's is off.
_WIDER = {torch.float32: torch.float64, torch.complex64: torch.complex128}


def _narrowed(result, dtype):
    """A float64 (complex128) result's floating tensors as `dtype`, the rest as they are."""
    if isinstance(result, torch.Tensor):
        return result.to(dtype) if result.is_floating_point() or result.is_complex() else result
    return type(result)([_narrowed(r, dtype) for r in result])


def _within(got, want, rtol, where):
    """A result against another, field by field, to a relative tolerance alone."""
    pairs = [(got, want)] if isinstance(want, torch.Tensor) else zip(got, want, strict=True)
    for g, w in pairs:
        assert g.dtype == w.dtype and g.shape == w.shape, (where, g, w)
        torch.testing.assert_close(
            g, w, rtol=rtol, atol=0, equal_nan=True, msg=lambda m: f"{where}: {m}"
        )


def _reproducible(first, second):
    """Whether two results of one dense call are the same, bit for bit (NaN as NaN)."""
    pairs = [(first, second)] if isinstance(first, torch.Tensor) else zip(first, second)
    return all(
        x.shape == y.shape and bool(((x == y) | (x.isnan() & y.isnan())).all()) for x, y in pairs
    )


@pytest.mark.slow
@pytest.mark.parametrize("call", ["solve", "solve right", "lstsq"])
def test_solves_with_a_dense_right_hand_side_equal_the_dense_call(call):
    calls = {
        "solve": [lambda a, b: torch.linalg.solve(a, b)],
        "solve right": [lambda a, b: torch.linalg.solve(a, b.mT if b.dim() > 1 else b, left=False)],
        "lstsq": [
            lambda a, b, driver=driver, rcond=rcond: torch.linalg.lstsq(a, b, rcond, driver=driver)
            for driver in (None, "gelsy", "gelsd", "gelss", "gels")
            # (rcond >= 1 leaves gelsy a tie of pivots that two dense calls break apart)
            for rcond in (None, 0.5)
        ],
    }[call]
    structured = 0
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64, torch.complex64, torch.float16):
        for value in special_values(dtype):
            if call == "lstsq" and not cmath.isfinite(value):
                continue  # LAPACK's least squares of inf or NaN differs from call to call
            for n in (0, 1, 3, 17):
                d = ScalarTensor(n, value, dtype=dtype)
                rhs = [torch.randn(n, 3, dtype=dtype), torch.randn(n, dtype=dtype)]
                rhs.append(torch.full((n, 2), math.inf, dtype=dtype))
                for fn in calls:
                    for b in rhs:
                        where = f"{call}(ScalarTensor({n}, {value!r}, {dtype}), {tuple(b.shape)})"
                        want, want_error = call_outcome(fn, d.tensor(), (b,), {})
                        got, got_error = call_outcome(fn, d, (b,), {})
                        if want_error is not None:
                            assert isinstance(got_error, type(want_error)), (where, got_error)
                            continue
                        assert got_error is None, (where, got_error)
                        if not _reproducible(want, fn(d.tensor(), b)):
                            continue  # gelsy on tiny values: the dense call disagrees with itself
                        with ScalarTensor.using_policy("strict"):
                            declined = call_outcome(fn, d, (b,), {})[1] is not None
                        structured += not declined
                        try:
                            same_result(got, want, where)
                        except AssertionError:
                            if dtype not in _WIDER:
                                raise
                            # (at the edge of float32's range LAPACK's least squares is a
                            # few ulps off on some right-hand sides, and which ones depends
                            # on the run: a structured answer must then be right by the
                            # dense call in float64, rounded; where the handler declines,
                            # the answer is LAPACK's own, which differs from one call to
                            # the next by up to 1.3e-4 relatively at value 1.2e-38)
                            wide = _narrowed(
                                fn(d.tensor().to(_WIDER[dtype]), b.to(_WIDER[dtype])), dtype
                            )
                            if not declined:
                                same_result(got, wide, where + " (float64)")
                            else:
                                _within(got, wide, 1e-3, where + " (declined, float64)")
    assert structured > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.complex128])
def test_matrix_exp_gives_the_dense_algorithms_answer_over_its_range(dtype):
    # torch's matrix_exp runs a Padé approximant and squarings whose number grows with
    # |value|; on value * I_2 they round as on value * I_N, while on 1x1 torch computes
    # exp(value) itself (float32 exp(0.5) differs by 2e-5 from the dense matrix's)
    values = [0.3, 0.5, 1.0, 2.5, 6.0, 10.0, 40.0, 80.0, -20.0, -80.0]
    values += [3j, 30j, 1000j, 5 + 5j, 0.7 - 0.2j] if dtype.is_complex else []
    eps = torch.finfo(dtype.to_real()).eps
    for value in values:
        for n in (1, 2, 5, 33):
            d = ScalarTensor(n, value, dtype=dtype)
            got, want = torch.matrix_exp(d), torch.matrix_exp(d.tensor())
            assert isinstance(got, ScalarTensor), (value, n)
            torch.testing.assert_close(got.tensor(), want, rtol=4 * eps, atol=0)


def _bits(t):
    """t's numbers with each zero's sign and NaN made comparable: equal bits, in effect."""
    t = torch.view_as_real(t) if t.is_complex() else t
    if not t.is_floating_point():
        return t.tolist()
    return [(math.copysign(1, x), x) if x == x else "nan" for x in t.flatten().tolist()]


@pytest.mark.parametrize(
    "dtype",
    [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.int64],
)
def test_matrix_power_rounds_as_the_dense_squarings_do(dtype):
    # the dense call rounds after each squaring and product: float16's 1.01 ** 100 and
    # float32's 1.0000001 ** (2**20 + 3) differ from pow's single rounding in their
    # last digits, and a power of 2**20 of 1e-8 off one ends far from pow's
    values = [0.0, -0.0, 1.0000001, 1.01, -1.5, 0.3, 3.0, 0.999]
    if dtype.is_complex:
        values += [0.6 + 0.8j, -1 + 0j, 1.0000001 + 1e-4j]
    elif not dtype.is_floating_point:
        values = [0, 1, -1, 3, -7]
    exact = not dtype.is_complex  # (the complex product's order is the BLAS kernel's)
    structured = 0
    for value in values:
        for n in (1, 2, 5, 33):
            d = ScalarTensor(n, value, dtype=dtype)
            for k in (0, 1, 2, 3, 7, 100, 2**10, 2**20 + 3, -1, -2):
                where = f"matrix_power(ScalarTensor({n}, {value!r}, {dtype}), {k})"
                got = matches_dense(
                    lambda d=d, k=k: torch.linalg.matrix_power(d, k),
                    lambda d=d, k=k: torch.linalg.matrix_power(d.tensor(), k),
                    where,
                    lambda got, want, where=where, k=k: (
                        same_power(got, want, where, k)
                        if dtype.is_complex
                        else same_result(got, want, where)
                    ),
                )
                if got is None:
                    continue
                if not isinstance(got, ScalarTensor):
                    continue  # (the dense call answered)
                structured += 1
                want = torch.linalg.matrix_power(d.tensor(), k)
                if exact and k >= 0:  # (a negative power inverts on LAPACK first)
                    assert _bits(got.tensor()) == _bits(want), where
    assert structured > 0


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_logdet_of_a_real_value_has_the_dense_calls_branch(dtype):
    # the dense determinant of (-2+0j) * I_17 is real, so its logarithm's imaginary part
    # is +pi; pow(-1+0j, 17) in complex arithmetic is -1-4e-15j, whose logarithm has -pi
    # on the real axis (+0j) the dense products stay real; elsewhere, where v ** N ends on
    # the negative real axis (-3j at N = 2, 6, ...; -2-0j), its rounding picks the side
    for value in (-2.0, 2.0, -0.5, -1.0, 1 - 2j, -3j, 3j, complex(-2, -0.0), -1 - 1j):
        for n in range(1, 40):
            d = ScalarTensor(n, value, dtype=dtype)
            for func in (torch.logdet, torch.det, lambda x: torch.linalg.slogdet(x).sign):
                got, want = func(d), func(d.tensor())
                torch.testing.assert_close(got, want, msg=lambda m, v=value, n=n: f"{v} {n}: {m}")
