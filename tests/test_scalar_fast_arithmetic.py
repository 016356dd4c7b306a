"""ScalarTensor's arithmetic on the compiled path (csrc/python/scalar_binary.cpp: the
codes ADD, SUB, MUL, DIV, MATMUL) against its Python handlers (arithmetic.py), which
define the behaviour, and against the dense call: every operator and function form of
add, sub, mul, div and matmul, over dtypes, special values, sizes and second operands
(ScalarTensors of the same and another dtype and size, Python numbers, 0-d tensors),
gives the same result bits (or the same error) with the compiled path on and off, and
the value the dense matrices give."""

import contextlib
import math

import pytest
import torch
from _support.scalar_cases import (
    SWEEP_DTYPES,
    LoggingMode,
    python_path,
    result_or_error,
    special_values,
)
from _support.scalar_cases import bits as _bits

from tensortools import ScalarTensor
from tensortools.types.scalar import FastCode

SIZES = [0, 1, 5]

#: The call forms, each a function of its two operands.
FORMS = {
    "x + y": lambda x, y: x + y,
    "torch.add": torch.add,
    "add alpha=2": lambda x, y: torch.add(x, y, alpha=2),
    "add alpha=-0.5": lambda x, y: torch.add(x, y, alpha=-0.5),
    "x.add": lambda x, y: x.add(y),
    "x - y": lambda x, y: x - y,
    "torch.sub": torch.sub,
    "sub alpha=3": lambda x, y: torch.sub(x, y, alpha=3),
    "torch.subtract": torch.subtract,
    "x * y": lambda x, y: x * y,
    "torch.mul": torch.mul,
    "torch.multiply": torch.multiply,
    "x @ y": lambda x, y: x @ y,
    "torch.matmul": torch.matmul,
    "torch.mm": torch.mm,
    "x / y": lambda x, y: x / y,
    "torch.div": torch.div,
    "torch.true_divide": torch.true_divide,
    "div floor": lambda x, y: torch.div(x, y, rounding_mode="floor"),
}

#: Python numbers as operands (each also first, as in 2 * d).
NUMBERS = [2, -3, 0, True, False, 0.5, -0.0, math.inf, math.nan, 1e300, 1 - 2j, 2**70]


def _same_values(a, b):
    """Whether two tensors of one dtype hold the same values (NaN equal to NaN)."""
    if a.is_complex():
        a, b = (torch.view_as_real(t.resolve_conj().resolve_neg()).double() for t in (a, b))
    elif a.is_floating_point():
        a, b = a.double(), b.double()
    else:
        return torch.equal(a, b)
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(a[~nan], b[~nan])


def _dense(x):
    return x.tensor() if isinstance(x, ScalarTensor) else x


def _operands(dtype, value, n, k):
    """(x, y) pairs for a ScalarTensor d of dtype, value and size n (the k-th case: a
    third of NUMBERS, in turn)."""
    d = ScalarTensor(n, value, dtype=dtype)
    values = special_values(dtype)
    values = values[1:3] + [v for v in values if isinstance(v, float) and math.isinf(v)][:1]
    others = [ScalarTensor(n, w, dtype=dtype) for w in values]
    others.append(ScalarTensor(n, 3, dtype=torch.int64))
    others.append(ScalarTensor(n, -0.25, dtype=torch.float16))
    others.append(ScalarTensor(n, 2j, dtype=torch.complex64))
    others.append(ScalarTensor(n + 1, 1.5, dtype=dtype))  # (sizes that differ)
    others += [torch.tensor(2.0), torch.tensor(-3)]
    pairs = [(d, d)] + [(d, o) for o in others] + [(o, d) for o in others[-3:]]
    numbers = NUMBERS[k % 3 :: 3]
    return pairs + [(d, s) for s in numbers] + [(s, d) for s in numbers]


def _sweep(form):
    """form over every operand pair, dtype, value and size; returns (calls, answered on the
    compiled path with a ScalarTensor, compared with the dense call)."""
    fn, stats = FORMS[form], [0, 0, 0]
    for dtype in SWEEP_DTYPES:
        values = special_values(dtype)
        for i, n in enumerate(SIZES):
            for k, value in enumerate(values[i % 2 :: 2] if n else values[:3]):
                for x, y in _operands(dtype, value, n, k + i):
                    got, got_err = result_or_error(lambda x=x, y=y: fn(x, y))
                    with python_path():
                        want, want_err = result_or_error(lambda x=x, y=y: fn(x, y))
                    case = (form, dtype, value, n, repr(x), repr(y))
                    assert got_err == want_err, (*case, got_err, want_err)
                    if got_err is None:
                        assert _bits(got) == _bits(want), case
                    dense, dense_err = result_or_error(lambda x=x, y=y: fn(_dense(x), _dense(y)))
                    if got_err is not None and dense_err is None:  # (no broadcasting)
                        assert "sizes differ" in got_err[1], (*case, got_err)
                    assert got_err is not None or dense_err is None, (*case, dense_err)
                    if got_err is None:
                        g = _dense(got)
                        assert g.dtype == dense.dtype and g.shape == dense.shape, case
                        assert _same_values(g, dense), case
                        stats[2] += 1
                    stats[0] += 1
                    stats[1] += isinstance(got, ScalarTensor)
    return stats


