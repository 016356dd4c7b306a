"""tensortools.ops as a whole: every operator of torch.ops.tensortools has CPU, CUDA and
meta kernels and a test file whose samples cover it, and the checks that concern every
operator at once on a GPU (gradcheck, device errors, streams)."""

import ast
import importlib
from pathlib import Path

import pytest
import torch
from _support.op_samples import D, lltm_args, sequence_args

from tensortools import ops, reference


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


@pytest.mark.cuda
def test_gradcheck_every_op_on_cuda():
    d = {"dtype": D, "device": "cuda", "requires_grad": True}
    args = [a.cuda().requires_grad_() for a in lltm_args(3, 4, 5)]
    assert torch.autograd.gradcheck(ops.lltm, args)
    seq = [a.cuda().requires_grad_() for a in sequence_args(4, 3, 2, 3)]
    assert torch.autograd.gradcheck(ops.lltm_sequence, seq)
    x, y = torch.randn(3, 1, **d), torch.randn(1, 4, **d)
    assert torch.autograd.gradcheck(lambda a, b: ops.axpby(a, b, 1.5, -2.0), (x, y))
    m, v = torch.randn(4, 4, **d), torch.tensor(1.5, **d)
    assert torch.autograd.gradcheck(ops.add_diagonal, (m, v))
    assert torch.autograd.gradcheck(ops.scale, (m, v))
    adj, xs, w, b = (
        torch.randn(5, 5, **d),
        torch.randn(5, 3, **d),
        torch.randn(3, 4, **d),
        torch.randn(4, **d),
    )
    assert torch.autograd.gradcheck(ops.graph_conv, (adj, xs, w, b))
    xi, wi = torch.randn(2, 2, 5, 5, **d), torch.randn(3, 2, 3, 3, **d)
    gamma, beta = torch.rand(3, **d), torch.randn(3, **d)
    assert torch.autograd.gradcheck(
        lambda *a: ops.fused_conv_bn2d(a[0], a[1], None, None, a[2], a[3], 1, 1),
        (xi, wi, gamma, beta),
    )


@pytest.mark.cuda
def test_argument_on_the_wrong_device_is_named():
    args = lltm_args(2, 3, 4, device="cuda")
    args[3] = args[3].cpu()
    with pytest.raises(ValueError, match="'old_h' must be on the same device as 'input'"):
        ops.lltm(*args)
    with pytest.raises(ValueError, match="'y' must be on the same device as 'x'"):
        ops.axpby(torch.randn(3, device="cuda"), torch.randn(3), 1.0, 1.0)
    with pytest.raises(ValueError, match="'weight' must be on the same device as 'input'"):
        ops.fused_conv_bn2d(torch.randn(2, 1, 4, 4, device="cuda"), torch.randn(2, 1, 3, 3))


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_argument_on_another_gpu_is_named():
    args = lltm_args(2, 3, 4, device="cuda:0")
    args[1] = args[1].to("cuda:1")
    with pytest.raises(ValueError, match="'weights' must be on the same device as 'input'"):
        ops.lltm(*args)


@pytest.mark.cuda
def test_kernels_run_on_a_side_stream_and_current_device():
    args = lltm_args(8, 4, 6, dtype=torch.float32, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = ops.lltm(*args)
    stream.synchronize()
    for g, w in zip(got, reference.lltm(*args)):
        torch.testing.assert_close(g, w)
