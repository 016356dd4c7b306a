"""ScalarTensor's compiled path (csrc/python/scalar_dispatch.cpp) against its Python path,
which defines the behaviour: every function the compiled path takes, over dtypes, special
values and sizes, gives the same result (type, dtype, shape, value bits, NaN and the sign
of zero) or the same error; calls it leaves out reach the Python path; malformed
instances and threads cannot make it crash or answer wrongly."""

import contextlib
import functools
import math
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from _support.scalar_cases import SWEEP_DTYPES, interleaved_failures, special_values
from _support.scalar_cases import bits as _bits

from tensortools import ScalarTensor
from tensortools.types.scalar import FastCode

SIZES = [0, 1, 2, 3, 17]
PYTHON = ScalarTensor._python_torch_function
COMPILED = ScalarTensor.__torch_function__


def _fast_functions(code):
    return [f for f, c in ScalarTensor._fast.codes.items() if c == code]


def _outcome(call):
    try:
        return _bits(call()), None
    except Exception as err:
        return None, type(err)


def _through(path, func, n, value, dtype, args, kwargs):
    """func(d, *args, **kwargs) through one path (the protocol's entry: unbound Tensor
    methods refuse d), on a new d."""
    d = ScalarTensor(n, value, dtype=dtype)
    return path(func, (ScalarTensor,), (d, *args), dict(kwargs))


def _sweep(funcs, dtypes, values_of=special_values, kwargs=None, args=(), sizes=SIZES):
    """Each func on each ScalarTensor (with args and kwargs) through both paths, each on
    an instance of its own (an in-place call changes it); returns how many answered."""
    kwargs = kwargs or {}
    answered = 0
    for func in funcs:
        for dtype in dtypes:
            for value in values_of(dtype):
                for n in sizes:
                    got, want = (
                        _outcome(lambda p=path: _through(p, func, n, value, dtype, args, kwargs))
                        for path in (COMPILED, PYTHON)
                    )
                    assert got == want, (func, dtype, value, n, args, kwargs, got, want)
                    answered += got[1] is None
    return answered


#: Numbers as further arguments: zero, ordinary, a float that float32 holds only as 0 and
#: one that float16 holds only as infinity (both left to the dense call), an int beyond
#: int64, inf, NaN, and what is not a number (None, False, True, a string).
NUMBERS = [0, -0.0, 1, -1, 0.5, 2, 3e-39, 1e-50, 70000.0, 2**70, math.inf, math.nan]
NUMBERS += [None, False, True, "floor"]
#: Functions of d and numbers, each with where its numbers go.
WITH_NUMBERS = {
    torch.gt: lambda x: ((x,), {}),
    torch.Tensor.__le__: lambda x: ((x,), {}),
    torch.eq: lambda x: ((), {"other": x}),
    torch.clamp: lambda x: ((x, 1.5), {}),
    torch.clamp_max: lambda x: ((x,), {}),
    torch.pow: lambda x: ((x,), {}),
    torch.Tensor.__pow__: lambda x: ((x,), {}),
    torch.float_power: lambda x: ((x,), {}),
    torch.remainder: lambda x: ((x,), {}),
    torch.fmod: lambda x: ((x,), {}),
    torch.floor_divide: lambda x: ((x,), {}),
    torch.xlogy: lambda x: ((x,), {}),
    torch.copysign: lambda x: ((x,), {}),
    torch.bitwise_and: lambda x: ((x,), {}),
    torch.special.xlog1py: lambda x: ((x,), {}),
    torch.round: lambda x: ((), {"decimals": x}),
    torch.nan_to_num: lambda x: ((), {"nan": x, "posinf": x}),
    F.leaky_relu: lambda x: ((), {"negative_slope": x, "inplace": False}),
    F.hardtanh: lambda x: ((), {"min_val": x, "max_val": 2.0}),
    F.threshold: lambda x: ((x, 0.5), {}),  # (positional: the Python path's)
    F.elu: lambda x: ((), {"alpha": x, "inplace": x}),  # (a flag that may be set)
    F.softshrink: lambda x: ((), {"lambd": x}),
}


