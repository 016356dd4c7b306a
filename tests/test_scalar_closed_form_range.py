"""ScalarTensor's closed forms of a power of the value (det, slogdet, logdet, the whole
product, the Frobenius and nuclear norms, matrix_power) for N from 1 to 10**6, against a
reference computed on logarithms (log|det| = N log|v|), never on the dense matrix: past
either end of the dtype's range by more than the dense call's roundings could move it,
the answer is the signed zero or infinity, at once; well inside, the value; near the
ends (and for non-finite or subnormal values) the dense call decides, so under the
"strict" policy the call is refused. Every call runs under "strict" with the dense
matrix forbidden: a call that formed it would fail, not allocate N² entries.

Beside it, at sizes where the dense matrix is cheap, the same calls against the dense
call itself."""

import cmath
import math

import pytest
import torch
from _support import tiers
from _support.scalar_cases import forbid_dense

from tensortools import ScalarTensor

DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]
VALUES = [0.0, -0.0, 1.0, -1.0, 0.3, -0.3, 0.9, -0.9, 0.999, 1.001, -1.1, 2.0, 1e-30]
VALUES += [-1e30, 1e-200, 1e200, 1e-310, 1e-40, math.nan, math.inf, -math.inf, 0.6 + 0.3j]
SIZES = [1, 2, 3, 17, 255, 256, 257, 1000, 2001, 12345, 10**5, 999_999, 10**6]


def info(dtype):
    return torch.finfo(dtype.to_real() if dtype.is_complex else dtype)


def zone(log, n, dtype):
    """Where a product of n roundings whose exact logarithm is `log` lies: "over" or
    "under" (past the largest number, or below half the smallest subnormal, by more than
    2 n eps, a logarithm's worth of n roundings, and a factor 4), "inside" (within
    4 * tiny .. max / 4 by the same), else "near"."""
    i = info(dtype)
    reach = 2 * n * i.eps + math.log(4)
    if log > math.log(i.max) + reach:
        return "over"
    if log < math.log(i.tiny) + math.log(i.eps / 2) - reach:
        return "under"
    if math.log(4 * i.tiny) + reach < log < math.log(i.max / 4) - reach:
        return "inside"
    return "near"


def held(value, dtype):
    """value as dtype holds it, or None where it is not finite or is subnormal (LAPACK's
    and the dense sums' own rules decide there)."""
    v = torch.tensor(value, dtype=dtype).item()
    if not cmath.isfinite(v) or (v != 0 and abs(v) < info(dtype).tiny):
        return None
    return v


def close(got, want, rtol):
    """got equals want to rtol; an infinity or zero exactly, with its sign; a complex want
    as (modulus, angle), the angle to rtol in radians."""
    if isinstance(want, tuple):
        modulus, angle = want
        assert abs(abs(got) - modulus) <= rtol * modulus, (got, want)
        assert abs(math.remainder(cmath.phase(got) - angle, 2 * math.pi)) <= rtol, (got, want)
    elif isinstance(got, complex) and want == 0:
        assert got == 0, (got, want)
    elif math.isinf(want) or want == 0:
        assert got == want and math.copysign(1, got) == math.copysign(1, want), (got, want)
    else:
        assert abs(got - want) <= rtol * abs(want), (got, want)


def det_reference(v, n, dtype):
    """The determinant v ** n as the rule gives it, or "dense" where the dense call decides,
    or None where either is right (within reach of the range's ends)."""
    if v is None:
        return "dense"
    if v == 0:
        return 0j if dtype.is_complex else math.copysign(0.0, v) ** n
    where = zone(n * math.log(abs(v)), n, dtype)
    negative = isinstance(v, float) and v < 0 and n % 2 == 1
    if where == "over":
        return "dense" if dtype.is_complex else (-math.inf if negative else math.inf)
    if where == "under":
        return 0j if dtype.is_complex else (-0.0 if negative else 0.0)
    if where == "inside":
        if dtype.is_complex:
            return math.exp(n * math.log(abs(v))), n * cmath.phase(v)
        return (-1) ** negative * math.exp(n * math.log(abs(v)))
    return None


def cases():
    out = []
    for dtype in DTYPES:
        for value in VALUES:
            if isinstance(value, complex) and not dtype.is_complex:
                continue
            out += [(dtype, value, n) for n in SIZES]
    return tiers.sample(out, 200, "closed form range")


