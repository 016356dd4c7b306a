"""The kit on other libraries' tensor types: torch_geometric's ``EdgeIndex`` and ``Index``,
tensordict's ``MemoryMappedTensor``, torchvision's ``tv_tensors`` (``Image``, ``Mask``,
``BoundingBoxes``) and MONAI's ``MetaTensor`` (whose run over the eager checks is
tests/test_testing_monai.py; here its hand reproducers and the compile check). Each
library is an optional development dependency, pure Python, installed without its
dependencies (requirements-dev.txt); its tests skip without it.

By default each type runs a few functions over every check; in the full tier, every op_db
function it can hold. Every failure such a run reports is a behaviour of that library,
confirmed by a hand reproducer below: a strict expected failure naming the version, which
asserts what plain torch does (it starts to pass, and so fails, once the library changes).
A run reports those functions and nothing else: a new failure is a finding to confirm by
hand, or a false alarm of the kit to fix (the kit's fix and its test are at the end)."""

from __future__ import annotations

import copy
import os
import pickle
import tempfile
import warnings

import pytest
import torch
from _support import peer_types

from tensortools import testing

EVERY_CHECK_BUT_COMPILE = list(testing.DEFAULT_CHECKS)  # (compile and batches run when named)
#: The default tier's runs: a few functions each, these checks, a few seconds per type.
QUICK_CHECKS = ["values", "types", "layouts", "mutation", "aliases", "binding", "autograd"]


@pytest.fixture(scope="module")
def pyg_edge_index():
    return pytest.importorskip("torch_geometric.edge_index")


@pytest.fixture(scope="module")
def pyg_index():
    return pytest.importorskip("torch_geometric.index")


@pytest.fixture(scope="module")
def tensordict():
    return pytest.importorskip("tensordict")


@pytest.fixture(scope="module")
def tv():
    with peer_types.tv_tensors_module() as module:
        if module is None:
            pytest.skip("torchvision is not installed")
        yield module


@pytest.fixture(scope="module")
def monai():
    return pytest.importorskip("monai.data")


