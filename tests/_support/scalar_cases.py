"""ScalarTensor calls, each run on ScalarTensors and on their dense matrices, and how
their results compare. Shared by the handler tests and the fuzz tests."""

import contextlib
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


# -- sweeps of ScalarTensor handlers against the dense call (reductions, linalg) -------


def reduction_calls(func, table):
    return [((), {})] + [((), a) if isinstance(a, dict) else (a, {}) for a in table[func]]


def call_outcome(func, x, args, kwargs):
    try:
        return func(x, *args, **kwargs), None
    except Exception as err:  # the dense call may refuse the dtype or the arguments
        return None, err


def same_result(got, want, where, signed=False, relative=False):
    """got (a structured answer) against want (the dense call's): the same types, dtypes
    and shapes, the same values to torch's tolerance for the dtype and, with relative,
    to its relative tolerance alone (a number where the dense answer is 0, however tiny,
    is a different answer: so are numbers of the subnormal range that differ by more
    than the dtype's precision)."""
    if isinstance(want, tuple):
        assert type(got) is type(want) and len(got) == len(want), where
        for g, w in zip(got, want, strict=True):
            same_result(g, w, where, signed, relative)
        return
    got = got.tensor() if isinstance(got, ScalarTensor) else got
    assert got.dtype == want.dtype and got.shape == want.shape, (where, got, want)
    if want.dtype.is_floating_point or want.dtype.is_complex:
        # the dense call adds in its own order (and LAPACK runs its own algorithm): to
        # torch's tolerance for the dtype
        tolerance = {}
        if relative:
            # (a sum of N powers |v|^p, then its 1/p-th power: the dense call's rounding
            # errors add up over the sum and grow by 1/p; the half types accumulate in
            # float32, so their answers round once)
            real = want.dtype.to_real() if want.dtype.is_complex else want.dtype
            rtol = {torch.float16: 1e-3, torch.bfloat16: 1.6e-2}
            tolerance = {"rtol": rtol.get(real, 32 * torch.finfo(real).eps), "atol": 0}
        torch.testing.assert_close(
            got, want, equal_nan=True, msg=lambda m: f"{where}: {m}", **tolerance
        )
        if signed and want.dtype.is_floating_point:
            same_signed_zeros(got, want, where)

    else:
        assert torch.equal(got, want), (where, got, want)


#: Reductions whose real zero's sign IEEE arithmetic fixes in any order: a product's is
#: the parity of its negative factors; a sum of zeros is -0 only if every term is -0.
#: (Elsewhere the order decides: max(-0, +0), LAPACK's operations, complex parts.)
SIGNED_ZEROS = {torch.prod, torch.sum, torch.nansum, torch.mean, torch.nanmean}


def same_power(got, want, where, k):
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


def same_signed_zeros(got, want, where):
    zeros = want == 0
    assert torch.equal(torch.signbit(got[zeros]), torch.signbit(want[zeros])), (where, got, want)


def edge_values(dtype):
    """Values at both ends of dtype's range, with either sign: the smallest subnormal, a
    subnormal, the smallest normal and 4 times it, around the square root of the smallest
    normal (where squares underflow) and of the largest (where they overflow), a quarter
    of the largest and the largest; for complex dtypes also some off the real axis."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return special_values(dtype)
    info = torch.finfo(dtype.to_real() if dtype.is_complex else dtype)
    low, high = math.sqrt(info.tiny), math.sqrt(info.max)
    values = [info.tiny * info.eps, info.tiny / 2, info.tiny, 4 * info.tiny]
    values += [low / 2, low, 2 * low, high / 2, high, 2 * high, info.max / 4, info.max]
    values += [-x for x in values[1::3]]
    if dtype.is_complex:
        values += [complex(low, -low), complex(0, high), complex(-info.max / 2, info.tiny)]
    return values


def sweep_against_dense(func, table, dtypes, sizes, values=None, relative=False):
    """Every (dtype, value, size, arguments) against the dense call: the same result (or
    the same kind of error), values drawn from values(dtype) (special_values by default),
    compared as same_result does. Returns how many answered without the dense matrix."""
    structured = 0
    handler = ScalarTensor.handler_for(func)
    for dtype in dtypes:
        for value in (values or special_values)(dtype):
            for n in sizes:
                d = ScalarTensor(n, value, dtype=dtype)
                for args, kwargs in reduction_calls(func, table):
                    where = (
                        f"{func.__name__}(ScalarTensor({n}, {value!r}, {dtype}), {args} {kwargs})"
                    )
                    got = matches_dense(
                        lambda x=d, a=args, k=kwargs: func(x, *a, **k),
                        lambda x=d, a=args, k=kwargs: func(x.tensor(), *a, **k),
                        where,
                        lambda got, want, where=where: same_result(
                            got, want, where, func in SIGNED_ZEROS, relative
                        ),
                    )
                    if got is not None:
                        structured += handler(d, *args, **kwargs) is not NotImplemented
    return structured


def forbid_dense(monkeypatch):
    """Make building any ScalarTensor's dense matrix fail the test (monkeypatch undoes it)."""

    def refuse(self):
        raise AssertionError("the dense matrix was built")

    monkeypatch.setattr(ScalarTensor, "tensor", refuse)


