"""ScalarTensor through tensortools.ops on the compiled path (csrc/python/
scalar_operators.cpp: the codes SCALE, ADD_DIAGONAL, AXPBY) against its Python handlers
(tensortools/types/scalar/operators.py), which define the behaviour, and against the
dense call: ops.scale, ops.add_diagonal and ops.axpby over dtypes, special values, sizes
and second operands give the same result bits (or the same error) with the compiled path
on and off, and the values the dense matrices give."""

import contextlib
import math

import pytest
import torch
from _support.frames import python_calls
from _support.scalar_cases import (
    SWEEP_DTYPES,
    LoggingMode,
    python_path,
    result_or_error,
    special_values,
)
from _support.scalar_cases import bits as _bits

from tensortools import ScalarTensor, ops
from tensortools.types.scalar import FastCode
from tensortools.types.scalar.common import KERNEL_DTYPES

SIZES = [0, 1, 5]
#: The numbers a call passes: Python ints, floats and bools, special ones, beyond the
#: half types' range, beyond a double's (an int), and kinds the C path leaves to Python.
NUMBERS = [2, -3, 0, True, False, 0.5, -0.0, 1e-40, 7e4, 1e39, 2**70, 10**400]
NUMBERS += [math.inf, -math.inf, math.nan, 1 - 2j, "2", None]


def _dense(x):
    return x.tensor() if isinstance(x, ScalarTensor) else x


def _calls(d, number, others):
    """The calls of the three operators on d with number (and others as second operand)."""
    calls = [
        ("scale", lambda: ops.scale(d, number)),
        ("add_diagonal", lambda: ops.add_diagonal(d, number)),
        ("axpby alpha", lambda: ops.axpby(d, d, number, 0.5)),
        ("axpby beta", lambda: ops.axpby(d, d, -1.5, number)),
    ]
    for k, e in enumerate(others):
        calls.append((f"axpby {k}", lambda e=e: ops.axpby(d, e, 2.0, number)))
        calls.append((f"axpby {k} swapped", lambda e=e: ops.axpby(e, d, number, 3)))
    return calls


def _others(d, dtype, n):
    """Second operands of axpby: ScalarTensors, and dense tensors of shapes, layouts and
    kinds the C path takes and leaves."""
    like = dtype if dtype.is_floating_point else torch.float32
    t = torch.randn(2, n, n, dtype=like)
    others = [
        ScalarTensor(n, -2.5, dtype=dtype),
        ScalarTensor(n + 1, 1.0, dtype=dtype),  # (sizes that differ)
        ScalarTensor(n, 3, dtype=torch.float64 if dtype != torch.float64 else torch.float32),
        t[0],
        t,  # (a batch of matrices)
        t[0].t(),
        torch.randn(n, n, dtype=like, requires_grad=True),
        torch.ones(n, n, dtype=torch.float64 if like != torch.float64 else torch.float32),
    ]
    if n:
        others += [t[0, :1].expand(n, n), t[0, 0]]  # (broadcast: the Python path)
    return others


@pytest.mark.parametrize("dtype", SWEEP_DTYPES)
def test_both_paths_alike_and_equal_to_dense(dtype):
    calls = structured = 0
    for n in SIZES:
        for value in special_values(dtype):
            d = ScalarTensor(n, value, dtype=dtype)
            for number in NUMBERS:
                for name, call in _calls(d, number, _others(d, dtype, n)):
                    got, got_err = result_or_error(call)
                    with python_path():
                        want, want_err = result_or_error(call)
                    case = (name, dtype, value, n, number)
                    assert got_err == want_err, (*case, got_err, want_err)
                    calls += 1
                    if got_err is not None:
                        continue
                    assert _bits(got) == _bits(want), case
                    structured += isinstance(got, ScalarTensor)
    assert calls > 1000 and (structured > 0) == (dtype in KERNEL_DTYPES)