@pytest.mark.slow
@pytest.mark.parametrize("func", list(WITH_NUMBERS), ids=lambda f: f.__name__)
def test_calls_with_numbers_take_both_paths_alike(func):
    answered = 0
    for x in NUMBERS:
        args, kwargs = WITH_NUMBERS[func](x)
        answered += _sweep([func], SWEEP_DTYPES, kwargs=kwargs, args=args, sizes=[0, 1, 3])
    assert answered > 0


def test_a_set_flag_goes_to_the_python_path(reached):
    # the C path runs the function on d's own pair: a set inplace (or training) flag is
    # for the Python path's in-place rules, which change d as the dense call changes
    # its matrix
    for flag in (True, 1, 2.0, "yes"):
        d = ScalarTensor(3, -0.5)
        assert F.leaky_relu(d, 0.5, inplace=flag) is d and d.value == -0.25
        d = ScalarTensor(3, -0.5)
        assert F.hardtanh(d, -0.1, 1.0, flag) is d and d.value == -0.1
        d = ScalarTensor(3, -0.5)
        with contextlib.suppress(TypeError):  # (the dense rrelu takes only a bool)
            F.rrelu(d, 0.1, 0.3, training=flag)
        assert reached == [F.leaky_relu, F.hardtanh, F.rrelu], flag
        reached.clear()
    d = ScalarTensor(3, -0.5)
    assert F.leaky_relu(d, 0.5).value == -0.25 and F.rrelu(d, training=False).value < 0
    assert reached == [] and d.value == -0.5


@pytest.fixture
def reached(monkeypatch):
    """The functions whose calls reach the Python path, in order."""
    calls = []

    def counting(cls, func, types, args=(), kwargs=None):
        calls.append(func)
        return PYTHON(func, types, args, kwargs)

    monkeypatch.setattr(ScalarTensor, "_python_torch_function", classmethod(counting))
    return calls


def test_the_record_lists_the_three_kinds_of_call():
    codes = ScalarTensor._fast.codes
    assert codes[torch.sin] == codes[torch.Tensor.abs] == FastCode.ELEMENTWISE
    assert codes[torch.sum] == codes[torch.Tensor.sum] == FastCode.SUM
    assert codes[torch.linalg.norm] == codes[torch.norm] == FastCode.FROBENIUS
    assert codes[torch.linalg.svdvals] == FastCode.SVDVALS
    assert torch.nansum not in codes and torch.amax not in codes  # (the Python path's)
    assert ScalarTensor._fast.result_class is ScalarTensor


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Casting complex values to real")  # (d.float(): dense too)
def test_elementwise_functions_take_both_paths_alike():
    funcs = _fast_functions(FastCode.ELEMENTWISE)
    assert len(funcs) > 100
    assert _sweep(funcs, SWEEP_DTYPES) > 0


@pytest.mark.parametrize("func", [torch.abs, torch.sin, torch.relu, F.gelu, torch.Tensor.half])
def test_common_elementwise_functions_take_both_paths_alike(func):
    assert _sweep([func], SWEEP_DTYPES) > 0


@pytest.mark.parametrize(
    "func, kwargs",
    [
        (F.relu, {"inplace": False}),
        (F.hardtanh, {"inplace": False}),
        (F.rrelu, {"training": False, "inplace": False}),
        (torch.nan_to_num, {"nan": None}),
        (torch.sum, {"dtype": None}),  # (the Python path's: only flags go to C)
    ],
)
def test_flags_that_are_off_take_both_paths_alike(func, kwargs):
    assert _sweep([func], SWEEP_DTYPES, kwargs=kwargs) > 0