def run(spec, make=None, **options):
    """check_type over every check but compile (unless asked), its report returned."""
    options.setdefault("checks", EVERY_CHECK_BUT_COMPILE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the libraries' own deprecation warnings)
        return testing.check_type(spec, make, raise_on_failure=False, **options)


def functions(*names):
    """A failure of one of these functions."""
    return lambda f: f.function in names


def in_place_stale(f):
    """A result of an in-place call that keeps the metadata of the values it had: the
    in-place form's result judged by the type's rule, or geometric, in-place only."""
    return f.function == "geometric" or (
        f.check == "types" and f.reason.startswith("in-place form: ")
    )


def assert_found(report, found):
    """Every failure of the run is one that a reproducer here confirms (`found`: the
    reproducer's name -> which failures it explains), and each reproducer's is among
    them."""
    unexplained = [f for f in report.failures if not any(is_it(f) for is_it in found.values())]
    assert not unexplained, "\n".join(map(str, unexplained[:20])) + "\n" + report.summary()
    missing = [name for name, is_it in found.items() if not any(map(is_it, report.failures))]
    assert not missing, f"no longer found: {missing}\n{report.summary()}"


# --- torch_geometric 2.8.1: EdgeIndex and Index ----------------------------------------------

#: EdgeIndex stands for its sparse adjacency matrix in a matrix product (torch_geometric's
#: meaning: ``edge_index @ x`` sums neighbours' features), which the (2, N) tensor's
#: product does not compute: these are left out of its runs, not compared.
ADJACENCY_PRODUCTS = ("matmul", "mm", "linalg.multi_dot")

#: What EdgeIndex and Index compute lazily and keep on the instance (a call may fill them).
EDGE_INDEX_CACHES = ("_indptr", "_T_perm", "_T_index", "_T_indptr", "_value")

#: The functions whose failures the reproducers below confirm, per type.
EDGE_INDEX_FOUND = {
    "test_pyg_in_place_calls_keep_stale_metadata": in_place_stale,
    "test_pyg_edge_index_to_sparse_is_the_adjacency": functions("to_sparse"),
}
INDEX_FOUND = {
    "test_pyg_in_place_calls_keep_stale_metadata": in_place_stale,
    "test_pyg_index_slice_from_a_negative_start": functions("gradient"),
    "test_pyg_slice_without_dim": functions("slice"),
}


def edge_samples(s):
    return None if s.name in ADJACENCY_PRODUCTS else peer_types.edge_samples(s)


def edge_index_spec(pyg_edge_index):
    return testing.TypeSpec(
        pyg_edge_index.EdgeIndex,
        make=peer_types.make_edge_index(pyg_edge_index),
        densify=peer_types.pyg_densify,
        rule=peer_types.pyg_rule,
        volatile_attrs=EDGE_INDEX_CACHES,
    )


#: (int64 only, four samples per function: op_db's first ones are mostly not matrices)
EDGE_INDEX_OPTIONS = {"dtypes": [torch.int64], "max_samples": 4, "samples": edge_samples}


def index_spec(pyg_index):
    return testing.TypeSpec(
        pyg_index.Index,
        make=peer_types.make_index(pyg_index),
        densify=peer_types.pyg_densify,
        rule=peer_types.pyg_rule,
        volatile_attrs=("_indptr",),
    )


INDEX_OPTIONS = {"dtypes": [torch.int64], "max_samples": 4, "samples": peer_types.index_samples}


@pytest.mark.slow
def test_pyg_edge_index_quick(pyg_edge_index):
    ops = ["add", "sub", "cat", "stack", "index_select", "unbind", "max", "where"]
    spec = edge_index_spec(pyg_edge_index)
    report = run(spec, ops=ops, checks=QUICK_CHECKS, **EDGE_INDEX_OPTIONS)
    assert report.passed, report.summary()
    assert len(report.functions) == len(ops) and report.samples > 20


@pytest.mark.slow
def test_pyg_index_quick(pyg_index):
    ops = ["add", "sub", "index_select", "sort", "max", "unbind", "gather"]
    report = run(index_spec(pyg_index), ops=ops, checks=QUICK_CHECKS, **INDEX_OPTIONS)
    assert report.passed, report.summary()
    assert len(report.functions) == len(ops) and report.samples > 15


@pytest.mark.slow
@pytest.mark.full
def test_pyg_edge_index_over_all_of_op_db(pyg_edge_index):
    # (every function: those with no sample an EdgeIndex holds run nothing)
    report = run(edge_index_spec(pyg_edge_index), **EDGE_INDEX_OPTIONS)
    assert len(report.functions) > 200 and report.samples > 1000
    assert_found(report, EDGE_INDEX_FOUND)


@pytest.mark.slow
@pytest.mark.full
def test_pyg_index_over_all_of_op_db(pyg_index):
    report = run(index_spec(pyg_index), **INDEX_OPTIONS)
    assert len(report.functions) > 200 and report.samples > 500
    assert_found(report, INDEX_FOUND)


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="torch_geometric 2.8.1: Index's slice handler takes any start <= 0 for a no-op, "
    "so index[-1:] is the whole index (and torch.gradient of an Index is wrong)",
)
def test_pyg_index_slice_from_a_negative_start(pyg_index):
    t = torch.tensor([0, 1, 3, 4])
    assert torch.equal(pyg_index.Index(t)[-1:].as_tensor(), t[-1:])
    (want,) = torch.gradient(t)
    (got,) = torch.gradient(pyg_index.Index(t))
    assert torch.equal(got, want)


@pytest.mark.xfail(
    strict=True,
    raises=TypeError,
    reason="torch_geometric 2.8.1: the slice handlers of Index and EdgeIndex need 'dim', "
    "which aten.slice.Tensor defaults (0): a call leaving it out raises TypeError",
)
def test_pyg_slice_without_dim(pyg_index):
    t = torch.tensor([0, 1, 3, 4])
    assert torch.equal(torch.ops.aten.slice.Tensor(pyg_index.Index(t), 0).as_tensor(), t)


@pytest.mark.xfail(
    strict=True,
    raises=ValueError,
    reason="torch_geometric 2.8.1: an in-place call other than add_ and sub_ changes the "
    "values and keeps the sparse size, dim size and sort order (validate() refuses them)",
)
@pytest.mark.parametrize("kind", ["EdgeIndex", "Index"])
def test_pyg_in_place_calls_keep_stale_metadata(pyg_edge_index, pyg_index, kind):
    if kind == "EdgeIndex":
        x = pyg_edge_index.EdgeIndex(
            torch.tensor([[0, 1, 2], [1, 2, 0]]), sparse_size=(3, 3), sort_order="row"
        )
    else:
        x = pyg_index.Index(torch.tensor([0, 1, 2]), dim_size=3, is_sorted=True)
    x.mul_(2)  # (the kit found it with geometric_, which writes random values)
    x.validate()  # what the type declares holds for the values it now has


