"""How results take MetadataTensor metadata: the rules of csrc/python/metadata_results.h
(exported through tensortools.types.metadata.results: which dicts and batch size a call's
results take, how a result takes them, the read of a batch size) and the compiled path's
rule for results that change class in place (wrapper_adopt), each written once.

The rules are checked against what they are documented to do; the stand-ins torch.compile
traces in their place against the C rules over every kind of input; and the source is
scanned so that a second copy of a rule (a write of ``_batch_size`` outside the one
writer, a read outside the one reader) fails here.
"""

from __future__ import annotations

import ast
import itertools
import pathlib
import re
import types
import weakref

import pytest
import torch

import tensortools
from tensortools import LoggingTensor, MetadataTensor
from tensortools._native import C
from tensortools.dispatch import results as dispatch_results
from tensortools.types.metadata import results
from tensortools.types.metadata.results import batch_size_of, carriers, take_metadata

ROOT = pathlib.Path(tensortools.__file__).parent
CSRC = ROOT.parent / "csrc"


class Child(MetadataTensor):
    pass


def _m(shape=(2,), metadata=None, size=None):
    t = MetadataTensor(torch.zeros(shape), metadata)
    if size is not None:
        take_metadata(t, None, size, False)
    return t


# -- take_metadata: a result takes a copy, and the batch size where it holds samples ------


def test_a_result_takes_a_copy_of_the_dict_of_its_own():
    source = {"k": [1, 2]}
    for given in (source, types.MappingProxyType(source), type("D", (dict,), {})(source)):
        out = torch.zeros(2).as_subclass(MetadataTensor)
        take_metadata(out, given, None, True)
        assert type(out.metadata) is dict and out.metadata == source
        assert out.metadata is not source and out.metadata["k"] is source["k"]  # (shallow)
        assert "_batch_size" not in vars(out)  # (new, no batch: nothing written)


def test_none_keeps_the_results_own_dict():
    out = _m(metadata={"k": 1})
    own = out.metadata
    take_metadata(out, None, 2, False)
    assert out.metadata is own and out.batch_size == 2


@pytest.mark.parametrize("shape", [(), (0,), (3,), (3, 2)])
def test_a_0d_result_holds_no_samples(shape):
    out = torch.zeros(shape).as_subclass(MetadataTensor)
    take_metadata(out, {"id": [0, 1, 2]}, 3, True)
    assert out.batch_size == (None if shape == () else 3)
    assert out.is_batch is (shape != ())


def test_a_result_that_holds_no_samples_is_no_batch():
    for size in (None, 3):
        batch = _m((3,) if size is None else (), {"id": [0, 1, 2]})
        vars(batch)["_batch_size"] = 3  # (a batch, or a 0-d tensor marked as one)
        take_metadata(batch, {"id": 0}, size, False)
        assert batch.batch_size is None and batch.metadata == {"id": 0}


def test_take_metadata_refuses_what_is_not_a_tensor_or_a_mapping():
    with pytest.raises(TypeError, match="'result' must be a tensor"):
        take_metadata([1], {}, None, True)
    with pytest.raises(TypeError):
        take_metadata(torch.zeros(1).as_subclass(MetadataTensor), 5, None, True)
    with pytest.raises(TypeError, match="metadata_take"):
        C.metadata_take(torch.zeros(1))


# -- carriers: which dicts a call's results take, and the batch size they pass on ---------


def test_carriers_are_every_metadata_tensor_with_metadata_in_order():
    plain, logged = torch.zeros(2), LoggingTensor(torch.zeros(2))
    bare = torch.zeros(2).as_subclass(MetadataTensor)  # (no metadata at all)
    a, b, c = _m(metadata={"a": 1}), Child(torch.zeros(2), {"c": 1}), _m(metadata={"b": 2})
    found, size = carriers(MetadataTensor, [plain, bare, b, logged, a, c])
    assert found == [{"c": 1}, {"a": 1}, {"b": 2}] and size is None
    assert found[0] is b.metadata  # (the dicts themselves: the results copy them)
    assert carriers(MetadataTensor, []) == ([], None)
    assert carriers(Child, [a, b]) == ([{"c": 1}], None)


def test_the_first_carrier_passes_its_batch_size_on():
    batch = _m((3,), {"id": [0, 1, 2]}, size=3)
    other = _m((3,), {"id": [4, 5, 6]}, size=3)
    plain = _m((3,), {"k": 1})
    assert carriers(MetadataTensor, [batch, plain]) == ([batch.metadata, plain.metadata], 3)
    assert carriers(MetadataTensor, [plain, batch])[1] is None
    bare = torch.zeros(3).as_subclass(MetadataTensor)
    vars(bare)["_batch_size"] = 7  # (a batch without metadata passes nothing on)
    assert carriers(MetadataTensor, [bare, other])[1] == 3


