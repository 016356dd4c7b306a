"""Formatting and linting as code: ruff (lint and format) over the Python, clang-format
over csrc/, with the configurations in pyproject.toml and .clang-format; and the size of
the package's modules."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    # next to this interpreter first (the venv scripts/run.sh installs them into)
    local = Path(sys.executable).with_name(name)
    path = str(local) if local.exists() else shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (bash scripts/run.sh test installs it)")
    return path


def _run(*command: str) -> None:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}\n{done.stderr}"


def test_ruff_lint():
    _run(_tool("ruff"), "check", "--output-format", "concise", ".")


def test_ruff_format():
    _run(_tool("ruff"), "format", "--check", ".")


def test_clang_format():
    sources = sorted(
        str(p.relative_to(ROOT))
        for pattern in ("*.h", "*.cpp", "*.cu", "*.cuh")
        for p in (ROOT / "csrc").rglob(pattern)
    )
    assert sources
    _run(_tool("clang-format"), "--dry-run", "-Werror", *sources)


#: The most lines a module of tensortools holds, unless its top note says why it must be
#: one module ("over 400 lines" in its docstring, with the reason).
MAX_LINES = 400


def test_modules_stay_under_400_lines_or_say_why():
    over = {}
    for path in sorted((ROOT / "tensortools").rglob("*.py")):
        text = path.read_text()
        note = ast.get_docstring(ast.parse(text)) or ""
        if text.count("\n") > MAX_LINES and "over 400 lines" not in note:
            over[str(path.relative_to(ROOT))] = text.count("\n")
    assert not over, f"modules over {MAX_LINES} lines: {over}"


def test_cpp_and_cuda_sources_stay_under_400_lines():
    # (the same rule for csrc/: kernels apart from their launch code, dispatch apart from
    # the arithmetic it exports)
    over = {
        str(p.relative_to(ROOT)): p.read_text().count("\n")
        for pattern in ("*.h", "*.cpp", "*.cu", "*.cuh")
        for p in sorted((ROOT / "csrc").rglob(pattern))
        if p.read_text().count("\n") > MAX_LINES
    }
    assert not over, f"C++/CUDA sources over {MAX_LINES} lines: {over}"