@pytest.mark.xfail(
    strict=True,
    raises=TypeError,
    reason="torch_geometric 2.8.1: EdgeIndex.to_sparse(layout, value) replaces "
    "Tensor.to_sparse(sparse_dim): it gives the sparse adjacency matrix (by design), and "
    "to_sparse(1) raises TypeError",
)
def test_pyg_edge_index_to_sparse_is_the_adjacency(pyg_edge_index):
    t = torch.tensor([[0, 1, 2], [1, 2, 0]])
    got = pyg_edge_index.EdgeIndex(t).to_sparse(1)
    assert torch.equal(got.to_dense(), t.to_sparse(1).to_dense())


# --- tensordict 0.15.3: MemoryMappedTensor ---------------------------------------------------

#: Calls give plain tensors but views (the type's rule, peer_types.memmap_rule). An instance
#: in anonymous shared memory is sent between processes by its descriptor and has no
#: pickle of its own (tensordict's documented design): the serialization check runs on
#: instances in files, whose pickle is the file's name.
MEMMAP_FOUND = {
    "test_tensordict_memmap_of_an_empty_tensor": lambda f: (
        f.check == "make" and "cannot mmap an empty file" in f.reason
    ),
    "test_tensordict_memmap_cannot_grow": lambda f: (
        f.function == "addbmm" and "not resizable" in f.reason
    ),
    "test_tensordict_memmap_views_take_no_axis": lambda f: (
        f.check == "binding" and f.function in ("unbind", "chunk")
    ),
    "test_tensordict_memmap_unbind_without_dim": lambda f: (
        f.check == "edges" and f.function == "x.unbind()[1]" and "'dim'" in f.reason
    ),
}


def memmap_spec(tensordict, *directory):
    """MemoryMappedTensor's spec (its instances in files in `directory`, where given)."""
    return testing.TypeSpec(
        tensordict.MemoryMappedTensor,
        make=peer_types.make_memmap(tensordict, *directory),
        rule=peer_types.memmap_rule,
    )


@pytest.mark.slow
def test_tensordict_memmap_quick(tensordict):
    ops = ["add", "sum", "flip", "cat", "__getitem__", "split", "t", "where"]
    report = run(memmap_spec(tensordict), ops=ops, checks=QUICK_CHECKS)
    assert report.passed, report.summary()
    assert len(report.functions) == len(ops)


@pytest.mark.slow
@pytest.mark.full
def test_tensordict_memmap_over_all_of_op_db(tensordict):
    checks = [c for c in EVERY_CHECK_BUT_COMPILE if c != "serialization"]
    report = run(memmap_spec(tensordict), checks=checks)
    assert len(report.functions) > 500 and report.samples > 1000
    assert_found(report, MEMMAP_FOUND)


@pytest.mark.slow
@pytest.mark.full
def test_tensordict_memmap_in_files_over_all_of_op_db(tensordict):
    with tempfile.TemporaryDirectory() as directory:
        report = run(memmap_spec(tensordict, directory), checks=["values", "serialization"])
    assert len(report.functions) > 500
    # (pickle passes; every function's deepcopy raises, and torch.load(weights_only=True)
    # refuses what torch.save wrote)
    serialization = {
        "test_tensordict_memmap_deepcopy": lambda f: "deepcopy raised" in f.reason,
        "test_tensordict_memmap_in_a_file_loads_with_weights_only": lambda f: (
            "weights_only=True) refuses" in f.reason and "builtins.getattr" in f.reason
        ),
    }
    # (of the whole run's findings, only the values check's is among these checks: an
    # empty tensor maps into a file)
    grow = "test_tensordict_memmap_cannot_grow"
    assert_found(report, {grow: MEMMAP_FOUND[grow], **serialization})


