"""The layout of tensortools.types.scalar: every module imports alone, the imports among
its modules point one way (no cycle; the class over its fallback only, no handler family
under the shared helpers), the class is complete when its module has run (no module adds
to it), no private name crosses a module border, and the rules the Python handlers share
with the compiled path (csrc/python/scalar_dispatch.cpp) agree with their definitions in
plain PyTorch."""

import ast
import json
import math
import pathlib
import subprocess
import sys

import pytest
import torch
from _support.packages import Package

import tensortools
from tensortools._native import C
from tensortools.types import scalar
from tensortools.types.scalar import FastCode, ScalarTensor, fast_path

PACKAGE = pathlib.Path(scalar.__file__).parent
PREFIX = "tensortools.types.scalar"
PKG = Package(PREFIX, PACKAGE)
MODULES = PKG.modules
# the handler families: each registers on the class and none may sit under another
FAMILIES = {
    "arithmetic",
    "elementwise",
    "reductions",
    "closed_forms",
    "linalg",
    "queries",
    "operators",
}


def test_the_package_has_the_documented_modules():
    assert set(MODULES) == FAMILIES | {"small", "in_place", "tensor", "common", "fast_path"}
    for module in MODULES:
        assert f"``{module}``" in scalar.__doc__, f"{module} missing from the package docstring"


@pytest.mark.slow
@pytest.mark.full  # (an interpreter per module; by default test_imports_point_one_way reads them)
def test_each_module_imports_alone_in_a_fresh_interpreter():
    # One interpreter per module (what a module imports first is the point).
    failed = PKG.failing_alone(
        "from tensortools import ScalarTensor\n"
        "d = ScalarTensor(3, 2.0)\n"
        "assert torch.sum(d).item() == 6.0\n"
        "assert torch.equal(torch.sin(d).tensor(), torch.sin(d.tensor()))\n"
        "print('ok')\n"
    )
    assert not failed, failed


def test_imports_point_one_way():
    graph = PKG.import_graph()
    # under the class only what it is made of (its fallback, which imports no class); the
    # shared helpers over the class; no family imports another family or the fallback
    assert graph["small"] == set()
    assert graph["in_place"] == {"small"}
    assert graph["tensor"] == {"in_place", "small"}
    assert graph["common"] == {"small", "tensor"}
    for family in FAMILIES:
        below = graph[family] & (FAMILIES | {"in_place"})
        assert not below, f"{family} imports {below}"


# Run in a fresh interpreter: ScalarTensor's __dict__ as it is when tensor.py has run (its
# loader wrapped; the package's other modules run around it), against the whole
# package's, as JSON: the names that changed or appeared, and whether the class's
# fallback and Python __torch_function__ are in_place's.
_AT_MODULE_END = """
import importlib.abc, importlib.machinery, json, sys

at_end = {}

class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "tensortools.types.scalar.tensor":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            at_end.update(vars(module.ScalarTensor))

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, Watch())
import tensortools
from tensortools import ScalarTensor
from tensortools.types.scalar import in_place

after = dict(vars(ScalarTensor))
own = {
    "fallback": in_place.fallback,
    "_python_torch_function": in_place.python_torch_function,
}
print(json.dumps({
    "changed": sorted(k for k in after.keys() | at_end.keys() if at_end.get(k) is not after.get(k)),
    "own": {k: getattr(at_end.get(k), "__func__", None) is f for k, f in own.items()},
}))
"""

# what the table (TorchFunctionTable) rebuilds as handlers register: its state, not the class
_TABLE_STATE = {"_calls", "_handlers", "_fast"}


def test_the_class_is_complete_when_its_module_has_run():
    run = subprocess.run(
        [sys.executable, "-c", _AT_MODULE_END], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["own"] == {"fallback": True, "_python_torch_function": True}
    # every attribute of the class, its methods and settings: no module of the package
    # adds or replaces one after tensor.py has run
    assert set(seen["changed"]) <= _TABLE_STATE, seen["changed"]


def test_no_module_assigns_onto_the_class():
    # (the source of every module: `ScalarTensor.x = ...` or setattr(ScalarTensor, ...))
    found = []
    for module in MODULES:
        tree = ast.parse((PACKAGE / f"{module}.py").read_text())
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr":
                targets = [ast.Attribute(value=node.args[0], attr="?")]
            found += [
                f"{module}:{node.lineno}"
                for t in targets
                if isinstance(t, ast.Attribute) and getattr(t.value, "id", None) == "ScalarTensor"
            ]
    assert not found, found


def test_no_private_name_crosses_a_module_border():
    assert not PKG.private_crossings()


def test_fast_path_lists_every_code_and_only_registered_handlers():
    assert set(fast_path.ANSWERED_IN_C) == set(FastCode)
    assert {code.name: int(code) for code in FastCode} == C.scalar_fast_codes
    codes = ScalarTensor._fast.codes
    for code, funcs in fast_path.ANSWERED_IN_C.items():
        for func in funcs:
            assert codes[func] == code, func
            assert ScalarTensor._handlers[func] is ScalarTensor._fast_handlers[func][0]
    # every marked function is one of those listed or an alias sharing its handler
    listed = {ScalarTensor._handlers[f] for fs in fast_path.ANSWERED_IN_C.values() for f in fs}
    assert all(ScalarTensor._handlers[f] in listed for f in codes)


# -- the rules shared with C, against their definitions -----------------------------------

FLOATING = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
    torch.float8_e5m2,
    torch.float8_e4m3fn,
    torch.float8_e5m2fnuz,
    torch.float8_e4m3fnuz,
]