def test_eigenvalues_and_singular_values_take_both_paths_alike():
    funcs = [torch.linalg.eigvals, torch.linalg.eigvalsh, torch.linalg.svdvals]
    assert {ScalarTensor._fast.codes[f] for f in funcs} == {
        FastCode.EIGVALS,
        FastCode.EIGVALSH,
        FastCode.SVDVALS,
    }

    def values(dtype):
        # also subnormal values (LAPACK's NaN: the dense call) and complex moduli near
        # the range's ends
        if not (dtype.is_floating_point or dtype.is_complex):
            return special_values(dtype)
        info = torch.finfo(dtype.to_real())
        more = [info.tiny / 8, -info.tiny / 2, 3 * info.tiny, info.max / 3]
        if dtype.is_complex:
            more += [complex(info.max / 2, info.max / 2), complex(info.tiny, info.tiny), 1e-3j]
        return special_values(dtype) + more

    assert _sweep(funcs, SWEEP_DTYPES, values) > 0


def test_sums_and_norms_take_both_paths_alike():
    funcs = _fast_functions(FastCode.SUM) + _fast_functions(FastCode.FROBENIUS)
    dtypes = [*SWEEP_DTYPES, torch.uint8, torch.int16, torch.int32, torch.uint16, torch.uint64]

    def values(dtype):
        # also totals within a factor 4 of the largest number and beyond it, and integer
        # sums that wrap around
        if dtype in (torch.uint8, torch.uint16, torch.uint64):
            return [0, 1, 3, torch.iinfo(dtype).max // 3, torch.iinfo(dtype).max]
        more = []
        if dtype.is_floating_point or dtype.is_complex:
            big = torch.finfo(dtype.to_real()).max
            more = [big / 20, big / 3, big / 2, 1e-20, 3e-39]
        elif dtype != torch.bool:
            more = [torch.iinfo(dtype).max // 3, torch.iinfo(dtype).min]
        return special_values(dtype) + more

    assert _sweep(funcs, dtypes, values) > 0


def test_common_calls_do_not_reach_the_python_path(reached):
    d = ScalarTensor(1000, -0.75)
    for call in (
        torch.abs,
        torch.sin,
        torch.sum,
        torch.linalg.norm,
        torch.neg,
        F.relu,
        torch.linalg.eigvals,
        torch.linalg.eigvalsh,
        torch.linalg.svdvals,
    ):
        assert call(d) is not None
    # (results of every kind: a bool one, an integer one, a cast)
    assert [d.abs(), d.sum(), -d, d.norm(), d > 0, d.long(), d.bool() != 0]
    assert [torch.clamp(d, -1, 1), torch.sum(ScalarTensor(1000, True)), F.leaky_relu(d)]
    assert reached == []
    # what it leaves out: further arguments, N <= 1, a result that is not diagonal
    torch.sum(d, 0)
    torch.abs(ScalarTensor(1, 2.0))
    torch.cos(d)
    assert reached == [torch.sum, torch.abs, torch.cos]


def test_a_handler_that_is_not_the_registered_one_takes_the_python_path():
    # functools.wraps copies the attributes of the handler it wraps, and a handler object
    # may be registered for another function: only the very object _structured
    # registered, for the function it registered it for, takes the C path
    original = ScalarTensor.handler_for(torch.sum)

    class Logged(ScalarTensor):
        pass

    @Logged.implements(torch.sum)
    @functools.wraps(original)
    def logged_sum(*args, **kwargs):
        return torch.tensor(-1.0)

    class Swapped(ScalarTensor):
        pass

    Swapped.implements(torch.abs)(ScalarTensor.handler_for(torch.neg))
    assert torch.sum(Logged(3, -2.0)).item() == -1.0
    assert torch.abs(Swapped(3, 2.0)).value == -2.0
    assert torch.sum not in Logged._fast.codes and torch.abs not in Swapped._fast.codes


def test_a_subclass_handler_takes_the_python_path():
    class Mine(ScalarTensor):
        pass

    @Mine.implements(torch.abs)
    def _abs(input):
        return "mine"

    m = Mine(3, -2.0)
    assert torch.abs(m) == "mine" and torch.sin(m).value == pytest.approx(math.sin(-2.0))
    assert type(torch.sin(m)) is ScalarTensor  # (structured results are ScalarTensors)
    assert torch.abs not in Mine._fast.codes and torch.sin in Mine._fast.codes
    assert ScalarTensor._fast.codes[torch.abs] == FastCode.ELEMENTWISE


def test_malformed_instances_get_the_python_paths_answer():
    # N and _pair set by hand to what no constructor makes: the compiled path must not read
    # past a pair or trust a size; each call gives what the Python path gives
    pairs = [
        torch.tensor([1.0, 0.0, 5.0]),
        torch.tensor([[1.0, 0.0]]),
        torch.tensor([1.0, 0.0, 2.0, 0.0])[::2],  # (strided: its entries 1 and 2)
        torch.tensor([2.0, 0.0], dtype=torch.float8_e4m3fn),
        torch.tensor([3, 0], dtype=torch.uint32),
        torch.tensor([2.0, 0.0], device="meta"),
        torch.tensor([2.0, 0.0]).to_sparse(),
        torch.tensor([2.0, 0.0]).as_subclass(type("Sub", (torch.Tensor,), {})),
        # memory that holds another number than the tensor: a lazy conjugate or
        # negation, a bool stored as the byte 2
        torch.tensor([1.5 + 2j, 0]).conj(),
        torch.tensor([1.5 + 2j, 0]).conj().imag,
        torch.tensor([2, 0], dtype=torch.uint8).view(torch.bool),
        torch.tensor([255, 0], dtype=torch.uint8).view(torch.bool),
        # a NaN with its sign bit set (the dense norm keeps it, Python's abs clears it)
        -torch.tensor([math.nan, 0.0]).abs(),
        "not a tensor",
    ]
    sizes = [3, 2**63, 2**70, -1, True, 3.0, "3"]
    for pair in pairs:
        for n in sizes:
            d = ScalarTensor._from_pair(n, pair)
            for func in (torch.abs, torch.sum, torch.linalg.norm):
                got = _outcome(lambda f=func, d=d: f(d))
                want = _outcome(lambda f=func, d=d: PYTHON(f, (ScalarTensor,), (d,), {}))
                assert got[1] == want[1], (pair, n, func, got, want)
                if got[1] is None:
                    assert got == want, (pair, n, func)


@pytest.mark.slow
def test_hostile_instances_do_not_crash_the_process():
    code = textwrap.dedent(
        """
        import torch
        from tensortools import ScalarTensor
        for pair in (torch.empty(0), torch.empty(2**20)[::2**19], torch.tensor([1.0, 0.0]).T):
            for n in (2, 2**62, -2**62):
                d = ScalarTensor._from_pair(n, pair)
                for f in (torch.abs, torch.sum, torch.linalg.norm, torch.exp):
                    try:
                        f(d)
                    except Exception:
                        pass
        d = ScalarTensor(3, 1.0)
        del d._pair
        for f in (torch.abs, torch.sum):
            try:
                f(d)
            except Exception:
                pass
        ScalarTensor._fast = ("not a record", 1)
        assert torch.abs(ScalarTensor(3, -1.0)).value == 1.0
        ScalarTensor._fast = (int, {torch.abs: 99})
        assert torch.abs(ScalarTensor(3, -1.0)).value == 1.0
        print("survived")
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "survived" in run.stdout, run.stderr[-2000:]


def test_threads_interleaving_compiled_and_python_calls():
    d = ScalarTensor(64, -1.25)
    dense = d.tensor()
    calls = {
        "abs": (lambda: torch.abs(d), torch.abs(dense)),
        "sin": (lambda: torch.sin(d), torch.sin(dense)),
        "sum": (lambda: torch.sum(d), torch.sum(dense)),
        "norm": (lambda: torch.linalg.norm(d), torch.linalg.norm(dense)),
        "sum dim": (lambda: torch.sum(d, 0), torch.sum(dense, 0)),
        "cos": (lambda: torch.cos(d), torch.cos(dense)),
        "relu": (lambda: F.relu(d), F.relu(dense)),
    }

    def same(got, want):
        got = got.tensor() if isinstance(got, ScalarTensor) else got
        return got.dtype == want.dtype and torch.allclose(got, want)

    assert not interleaved_failures(calls, 200, same)
