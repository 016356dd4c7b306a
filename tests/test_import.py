"""What a user gets from ``import tensortools`` with torch alone: every runtime module imports
and works without the development tools, loads nothing of torch's compiler or test
internals, changes nothing of torch for plain tensors, and the tools say what to install."""

import importlib.metadata
import subprocess
import sys
import textwrap

import pytest
import torch

import tensortools

# One process for every check: starting Python and importing torch is most of its time.
_FIRST_CONTACT = textwrap.dedent(
    """
    import contextlib, io, runpy, sys

    # The development tools (requirements-dev.txt) are missing: importing one fails.
    TOOLS = ("expecttest", "pytest", "hypothesis", "sybil", "sphinx", "monai", "matplotlib",
             "tqdm")
    for name in TOOLS:
        sys.modules[name] = None

    import torch
    from torch.utils.data import default_collate
    from torch.utils.data._utils import collate

    COMPILER = ("torch._dynamo", "torch._inductor", "sympy", "torch.testing._internal")

    def compiler_modules():
        return {m for m in sys.modules if any(m == c or m.startswith(c + ".") for c in COMPILER)}

    # (torch itself imports two modules of torch.testing._internal: what counts is what
    # tensortools adds)
    before = compiler_modules()
    torch_collate = collate.default_collate_fn_map[torch.Tensor]

    import tensortools

    added = sorted(compiler_modules() - before)
    assert not added, f"import tensortools loaded {added}"
    assert collate.default_collate_fn_map[torch.Tensor] is torch_collate, "collate changed"
    assert collate.default_collate_fn_map[torch.Tensor] is collate.collate_tensor_fn

    import tensortools.dispatch, tensortools.distributed, tensortools.nn, tensortools.ops
    import tensortools.reference, tensortools.types
    from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, capture_logs, ops

    d = ScalarTensor(3, 2.0)
    assert torch.equal(d @ torch.ones(3, 2), torch.full((3, 2), 2.0))
    m = MetadataTensor(torch.ones(2), {"id": 1})
    assert (m * 2).metadata == {"id": 1}
    batch = default_collate([MetadataTensor(torch.ones(2), {"id": i}) for i in range(3)])
    assert type(batch) is MetadataTensor and batch.metadata == {"id": [0, 1, 2]}
    assert type(default_collate([torch.ones(2), torch.zeros(2)])) is torch.Tensor
    with capture_logs() as logs:
        torch.sin(LoggingTensor(torch.ones(2)))
    assert [r.function for r in logs] == ["torch.sin"]
    torch.manual_seed(0)
    x, w, b, h, c = (torch.randn(s, dtype=torch.float64) for s in ((2, 3), (12, 7), (12,),
                                                                   (2, 4), (2, 4)))
    # (torch.allclose: torch.testing.assert_close itself imports sympy)
    for got, want in zip(ops.lltm(x, w, b, h, c), tensortools.reference.lltm(x, w, b, h, c)):
        assert torch.allclose(got, want), (got, want)
    new_h, _ = tensortools.nn.LLTM(3, 4)(x.float(), (h.float(), c.float()))
    assert new_h.shape == (2, 4)

    class Tagged(tensortools.dispatch.TensorWrapper):
        pass

    assert type(torch.add(Tagged._make(torch.ones(1)), 1)) is Tagged
    added = sorted(compiler_modules() - before)
    assert not added, f"using the runtime loaded {added}"

    # The demo runs (its timing tables, which take seconds, stubbed).
    from tensortools import bench
    bench.lltm_rows = bench.dispatch_rows = bench.sequence_rows = lambda *a, **k: []
    sys.argv = ["tensortools.demo", "--quick"]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            runpy.run_module("tensortools.demo", run_name="__main__")
        except SystemExit as exit:
            assert exit.code == 0, f"the demo exited with {exit.code}"
    assert "== 7." in out.getvalue(), out.getvalue()[-2000:]

    # The testing kit imports; what needs PyTorch's op_db says what to install.
    try:
        tensortools.testing.check_type(MetadataTensor, MetadataTensor, ops=["sin"])
    except ImportError as err:
        assert "pip install 'tensortools[testing]'" in str(err) and "expecttest" in str(err), err
    else:
        raise AssertionError("check_type ran op_db without expecttest")
    print("ok")
    """
)


@pytest.mark.slow  # a process of its own (about 3 s, 1 of them importing torch)
def test_runtime_imports_and_runs_without_the_development_tools(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _FIRST_CONTACT],
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