def test_carriers_refuse_what_they_cannot_read():
    with pytest.raises(TypeError, match="metadata_carriers"):
        C.metadata_carriers(1, [])
    with pytest.raises(TypeError):
        carriers(MetadataTensor, 5)


# -- what torch.compile traces in their place: the same, over every kind of input --------

METADATA = {
    "None": lambda: None,
    "{}": dict,
    "dict": lambda: {"id": [0, 1, 2]},
    "dict subclass": lambda: type("D", (dict,), {})(k=1),
    "mapping": lambda: types.MappingProxyType({"k": 2}),
}
SIZES = [None, 0, 3, "x"]
SHAPES = [(), (3,), (3, 2)]
BEFORE = ["fresh", "a batch of 3", "not a batch"]


def _made(shape, before, cls=MetadataTensor):
    t = torch.zeros(shape).as_subclass(cls)
    if before != "fresh":
        vars(t).update(metadata={"old": 1}, _batch_size=3 if before == "a batch of 3" else None)
    return t


def _state(t):
    # (as a user sees it: a traced result makes its copy of the metadata when first read)
    getattr(t, "metadata", None)
    return {k: (type(v), v) for k, v in vars(t).items()}


@pytest.mark.parametrize("metadata", sorted(METADATA))
def test_the_traced_take_is_the_c_rule(metadata):
    for size, shape, before, new in itertools.product(SIZES, SHAPES, BEFORE, (True, False)):
        if new and before != "fresh":
            continue  # (new: a result just made, which holds nothing yet)
        outs = []
        for rule in (take_metadata, results._traced_take):
            out, given = _made(shape, before), METADATA[metadata]()
            rule(out, given, size, new)
            assert given is None or out.metadata is not given
            outs.append(_state(out))
        assert outs[0] == outs[1], (metadata, size, shape, before, new)


def test_the_traced_carriers_are_the_c_rule():
    kinds = {
        "plain": lambda: torch.zeros(3),
        "logged": lambda: LoggingTensor(torch.zeros(3)),
        "bare": lambda: torch.zeros(3).as_subclass(MetadataTensor),
        "metadata": lambda: _m((3,), {"k": 1}),
        "batch": lambda: _m((3,), {"id": [0, 1, 2]}, size=3),
        "child batch": lambda: Child.wrap_batch(torch.zeros(2), {"id": [7, 8]}, 2),
        "batch, no metadata": lambda: _no_metadata(),
    }
    for n in range(4):
        for combo in itertools.product(sorted(kinds), repeat=n):
            tensors = [kinds[k]() for k in combo]
            for carrier in (MetadataTensor, Child):
                got = carriers(carrier, tensors)
                traced = results._traced_carriers(carrier, tensors)
                assert got[1] == traced[1] and len(got[0]) == len(traced[0]), combo
                assert all(x is y for x, y in zip(got[0], traced[0])), combo


def _no_metadata():
    t = torch.zeros(3).as_subclass(MetadataTensor)
    vars(t)["_batch_size"] = 3
    return t


@pytest.mark.slow
def test_torch_compile_traces_the_stand_ins_with_eagers_results():
    torch._dynamo.reset()
    samples = [MetadataTensor(torch.full((2,), float(i)), {"id": i}) for i in range(3)]
    batch = torch.stack(samples)

    def f(b, plain):
        return torch.exp(b), torch.add(plain, b).sum(), b.sum(), b[1], b[1:]

    eager = f(batch, torch.ones(2))
    compiled = torch.compile(f, fullgraph=True, backend="eager")(batch, torch.ones(2))
    for got, want in zip(compiled, eager):
        assert type(got) is type(want) is MetadataTensor
        assert got.metadata == want.metadata and got.batch_size == want.batch_size
        torch.testing.assert_close(got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))
    assert [t.batch_size for t in eager] == [3, None, None, None, 2]


# -- when a new result adopts the class: one rule, the compiled path's --------------------


def test_the_python_path_adopts_results_by_the_compiled_paths_rule():
    assert dispatch_results._adopt is C.wrapper_adopt
    fresh = torch.zeros(2)
    assert C.wrapper_adopt(MetadataTensor, fresh) is True and type(fresh) is MetadataTensor
    held = torch.zeros(2)
    cache = weakref.ref(held)
    assert C.wrapper_adopt(MetadataTensor, held) is False and type(cache()) is torch.Tensor
    noted = torch.zeros(2)
    noted.note = 1
    assert C.wrapper_adopt(MetadataTensor, noted) is False and type(noted) is torch.Tensor
    other = torch.zeros(2).as_subclass(LoggingTensor)
    assert C.wrapper_adopt(MetadataTensor, other) is False and type(other) is LoggingTensor
    with pytest.raises(TypeError, match="wrapper_adopt"):
        C.wrapper_adopt(1, fresh)