def test_results_equal_the_dense_calls():
    # the Python path is the definition; here both against the dense matrices
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for value in (1.5, -0.0, math.inf):
            d, e = ScalarTensor(4, value, dtype=dtype), ScalarTensor(4, -3.0, dtype=dtype)
            for number in (2, -0.5, 0.0, 7e4, math.inf, math.nan):
                calls = [(ops.scale, (d, number)), (ops.add_diagonal, (d, number))]
                if dtype in (torch.float32, torch.float64):  # (axpby's CPU dtypes)
                    beta = number if math.isfinite(number) else 1.0
                    calls.append((ops.axpby, (d, e, 2.0, beta)))
                for op, args in calls:
                    got = _dense(op(*args))
                    want = op(*(_dense(a) for a in args))
                    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [0, 1, 256])
def test_the_common_calls_run_no_python_handler(dtype, n):
    # (lltm and graph_conv: below)
    d, e = ScalarTensor(n, 0.5, dtype=dtype), ScalarTensor(n, 2.0, dtype=dtype)
    forms = [
        lambda: ops.scale(d, 2.0),
        lambda: ops.scale(d, -3),
        lambda: ops.add_diagonal(d, 1.0),
        lambda: ops.add_diagonal(d, True),
    ]
    if dtype in (torch.float32, torch.float64):  # (axpby's CPU dtypes)
        forms += [lambda: ops.axpby(d, e, 2.0, -1.0), lambda: ops.axpby(d, d, 1, 0)]
    t = torch.randn(n, n, dtype=dtype)
    dense = [lambda: ops.axpby(d, t, 2.0, -1.0), lambda: ops.axpby(t, d, 0.5, 3)]
    dense = dense if dtype in (torch.float32, torch.float64) else []
    for form in forms + dense:
        names, result = python_calls(form, under="tensortools/types")
        # (the class's __torch_function__ frame hands the call to C)
        assert names == ["__torch_function__"], names
        assert (type(result) is torch.Tensor) == (form in dense) and result.shape[-1] == n


def test_other_calls_take_the_python_path():
    d = ScalarTensor(3, 1.5)
    for form in [
        lambda: ops.scale(d, torch.tensor(2.0)),  # a 0-d tensor
        lambda: ops.scale(d, math.inf),  # NaN off the diagonal: the dense call's
        lambda: ops.axpby(d, d, math.inf, 1.0),
        lambda: ops.axpby(d, ScalarTensor(4, 1.0), 1.0, 1.0),
        lambda: ops.axpby(d, torch.ones(3), 1.0, 1.0),  # (broadcast)
        lambda: ops.axpby(d, torch.ones(3, 3, requires_grad=True), 1.0, 1.0),
        lambda: ops.scale(ScalarTensor(3, 2, dtype=torch.int64), 2),
    ]:
        names, _ = python_calls(lambda: result_or_error(form), under="tensortools/types")
        assert "python_torch_function" in names


def test_the_record_lists_the_operators():
    codes = ScalarTensor._fast.codes
    assert codes[ops.scale] == FastCode.SCALE
    assert codes[ops.add_diagonal] == FastCode.ADD_DIAGONAL
    assert codes[ops.axpby] == FastCode.AXPBY


def test_a_subclass_handler_of_its_own_takes_python():
    class Mine(ScalarTensor):
        pass

    seen = []

    @Mine.implements(ops.scale)
    def _scale(input, value):
        seen.append(value)
        return NotImplemented

    got = ops.scale(Mine(3, 2.0), 4.0)
    assert seen == [4.0] and torch.equal(_dense(got), 8.0 * torch.eye(3))
    inherited = ops.add_diagonal(Mine(3, 2.0), 1.0)
    assert type(inherited) is ScalarTensor and inherited.value == 3.0


