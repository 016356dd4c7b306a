"""ScalarTensor's reductions and linear algebra against the same call on the dense matrix:
every registered function, with each of its argument sets, over dtypes, special values
(0, -0, the dtype's extremes, inf, NaN) and sizes (0 to 3 and 17, where the handlers
widen a 2x2 stand-in or use a closed form, and 64, where torch's reductions vectorise)."""

import cmath
import math

import pytest
import torch
from scalar_cases import SWEEP_DTYPES, interleaved_failures, matches_dense, special_values

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
REDUCTIONS = (
    *reductions.EXTREMES,
    *reductions.SUMS,
    *closed_forms.CLOSED_FORMS,
    *closed_forms.NORMS,
)


def test_every_registered_reduction_is_swept():
    assert set(REDUCTIONS) <= set(ARGUMENTS) | {torch.nuclear_norm}
    for func in (*REDUCTIONS, *LINALG, torch.linalg.solve, torch.linalg.lstsq):
        assert ScalarTensor.handler_for(func) is not None, func


def _calls(func, table):
    return [((), {})] + [((), a) if isinstance(a, dict) else (a, {}) for a in table[func]]


def _outcome(func, x, args, kwargs):
    try:
        return func(x, *args, **kwargs), None
    except Exception as err:  # the dense call may refuse the dtype or the arguments
        return None, err


def _same(got, want, where, signed=False):
    if isinstance(want, tuple):
        assert type(got) is type(want) and len(got) == len(want), where
        for g, w in zip(got, want, strict=True):
            _same(g, w, where, signed)
        return
    got = got.tensor() if isinstance(got, ScalarTensor) else got
    assert got.dtype == want.dtype and got.shape == want.shape, (where, got, want)
    if want.dtype.is_floating_point or want.dtype.is_complex:
        # the dense call adds in its own order (and LAPACK runs its own algorithm): to
        # torch's tolerance for the dtype
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"{where}: {m}")
        if signed and want.dtype.is_floating_point:
            _same_signed_zeros(got, want, where)

    else:
        assert torch.equal(got, want), (where, got, want)


#: Reductions whose real zero's sign IEEE arithmetic fixes in any order: a product's is
#: the parity of its negative factors; a sum of zeros is -0 only if every term is -0.
#: (Elsewhere the order decides: max(-0, +0), LAPACK's operations, complex parts.)
SIGNED_ZEROS = {torch.prod, torch.sum, torch.nansum, torch.mean, torch.nanmean}


def _same_power(got, want, where, k):
    """A complex k-th power against the dense one: each rounds its products in its own
    order (the BLAS kernel's, which differs between CPUs), and a relative error e in a
    factor becomes |k| * e in the power, so the two agree to |k| units in the last
    place, not to one."""
    got = got.tensor() if isinstance(got, ScalarTensor) else got
    assert got.dtype == want.dtype and got.shape == want.shape, (where, got, want)
    eps = torch.finfo(want.dtype).eps
    tolerance = max(1.3e-6, 4 * abs(k) * eps)
    torch.testing.assert_close(
        got, want, rtol=tolerance, atol=1e-5, equal_nan=True, msg=lambda m: f"{where}: {m}"
    )


def _same_signed_zeros(got, want, where):
    zeros = want == 0
    assert torch.equal(torch.signbit(got[zeros]), torch.signbit(want[zeros])), (where, got, want)


def _sweep(func, table, dtypes, sizes):
    """Every (dtype, value, size, arguments) against the dense call: the same result (or
    the same kind of error). Returns how many answered without the dense matrix."""
    structured = 0
    handler = ScalarTensor.handler_for(func)
    for dtype in dtypes:
        for value in special_values(dtype):
            for n in sizes:
                d = ScalarTensor(n, value, dtype=dtype)
                for args, kwargs in _calls(func, table):
                    where = (
                        f"{func.__name__}(ScalarTensor({n}, {value!r}, {dtype}), {args} {kwargs})"
                    )
                    got = matches_dense(
                        lambda x=d, a=args, k=kwargs: func(x, *a, **k),
                        lambda x=d, a=args, k=kwargs: func(x.tensor(), *a, **k),
                        where,
                        lambda got, want, where=where: _same(
                            got, want, where, func in SIGNED_ZEROS
                        ),
                    )
                    if got is not None:
                        structured += handler(d, *args, **kwargs) is not NotImplemented
    return structured


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")  # var's "degrees of freedom <= 0", dense too
@pytest.mark.parametrize("func", list(ARGUMENTS), ids=lambda f: f.__name__)
def test_every_reduction_equals_the_dense_call(func):
    assert _sweep(func, ARGUMENTS, DTYPES, SIZES) > 0, f"{func.__name__}: never structured"


@pytest.mark.slow
@pytest.mark.parametrize("func", list(LINALG), ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_every_linear_algebra_handler_equals_the_dense_call(func):
    dtypes = [torch.float32, torch.float64, torch.complex64, torch.complex128, torch.int64]
    assert _sweep(func, LINALG, dtypes, [0, 1, 2, 5, 33]) > 0, f"{func.__name__}: never structured"


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
    assert torch.equal(torch.linalg.eigvalsh(d), torch.full((n,), -2.0))
    sign, logabs = torch.linalg.slogdet(d)
    assert sign.item() == 1 and logabs.item() == pytest.approx(n * math.log(2), rel=1e-6)
    assert isinstance(torch.matrix_exp(d), ScalarTensor)
    assert torch.matrix_exp(d).value == pytest.approx(math.exp(-2), rel=1e-6)
    b = torch.randn(n, 3)
    torch.testing.assert_close(torch.linalg.solve(d, b), b / -2)


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
        want, want_error = _outcome(torch.linalg.solve, d.tensor(), (b,), {})
        got, got_error = _outcome(torch.linalg.solve, d, (b,), {})
        if want_error is not None:
            assert isinstance(got_error, type(want_error)), (name, got_error)
        else:
            _same(got, want, name)
    with pytest.raises(RuntimeError):
        torch.linalg.solve(ScalarTensor(4, 0.0), torch.ones(4, 2))  # singular, as dense
    with pytest.raises(RuntimeError):
        torch.linalg.solve(d, torch.ones(3, 2))  # the sizes disagree, as dense


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
                        want, want_error = _outcome(fn, d.tensor(), (b,), {})
                        got, got_error = _outcome(fn, d, (b,), {})
                        if want_error is not None:
                            assert isinstance(got_error, type(want_error)), (where, got_error)
                            continue
                        assert got_error is None, (where, got_error)
                        if not _reproducible(want, fn(d.tensor(), b)):
                            continue  # gelsy on tiny values: the dense call disagrees with itself
                        _same(got, want, where)
                        with ScalarTensor.using_policy("strict"):
                            structured += _outcome(fn, d, (b,), {})[1] is None
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
                        _same_power(got, want, where, k)
                        if dtype.is_complex
                        else _same(got, want, where)
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


def test_trace_refuses_the_dtypes_the_dense_trace_refuses():
    for dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.int8, torch.bool):
        d = ScalarTensor(3, 1, dtype=dtype)
        matches_dense(
            lambda d=d: torch.trace(d),
            lambda d=d: torch.trace(d.tensor()),
            f"trace {dtype}",
            lambda got, want: _same(got, want, f"trace {dtype}"),
        )
