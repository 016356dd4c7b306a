"""ScalarTensor's queries, conversions and views (tensortools/types/scalar/queries.py):
answered from N, the dtype and the device as the dense matrix would answer them, and never
by building the dense matrix, also for N = 10**12."""

import pytest
import torch
from _support.scalar_cases import PROPERTIES, QUERIES
from _support.scalar_cases import forbid_dense as _no_dense
from _support.scalar_cases import seeded_outcome as _attempt

from tensortools import ScalarTensor


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.int64, torch.bool, torch.complex64], ids=str
)
def test_queries_never_build_the_dense_matrix(monkeypatch, dtype):
    small = ScalarTensor(3, 1, dtype=dtype)
    small_dense = small.tensor()
    huge = ScalarTensor(10**12, 1, dtype=dtype)
    _no_dense(monkeypatch)
    for name in QUERIES:
        got, want = getattr(huge, name)(), getattr(small_dense, name)()
        if name in ("numel", "nelement"):
            want = 10**24
        elif name == "stride":
            want = (10**12, 1)
        assert got == want, name
    for name in PROPERTIES:
        got, want = getattr(huge, name), getattr(small_dense, name)
        if name == "nbytes":
            want = 10**24 * dtype.itemsize
        elif name == "shape":
            want = torch.Size((10**12, 10**12))
        elif isinstance(got, ScalarTensor):
            assert got.N == huge.N and got.dtype == want.dtype, name
            continue
        assert got == want, name
    assert torch.numel(huge) == 10**24 and torch.is_floating_point(huge) == dtype.is_floating_point
    assert torch.result_type(huge, 1.5) == torch.result_type(small_dense, 1.5)
    assert huge.stride(-1) == 1 and len(huge) == 10**12
    with pytest.raises(IndexError):
        huge.stride(2)
    with pytest.raises(TypeError, match="no storage or data pointer"):
        huge.data_ptr()


@pytest.mark.parametrize("n", [0, 1, 2, 10**12])
@pytest.mark.parametrize(
    "convert",
    [bool, float, int, complex, lambda d: d.item(), lambda d: torch.is_nonzero(d)],
    ids=["bool", "float", "int", "complex", "item", "is_nonzero"],
)
def test_conversions_match_the_dense_matrix(monkeypatch, n, convert):
    d = ScalarTensor(n, 2.5)
    dense = d.tensor() if n < 10 else torch.zeros(2, 2)  # what any N > 1 answers
    want, want_error = _attempt(lambda: convert(dense))
    _no_dense(monkeypatch)
    got, got_error = _attempt(lambda: convert(d))
    assert type(got_error) is type(want_error) and got == want
    if want_error is not None:
        assert str(got_error) == str(want_error)


def test_views_share_the_value_and_copies_do_not():
    d = ScalarTensor(3, 2.0)
    d.detach().zero_()
    assert d.value == 0.0  # detach(), like .data, t() and T, shares the value
    one = ScalarTensor(1, 2.0)
    one.diagonal().fill_(7.0)
    assert one.value == 7.0  # the main diagonal is a view of the value
    big = ScalarTensor(3, 2.0)
    big.diagonal().fill_(7.0)  # every entry the same number: still value * I
    assert big.value == 7.0
    with pytest.raises(RuntimeError, match="single memory location"):
        big.diagonal().add_(torch.arange(3.0))  # entries would differ: refused
    assert big.value == 7.0


def test_more_queries_never_build_the_dense_matrix(monkeypatch):
    huge = ScalarTensor(10**12, 1.0)
    _no_dense(monkeypatch)
    assert huge.dim_order() == (0, 1)
    assert huge.requires_grad_(False) is huge
    with pytest.raises(TypeError, match="cannot require grad"):
        huge.requires_grad_()
    assert ScalarTensor(0, 1.0).stride() == torch.zeros(0, 0).stride()
    assert huge.is_set_to(huge) and huge.is_set_to(huge.detach())