def test_modes_and_autocast_see_the_python_path():
    # an active mode sees the handlers' own calls (on the pairs): so the C path steps aside
    d, e = ScalarTensor(3, 1.5), ScalarTensor(3, -2.0)
    results, logs = [], []
    for switch in (contextlib.nullcontext, python_path):
        log = []
        with switch(), LoggingMode(log):
            results.append([_bits(ops.scale(d, 2.0)), _bits(ops.axpby(d, e, 2.0, 1.0))])
        logs.append(log)
    assert results[0] == results[1] and logs[0] == logs[1] and "scale" in logs[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        names, got = python_calls(lambda: ops.scale(d, 2.0), under="tensortools/types")
    assert "python_torch_function" in names and _bits(got) == _bits(ops.scale(d, 2.0))


# -- lltm and graph_conv: the handlers' calls in C, with plain tensors asking nothing of
# autograd -----------------------------------------------------------------------------


def _lltm_cases(dtype):
    """(d, weights, bias, old_h, old_cell) of sizes N and S, layouts, special values."""
    for n, s in [(0, 2), (1, 1), (5, 2), (9, 4), (3, 3)]:
        for value in (0.5, -0.0, math.inf, math.nan):
            w, b = torch.randn(3 * s, s + n, dtype=dtype), torch.randn(3 * s, dtype=dtype)
            h, c = torch.randn(n, s, dtype=dtype), torch.randn(n, s, dtype=dtype)
            yield ScalarTensor(n, value, dtype=dtype), w, b, h, c
            transposed = (t.t().contiguous().t() for t in (w, h))
            yield ScalarTensor(n, value, dtype=dtype), next(transposed), b, next(transposed), c
            if n:
                bad = w.clone()
                bad[-1, s + n - 1] = math.inf  # (NaN where the dense product meets it)
                yield ScalarTensor(n, value, dtype=dtype), bad, b, h, c
    d = ScalarTensor(4, 1.0, dtype=dtype)
    w, b, h = torch.randn(6, 6, dtype=dtype), torch.randn(6, dtype=dtype), torch.randn(4, 2)
    yield d, w, b, h.to(dtype), h.to(dtype)
    yield d, w[:, :5], b, h.to(dtype), h.to(dtype)  # (shapes the handler leaves)
    yield d, w, b[:3], h.to(dtype), h.to(dtype)
    yield d, w.double() if dtype != torch.float64 else w.float(), b, h.to(dtype), h.to(dtype)
    yield d, w, b.expand(6), h.to(dtype).expand(4, 2), h.to(dtype)


def _graph_conv_cases(dtype):
    for n, f_in, f_out in [(0, 2, 3), (1, 1, 1), (6, 2, 5), (6, 5, 2), (4, 3, 3)]:
        for value in (2.0, -0.0, math.inf):
            x, weight = torch.randn(n, f_in, dtype=dtype), torch.randn(f_in, f_out, dtype=dtype)
            for bias in (None, torch.randn(f_out, dtype=dtype)):
                yield ScalarTensor(n, value, dtype=dtype), x, weight, bias
                yield ScalarTensor(n, value, dtype=dtype), x.t().contiguous().t(), weight, bias
                if n:
                    bad = x.clone()
                    bad[0, 0] = math.nan
                    yield ScalarTensor(n, value, dtype=dtype), bad, weight, bias
    d = ScalarTensor(3, 1.0, dtype=dtype)
    yield d, torch.randn(3, 2, dtype=dtype), torch.randn(3, 2, dtype=dtype), None
    yield d, torch.randn(3, 2, dtype=dtype), torch.randn(2, 2, dtype=dtype), torch.randn(3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", ["lltm", "graph_conv"])
def test_lltm_and_graph_conv_take_both_paths_alike(op, dtype):
    fn, cases = (ops.lltm, _lltm_cases) if op == "lltm" else (ops.graph_conv, _graph_conv_cases)
    answered = 0
    for args in cases(dtype):
        names, got = python_calls(lambda: result_or_error(lambda: fn(*args)), under="tensortools/")
        with python_path():
            want = result_or_error(lambda: fn(*args))
        assert got[1] == want[1], (args, got[1], want[1])
        if got[1] is None:
            got_t = got[0] if isinstance(got[0], tuple) else (got[0],)
            want_t = want[0] if isinstance(want[0], tuple) else (want[0],)
            assert [_bits(g) for g in got_t] == [_bits(w) for w in want_t], args
            answered += "python_torch_function" not in names
    # (graph_conv's CPU kernel takes float32 and float64: the others raise on both paths)
    assert answered > 10 or (op == "graph_conv" and dtype in (torch.float16, torch.bfloat16))


def _lltm_args(grad=False):
    n, s = 6, 2
    w = torch.randn(3 * s, s + n, requires_grad=grad)
    return ScalarTensor(n, 0.5), w, torch.randn(3 * s), torch.randn(n, s), torch.randn(n, s)


def test_gradients_and_tangents_take_the_python_path():
    d, w, b, h, c = _lltm_args(grad=True)
    names, (new_h, _) = python_calls(lambda: ops.lltm(d, w, b, h, c), under="tensortools/")
    assert "python_torch_function" in names and new_h.requires_grad
    with torch.no_grad():  # (no gradient wanted: C answers)
        names, _ = python_calls(lambda: ops.lltm(d, w, b, h, c), under="tensortools/types")
    assert "python_torch_function" not in names
    import torch.autograd.forward_ad as fwAD

    d, w, b, h, c = _lltm_args()
    tangent = torch.randn_like(w)
    with fwAD.dual_level():
        dual = fwAD.make_dual(w, tangent)
        new_h, _ = ops.lltm(d, dual, b, h, c)
        got = fwAD.unpack_dual(new_h).tangent
    dense = d.tensor()
    _, want = torch.func.jvp(lambda w: ops.lltm(dense, w, b, h, c)[0], (w,), (tangent,))
    torch.testing.assert_close(got, want)
    x = torch.randn(6, 3)
    with fwAD.dual_level():
        out = ops.graph_conv(d, fwAD.make_dual(x, torch.ones_like(x)), torch.eye(3), None)
        torch.testing.assert_close(fwAD.unpack_dual(out).tangent, 0.5 * torch.ones(6, 3))


def test_a_dual_pair_keeps_its_tangent_on_both_paths():
    # a ScalarTensor whose pair carries a tangent (from a dual number): the calls keep it,
    # as the Python path and the dense call do
    import torch.autograd.forward_ad as fwAD

    def tangents():
        d = ScalarTensor(3, 1.5)
        with fwAD.dual_level():
            r = ops.scale(d, fwAD.make_dual(torch.tensor(2.0), torch.tensor(1.0)))
            e, t = ScalarTensor(3, 1.0), torch.randn(3, 3)
            outs = [ops.scale(r, 3), ops.add_diagonal(r, 1), ops.axpby(r, e, 2.0, 1.0)]
            outs += [ops.axpby(r, t, 2.0, 1.0), ops.axpby(t, r, 1.0, 2.0)]
            return [fwAD.unpack_dual(_dense(o)).tangent for o in outs]

    got = tangents()
    with python_path():
        want = tangents()
    eye = torch.eye(3)
    for g, w, scale in zip(got, want, (4.5, 1.5, 3.0, 3.0, 3.0)):
        assert g is not None and torch.equal(g, w)
        torch.testing.assert_close(g, scale * eye)


def test_threads_calling_while_another_switches_the_path():
    # four threads call through C while a fifth switches the class's record between the
    # compiled path and none: every result equals the Python path's, bit for bit
    import threading

    d, e, t = ScalarTensor(6, 1.5), ScalarTensor(6, -2.0), torch.randn(6, 6)
    w, b, h, c = torch.randn(6, 8), torch.randn(6), torch.randn(6, 2), torch.randn(6, 2)
    weight = torch.randn(3, 4)
    calls = [
        lambda: ops.scale(d, 3.0),
        lambda: ops.add_diagonal(d, 1),
        lambda: ops.axpby(d, e, 2.0, -1.0),
        lambda: ops.axpby(d, t, 0.5, 2.0),
        lambda: ops.lltm(d, w, b, h, c),
        lambda: ops.graph_conv(d, t[:, :3], weight, None),
    ]
    with python_path():
        want = [_bits_of(call()) for call in calls]
    wrong, done = [], threading.Event()

    def caller():
        for _ in range(200):
            for k, call in enumerate(calls):
                if _bits_of(call()) != want[k]:
                    wrong.append(k)

    def switcher():
        while not done.is_set():
            with python_path():
                pass

    threads = [threading.Thread(target=caller) for _ in range(4)]
    other = threading.Thread(target=switcher)
    other.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    other.join()
    assert wrong == []


def _bits_of(result):
    return [_bits(r) for r in (result if isinstance(result, tuple) else (result,))]