# -- each rule in one place: a second copy fails here -------------------------------------


def _python_sources():
    for path in sorted(ROOT.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _where(tree):
    """node -> the qualified name of the function or class it stands in."""
    owner = {}

    def visit(node, name):
        for child in ast.iter_child_nodes(node):
            inner = name
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{name}.{child.name}" if name else child.name
            owner[child] = inner
            visit(child, inner)

    visit(tree, "")
    return owner


def _uses_of_batch_size():
    """(module, function, how) for every mention of `_batch_size` in tensortools' Python."""
    found = []
    for module, tree in _python_sources():
        owner = _where(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "_batch_size":
                how = "writes" if isinstance(node.ctx, ast.Store) else "reads"
                found.append((module, owner[node], how))
            elif isinstance(node, ast.Constant) and node.value == "_batch_size":
                found.append((module, owner[node], "names"))
    return sorted(found)


def test_batch_size_is_written_by_one_function_and_read_one_way():
    # (C: read_batch_size and take_metadata; below, their stand-ins under torch.compile,
    # and the key of a saved state)
    assert _uses_of_batch_size() == [
        ("types/metadata/results.py", "_read_size", "names"),
        ("types/metadata/results.py", "_traced_take", "writes"),
        ("types/metadata/results.py", "_traced_take", "writes"),
        ("types/metadata/tensor.py", "MetadataTensor._check_state", "names"),
    ]
    assert _c_functions_using("metadata_names::batch_size") == {
        "read_batch_size",  # the one read
        "take_metadata",  # the one write
        "add_metadata_results",  # (the name interned)
    }


def _c_functions_using(name: str) -> set[str]:
    """The functions of csrc/ whose bodies use `name` (a definition starts at the line's
    start and ends with the first line that is a lone closing brace)."""
    using, function = set(), None
    lines = [line for p in sorted(CSRC.rglob("*.[ch]*")) for line in p.read_text().splitlines()]
    for line in lines:
        start = re.match(r"[A-Za-z].*?\b(\w+)\(", line)
        if start and not line.endswith(";") and function is None:
            function = start.group(1)
        elif line == "}":
            function = None
        elif function and re.search(rf"\b{re.escape(name)}\b", line):
            using.add(function)
    return using


def test_the_c_rules_are_the_only_c_code_that_names_batch_size_or_metadata():
    naming = {
        p.relative_to(CSRC).as_posix()
        for p in sorted(CSRC.rglob("*.[ch]*"))
        if '"_batch_size"' in p.read_text() or '"metadata"' in p.read_text()
    }
    assert naming == {"python/metadata_results.cpp", "python/metadata_results.h"}


def test_results_take_metadata_only_through_the_rule():
    # (a result's metadata is set by take_metadata, or, for a result of a compiled
    # function, by results.PendingMetadata, its copy when first read; the constructor
    # and loading set an instance's own)
    stores = [
        (module, _where(tree)[node])
        for module, tree in _python_sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "metadata"
        and isinstance(node.ctx, ast.Store)
        and module.startswith("types/")
    ]
    assert sorted(stores) == [
        ("types/metadata/results.py", "_traced_take"),
        ("types/metadata/results.py", "_traced_take"),
        ("types/metadata/tensor.py", "MetadataTensor.__new__"),
        ("types/metadata/tensor.py", "MetadataTensor.__setstate__"),
    ]


def test_the_python_rules_are_the_c_functions():
    assert carriers is C.metadata_carriers and take_metadata is C.metadata_take
    assert batch_size_of is C.metadata_batch_size


# -- batch_size_of: the one read -----------------------------------------------------------


def test_batch_size_of_reads_a_metadata_tensors_batch_size_alone():
    other = torch.zeros(3).as_subclass(LoggingTensor)
    vars(other)["_batch_size"] = 3  # (another type's attribute of that name is not one)
    plain = _m((3,), {"k": 1})
    cases = [
        _m((3,), {"id": [0, 1, 2]}, size=3),
        Child.wrap_batch(torch.zeros(2), {"i": [1, 2]}, 2),
    ]
    cases += [plain, torch.zeros(3), other, 3, None, [_m((3,), {}, size=3)], _no_metadata()]
    want = [3, 2, None, None, None, None, None, None, 3]
    assert [batch_size_of(t) for t in cases] == want
    assert [results._traced_batch_size_of(t) for t in cases] == want
    assert batch_size_of(plain) is plain.batch_size is None and not plain.is_batch
