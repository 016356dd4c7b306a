"""ScalarTensor's elementwise handlers against the same call on the dense matrix: every
function of the table, with each of its argument sets, over dtypes, special values
(0, -0, the dtype's extremes, inf, NaN) and sizes (0, 1, 3, 17: the last runs torch's
vectorised loops on the dense matrix)."""

import math

import pytest
import torch
import torch.nn.functional as F
from _support.scalar_cases import SWEEP_DTYPES, interleaved_failures, matches_dense, special_values

from tensortools import ScalarTensor, coverage
from tensortools.types.scalar.elementwise import ELEMENTWISE

DTYPES = SWEEP_DTYPES
SIZES = [0, 1, 3, 17]

# Further arguments for the functions that take them (each also runs without, where it
# can); numbers chosen so that some calls keep 0 off the diagonal and some do not.
HALF = torch.tensor(0.5)
ARGUMENTS = {
    torch.clamp: [{"min": -1, "max": 1}, {"min": 0.5}, {"max": -0.5}],
    torch.clip: [{"min": -1.5, "max": 1.5}],
    torch.clamp_min: [(0.25,), (-1,)],
    torch.clamp_max: [(0.25,), (-1,)],
    torch.pow: [(2,), (0.5,), (0,), (-1,), (HALF,)],
    torch.float_power: [(2,), (3.5,)],
    torch.remainder: [(3,), (-2.5,)],
    torch.fmod: [(3,), (-2.5,)],
    torch.floor_divide: [(2,), (-3,)],
    torch.xlogy: [(2.0,), (0,)],
    torch.special.xlogy: [(2.0,)],
    torch.special.xlog1py: [(2.0,), (-1.0,)],
    torch.copysign: [(-1.0,), (2,)],
    torch.bitwise_and: [(3,), (True,)],
    torch.bitwise_left_shift: [(1,)],
    torch.bitwise_right_shift: [(1,)],
    torch.logical_and: [(torch.tensor(True),), (torch.tensor(0),)],
    torch.maximum: [(HALF,), (torch.tensor(-1.0),)],
    torch.minimum: [(HALF,)],
    torch.fmax: [(HALF,), (torch.tensor(-1.0),)],
    torch.fmin: [(torch.tensor(-2.0),), (torch.tensor(1.0),)],
    torch.round: [{"decimals": 1}],
    torch.nan_to_num: [{"nan": 0.0, "posinf": 1.0, "neginf": -1.0}, {"nan": 7.0}],
    F.leaky_relu: [(0.2,)],
    F.hardtanh: [(-0.5, 0.5), (0.1, 2.0)],
    F.threshold: [(0.1, 20.0), (-1.0, 5.0)],
    F.elu: [{"alpha": 0.5}],
    F.celu: [{"alpha": 2.0}],
    F.gelu: [{"approximate": "tanh"}],
    F.hardshrink: [(0.3,)],
    F.softshrink: [(0.3,)],
    F.rrelu: [{"lower": 0.1, "upper": 0.3}],
}
ARGUMENTS[torch.Tensor.to] = [
    (torch.float64,),
    (torch.int32,),
    ("cpu",),
    {"dtype": torch.float16, "copy": True},
]
for _compare in (
    *(torch.eq, torch.ne, torch.not_equal, torch.lt, torch.le, torch.gt, torch.ge),
    *(torch.less, torch.less_equal, torch.greater, torch.greater_equal),
):
    ARGUMENTS[_compare] = [(0.5,), (-1,), (0,)]


def _calls(func):
    return [((), {})] + [
        ((), a) if isinstance(a, dict) else (a, {}) for a in ARGUMENTS.get(func, [])
    ]


def _call(func, x, args, kwargs):
    if getattr(torch.Tensor, getattr(func, "__name__", ""), None) is func:
        # a method of torch.Tensor: called as one (x.double()), which a ScalarTensor, not
        # being a torch.Tensor, answers through its table
        return getattr(x, func.__name__)(*args, **kwargs)
    return func(x, *args, **kwargs)


def _outcome(func, x, args, kwargs):
    try:
        return _call(func, x, args, kwargs), None
    except Exception as err:  # the dense call may refuse the dtype or the arguments
        return None, err


def _same(got, want):
    got = got.tensor() if isinstance(got, ScalarTensor) else got
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    if want.dtype.is_floating_point or want.dtype.is_complex:
        # torch's own results depend on the shape: its vectorised loops treat the main
        # part and the tail of a tensor differently, and one element differently again
        # (float64 sinh(-2.0) differs in the last bit between a 2-element and a 3x3
        # tensor; float32 gelu(-2.0) by 33 ulp between 1x1 and 2x2). So the 2-element
        # probe agrees with the dense call to torch's tolerance for the dtype.
        torch.testing.assert_close(got, want, equal_nan=True)
    else:
        assert torch.equal(got, want)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Casting complex values to real:UserWarning")  # (dense too)
