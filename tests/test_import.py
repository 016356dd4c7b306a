"""What a user gets from ``import tensortools`` with torch alone: every runtime module imports
and works without the development tools, loads nothing of torch's compiler or test
internals, changes nothing of torch for plain tensors, and the tools say what to install."""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tensortools

FIRST_CONTACT = Path(__file__).parent / "_support" / "first_contact.py"


@pytest.mark.slow  # a process of its own (about 3 s, 1 of them importing torch)
def test_runtime_imports_and_runs_without_the_development_tools(tmp_path):
    done = subprocess.run(
        [sys.executable, str(FIRST_CONTACT)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # (not the checkout: tensortools as installed)
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), (
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


def test_version_is_the_package_metadata():
    assert tensortools.__version__ == importlib.metadata.version("tensortools")


def test_tools_are_attributes_imported_on_first_use():
    assert tensortools.testing.check_type is not None
    assert "testing" in dir(tensortools) and "bench" in dir(tensortools)
    assert tensortools.coverage.report(tensortools.ScalarTensor, samples=False).functions
    with pytest.raises(AttributeError, match="no_such_name"):
        tensortools.no_such_name  # noqa: B018


def test_the_public_surface_is_listed_and_the_tools_are_not_in_it():
    # every listed name is there; the tools stay attributes imported on first use
    assert all(hasattr(tensortools, name) for name in tensortools.__all__)
    assert not set(tensortools.__all__) & {"testing", "coverage", "bench"}
    for name in ("collate", "decollate", "CapturedLogs", "CallStats"):
        assert getattr(tensortools, name) is getattr(tensortools.types, name)
    # tensortools.dispatch exports only what it lists (its submodules aside)
    public = {n for n, v in vars(tensortools.dispatch).items() if not n.startswith("_")}
    submodules = {n for n in public if type(getattr(tensortools.dispatch, n)) is type(sys)}
    assert public - submodules == set(tensortools.dispatch.__all__)


def test_coverage_report_is_the_function_whichever_module_is_imported_first():
    # tensortools.coverage.report names the function; its module of the same name, once
    # imported, must not replace it.
    module = importlib.import_module("tensortools.coverage.report")
    assert callable(tensortools.coverage.report) and tensortools.coverage.report is module.report


def test_collate_registers_metadata_tensor_before_torch_tensor_only():
    collate_map = torch.utils.data._utils.collate.default_collate_fn_map
    keys = list(collate_map)
    assert keys.index(tensortools.MetadataTensor) == keys.index(torch.Tensor) - 1
    assert collate_map[torch.Tensor] is torch.utils.data._utils.collate.collate_tensor_fn
