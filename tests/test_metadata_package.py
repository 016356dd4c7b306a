"""The layout of tensortools.types.metadata: every module imports alone, the imports among
its modules point one way (the dict rules, the rules by which results take them and the
index reader at the bottom, the words of the batch rules and their application to results
under the class, the records of the batch rules over the class, which they register when
imported), no private name crosses a module border; and the dispatch base under every type
imports nothing of tensortools.ops, nor the package."""

import pathlib
import subprocess
import sys

import pytest
import torch
from _support.packages import Package, imports

import tensortools
from tensortools.dispatch import batch_rules, wrapper
from tensortools.types import metadata
from tensortools.types.metadata import tensor

PACKAGE = pathlib.Path(metadata.__file__).parent
PREFIX = "tensortools.types.metadata"
PKG = Package(PREFIX, PACKAGE)
MODULES = PKG.modules
# the modules with the batch rules' records (registered when imported): the class's modules
# import none of them; those that apply the records to results sit under the class
BATCH = {"batch", "collation", "batch_moves", "batch_rule"}
SETTLE = {"batch_verdict", "batch_settle"}


def test_the_package_has_the_documented_modules():
    assert set(MODULES) == {"dicts", "results", "batch_index", "tensor"} | BATCH | SETTLE
    for module in MODULES:
        assert f"``{module}``" in metadata.__doc__, f"{module} missing from the package docstring"


def test_the_package_exports_what_the_api_lists():
    assert set(metadata.__all__) == {"MetadataTensor", "MERGE_POLICIES", "collate", "decollate"}
    assert metadata.MetadataTensor is tensortools.MetadataTensor
    assert metadata.collate is tensortools.collate and metadata.decollate is tensortools.decollate
    assert metadata.MetadataTensor.__module__ == f"{PREFIX}.tensor"


@pytest.mark.slow
@pytest.mark.full  # (an interpreter per module; by default test_imports_point_one_way reads them)
def test_each_module_imports_alone_in_a_fresh_interpreter():
    # One interpreter per module (what a module imports first is the point).
    failed = PKG.failing_alone(
        "from tensortools import MetadataTensor\n"
        "b = torch.stack([MetadataTensor(torch.ones(2), {'id': i}) for i in range(3)])\n"
        "assert b.batch_size == 3 and b[1].metadata == {'id': 1}\n"
        "assert torch.flip(b, [0]).metadata == {'id': [2, 1, 0]}\n"
        "assert torch.exp(b).batch_size == 3 and torch.sum(b, 0).batch_size is None\n"
        "print('ok')\n"
    )
    assert not failed, failed


def test_imports_point_one_way():
    graph = PKG.import_graph()
    # the rules of results and the index reader import none of the package, the dict
    # rules only the rules of results (a compiled function's view of a result's dict);
    # the class only those rules; the batch rules sit over the class
    assert graph["results"] == graph["batch_index"] == set() and graph["dicts"] == {"results"}
    # (the records' application to results under the class: no module of BATCH)
    assert graph["batch_verdict"] == {"dicts", "results"}
    assert graph["batch_settle"] == {"batch_index", "batch_verdict", "dicts", "results"}
    assert graph["tensor"] == {"dicts", "results", "batch_settle"}
    assert "tensor" in graph["batch"] and not graph["batch"] & BATCH
    assert not graph["collation"] & BATCH - {"batch"}
    assert graph["batch_moves"] & BATCH == set() and "batch_verdict" in graph["batch_moves"]
    assert {"batch_verdict", "batch_moves"} <= graph["batch_rule"]


def test_no_private_name_crosses_a_module_border():
    assert not PKG.private_crossings()


def test_the_batch_modules_registered_their_records():
    # one record per function; the compiled path's dict is the registry's view of it
    records = batch_rules.RECORDS
    assert tensor.BATCH_CALLS is batch_rules.COMPILED
    compiled = {f for f, r in records.items() if r.compiled in ("keeps", "judged")}
    assert set(tensor.BATCH_CALLS) == compiled
    assert torch.exp in tensor.BATCH_CALLS and torch.cat not in tensor.BATCH_CALLS
    for f in (torch.cat, torch.Tensor.__getitem__, torch.unbind):
        assert records[f].runs is not None
    assert records[torch.cat].does == "join" and records[torch.unbind].does == "apart"
    # torch.stack of samples: a handler of the class's table; collation: default_collate's
    collate_map = torch.utils.data._utils.collate.default_collate_fn_map
    assert torch.stack in tensor.MetadataTensor._handlers
    assert collate_map[tensor.MetadataTensor] is metadata.collate


# -- the dispatch base points down: nothing of tensortools.ops ----------------------------

DISPATCH = pathlib.Path(wrapper.__file__).parent


def test_no_dispatch_module_imports_tensortools_ops():
    found = [
        f"{path.name} imports {name} {names}"
        for path in sorted(DISPATCH.glob("*.py"))
        for name, names in imports(path)
        if name == "tensortools.ops"
        or name.startswith("tensortools.ops.")
        or (name == "tensortools" and "ops" in names)
    ]
    assert not found


@pytest.mark.slow
def test_tensortools_dispatch_imports_without_tensortools_ops():
    # tensortools.dispatch's own import, without the package's __init__ (which imports
    # every layer): the package as a bare namespace of its directory
    code = (
        "import sys, types\n"
        f"root = types.ModuleType('tensortools'); root.__path__ = [{str(DISPATCH.parent)!r}]\n"
        "sys.modules['tensortools'] = root\n"
        "import tensortools.dispatch\n"
        "assert tensortools.dispatch.TensorWrapper is not None\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('tensortools.'))\n"
        "above = ('tensortools.ops', 'tensortools.types')\n"
        "assert not [m for m in loaded if m.startswith(above)], loaded\n"
        "print('ok')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


def test_tensortools_operators_are_registered_as_giving_fresh_results():
    assert {getattr(tensortools.ops, name) for name in tensortools.ops.__all__} <= (
        wrapper.FRESH_RESULTS
    )