@pytest.mark.parametrize("form", list(FORMS))
def test_arithmetic_takes_both_paths_alike_and_equals_dense(form):
    calls, structured, compared = _sweep(form)
    assert calls > 800 and structured > 0 and compared > 0


@pytest.fixture
def reached(monkeypatch):
    """The functions whose calls reach the Python path, in order."""
    calls, python = [], ScalarTensor._python_torch_function

    def counting(cls, func, types, args=(), kwargs=None):
        calls.append(func)
        return python(func, types, args, kwargs)

    monkeypatch.setattr(ScalarTensor, "_python_torch_function", classmethod(counting))
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.int64])
@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_the_common_calls_are_answered_in_c(reached, dtype, n):
    d, e = ScalarTensor(n, 3, dtype=dtype), ScalarTensor(n, 2, dtype=dtype)
    calls = [d + e, d - e, d * e, d * 2, 2 * d, 0.5 * d, torch.add(d, e, alpha=2)]
    calls += [torch.sub(d, e, alpha=2), torch.mul(d, e), d.add(e), d.mul(e), torch.multiply(d, e)]
    calls += [d @ e, torch.matmul(d, e), torch.mm(d, e), d.matmul(e)]
    calls += [d / 2, torch.div(d, 4), torch.true_divide(d, 2)] if n else []
    assert reached == []
    assert all(isinstance(c, ScalarTensor) and c.N == n for c in calls)
    dense = [c.tensor() for c in calls]
    assert torch.equal(dense[0], d.tensor() + e.tensor())
    assert torch.equal(dense[-1 if not n else -4], d.tensor() @ e.tensor())


def test_other_calls_reach_the_python_path(reached):
    d, e = ScalarTensor(3, 1.5), ScalarTensor(4, 1.5)
    with pytest.raises(ValueError, match="ScalarTensor sizes differ: N=3 and N=4"):
        d + e
    assert reached == [torch.Tensor.__add__]
    reached.clear()
    1 - d, d / d, d + 1, d * torch.tensor(2.0), torch.add(d, d, out=torch.empty(3, 3))
    T = torch.Tensor
    assert reached[:4] == [T.__rsub__, T.__truediv__, T.__add__, T.__mul__]
    assert reached[4] == torch.add


def test_the_record_lists_the_arithmetic():
    codes = ScalarTensor._fast.codes
    assert codes[torch.add] == codes[torch.Tensor.__add__] == FastCode.ADD
    assert codes[torch.Tensor.__radd__] == FastCode.ADD
    assert codes[torch.mul] == codes[torch.Tensor.__rmul__] == FastCode.MUL
    assert codes[torch.sub] == codes[torch.subtract] == FastCode.SUB
    assert codes[torch.div] == codes[torch.Tensor.__truediv__] == FastCode.DIV
    assert codes[torch.matmul] == codes[torch.mm] == FastCode.MATMUL
    for reflected in (torch.Tensor.__rsub__, torch.Tensor.__rtruediv__, torch.Tensor.__rmatmul__):
        assert reflected not in codes  # (its handler swaps the operands: the Python path's)


#: The calls the mode's log is compared by (the Python path also reads attributes).
_COMPUTING = {
    "add",
    "sub",
    "mul",
    "div",
    "__add__",
    "__sub__",
    "__mul__",
    "__matmul__",
    "__truediv__",
}


def test_modes_see_the_same_calls_on_both_paths():
    # the handlers call torch's functions, which an active mode sees (on the probes, on the
    # pairs); so does this path
    d, e = ScalarTensor(3, 1.5), ScalarTensor(3, -2.0)
    forms = [FORMS[f] for f in ("x + y", "x * y", "x @ y", "add alpha=2", "x - y")]
    results, logs = [], []
    for switch in (contextlib.nullcontext, python_path):
        log = []
        with switch(), LoggingMode(log), LoggingMode(log):
            results.append([_bits(f(d, e)) for f in forms] + [_bits(d * 2), _bits(d / 4)])
        logs.append([f for f in log if f in _COMPUTING])
    assert results[0] == results[1] and logs[0] == logs[1]
    assert {"add", "mul", "div"} <= set(logs[0])
