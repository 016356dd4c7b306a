"""Other libraries' tensor types as ``tensortools.testing.check_type`` runs them
(tests/test_testing_peers.py): for each, how to make an instance of a plain tensor (or
decline it), the plain tensor an instance stands for where it is not the instance itself,
the samples it can hold, and the rule its results follow. Each library is optional: the
functions here take the module, which the test imports (or skips without)."""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves

from tensortools import testing
from tensortools.testing.samples import tensor_leaves

# -- shaping op_db's samples ------------------------------------------------------------


def _first_tensor(s: testing.Sample) -> Tensor | None:
    leaves = tensor_leaves(s.input)
    return leaves[0] if leaves else None


def _like_input(s: testing.Sample, fn: Callable[[Tensor], Tensor], variant: str):
    """The sample with each tensor of its first input tensor's shape as ``fn(tensor)``
    (``add(a, b)``'s both, ``cat([a, b])``'s both; an index or a weight of another shape
    stays as op_db gives it)."""
    shape = _first_tensor(s).shape
    return s.map_tensors(
        lambda t: fn(t) if t.shape == shape and t.layout == torch.strided else t, variant
    )


def _non_negative(t: Tensor) -> Tensor:
    return t.abs() if not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool) else t


def edge_samples(s: testing.Sample) -> list[testing.Sample] | None:
    """op_db's int64 samples of matrices as edge indices: each matrix of the input's shape
    cut to its first two rows, its integers made non-negative; once as they come and
    once with the columns sorted by the input's first row (a sorted EdgeIndex)."""
    first = _first_tensor(s)
    if first is None or first.dtype != torch.int64 or first.dim() != 2 or first.shape[0] < 2:
        return None
    two = _like_input(s, lambda t: _non_negative(t[:2]).contiguous(), "2 rows")
    order = _first_tensor(two)[0].argsort(stable=True)
    ordered = _like_input(two, lambda t: t[:, order].contiguous(), "2 rows, sorted by row")
    return [two, ordered]


def index_samples(s: testing.Sample) -> list[testing.Sample] | None:
    """op_db's int64 samples of vectors as indices: non-negative, once as they come and
    once sorted (the other vectors of the input's shape permuted alike)."""
    first = _first_tensor(s)
    if first is None or first.dtype != torch.int64 or first.dim() != 1:
        return None
    positive = _like_input(s, _non_negative, "non-negative")
    order = _first_tensor(positive).argsort(stable=True)
    ordered = _like_input(positive, lambda t: t[order], "non-negative, sorted")
    return [positive, ordered]


def box_samples(s: testing.Sample) -> testing.Sample | None:
    """op_db's matrices of four columns or more as boxes: their first four columns."""
    first = _first_tensor(s)
    if first is None or first.dim() != 2 or first.shape[1] < 4:
        return None
    return _like_input(s, lambda t: t[:, :4].contiguous(), "4 columns")


# -- torch_geometric: EdgeIndex and Index -----------------------------------------------


def _is_sorted(t: Tensor) -> bool:
    return t.numel() < 2 or bool((t[1:] >= t[:-1]).all())


def make_edge_index(pyg_edge_index: types.ModuleType) -> Callable[[Tensor], Any]:
    """An EdgeIndex of a (2, N) tensor of non-negative integers, with what is true of it
    declared: its sparse size (one more than its largest row and column), and its sort
    order where its first row is sorted."""

    def make(t: Tensor) -> Any:
        if t.dtype != torch.int64 or t.dim() != 2 or t.shape[0] != 2 or bool((t < 0).any()):
            raise testing.Unsupported("an EdgeIndex holds (2, N) non-negative int64")
        if not t.is_contiguous():
            raise testing.Unsupported("an EdgeIndex holds contiguous data")
        size = (int(t[0].max()) + 1, int(t[1].max()) + 1) if t.numel() else None
        order = "row" if t.numel() and _is_sorted(t[0]) else None
        return pyg_edge_index.EdgeIndex(t, sparse_size=size, sort_order=order)

    return make


def make_index(pyg_index: types.ModuleType) -> Callable[[Tensor], Any]:
    """An Index of a vector of non-negative integers, with its size (one more than its
    largest value) and whether it is sorted declared."""

    def make(t: Tensor) -> Any:
        if t.dtype != torch.int64 or t.dim() != 1 or bool((t < 0).any()):
            raise testing.Unsupported("an Index holds 1-d non-negative int64")
        if not t.is_contiguous():
            raise testing.Unsupported("an Index holds contiguous data")
        size = int(t.max()) + 1 if t.numel() else None
        return pyg_index.Index(t, dim_size=size, is_sorted=_is_sorted(t))

    return make


def pyg_densify(x: Any) -> Tensor:
    """The plain tensor an EdgeIndex or Index holds (``as_subclass`` keeps their type)."""
    return x.as_tensor()