@pytest.mark.xfail(
    strict=True,
    raises=TypeError,
    reason="tensordict 0.15.3: MemoryMappedTensor.unbind requires dim, which torch's "
    "Tensor.unbind defaults to 0",
)
def test_tensordict_memmap_unbind_without_dim(tensordict):
    t = torch.rand(2, 3)
    rows = tensordict.MemoryMappedTensor.from_tensor(t).unbind()
    assert torch.equal(rows[1].as_subclass(torch.Tensor), t[1])


class _Declines(torch.Tensor):
    """A Tensor subclass that declines every call (torch's protocol: NotImplemented)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return NotImplemented


def test_tensordict_memmap_opts_out_of_torch_function(tensordict):
    # MemoryMappedTensor's __torch_function__ is torch's opt-out: torch never asks it, so a
    # call with a type that declines ends in that type's TypeError, as with a plain tensor
    # (called directly, the method computes the call: the kit no longer asks it so).
    x = tensordict.MemoryMappedTensor.from_tensor(torch.rand(3))
    assert type(x).__torch_function__ is torch._C._disabled_torch_function_impl
    other = torch.rand(3).as_subclass(_Declines)
    for t in (torch.rand(3), x):
        for call in (lambda: torch.add(t, other), lambda: torch.add(other, t), lambda: t * other):
            with pytest.raises(TypeError):
                call()
    report = run(memmap_spec(tensordict), ops=["add"], checks=["edges"])
    assert not [f for f in report.failures if f.function.startswith("x.__torch_function__(")]


@pytest.mark.xfail(
    strict=True,
    raises=pickle.UnpicklingError,
    reason="tensordict 0.15.3: what torch.save writes of a MemoryMappedTensor in a file "
    "loads only with builtins.getattr allowed, which torch.load(weights_only=True) refuses "
    "(allowing it would let a file call any attribute)",
)
def test_tensordict_memmap_in_a_file_loads_with_weights_only(tensordict, tmp_path):
    t = torch.rand(3)
    x = tensordict.MemoryMappedTensor.from_tensor(t, filename=os.path.join(tmp_path, "x.memmap"))
    torch.save(x, os.path.join(tmp_path, "x.pt"))
    with torch.serialization.safe_globals([tensordict.MemoryMappedTensor]):
        loaded = torch.load(os.path.join(tmp_path, "x.pt"), weights_only=True)
    assert torch.equal(loaded.as_subclass(torch.Tensor), t)


@pytest.mark.xfail(
    strict=True,
    raises=RuntimeError,
    reason="tensordict 0.15.3: copy.deepcopy of a MemoryMappedTensor raises (torch's "
    "default __deepcopy__ needs new_empty to give the subclass; its calls give plain tensors)",
)
@pytest.mark.parametrize("in_a_file", [False, True])
def test_tensordict_memmap_deepcopy(tensordict, in_a_file, tmp_path):
    t = torch.rand(3)
    filename = os.path.join(tmp_path, "x.memmap") if in_a_file else None
    x = tensordict.MemoryMappedTensor.from_tensor(t, filename=filename)
    assert torch.equal(copy.deepcopy(x), t)


@pytest.mark.xfail(
    strict=True,
    raises=ValueError,
    reason="tensordict 0.15.3: from_tensor of an empty tensor into anonymous shared memory "
    "raises 'cannot mmap an empty file' (into a file, it works)",
)
def test_tensordict_memmap_of_an_empty_tensor(tensordict):
    t = torch.empty(1, 0, 3)
    assert tensordict.MemoryMappedTensor.from_tensor(t).shape == t.shape


@pytest.mark.xfail(
    strict=True,
    raises=RuntimeError,
    reason="tensordict 0.15.3: a MemoryMappedTensor's storage cannot grow, where torch "
    "resizes a plain tensor in place (addbmm_ of a (5,) input gives (5, 5))",
)
def test_tensordict_memmap_cannot_grow(tensordict):
    b1, b2 = torch.rand(3, 5, 4), torch.rand(3, 4, 5)
    t = torch.rand(5)
    x = tensordict.MemoryMappedTensor.from_tensor(t)
    assert torch.allclose(x.addbmm_(b1, b2), t.addbmm_(b1, b2))


@pytest.mark.xfail(
    strict=True,
    raises=TypeError,
    reason="tensordict 0.15.3: MemoryMappedTensor.unbind and chunk, written in Python, do "
    "not take the axis= that torch.Tensor's methods take for dim=",
)
@pytest.mark.parametrize("method", ["unbind", "chunk"])
def test_tensordict_memmap_views_take_no_axis(tensordict, method):
    t = torch.rand(2, 3)
    x = tensordict.MemoryMappedTensor.from_tensor(t)
    args = (2,) if method == "chunk" else ()
    for got, want in zip(getattr(x, method)(*args, axis=1), getattr(t, method)(*args, axis=1)):
        assert torch.equal(got, want)


# --- torchvision 0.28.0: tv_tensors ----------------------------------------------------------

#: Calls give plain tensors but clone, to, detach, requires_grad_ and pin_memory
#: (peer_types.tv_rule); Image holds three dims or more, BoundingBoxes (N, 4) (the first
#: four columns of op_db's matrices: peer_types.box_samples).
TV_FOUND = {
    "test_tv_tensors_in_place_methods_return_a_plain_tensor": lambda f: (
        "in-place form returned a new Tensor" in f.reason
    ),
    "test_tv_tensors_out_forms_return_a_plain_tensor": lambda f: (
        "out= form returned a new Tensor" in f.reason
    ),
}


def tv_types(tv):
    """name -> (spec, check_type's further keywords); the specs allow their types for
    torch.load(weights_only=True), which torchvision does not declare."""
    rule = peer_types.tv_rule
    return {
        "Image": (
            testing.TypeSpec(
                tv.Image, make=peer_types.make_image(tv), rule=rule, safe_globals=[tv.Image]
            ),
            {},
        ),
        "Mask": (
            testing.TypeSpec(
                tv.Mask, make=peer_types.make_mask(tv), rule=rule, safe_globals=[tv.Mask]
            ),
            {},
        ),
        "BoundingBoxes": (
            testing.TypeSpec(
                tv.BoundingBoxes,
                make=peer_types.make_boxes(tv),
                rule=rule,
                safe_globals=[tv.BoundingBoxes, tv.BoundingBoxFormat],
            ),
            {"samples": peer_types.box_samples},
        ),
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Image", "Mask", "BoundingBoxes"])
def test_tv_tensors_quick(tv, name):
    spec, options = tv_types(tv)[name]
    # (functions without an in-place form: see the reproducer below; where's out= form is
    # its other reproducer's finding)
    if name == "BoundingBoxes":
        ops = ["cat", "gather", "softmax", "stack", "unbind", "where"]
    else:
        ops = ["flip", "max", "sort", "where", "clone", "narrow", "select", "roll"]
    checks = [*QUICK_CHECKS, "serialization"]
    report = run(spec, ops=ops, checks=checks, **options)
    out_forms = "test_tv_tensors_out_forms_return_a_plain_tensor"
    assert_found(report, {out_forms: TV_FOUND[out_forms]})


@pytest.mark.slow
@pytest.mark.full
@pytest.mark.parametrize("name", ["Image", "Mask", "BoundingBoxes"])
def test_tv_tensors_over_all_of_op_db(tv, name):
    spec, options = tv_types(tv)[name]
    report = run(spec, **options)
    assert len(report.functions) > (150 if name == "BoundingBoxes" else 500)
    assert_found(report, TV_FOUND)


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="torchvision 0.28.0: an in-place method of a TVTensor returns a new plain "
    "tensor on the same memory, not the instance (by design: TVTensor.__torch_function__ "
    "unwraps every result but clone, to, detach, requires_grad_ and pin_memory)",
)
def test_tv_tensors_in_place_methods_return_a_plain_tensor(tv):
    image = tv.Image(torch.rand(3, 4, 4))
    assert image.add_(1) is image  # as torch.Tensor's in-place methods return self


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="torchvision 0.28.0: an out= form on a TVTensor returns a new plain tensor on "
    "out's memory, not out (TVTensor.__torch_function__ unwraps every result, as for the "
    "in-place methods)",
)
@pytest.mark.parametrize("name", ["Image", "Mask", "BoundingBoxes"])
def test_tv_tensors_out_forms_return_a_plain_tensor(tv, name):
    make = tv_types(tv)[name][0].make
    shape = (5, 4) if name == "BoundingBoxes" else (3, 4, 4)
    x, y, out = make(torch.rand(shape)), torch.rand(shape), make(torch.empty(shape))
    assert torch.where(y > 0.5, x, y, out=out) is out  # as torch returns out


# --- MONAI 1.6.1: MetaTensor (its run over the eager checks: tests/test_testing_monai.py) -----


@pytest.mark.xfail(
    strict=True,
    raises=AttributeError,
    reason="monai 1.6.1: MetaTensor updates the metadata of each result and takes "
    "histogramdd's (hist, bin_edges) for one: 'tuple' object has no attribute 'meta'",
)
def test_monai_histogramdd(monai):
    t = torch.rand(5, 5)
    got = torch.histogramdd(monai.MetaTensor(t), bins=[3] * 5)
    assert torch.equal(got.hist.as_tensor(), torch.histogramdd(t, bins=[3] * 5).hist)


@pytest.mark.xfail(
    strict=True,
    raises=NotImplementedError,
    reason="monai 1.6.1: MetaTensor copies metadata by reading the result's storage, which "
    "a sparse tensor has not: to_sparse raises",
)
def test_monai_to_sparse(monai):
    t = torch.rand(5, 5)
    assert torch.equal(monai.MetaTensor(t).to_sparse().to_dense(), t)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="monai 1.6.1 with torch 2.13.0: compiled, (x + 0.5) * 2 - x / 3 on a MetaTensor "
    "runs + 0.5 as * 0.5 (its __torch_function__ breaks the graph, and dynamo runs code "
    "compiled for another operator)",
)
def test_monai_compiled_arithmetic_chain(monai):
    torch._dynamo.reset()
    t = torch.rand(4)
    f = torch.compile(lambda x: (x + 0.5) * 2 - x / 3, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = f(monai.MetaTensor(t))
    torch._dynamo.reset()
    assert torch.allclose(got.as_tensor(), (t + 0.5) * 2 - t / 3)


# --- false alarms of the kit that these types showed (fixed, tested with types of its own) ---


class Matrix(torch.Tensor):
    """A bare subclass that holds matrices alone, as BoundingBoxes hold (N, 4)."""


def make_matrix(t):
    if t.dim() != 2:
        raise testing.Unsupported("a Matrix has two dims")
    return t.as_subclass(Matrix)


@pytest.mark.slow  # (op_db's import)
def test_vmap_over_a_batch_the_type_does_not_hold_is_not_a_failure():
    # (vmap over the instance stacks two samples: a batch of matrices is no matrix; the
    # kit reported make's Unsupported there as "vmap over the instance: raised ...")
    report = run(Matrix, make_matrix, ops=["sin", "T"], checks=["func"], max_samples=1)
    assert report.passed, report.summary()
    assert report.functions == ["T", "sin"]


class Detached(torch.Tensor):
    """A bare subclass of tensors that do not require grad, as tensordict's
    MemoryMappedTensor, which from_tensor refuses to make of one that does."""


def make_detached(t):
    if t.requires_grad:
        raise testing.Unsupported("a Detached tensor cannot require grad")
    return t.as_subclass(Detached)


@pytest.mark.slow
def test_gradcheck_on_a_type_that_holds_no_tensor_requiring_grad_is_declined():
    # (gradcheck passes make the tensors it differentiates, which require grad; the kit
    # reported make's Unsupported there as "gradcheck (float64): ..." for every function)
    report = run(Detached, make_detached, ops=["exp", "sum"], checks=["autograd"])
    assert report.passed, report.summary()
    assert {d.function for d in report.declined if "gradcheck" in d.reason} == {"exp", "sum"}


class Cached(torch.Tensor):
    """A bare subclass with a cache declared on the class (``None`` until filled), as
    torch_geometric's EdgeIndex declares ``_T_indptr = None``; an unpickled one sets it
    on the instance."""

    cache = None

    def __setstate__(self, state):
        torch._utils._set_obj_state(self, state)
        self.cache = None

    def __deepcopy__(self, memo):
        return self.detach().clone()


def test_an_attribute_equal_to_its_class_default_is_no_difference():
    # (compiled under aot_eager, an EdgeIndex result held _T_indptr = None where eager's
    # read None from the class: the kit reported "attribute '_T_indptr' is None instead of
    # '(missing)'"; the round trips compare attributes the same way)
    report = run(
        testing.TypeSpec(Cached, make=lambda t: t.as_subclass(Cached), safe_globals=[Cached]),
        ops=["exp"],
        checks=["serialization"],
    )
    assert report.passed, report.summary()
