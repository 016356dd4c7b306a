"""Property-based fuzzing of ScalarTensor's structured handlers against the same call on
the dense matrix: every dtype (integer, bool and complex included), sizes 0 to 4, special
values (NaN, ±Inf, huge, tiny, integer extremes), dense operands of any shape, dtype and
memory layout, and numbers of every kind. Where the dense call returns, the handler must
return the same values and dtype; where it raises, the handler must raise a TypeError,
ValueError or RuntimeError too.
"""

import pytest
import torch
from _support.fuzz_tensors import Kind, kinds, numbers
from _support.scalar_cases import CASES, assert_same, dense
from conftest import DEVICES
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tensortools import ScalarTensor

pytestmark = pytest.mark.slow  # fuzzing

ERRORS = (TypeError, ValueError, RuntimeError)
# Cases combining the two ScalarTensors d and e: sizes that differ are refused even where
# the dense matrices would broadcast (a 1×1 with an N×N).
PAIRS = {"add", "add alpha", "sub", "mul", "matmul", "operator d + e", "operator d @ d"}


@st.composite
def scalar_cases(draw):
    n = draw(st.integers(0, 4))
    d_kind = draw(kinds())
    e_kind = draw(st.one_of(st.just(d_kind), kinds()))
    e_n = n if draw(st.integers(0, 4)) else n + 1
    t_shape = draw(st.sampled_from([(n, n), (n, n), (n, 3), (3, n), (2, n, n), (n,), ()]))
    t_kind = draw(st.one_of(st.just(d_kind), kinds()))
    s = draw(st.one_of(numbers, st.builds(lambda k: k.make(), kinds())))
    return n, d_kind, e_n, e_kind, t_shape, t_kind, s


def _scalar(n: int, kind: Kind, device: str) -> ScalarTensor:
    """A ScalarTensor whose value is a (possibly special) value of kind's dtype."""
    return ScalarTensor(n, kind.make(device=device))


def _on_cpu(x):
    """x (a number, a tensor or a ScalarTensor's dense matrix) on the CPU."""
    x = dense(x)
    return x.cpu() if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=max(300, settings().max_examples))
@given(case=scalar_cases())
def test_handlers_match_the_dense_matrix(device, case):
    n, d_kind, e_n, e_kind, t_shape, t_kind, s = case
    d, e = _scalar(n, d_kind, device), _scalar(e_n, e_kind, device)
    t = t_kind.make(*t_shape, device=device)
    for name, fn, exact in CASES:
        try:
            want, want_error = fn(dense(d), dense(e), t, s), None
        except Exception as err:  # the dense call may refuse the case
            want, want_error = None, err
        try:
            got, got_error = fn(d, e, t, s), None
        except Exception as err:
            got, got_error = None, err
        event(f"{name}: {'refused' if want_error else 'computed'}")
        context = (
            f"{name}: N={n} {d!r} {d.dtype} e={e!r} {e.dtype} t {t.dtype}{tuple(t.shape)} s={s!r}"
        )
        if name in PAIRS and d.N != e.N:
            assert isinstance(got_error, ERRORS), f"{context}: sizes differ, got {got_error!r}"
            continue
        if isinstance(want_error, NotImplementedError) and got_error is None and device != "cpu":
            # torch has no kernel for this dtype on the device (integer matmul on CUDA):
            # the structured answer must be the one the dense matrix gives on the CPU
            want = fn(dense(d).cpu(), dense(e).cpu(), t.cpu(), _on_cpu(s))
            try:
                assert_same(_on_cpu(got), want, exact)
            except AssertionError as err:
                raise AssertionError(f"{context} (dense on the CPU)") from err
            continue
        if want_error is not None:
            # the handler's own errors, or torch's: the dense path raises what torch raises
            assert isinstance(got_error, (*ERRORS, type(want_error))), (
                f"{context}: the dense call raised {want_error!r}, the handler gave {got_error!r}"
            )
            continue
        assert got_error is None, f"{context}: the handler raised {got_error!r}"
        try:
            assert_same(got, want, exact)
        except AssertionError as err:
            raise AssertionError(context) from err
