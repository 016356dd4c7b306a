"""ScalarTensor's unary structured functions over complex dtypes: every one whose dense
answer is ``value * I`` (by value, at an N where both of torch's CPU loops compute
diagonal entries) answers without forming the dense matrix (the strict policy, with
``ScalarTensor.tensor`` refusing), with the dense call's values for every N. torch's
vectorised complex neg computes 0 - z and its scalar loop -z, so the two give zeros (and
NaNs) of different signs: that alone must not send -d to the dense matrix."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from _support.scalar_cases import forbid_dense
from _support.scalar_structured import call, name_of

from tensortools import ScalarTensor
from tensortools.types.scalar.elementwise import ELEMENTWISE

DTYPES = [torch.complex64, torch.complex128]
VALUES = [
    1.5 - 2j,
    -0.5 + 0.25j,
    3j,
    -2 + 0j,
    0j,
    complex(-0.0, -0.0),
    complex(0.0, -0.0),
    complex(math.inf, 1),
    complex(math.nan, 0),
    1e30 + 1e30j,
]
#: N = 70: both loops compute diagonal entries (the last ones are the scalar loop's tail).
SIZES = [0, 1, 2, 3, 17, 70]

#: The unary functions: the table's elementwise functions and neg in every spelling.
NEG_FORMS = {
    "-d": lambda d: -d,
    "torch.neg": torch.neg,
    "torch.negative": torch.negative,
    "d.neg()": lambda d: d.neg(),
    "d.negative()": lambda d: d.negative(),
}
UNARY = {**NEG_FORMS, **{name_of(f): (lambda d, f=f: call(f, d, ())) for f in ELEMENTWISE}}


def _dense_answer(fn, n, value, dtype):
    try:
        return fn(ScalarTensor(n, value, dtype=dtype).tensor()), None
    except Exception as err:  # noqa: BLE001  (the dense call may refuse complex)
        return None, err


def _is_value_eye(t):
    """Whether a square matrix is value * I by value: equal diagonal entries (NaN equal to
    NaN) and 0 elsewhere."""
    if not isinstance(t, torch.Tensor) or t.dim() != 2:
        return False
    diagonal = t.diagonal()
    first = diagonal[:1].expand_as(diagonal)
    same = (diagonal == first) | (diagonal.isnan() & first.isnan())
    return bool(same.all()) and int(t.count_nonzero() - diagonal.count_nonzero()) == 0


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_complex_unary_is_structured_where_the_dense_answer_is(monkeypatch, name, dtype):
    fn = UNARY[name]
    checked = 0
    for value in VALUES:
        wanted = [_dense_answer(fn, n, value, dtype) for n in (3, 70)]
        if not all(error is None and _is_value_eye(want) for want, error in wanted):
            continue  # (not value * I, or refused: the dense call answers)
        for n in SIZES:
            want, _ = _dense_answer(fn, n, value, dtype)
            d = ScalarTensor(n, value, dtype=dtype)
            with monkeypatch.context() as patch, ScalarTensor.using_policy("strict"):
                forbid_dense(patch)
                got = fn(d)
            assert isinstance(got, ScalarTensor) and got.N == n, (name, value, n, got)
            got = got.tensor()
            assert got.dtype == want.dtype and got.shape == want.shape, (name, value, n)
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
            checked += 1
    if name in NEG_FORMS:
        assert checked == len(VALUES) * len(SIZES)  # neg is value * I for every value


def test_the_sweep_meets_complex_functions():
    # The sweep is not empty: most of the table's functions take complex values.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        taken = [n for n, fn in UNARY.items() if _dense_answer(fn, 3, 1 - 1j, DTYPES[0])[1] is None]
    assert len(taken) >= 40, taken