@pytest.mark.parametrize(
    "func", ELEMENTWISE, ids=lambda f: f"{getattr(f, '__module__', None) or 'Tensor'}.{f.__name__}"
)
def test_every_elementwise_handler_equals_the_dense_call(func):
    structured = 0
    for dtype in DTYPES:
        for value in special_values(dtype):
            for n in SIZES:
                d = ScalarTensor(n, value, dtype=dtype)
                for args, kwargs in _calls(func):
                    got = matches_dense(
                        lambda x=d, a=args, k=kwargs: _call(func, x, a, k),
                        lambda x=d, a=args, k=kwargs: _call(func, x.tensor(), a, k),
                        f"{func.__name__}(ScalarTensor({n}, {value!r}, {dtype}), {args} {kwargs})",
                        _same,
                    )
                    structured += isinstance(got, ScalarTensor)
    # the handler answers without the dense matrix wherever it can (for some function
    # and argument pairs, never: d ** 0 is all ones)
    assert structured > 0, f"{func.__name__}: never structured"


def test_zero_preserving_calls_stay_structured_and_the_rest_go_dense():
    d = ScalarTensor(4, 0.5)
    for result in (torch.sin(d), d.tanh(), F.relu(-d), torch.clamp(d, max=0.25), d > 0):
        assert isinstance(result, ScalarTensor) and result.N == 4
    assert torch.sin(d).value == pytest.approx(math.sin(0.5))
    assert (d > 0).dtype == torch.bool and (d > 0).value is True
    # f(0) != 0: the dense answer, exactly as the dense call gives it
    for result, want in (
        (torch.cos(d), torch.cos(d.tensor())),
        (torch.clamp(d, min=1), torch.clamp(d.tensor(), min=1)),
        (d > -1, d.tensor() > -1),
        (d**0, d.tensor() ** 0),
    ):
        assert type(result) is torch.Tensor and torch.equal(result, want)
    # NaN off the diagonal (0 * inf) is not value * I either
    assert type(torch.pow(ScalarTensor(2, 0.0), -1)) is torch.Tensor


def test_in_place_flags_and_out_are_left_to_the_in_place_rules():
    d = ScalarTensor(3, -0.5)
    out = torch.empty(3, 3)
    torch.sin(d, out=out)
    assert torch.equal(out, torch.sin(d.tensor()))
    kept = F.relu(d)  # a new ScalarTensor; d is unchanged
    assert kept.value == 0 and d.value == -0.5
    for call in (lambda x: F.relu(x, inplace=True), lambda x: F.relu(x, True), F.relu_):
        e = ScalarTensor(3, -0.5)
        assert call(e) is e and e.value == 0  # in place: e itself changes
    assert isinstance(F.rrelu(d), ScalarTensor)  # not training: a fixed slope
    assert type(F.rrelu(d, training=True)) is torch.Tensor  # a random slope per entry


def test_results_are_new_or_the_input_itself_as_on_a_dense_tensor():
    for n in (1, 3):
        d = ScalarTensor(n, 2.0)
        same = torch.clamp(d, min=-10)  # torch returns a new tensor; the handler must too
        assert isinstance(same, ScalarTensor) and same._pair is not d._pair
        # a cast to the dtype it has returns the tensor itself, dense or not
        assert d.float() is d and d.to(torch.float32) is d
        assert d.to(torch.float32, copy=True) is not d
        assert d.double().dtype == torch.float64 and isinstance(d.double(), ScalarTensor)


def test_coverage_counts_the_table():
    counts = coverage.report(ScalarTensor, samples=False).counts()
    assert counts["handled"] >= 250
    handled = {
        f.name
        for f in coverage.report(ScalarTensor, samples=False).functions
        if f.outcome == "handled"
    }
    assert {
        "torch.sin",
        "torch.Tensor.sin",
        "torch.nn.functional.relu",
        "torch.Tensor.__gt__",
    } <= handled


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16])
def test_operator_forms_equal_the_dense_operators(dtype):
    operators = {
        "d ** 2": lambda x: x**2,
        "2 ** d": lambda x: 2**x,
        "d % 3": lambda x: x % 3,
        "5 % d": lambda x: 5 % x,
        "d // 2": lambda x: x // 2,
        "7 // d": lambda x: 7 // x,
        "3 > d": lambda x: 3 > x,
        "d >= 1": lambda x: x >= 1,
        "d == 0": lambda x: x == 0,
        "abs(d)": abs,
        "d.clamp(0, 1)": lambda x: x.clamp(0, 1),
        "(d > 0) & True": lambda x: (x > 0) & True,
    }
    for value in (2, -3, 0):
        d = ScalarTensor(3, value, dtype=dtype)
        for name, op in operators.items():
            want, want_error = _outcome(op, d.tensor(), (), {})
            got, got_error = _outcome(op, d, (), {})
            if want_error is not None:
                assert isinstance(got_error, type(want_error)), (name, value, got_error)
                continue
            try:
                _same(got, want)
            except AssertionError as err:
                raise AssertionError(f"{name} with value {value} ({dtype})") from err