def _magnitudes(info):
    edges = [info.tiny, 4 * info.tiny, info.max / 4, info.max]
    around = [x * f for x in edges for f in (1 - 2**-40, 1, 1 + 2**-40)]
    return [0.0, -0.0, 1.0, -3.5, math.inf, -math.inf, math.nan, 10**400, *around]


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_in_range_is_finfos_rule(dtype):
    info = torch.finfo(dtype.to_real() if dtype.is_complex else dtype)
    for x in _magnitudes(info):
        try:
            size = abs(float(x))
        except OverflowError:
            size = math.inf
        want = size == 0 or 4 * info.tiny <= size <= info.max / 4
        assert C.scalar_in_range(x, dtype) is want, (x, dtype)
    with pytest.raises(TypeError, match="dtype"):
        C.scalar_in_range(1.0, torch.int32)
    with pytest.raises(TypeError, match="dtype"):
        C.scalar_in_range(1.0, "float32")


@pytest.mark.parametrize(
    "dtype", [*FLOATING, torch.int32, torch.uint8, torch.bool, torch.int64], ids=str
)
def test_number_passes_is_result_types_range(dtype):
    pair = torch.tensor([1, 0], dtype=dtype)
    numbers = [1, -7, 2**40, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 1e-300, 5e-324]
    numbers += [3.5, 1e38, 1e39, 65504.0, 70000.0, 1e-8, 6e-5]
    for x in numbers:
        try:
            result = torch.result_type(pair, x)
        except (OverflowError, RuntimeError):
            want = False
        else:
            real = result.to_real() if result.is_complex else result
            if real.is_floating_point:
                info = torch.finfo(real)
                want = info.tiny <= abs(x) <= info.max
            else:
                want = True
        assert C.scalar_number_passes(x, pair) is want, (x, dtype)


def _dense_sum_reference(d: ScalarTensor):
    """The whole sum as the dense matrix's sum gives it, for small N."""
    return torch.sum(d.tensor())


@pytest.mark.parametrize(
    "dtype",
    [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64]
    + [torch.int8, torch.uint8, torch.int64, torch.bool, torch.uint16, torch.uint32],
    ids=str,
)
def test_whole_sum_and_frobenius_from_python_and_c_equal_the_dense_call(dtype):
    values = (
        [0, 1, 3]
        if not (dtype.is_floating_point or dtype.is_complex)
        else [
            0.0,
            -0.0,
            2.5,
            -1e4,
            math.inf,
            math.nan,
        ]
    )
    if dtype == torch.bool:
        values = [False, True]
    for value in values:
        for n in (0, 1, 2, 5):
            d = ScalarTensor(n, value, dtype=dtype)
            got = C.scalar_whole_sum(n, d._pair)
            if got is not None:
                want = _dense_sum_reference(d)
                assert got.dtype == want.dtype
                torch.testing.assert_close(got, want, equal_nan=True, atol=0, rtol=0)
            if dtype.is_floating_point or dtype.is_complex:
                norm = C.scalar_frobenius(n, d._pair)
                if norm is not None:
                    want = torch.linalg.norm(
                        d.tensor().to(torch.complex128 if dtype.is_complex else torch.float64)
                    )
                    assert norm.dtype == (dtype.to_real() if dtype.is_complex else dtype)
                    torch.testing.assert_close(
                        norm.double(), want.double(), equal_nan=True, rtol=1e-2, atol=0
                    )


def test_the_rules_take_n_beyond_int64_and_refuse_what_they_cannot_read():
    pair = torch.tensor([3, 0], dtype=torch.int64)
    # integer sums wrap around as int64 does
    assert C.scalar_whole_sum(2**64 + 5, pair).item() == 15
    assert C.scalar_whole_sum(2**70, torch.tensor([2.0, 0.0])).item() == 2.0**71
    assert C.scalar_frobenius(2**70, torch.tensor([2.0, 0.0])).item() == 2.0**35 * 2
    for taken_apart in (torch.empty(0), torch.ones(2, 2), torch.ones(3, device="meta")):
        assert C.scalar_whole_sum(3, taken_apart) is None
        assert C.scalar_frobenius(3, taken_apart) is None
        assert C.scalar_lapack_safe(taken_apart, True) is False
    with pytest.raises(ValueError, match="N"):
        C.scalar_whole_sum(-1, pair)


def test_handlers_on_the_meta_device_answer_as_the_dense_call():
    d = ScalarTensor(3, 2.0, device="meta")
    for f in (torch.sum, torch.linalg.norm, torch.det, torch.linalg.svdvals):
        got, want = f(d), f(torch.empty(3, 3, device="meta"))
        assert got.is_meta and got.shape == want.shape and got.dtype == want.dtype, f


def test_every_module_is_in_the_api_or_says_why_not():
    assert tensortools.types.scalar.ScalarTensor is tensortools.ScalarTensor
