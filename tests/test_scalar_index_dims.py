"""A dim given as a NumPy integer or a 0-d integer tensor, as torch takes it: every
ScalarTensor reduction with a dim (and the transposes, diagonals and size) answers with
its structured handler wherever it answers for the same dim as a Python int (the strict
policy, with the dense matrix refused), with the dense call's values. Before,
``d.sum(np.int64(0))`` skipped the handler and formed the dense matrix (40 GB at
N = 10**5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.scalar_cases import forbid_dense, same_result

from tensortools import ScalarTensor

NUMPY_INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
TENSOR_INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]


def _indices(dim):
    """dim as each NumPy integer type and each 0-d integer tensor that holds it."""
    kinds = [
        (f"np.{t.__name__}", t(dim))
        for t in NUMPY_INTS
        if dim >= 0 or np.issubdtype(t, np.signedinteger)
    ]
    kinds += [
        (f"tensor({str(t)[6:]})", torch.tensor(dim, dtype=t))
        for t in TENSOR_INTS
        if dim >= 0 or t.is_signed
    ]
    return kinds


#: name: (call(d, dim), dtypes): every reduction of ScalarTensor's table with a dim, in
#: the forms users write (function, method, keyword, a tuple of dims).
REDUCTIONS = {
    "torch.sum(d, dim)": (lambda d, i: torch.sum(d, i), "fic"),
    "d.sum(dim)": (lambda d, i: d.sum(i), "fic"),
    "d.sum(dim=(dim,), keepdim=True)": (lambda d, i: d.sum(dim=(i,), keepdim=True), "fic"),
    "torch.nansum(d, dim)": (lambda d, i: torch.nansum(d, i), "f"),
    "torch.count_nonzero(d, dim)": (lambda d, i: torch.count_nonzero(d, i), "fic"),
    "torch.amax(d, dim)": (lambda d, i: torch.amax(d, i), "fi"),
    "d.amin(dim=dim)": (lambda d, i: d.amin(dim=i), "fi"),
    "torch.aminmax(d, dim=dim)": (lambda d, i: torch.aminmax(d, dim=i), "fi"),
    "d.max(dim=dim)": (lambda d, i: d.max(dim=i), "fi"),
    "torch.min(d, dim=dim, keepdim=True)": (lambda d, i: torch.min(d, dim=i, keepdim=True), "fi"),
    "torch.argmax(d, dim)": (lambda d, i: torch.argmax(d, i), "fi"),
    "d.argmin(dim)": (lambda d, i: d.argmin(i), "fi"),
    "torch.all(d, dim)": (lambda d, i: torch.all(d, i), "fi"),
    "d.any(dim)": (lambda d, i: d.any(i), "fi"),
    "torch.prod(d, dim)": (lambda d, i: torch.prod(d, i), "fi"),
    "torch.mean(d, dim)": (lambda d, i: torch.mean(d, i), "fc"),
    "d.mean((dim,))": (lambda d, i: d.mean((i,)), "fc"),
    "torch.nanmean(d, dim)": (lambda d, i: torch.nanmean(d, i), "f"),
    "torch.var(d, dim)": (lambda d, i: torch.var(d, i), "fc"),
    "d.std(dim, correction=0)": (lambda d, i: d.std(i, correction=0), "fc"),
    "torch.var_mean(d, dim)": (lambda d, i: torch.var_mean(d, i), "f"),
    "torch.std_mean(d, dim=dim, keepdim=True)": (
        lambda d, i: torch.std_mean(d, dim=i, keepdim=True),
        "f",
    ),
    "torch.logsumexp(d, dim)": (lambda d, i: torch.logsumexp(d, i), "f"),
    "torch.norm(d, 2, dim)": (lambda d, i: torch.norm(d, 2, i), "fc"),
    "d.norm(p=1, dim=dim)": (lambda d, i: d.norm(p=1, dim=i), "fc"),
    "torch.linalg.norm(d, dim=dim)": (lambda d, i: torch.linalg.norm(d, dim=i), "fc"),
    "torch.linalg.vector_norm(d, 3, dim)": (lambda d, i: torch.linalg.vector_norm(d, 3, i), "fc"),
    "torch.linalg.matrix_norm(d, dim=(dim, other))": (
        lambda d, i: torch.linalg.matrix_norm(d, dim=(i, 1 - _plain(i) % 2)),
        "fc",
    ),
}
#: The calls of a dim that are not reductions: views and the size.
OTHERS = {
    "d.transpose(dim, other)": (lambda d, i: d.transpose(i, 1 - _plain(i) % 2), "fic"),
    "torch.diagonal(d, 0, dim, other)": (
        lambda d, i: torch.diagonal(d, 0, i, 1 - _plain(i) % 2),
        "fic",
    ),
    "torch.diag(d, offset)": (lambda d, i: torch.diag(d, i), "fic"),
}
DTYPES = {"f": [torch.float32, torch.float64], "i": [torch.int64], "c": [torch.complex64]}
VALUE = {torch.float32: -1.5, torch.float64: 2.25, torch.int64: 3, torch.complex64: 1 - 2j}
#: N = 1 (no zeros), 2 (the small matrix itself) and 5 (widened from it)
SIZES = [1, 2, 5]


def _plain(i):
    return int(i)


def _outcome(fn):
    try:
        return fn(), None
    except Exception as err:  # noqa: BLE001  (the dense call's own errors are compared)
        return None, err


@pytest.mark.parametrize("name", sorted({**REDUCTIONS, **OTHERS}))
def test_index_dims_take_the_structured_handler(monkeypatch, name):
    fn, kinds = {**REDUCTIONS, **OTHERS}[name]
    checked = 0
    for dtype in [t for k in kinds for t in DTYPES[k]]:
        for n in SIZES:
            for dim in (0, 1, -1, -2):
                for kind, index in _indices(dim):
                    where = f"{name} {dtype} N={n} dim={kind}({dim})"
                    d = ScalarTensor(n, VALUE[dtype], dtype=dtype)
                    want, dense_error = _outcome(lambda: fn(d.tensor(), index))
                    if dense_error is not None:
                        with pytest.raises(type(dense_error)):
                            fn(d, index)
                        continue
                    with monkeypatch.context() as patch, ScalarTensor.using_policy("strict"):
                        forbid_dense(patch)
                        try:
                            fn(d, dim)
                        except TypeError:
                            continue  # (not structured for the int either: diag(d, -1), N=1)
                        got = fn(d, index)
                    same_result(got, want, where)
                    checked += 1
    assert checked > 0


@pytest.mark.parametrize("dim", [0, 1, -1, -2])
def test_size_takes_index_dims(dim):
    d = ScalarTensor(4, 1.0)
    for kind, index in _indices(dim):
        assert d.size(index) == d.tensor().size(index) == 4, kind
    for refused in (True, np.float64(0), torch.tensor(0.0), torch.tensor(True)):
        with pytest.raises(TypeError, match="'dim'"):
            d.size(refused)