def seeded_outcome(call):
    """(call(), None), or (None, the exception it raised), with the CPU generator seeded."""
    # (the CPU generator alone: torch.manual_seed also records a stack trace per call for
    # the accelerators it seeds lazily, which costs more than the calls checked here)
    torch.default_generator.manual_seed(0)
    try:
        return call(), None
    except Exception as err:  # noqa: BLE001 - the dense call may refuse the case
        return None, err


#: The queries and properties a ScalarTensor answers from N, its dtype and device alone.
PROPERTIES = [
    "requires_grad",
    "is_leaf",
    "grad",
    "grad_fn",
    "ndim",
    "layout",
    "is_cuda",
    "is_cpu",
    "is_sparse",
    "is_quantized",
    "is_meta",
    "is_nested",
    "itemsize",
    "nbytes",
    "shape",
    "dtype",
    "device",
    "T",
    "mT",
    "data",
    "real",
]
QUERIES = [
    "numel",
    "nelement",
    "dim",
    "ndimension",
    "element_size",
    "get_device",
    "is_complex",
    "is_floating_point",
    "is_signed",
    "is_conj",
    "is_neg",
    "is_inference",
    "is_contiguous",
    "is_pinned",
    "is_shared",
    "stride",
    "storage_offset",
    "type",
]


_SAME_SIZE_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(x):
    """x's type and, for tensors (the pairs of ScalarTensors), dtype, shape and the bits of
    its values: each zero's sign, each NaN's sign and payload."""
    from tensortools import ScalarTensor

    if isinstance(x, ScalarTensor):
        return ("ScalarTensor", x.N, bits(x._pair))
    t = torch.view_as_real(x.resolve_conj().resolve_neg()) if x.is_complex() else x
    if t.is_floating_point():
        t = t.contiguous().view(_SAME_SIZE_INT[t.element_size()])
    return (type(x), x.dtype, tuple(x.shape), t.flatten().tolist())


@contextlib.contextmanager
def python_path():
    """ScalarTensor's compiled path off: its record lists no function, so every call takes
    the Python path (the handlers themselves, which define the behaviour)."""
    from tensortools.types.scalar.tensor import FastRecord

    saved = ScalarTensor._fast
    ScalarTensor._fast = FastRecord(ScalarTensor, {})
    try:
        yield
    finally:
        ScalarTensor._fast = saved


def result_or_error(call):
    """(call(), None), or (None, (type, message)) of what it raised: compared between the
    compiled path and the Python path."""
    try:
        return call(), None
    except Exception as err:  # noqa: BLE001
        return None, (type(err), str(err))


class LoggingMode(torch.overrides.TorchFunctionMode):
    """A mode that logs every function's name into ``log`` and runs calls of tensors only
    (a call with a ScalarTensor is declined: ScalarTensor's own runs, this mode active)."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.log.append(getattr(func, "__name__", repr(func)))
        if not all(issubclass(t, torch.Tensor) for t in types):
            return NotImplemented
        return func(*args, **(kwargs or {}))