def pyg_rule(x: Any, result: Any) -> str:
    """torch_geometric's invariant, as ``validate()`` checks it: what an EdgeIndex or
    Index result declares holds for its values (below its sparse size or dim size,
    sorted where it says so). (Negative values are not asked about: ``ei - 5`` may give
    them, as the user's arithmetic, where validate() refuses them.)"""
    from torch_geometric.edge_index import EdgeIndex
    from torch_geometric.index import Index

    for t in tree_leaves(result):
        if isinstance(t, EdgeIndex) and t.numel():
            data = t.as_tensor()
            for row, name, size, is_sorted in (
                (0, "rows", t.sparse_size(0), t.is_sorted_by_row),
                (1, "columns", t.sparse_size(1), t.is_sorted_by_col),
            ):
                if size is not None and int(data[row].max()) >= size:
                    return (
                        f"an EdgeIndex result whose {name} reach {int(data[row].max())} of {size}"
                    )
                if is_sorted and not _is_sorted(data[row]):
                    return f"an EdgeIndex result sorted by {name[:-1]} whose {name} are not sorted"
        if isinstance(t, Index) and t.numel():
            data = t.as_tensor()
            if t.dim_size is not None and int(data.max()) >= t.dim_size:
                return f"an Index result whose values reach {int(data.max())} of {t.dim_size}"
            if t.is_sorted and not _is_sorted(data):
                return "an Index result that says it is sorted and is not"
    return ""


# -- tensordict: MemoryMappedTensor ---------------------------------------------------


def make_memmap(tensordict: types.ModuleType, directory: str | None = None):
    """A MemoryMappedTensor copied from the tensor: into anonymous shared memory, or into
    a new file in `directory` (the form that ``pickle`` and ``torch.save`` write as its
    file's name; the other is sent between processes by its descriptor alone). It holds
    no tensor that requires grad."""
    files = itertools.count()

    def make(t: Tensor) -> Any:
        if t.requires_grad:
            raise testing.Unsupported("a MemoryMappedTensor cannot require grad")
        if directory is None:
            return tensordict.MemoryMappedTensor.from_tensor(t)
        name = os.path.join(directory, f"{next(files)}.memmap")
        return tensordict.MemoryMappedTensor.from_tensor(t, filename=name)

    return make


def memmap_rule(x: Any, result: Any, func=None, args=(), kwargs=None) -> str:
    """tensordict's rule: a call gives plain tensors, except views of the mapped memory
    (indexing, unbind, chunk, split), which are MemoryMappedTensors on the same storage.
    (A result that is no call's, as a round trip's, maps its own memory: only its type is
    asked.)"""
    cls = type(x)
    if func is None:
        return ""
    mapped = {
        t.untyped_storage().data_ptr()
        for t in tree_leaves((x, args, kwargs or {}))
        if isinstance(t, cls)
    }
    for t in tree_leaves(result):
        if isinstance(t, cls) and t.untyped_storage().data_ptr() not in mapped:
            return f"a {cls.__name__} result that holds none of the mapped memory"
    return ""


# -- torchvision: tv_tensors ----------------------------------------------------------


@contextlib.contextmanager
def tv_tensors_module() -> Iterator[types.ModuleType | None]:
    """torchvision.tv_tensors (pure Python), or None where torchvision is not installed.

    torchvision's wheels are built for one torch: where its compiled ops do not load on
    this torch (a CUDA wheel on a CPU-only torch), ``import torchvision`` fails, and
    tv_tensors, which needs none of them, is loaded alone, torchvision's ``__init__``
    left unrun. What that adds to ``sys.modules`` is taken out on exit."""
    before = set(sys.modules)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torchvision's warning about its ops)
            import torchvision.tv_tensors as tv

        yield tv
        return
    except ImportError:
        if importlib.util.find_spec("torchvision") is None:
            yield None
            return
    except Exception:
        pass  # its compiled ops do not load on this torch
    spec = importlib.util.find_spec("torchvision")
    try:
        package = types.ModuleType("torchvision")
        package.__path__ = list(spec.submodule_search_locations)
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]  # (what the failed import left)
        sys.modules["torchvision"] = package
        import torchvision.tv_tensors as tv

        yield tv
    finally:
        for name in set(sys.modules) - before:
            if name.split(".")[0] == "torchvision":
                del sys.modules[name]


def make_image(tv: types.ModuleType) -> Callable[[Tensor], Any]:
    """An Image of a tensor of three dims or more (Image adds a channel to a matrix: it
    would not stand for the tensor)."""

    def make(t: Tensor) -> Any:
        if t.dim() < 3:
            raise testing.Unsupported("an Image has (..., C, H, W) dims")
        return tv.Image(t)

    return make


def make_mask(tv: types.ModuleType) -> Callable[[Tensor], Any]:
    return lambda t: tv.Mask(t)


def make_boxes(tv: types.ModuleType) -> Callable[[Tensor], Any]:
    """XYXY BoundingBoxes on a 32 x 32 canvas of an (N, 4) tensor."""

    def make(t: Tensor) -> Any:
        if t.dim() != 2 or t.shape[1] != 4:
            raise testing.Unsupported("BoundingBoxes hold (N, 4)")
        return tv.BoundingBoxes(t, format="XYXY", canvas_size=(32, 32))

    return make


def tv_rule(x: Any, result: Any) -> str:
    """torchvision's rule: calls give plain tensors (the type is kept by clone, to,
    detach, requires_grad_ and pin_memory alone); a result of the type carries the
    metadata of the instance."""
    for t in tree_leaves(result):
        if isinstance(t, torch.Tensor) and type(t) is not torch.Tensor:
            if type(t) is not type(x):
                return f"a {type(t).__name__} result of a {type(x).__name__}"
            for name in ("format", "canvas_size", "clamping_mode"):
                if getattr(t, name, None) != getattr(x, name, None):
                    return f"a result whose {name} is {getattr(t, name, None)!r}"
    return ""
