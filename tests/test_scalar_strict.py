"""Augmented assignment and the "strict" policy on ScalarTensor.

`x op= y` changes x itself (every reference and view of it sees the change) or raises;
Python's own fallback, `x = x op y`, would leave the other references with the old
values, so it must never happen silently. Under "strict" nothing forms a ScalarTensor's
dense matrix, and what can be done without it is done.
"""

import operator

import pytest
import torch
from _support.scalar_cases import forbid_dense

from tensortools import ScalarTensor
from tensortools.dispatch import CannotHoldResult

#: Python's augmented assignment operators, as the operator module defines them (x op= y
#: is x = operator.__iop__(x, y)): +=, -=, *=, /=, //=, %=, **=, @=, &=, |=, ^=, <<=, >>=.
AUGMENTED = [
    getattr(operator, name)
    for name in sorted(dir(operator))
    if name.startswith("__i") and f"__{name[3:]}" in dir(operator) and name != "__iconcat__"
]
POLICIES = ["fallback", "strict"]
N = 3


def _dense(x):
    return _TENSOR(x) if isinstance(x, ScalarTensor) else x


_TENSOR = ScalarTensor.tensor


def _operands(dtype):
    """(kind, x, y): the augmented assignment x op= y for each kind of operand."""
    value, other = (6, 3) if dtype == torch.int64 else (1.5, 2.5)
    grid = torch.arange(N * N).reshape(N, N).to(dtype) - 4
    return [
        ("d op= int", ScalarTensor(N, value, dtype=dtype), 2),
        ("d op= float", ScalarTensor(N, value, dtype=dtype), 0.5),
        ("d op= 0", ScalarTensor(N, value, dtype=dtype), 0),
        (
            "d op= ScalarTensor",
            ScalarTensor(N, value, dtype=dtype),
            ScalarTensor(N, other, dtype=dtype),
        ),
        ("d op= dense", ScalarTensor(N, value, dtype=dtype), grid),
        (
            "d op= dense diagonal",
            ScalarTensor(N, value, dtype=dtype),
            other * torch.eye(N, dtype=dtype),
        ),
        ("t op= d", grid.clone(), ScalarTensor(N, value, dtype=dtype)),
    ]


def _cases():
    for op in AUGMENTED:
        for policy in POLICIES:
            for dtype in (torch.float32, torch.int64):
                for kind, x, y in _operands(dtype):
                    yield op, policy, dtype, kind, x, y


def _outcome(op, x, y):
    try:
        return op(x, y), None
    except Exception as e:  # noqa: BLE001  (the dense call's own errors are compared)
        return None, e


