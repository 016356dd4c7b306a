"""ScalarTensor's queries (``numel``, ``requires_grad``, ``stride``, ...), conversions
(``bool``, ``float``, ``item``), views (``T``, ``real``), diagonals and transposes:
answered from N, the dtype and the device, never from the dense matrix (which may not fit
in memory)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tensortools.dispatch import CannotHoldResult
from tensortools.types.scalar.common import as_index, structured
from tensortools.types.scalar.tensor import ScalarTensor

__all__: list[str] = []


def _empty_like_matrix(d: ScalarTensor) -> Tensor:
    """An empty dense matrix of d's dtype and device: it answers every query whose answer
    does not depend on N (dtype, device, layout, autograd state, contiguity) as d's dense
    matrix would, and costs nothing to make."""
    return torch.empty(0, 0, dtype=d.dtype, device=d.device)


def _as_empty_matrix(obj: Any) -> Any:
    return _empty_like_matrix(obj) if isinstance(obj, ScalarTensor) else obj


def _size_free(func: Callable) -> Callable:
    def query(*args, **kwargs):
        return func(*map(_as_empty_matrix, args), **kwargs)

    return query


_PROPERTIES = (
    "is_cpu",
    "is_cuda",
    "is_ipu",
    "is_maia",
    "is_meta",
    "is_mkldnn",
    "is_mps",
    "is_mtia",
    "is_nested",
    "is_quantized",
    "is_sparse",
    "is_sparse_csr",
    "is_vulkan",
    "is_xla",
    "is_xpu",
    "itemsize",
    "layout",
    "ndim",
    "requires_grad",
    "retains_grad",
    "is_leaf",
    "grad",
    "grad_fn",
    "output_nr",
    "_base",
    "_version",
)
_METHODS = (
    "dim_order",
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
    "is_coalesced",
    "result_type",
)


def _size_free_queries() -> list[Callable]:
    found = [getattr(Tensor, p).__get__ for p in _PROPERTIES if hasattr(Tensor, p)]
    for name in _METHODS:
        # the torch.* form where there is one (its Tensor method comes along)
        found.append(getattr(torch, name, None) or getattr(Tensor, name, None))
    found.append(Tensor.type)  # type() with no dtype is a query; with one, a cast
    return [f for f in found if f is not None]


for _query in _size_free_queries():
    if _query is Tensor.type:

        def _type(input, dtype=None, *args, **kwargs):
            if dtype is not None or args or kwargs:
                return NotImplemented
            return Tensor.type(_empty_like_matrix(input))

        ScalarTensor.implements(Tensor.type)(_type)
    else:
        ScalarTensor.implements(_query)(_size_free(_query))


@ScalarTensor.implements(torch.numel, Tensor.nelement)
def _numel(input):
    return input.N * input.N


@ScalarTensor.implements(Tensor.nbytes.__get__)
def _nbytes(input):
    return input.N * input.N * input.dtype.itemsize


@ScalarTensor.implements(Tensor.stride)
def _stride(input, dim=None):
    strides = (max(input.N, 1), 1)  # the dense matrix is contiguous (torch's strides of N=0)
    if dim is None:
        return strides
    _empty_like_matrix(input).stride(dim)  # an invalid dim raises as on the dense matrix
    return strides[dim]


@ScalarTensor.implements(Tensor.storage_offset)
def _storage_offset(input):
    return 0


@ScalarTensor.implements(torch.is_same_size)
def _is_same_size(input, other):
    return tuple(input.shape) == tuple(other.shape)


def _one_element(d: ScalarTensor) -> Tensor:
    """A dense matrix with as many elements as d's, when that is 0 or 1, or a 2 x 2 zero matrix
    otherwise: what conversions to a Python number (which need exactly one element) see."""
    if d.N == 1:
        return d._pair[:1].reshape(1, 1)
    n = min(d.N, 2)
    return torch.zeros(n, n, dtype=d.dtype, device=d.device)


for _conversion in (
    torch.is_nonzero,
    Tensor.item,
    Tensor.__bool__,
    Tensor.__int__,
    Tensor.__float__,
    Tensor.__complex__,
    Tensor.__index__,
):
    ScalarTensor.implements(_conversion)(
        lambda d, *args, _f=_conversion, **kwargs: _f(_one_element(d), *args, **kwargs)
    )


def _no_storage(d, *args, **kwargs):
    raise TypeError(
        "a ScalarTensor stores N and a value, not the N x N matrix: it has no "
        "storage or data pointer (d.tensor() makes the dense matrix)"
    )


for _storage in (
    Tensor.data_ptr,
    Tensor.untyped_storage,
    Tensor.storage,
    getattr(Tensor, "_typed_storage", None),
    getattr(Tensor, "const_data_ptr", None),
    getattr(Tensor, "mutable_data_ptr", None),
):
    if _storage is not None:
        ScalarTensor.implements(_storage)(_no_storage)


@ScalarTensor.implements(Tensor.is_set_to)
def _is_set_to(input, other):
    if not isinstance(other, ScalarTensor):
        return NotImplemented  # (the dense call answers, or refuses what is no tensor)
    # the dense matrices of two ScalarTensors share memory where they share their pair
    return other._pair is input._pair and other.N == input.N


@ScalarTensor.implements(Tensor.requires_grad_)
def _requires_grad_(input, requires_grad=True):
    if not isinstance(requires_grad, bool):
        return NotImplemented  # (the dense call refuses it)
    if requires_grad:
        raise CannotHoldResult(
            "torch.Tensor.requires_grad_: a ScalarTensor holds a number and cannot require "
            "grad; compute on d.tensor() instead"
        )
    return input


@ScalarTensor.implements(Tensor.T.__get__, Tensor.mT.__get__, Tensor.data.__get__, torch.detach)
def _same_matrix(input):
    return ScalarTensor._from_pair(input.N, input._pair)  # shares the pair, as views do


@ScalarTensor.implements(Tensor.H.__get__, Tensor.mH.__get__)
def _conjugate_transpose(input):
    return ScalarTensor._from_pair(input.N, input._pair.conj().resolve_conj())


@ScalarTensor.implements(Tensor.real.__get__)
def _real(input):
    return ScalarTensor._from_pair(input.N, input._pair.real) if input.dtype.is_complex else input


@ScalarTensor.implements(Tensor.imag.__get__)
def _imag(input):
    if not input.dtype.is_complex:
        return Tensor.imag.__get__(_empty_like_matrix(input))  # raises as on the dense matrix
    return ScalarTensor._from_pair(input.N, input._pair.imag)


# In-place functions that act on each element alone: on a ScalarTensor they are applied to


# -- diagonals and transposes ---------------------------------------------------------


def _diagonal_values(d: ScalarTensor, offset: int, view: bool) -> Any:
    """The diagonal `offset` of d's matrix. As a view (torch.diagonal), the main diagonal
    is d's value expanded: reading it costs nothing, writing through it changes d for
    N = 1 and raises for larger N (its entries share one number); other diagonals are
    copies, as is everything torch.diag returns."""
    offset = as_index(offset)
    if offset is None or abs(offset) >= max(d.N, 1):
        return NotImplemented  # (the dense call refuses offsets that are not ints)
    length = d.N - abs(offset)
    if offset != 0:
        return d._pair[1].expand(length).clone()
    diagonal = d._pair[:1].expand(length)
    return diagonal if view else diagonal.clone()


@structured(torch.diag)
def _diag(input, diagonal=0):
    return _diagonal_values(input, diagonal, view=False)


def _matrix_dim(dim: Any) -> int | None:
    """dim of a 2-D tensor as 0 or 1, or None if out of range or not an int (a NumPy
    integer or a 0-d integer tensor is one: common.as_index)."""
    dim = as_index(dim)
    return dim % 2 if dim is not None and -2 <= dim < 2 else None


@structured(torch.diagonal)
def _diagonal(input, offset=0, dim1=0, dim2=1):
    if {_matrix_dim(dim1), _matrix_dim(dim2)} != {0, 1}:
        return NotImplemented  # the dense call raises for equal or invalid dims
    return _diagonal_values(input, offset, view=True)


@structured(torch.transpose)
def _transpose(input, dim0, dim1):
    if _matrix_dim(dim0) is None or _matrix_dim(dim1) is None:
        return NotImplemented
    return ScalarTensor._from_pair(input.N, input._pair)


@structured(torch.t)
def _t(input):
    return ScalarTensor._from_pair(input.N, input._pair)
