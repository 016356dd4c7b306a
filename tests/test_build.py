"""The build's promises: the JIT development path and the CUDA switch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tensortools

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
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "jit ok" in proc.stdout
    assert "TENSORTOOLS_JIT is set, compiling" in proc.stderr