def test_augmented_assignment_changes_the_object_or_raises(monkeypatch):
    """Every augmented operator x policy x kind of operand, against the same statement on
    the dense matrices: x itself changes (a reference taken before and a view see the dense
    result), or the statement raises (a TypeError: refused or not holdable; or the dense
    statement's own error), leaving x as it was. Under "fallback" a statement whose dense
    result x can hold must succeed; under "strict" no dense matrix of a ScalarTensor is
    formed."""
    failures, count = [], 0
    for op, policy, dtype, kind, x, y in _cases():
        count += 1
        where = f"{op.__name__} {policy} {dtype} {kind}"
        dense_x, dense_y = _dense(x).clone(), _dense(y)
        before = _dense(x).clone()
        reference, view = x, x.t()
        want, dense_error = _outcome(op, dense_x, dense_y)
        dense_in_place = dense_error is None and want is dense_x
        with monkeypatch.context() as patch, ScalarTensor.using_policy(policy):
            if policy == "strict":
                forbid_dense(patch)
            got, error = _outcome(op, x, y)
        if isinstance(error, AssertionError):
            failures.append(f"{where}: formed the dense matrix under strict")
        elif error is not None:
            expected = TypeError if dense_error is None else (TypeError, type(dense_error))
            if not isinstance(error, expected):
                failures.append(f"{where}: raised {error!r}, dense {dense_error!r}")
            elif not (_same(_dense(x), before) or dense_error and _same(_dense(x), dense_x)):
                # (a dense statement that raises may have changed part of x first)
                failures.append(f"{where}: raised {error!r} but changed x")
            elif policy == "fallback" and dense_in_place and isinstance(x, ScalarTensor):
                if _holdable(dense_x) and not isinstance(error, CannotHoldResult):
                    failures.append(f"{where}: refused {error!r} a result it can hold")
                elif _holdable(dense_x):
                    failures.append(f"{where}: could not hold {dense_x}")
            elif policy == "fallback" and dense_in_place and not isinstance(x, ScalarTensor):
                failures.append(f"{where}: raised {error!r} where the dense statement works")
        elif dense_error is not None:
            failures.append(f"{where}: returned where the dense statement raised {dense_error!r}")
        elif not dense_in_place:
            # torch.Tensor has no in-place matmul: `t @= D` rebinds t for dense matrices,
            # and `t @= d` may only do the same
            if isinstance(x, ScalarTensor) or got is x or not torch.equal(x, before):
                failures.append(f"{where}: the dense statement rebinds; got {got!r}")
            else:
                torch.testing.assert_close(_dense(got), want, equal_nan=True)
        elif got is not reference:
            failures.append(f"{where}: rebound x to a new {type(got).__name__}")
        else:
            try:
                torch.testing.assert_close(_dense(x), dense_x, equal_nan=True)
                torch.testing.assert_close(_dense(view), dense_x.t(), equal_nan=True)
            except AssertionError as e:
                failures.append(f"{where}: {e}")
    assert count == len(AUGMENTED) * 2 * 2 * 7 and not failures, "\n".join(failures[:40])


def _same(a, b):
    return a.dtype == b.dtype and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _holdable(t):
    off = t.clone()
    off.diagonal().zero_()
    diagonal = t.diagonal()
    same = (diagonal == diagonal[:1]) | (diagonal.isnan() & diagonal[:1].isnan())
    return int(off.count_nonzero()) == 0 and bool(same.all())


def test_the_operators_cover_python_s_augmented_assignments():
    names = {op.__name__ for op in AUGMENTED}
    assert {"iadd", "isub", "imul", "itruediv", "ipow", "imatmul", "ilshift"} <= names
    assert len(names) == 13


@pytest.mark.parametrize(
    "call",
    [
        lambda d: d.mul_(2),
        lambda d: d.sin_(),
        lambda d: d.zero_(),
        lambda d: d.t_(),
        lambda d: torch.nn.init.zeros_(d),
        lambda d: torch.nn.functional.relu(d, inplace=True),
        lambda d: torch.neg(d, out=d),
    ],
    ids=["mul_", "sin_", "zero_", "t_", "init.zeros_", "relu inplace", "out="],
)
def test_strict_takes_in_place_calls_that_need_no_dense_matrix(monkeypatch, call):
    # (tests/test_scalar_in_place.py runs every in-place form of every structured call
    # under both policies at N = 10**12)
    d = ScalarTensor(10**12, 1.5)
    forbid_dense(monkeypatch)
    with ScalarTensor.using_policy("strict"):
        assert call(d) is d
    with ScalarTensor.using_policy("strict"), pytest.raises(TypeError):
        d.cumsum_(0)  # the dense matrix's running sums: refused, not formed


def test_a_strict_refusal_names_the_policy_and_the_way_out():
    d = ScalarTensor(3, 2.0)
    way_out = r"ScalarTensor.using_policy\('fallback'\).*ScalarTensor.set_policy\('fallback'\)"
    with ScalarTensor.using_policy("strict"):
        for call, name in [
            (lambda: torch.exp(d), "torch.exp"),
            (lambda: d.exp(), "torch.Tensor.exp"),
            (lambda: d.contiguous(), "torch.Tensor.contiguous"),
        ]:
            with pytest.raises(TypeError, match=f"'{name}' on ScalarTensor: refused under the "):
                call()
            with pytest.raises(TypeError, match=f"'strict' policy.*{way_out}"):
                call()
    # the way out it names works
    with ScalarTensor.using_policy("fallback"):
        torch.testing.assert_close(torch.exp(d), torch.exp(d.tensor()))