def answer(call):
    try:
        return call()
    except TypeError as err:
        assert "strict" in str(err) or "NotImplemented" in str(err), err
        return "dense"


@pytest.mark.parametrize(("dtype", "value", "n"), cases())
def test_powers_of_the_value_past_the_range_answer_at_once(dtype, value, n, monkeypatch):
    d = ScalarTensor(n, value, dtype=dtype)
    v = held(value, dtype)
    eps = info(dtype).eps
    forbid_dense(monkeypatch)
    with ScalarTensor.using_policy("strict"):
        det = answer(lambda: torch.linalg.det(d))
        want = det_reference(v, n, dtype)
        if want == "dense" or det == "dense":
            assert det == want or want is None, (det, want)  # (None: near an end, either)
        elif want is not None:
            # (the reference's exp(n log|v|) is off by up to |n log|v|| float64 roundings)
            log = n * math.log(abs(v)) if v else 0.0
            close(det.item(), want, 4 * eps + 4 * (n + abs(log)) * 2**-52)

        slogdet = answer(lambda: torch.linalg.slogdet(d))
        if v is None or (
            dtype.is_complex and v != 0 and zone(math.log(abs(v)), 1, dtype) != "inside"
        ):
            assert slogdet == "dense"
        else:
            want = -math.inf if v == 0 else n * math.log(abs(v))
            close(slogdet.logabsdet.item(), want, 4 * eps)

        if not dtype.is_complex:
            prod = answer(lambda: torch.prod(d))
            if n > 256 and v is not None:
                negative = math.copysign(1, v) < 0 and n % 2 == 1
                close(prod.item(), -0.0 if negative else 0.0, 0)

        norm = answer(lambda: torch.linalg.norm(d))
        if n <= 2:
            return  # (the small matrix is the whole matrix: torch's own norms answer)
        if v is not None and v != 0:
            squares = zone(2 * math.log(abs(v)) + math.log(n), n, dtype)
            if squares == "inside":
                close(norm.item(), math.sqrt(n) * abs(v), 4 * eps)
            elif squares == "over":
                close(norm.item(), math.inf, 0)
            elif zone(2 * math.log(abs(v)), 1, dtype) == "under":
                close(norm.item(), 0.0, 0)

        nuclear = answer(lambda: torch.linalg.matrix_norm(d, "nuc"))
        if v is not None and v != 0:
            where = zone(math.log(abs(v)) + math.log(n), n, dtype)
            if where in ("inside", "over"):
                close(nuclear.item(), n * abs(v) if where == "inside" else math.inf, 4 * eps)
        elif v == 0:
            close(nuclear.item(), 0.0, 0)

        for k in (3, 1000):
            power = answer(lambda k=k: torch.linalg.matrix_power(d, k))
            if v is None or v == 0:
                continue
            where = zone(k * math.log(abs(v)), k, dtype)
            if where == "under":
                assert isinstance(power, ScalarTensor) and power.value == 0, power
            elif where == "inside":
                assert isinstance(power, ScalarTensor), power
                want = (abs(v) ** k, k * cmath.phase(v)) if dtype.is_complex else v**k
                close(power.value, want, 4 * k * eps + 4 * abs(k * math.log(abs(v))) * 2**-52)


DENSE_SIZES = [2, 3, 17, 63, 130]
PAST_THE_RANGE = [0.3, -0.3, 0.01, -100.0, 1e-30, -1e30, 0.06 + 0.03j]


def dense_cases():
    out = [
        (dtype, value, n)
        for dtype in DTYPES
        for value in PAST_THE_RANGE
        for n in DENSE_SIZES
        if dtype.is_complex or not isinstance(value, complex)
    ]
    return tiers.sample(out, 40, "closed form range dense")


@pytest.mark.parametrize(("dtype", "value", "n"), dense_cases())
def test_powers_of_the_value_past_the_range_equal_the_dense_call(dtype, value, n):
    d = ScalarTensor(n, value, dtype=dtype)
    dense = d.tensor()
    calls = [torch.linalg.det, torch.linalg.norm, lambda x: torch.linalg.matrix_norm(x, "nuc")]
    calls += [lambda x: torch.linalg.matrix_power(x, 1000)]
    calls += [] if dtype.is_complex else [torch.prod]
    for call in calls:
        got, want = call(d), call(dense)
        got = got.tensor() if isinstance(got, ScalarTensor) else got
        torch.testing.assert_close(got, want, equal_nan=True)
