"""tensortools.ops as a whole: every operator of torch.ops.tensortools has CPU, CUDA and
meta kernels and a test file whose samples cover it, and tensortools.ops exports every
operator module's entry points. Each operator's own tests, on every device, are in
tests/test_ops_<op>.py."""

import ast
import importlib
from pathlib import Path

import torch

from tensortools import ops


def _tensortools_ops():
    return sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("tensortools::"))


def test_every_op_has_cpu_cuda_and_meta_kernels():
    # (a build without CUDA gives the operators with a CPU kernel of their own a CUDA one
    # that raises a clear error, found from the dispatcher: csrc/ops/cuda_missing.cpp)
    names = _tensortools_ops()
    assert "tensortools::lltm_forward" in names
    for name in names:
        for key in ("CPU", "CUDA", "Meta"):  # a composite registration counts for each
            assert torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, key), (name, key)


def test_every_operator_has_samples_in_its_test_file():
    """Each tests/test_ops_<op>.py names the operators its sample_inputs covers (the keys
    of its SAMPLE_BUILDERS); together they cover every registered operator once."""
    covered = []
    for path in sorted(Path(__file__).parent.glob("test_ops_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(
                getattr(t, "id", None) == "SAMPLE_BUILDERS" for t in node.targets
            ):
                covered += [k.value for k in node.value.keys]
    registered = [n.split("::")[1] for n in _tensortools_ops()]
    assert sorted(covered) == sorted(registered)


def test_every_operator_module_is_exported():
    # each module of tensortools.ops.MODULES exports its __all__ as tensortools.ops.<name>
    modules = [importlib.import_module(f"tensortools.ops.{m}") for m in ops.MODULES]
    exported = {name for module in modules for name in module.__all__}
    assert exported == set(ops.__all__)
    assert all(getattr(ops, name).__module__ == "tensortools.ops" for name in ops.__all__)
