"""ScalarTensor calls, each run on ScalarTensors and on their dense matrices, and how
their results compare. Shared by the handler tests and the fuzz tests."""

import math

import torch

from tensortools import ScalarTensor


def dense(x):
    return x.tensor() if isinstance(x, ScalarTensor) else x


def assert_same(got, want, exact):
    got = dense(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    # torch's complex products round differently in its vectorised and scalar loops, and
    # a number times a half-precision tensor is rounded once or twice depending on which
    # operand it is: there the 2-element probe and the dense matrix may differ in the
    # last bit.
    if exact and want.dtype in (torch.float16, torch.bfloat16):
        torch.testing.assert_close(
            got, want, rtol=torch.finfo(want.dtype).eps, atol=0, equal_nan=True
        )
    elif exact and not want.dtype.is_complex:
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    else:  # reductions: the dense sum's order of additions may differ by rounding
        torch.testing.assert_close(got, want, equal_nan=True)


#: The dtypes the handler sweeps run over.
SWEEP_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.int64,
    torch.int8,
    torch.bool,
]


def special_values(dtype):
    """Values for a ScalarTensor of dtype: 0, -0, ordinary numbers, the dtype's extremes
    (largest, smallest normal), inf, NaN, and complex ones for complex dtypes."""
    if dtype == torch.bool:
        return [True, False]
    if not (dtype.is_floating_point or dtype.is_complex):
        info = torch.iinfo(dtype)
        return [0, 1, -3, info.max, info.min]
    real = torch.finfo(dtype if dtype.is_floating_point else dtype.to_real())
    values = [0.0, -0.0, 1.5, -2.0, 0.3, real.max, -real.max, real.tiny, 1e-3 * real.max]
    values += [math.inf, -math.inf, math.nan]
    return values + ([1 - 2j, -3j] if dtype.is_complex else [])


def matches_dense(structured, dense_call, where, same):
    """Run ``dense_call()`` (on dense matrices) and ``structured()`` (the same call on
    ScalarTensors): where the dense call raises, the structured one must raise the same
    kind of error (None is returned); else it must not, and ``same(got, want)`` compares
    the results. Returns the structured call's result."""
    want, want_error = outcome(dense_call)
    got, got_error = outcome(structured)
    if want_error is not None:
        assert got_error is not None and issubclass(got_error, want_error), (
            where,
            want_error,
            got_error,
        )
        return None
    assert got_error is None, (where, got_error)
    try:
        same(got, want)
    except AssertionError as err:
        raise AssertionError(where) from err
    return got


def interleaved_failures(calls, steps, same, also=None, threads=8):
    """Run ``calls`` (name -> (fn, want)) from ``threads`` threads started together, each
    through them in its own rotation for ``steps`` steps, so that they interleave.
    Returns (thread, step, name) for every result that ``same(got, want)`` rejects, and
    for every step where ``also()`` (a check of the thread's own) returns False."""
    import threading

    barrier, failures, names = threading.Barrier(threads), [], list(calls)

    def work(i):
        barrier.wait()
        for step in range(steps):
            name = names[(i + step) % len(names)]
            fn, want = calls[name]
            if not same(fn(), want):
                failures.append((i, step, name))
            if also is not None and not also():
                failures.append((i, step, "also"))

    running = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()
    return failures


# (name, function of (d, e, t, s), whether the result is exact): d and e ScalarTensors,
# t a dense tensor, s a number. Reductions may round differently from the dense sum.
CASES = [
    ("add", lambda d, e, t, s: torch.add(d, e), True),
    ("add alpha", lambda d, e, t, s: torch.add(d, e, alpha=s), False),
    ("dense + d", lambda d, e, t, s: torch.add(t, d), True),
    ("d + dense", lambda d, e, t, s: torch.add(d, t), True),
    ("dense + alpha d", lambda d, e, t, s: torch.add(t, d, alpha=s), True),
    ("sub", lambda d, e, t, s: torch.sub(d, e), True),
    ("dense - d", lambda d, e, t, s: torch.sub(t, d), True),
    ("mul", lambda d, e, t, s: torch.mul(d, e), True),
    ("mul number", lambda d, e, t, s: torch.mul(d, s), True),
    ("number * d", lambda d, e, t, s: s * d, True),
    ("div number", lambda d, e, t, s: torch.div(d, s), True),
    ("div floor", lambda d, e, t, s: torch.div(d, s, rounding_mode="floor"), True),
    ("neg", lambda d, e, t, s: torch.neg(d), True),
    ("matmul", lambda d, e, t, s: torch.matmul(d, e), True),
    ("d @ dense", lambda d, e, t, s: d @ t, True),
    ("dense @ d", lambda d, e, t, s: t @ d, True),
    ("mm", lambda d, e, t, s: torch.mm(d, t), True),
    ("mean", lambda d, e, t, s: torch.mean(d), False),
    ("sum", lambda d, e, t, s: torch.sum(d), False),
    ("trace", lambda d, e, t, s: torch.trace(d), False),
    ("det", lambda d, e, t, s: torch.det(d), False),
    ("linalg.det", lambda d, e, t, s: torch.linalg.det(d), False),
    ("inverse", lambda d, e, t, s: torch.inverse(d), False),
    ("linalg.inv", lambda d, e, t, s: torch.linalg.inv(d), False),
    ("diag", lambda d, e, t, s: torch.diag(d), True),
    ("diag offset", lambda d, e, t, s: torch.diag(d, 1), True),
    ("diagonal", lambda d, e, t, s: torch.diagonal(d), True),
    ("diagonal dims", lambda d, e, t, s: torch.diagonal(d, 0, 1, 0), True),
    ("transpose", lambda d, e, t, s: torch.transpose(d, 0, 1), True),
    ("t", lambda d, e, t, s: torch.t(d), True),
    ("operator d + e", lambda d, e, t, s: d + e, True),
    ("operator dense + d", lambda d, e, t, s: t + d, True),
    ("operator -d", lambda d, e, t, s: -d, True),
    ("operator d * s", lambda d, e, t, s: d * s, True),
    ("operator d / s", lambda d, e, t, s: d / s, True),
    ("operator d @ d", lambda d, e, t, s: d @ e, True),
    # a few of the elementwise table (tests/test_scalar_elementwise.py sweeps all of it);
    # transcendental ones may round differently in torch's vectorised loops
    ("sin", lambda d, e, t, s: torch.sin(d), False),
    ("relu", lambda d, e, t, s: torch.relu(d), True),
    ("clamp number", lambda d, e, t, s: torch.clamp(d, max=s), True),
    ("pow number", lambda d, e, t, s: torch.pow(d, s), False),
    ("gt number", lambda d, e, t, s: d > s, True),
]


def outcome(fn, *args):
    try:
        return fn(*args), None
    except Exception as exc:  # the dense computation may legitimately raise
        return None, type(exc)