def test_hostile_arguments_give_the_dense_calls_answer_or_error():
    d = ScalarTensor(3, 0.5)
    for call in (
        lambda x: torch.round(x, decimals=10**20),  # no dtype holds it
        lambda x: torch.pow(x, 10**30),
        lambda x: torch.clamp(x, min=torch.tensor([1.0, 2.0, 3.0])),  # not 0-d
        lambda x: F.threshold(x, 0.5, torch.tensor(1.0, requires_grad=True)),
        lambda x: F.gelu(x, approximate="bogus"),
        lambda x: x > 1j,
    ):
        want, want_error = _outcome(call, d.tensor(), (), {})
        got, got_error = _outcome(call, d, (), {})
        if want_error is not None:
            assert type(got_error) is type(want_error), (want_error, got_error)
        else:
            _same(got, want)
    # on the meta device there are no values to check: the dense call answers
    for n in (0, 1, 3):
        meta = ScalarTensor(n, 0.5).to("meta")
        assert type(meta) is torch.Tensor and meta.device.type == "meta" and meta.shape == (n, n)
    on_meta = ScalarTensor(3, 0.5, device="meta")
    assert torch.sin(on_meta).device.type == "meta"


@pytest.mark.slow
def test_threads_sharing_one_scalar_tensor_get_their_own_answers():
    # Handlers read the shared pair [value, 0] and never write it: interleave calls that
    # stay structured, go dense, cast and change another ScalarTensor in place.
    d = ScalarTensor(5, -0.75)
    calls = {
        "sin": (lambda: torch.sin(d), torch.sin(d.tensor())),
        "clamp dense": (lambda: torch.clamp(d, min=1), torch.clamp(d.tensor(), min=1)),
        "gt": (lambda: d > -1, d.tensor() > -1),
        "double": (lambda: d.double(), d.tensor().double()),
        "relu": (lambda: F.relu(d), F.relu(d.tensor())),
    }

    def own_in_place():
        own = ScalarTensor(5, -0.75)
        F.relu(own, inplace=True)  # in place on a ScalarTensor of this thread only
        return own.value == 0

    def same(got, want):
        return torch.equal(got.tensor() if isinstance(got, ScalarTensor) else got, want)

    failures = interleaved_failures(calls, 200, same, also=own_in_place)
    assert not failures and d.value == -0.75


# functions of the table that take a second tensor: with a ScalarTensor of the same size
# there, the two probes meet entry for entry
PAIRED = (
    *(torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge),
    *(torch.maximum, torch.minimum, torch.fmax, torch.fmin),
    *(torch.pow, torch.float_power, torch.remainder, torch.fmod, torch.floor_divide),
    *(torch.copysign, torch.xlogy, torch.bitwise_and, torch.logical_and),
)


@pytest.mark.slow
@pytest.mark.parametrize("func", PAIRED, ids=lambda f: f.__name__)
def test_two_scalar_tensors_of_one_size_combine_as_their_dense_matrices(func):
    pairs = [
        (torch.float32, torch.float32),
        (torch.float16, torch.float64),
        (torch.int64, torch.float32),
        (torch.int8, torch.int64),
        (torch.bool, torch.bool),
        (torch.complex64, torch.float32),
    ]
    structured = 0
    for dtype_a, dtype_b in pairs:
        values_a, values_b = special_values(dtype_a)[:7], special_values(dtype_b)[::2]
        for a in values_a:
            for b in values_b:
                for n in SIZES:
                    d, e = ScalarTensor(n, a, dtype=dtype_a), ScalarTensor(n, b, dtype=dtype_b)
                    got = matches_dense(
                        lambda d=d, e=e: func(d, e),
                        lambda d=d, e=e: func(d.tensor(), e.tensor()),
                        f"{func.__name__}({d!r} {dtype_a}, {e!r} {dtype_b})",
                        _same,
                    )
                    structured += isinstance(got, ScalarTensor)
    assert structured > 0, f"{func.__name__}: never structured"


def test_scalar_tensors_of_other_sizes_or_devices_go_to_the_dense_call():
    d = ScalarTensor(3, 1.5)
    assert torch.equal(d > ScalarTensor(1, 1.0), d.tensor() > 1.0)  # (broadcasts, dense)
    with pytest.raises(RuntimeError, match="size of tensor"):
        d > ScalarTensor(4, 1.0)  # noqa: B015
    assert isinstance(d != ScalarTensor(3, 1.0), ScalarTensor)
    assert type(d == ScalarTensor(3, 1.0)) is torch.Tensor  # 0 == 0 off the diagonal
    on_meta = ScalarTensor(3, 1.0, device="meta")
    assert (d.to("meta") > on_meta).device.type == "meta"
