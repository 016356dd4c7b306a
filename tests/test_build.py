"""The build's promises: the JIT development path and the CUDA switch."""

import concurrent.futures
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tensortools
from tensortools import _extension

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(torch.version.cuda is not None, reason="torch is a CUDA build")
def test_cpu_torch_builds_without_cuda():
    assert tensortools.with_cuda is False
    assert tensortools._C.with_cuda is False


@pytest.mark.slow
def test_jit_path_compiles_same_sources_and_says_so():
    # Compiles the extension with torch.utils.cpp_extension.load (cached after the first
    # run) and checks the op it registers computes the LLTM.
    code = (
        "import torch, tensortools as tt\n"
        "assert 'jit' in tt._C.__name__, tt._C.__name__\n"
        "import tensortools._C as named\n"
        "assert named is tt._C  # the built module is not loaded as well\n"
        "args = [torch.randn(2, 3, dtype=torch.float64), torch.randn(12, 7, dtype=torch.float64),"
        " torch.randn(12, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64),"
        " torch.randn(2, 4, dtype=torch.float64)]\n"
        "got = tt.ops.lltm(*args); want = tt.reference.lltm(*args)\n"
        "torch.testing.assert_close(got, want)\n"
        "print('jit ok')\n"
    )
    env = {**os.environ, "TENSORTOOLS_JIT": "1", "MAX_JOBS": os.environ.get("MAX_JOBS", "2")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "jit ok" in proc.stdout
    assert "TENSORTOOLS_JIT is set, compiling" in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_every_cuda_source_compiles(tmp_path):
    # CI has nvcc but no GPU and a CPU torch: compiling each .cu file here keeps the CUDA
    # kernels from rotting unnoticed between runs on a GPU machine.
    sources = _extension.cuda_sources()
    assert {s.name for s in sources} >= {
        "lltm_kernel.cu",
        "conv_bn2d_kernel.cu",
        "axpby_kernel.cu",
        "scalar_ops_kernel.cu",
    }

    def compile_one(source):
        cmd = _extension.nvcc_check_command(
            source, tmp_path / f"{source.stem}.o", tmp_path / "shim"
        )
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        return source.name, proc.returncode, proc.stderr

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(compile_one, sources))
    failed = {name: err[-3000:] for name, rc, err in results if rc != 0}
    assert not failed, failed
