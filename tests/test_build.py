"""The build's promises: the JIT development path and the CUDA switch."""

import concurrent.futures
import os
import re
import shlex
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


def test_source_files_have_distinct_object_names():
    """torch.utils.cpp_extension.load names each object file after its source's base name
    (``.cuda.o`` for CUDA sources): two sources of one name in different folders of csrc/
    would break the JIT path while setup.py builds."""
    sources = [*_extension.CSRC.rglob("*.cpp"), *_extension.CSRC.rglob("*.cu")]
    objects = [p.stem + (".cuda" if p.suffix == ".cu" else "") for p in sources]
    assert len(objects) == len(set(objects)), sorted(o for o in objects if objects.count(o) > 1)


@pytest.mark.slow
@pytest.mark.full
def test_jit_path_compiles_same_sources_and_says_so():
    # Compiles the extension with torch.utils.cpp_extension.load (cached after the first
    # run) and checks the op it registers computes the LLTM. A second build of every
    # source (5-20 minutes on 2 cores from an empty cache): the full tier's.
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


@pytest.mark.parametrize(
    "argv, fixed",
    [
        (["/v/bin/python", "/v/bin/pip", "install", "."], "pip install --no-build-isolation ."),
        (
            [".venv/bin/python", "-m", "pip", "install", "-e", ".[test]"],
            ".venv/bin/python -m pip install --no-build-isolation -e '.[test]'",
        ),
        (["/usr/bin/python3", "/usr/bin/pip3", "wheel", "."], "pip3 wheel --no-build-isolation ."),
        (["uv", "pip", "install", "-e", "."], "uv pip install --no-build-isolation -e ."),
        (["uv", "build"], "uv build --no-build-isolation"),
        (["uv", "sync", "--locked"], "uv sync --no-build-isolation --locked"),
        (
            ["/v/bin/python", "/v/bin/pip3.11", "install", "."],
            "pip3.11 install --no-build-isolation .",
        ),
        (
            ["/usr/bin/python3.11", "-I", "-m", "pip", "install", "."],
            "/usr/bin/python3.11 -I -m pip install --no-build-isolation .",
        ),
        (["python3", "-m", "build", "--wheel"], "python3 -m build --no-isolation --wheel"),
        (["pip", "install", "--no-build-isolation", "."], None),
        (["make", "all"], None),
        ([], None),
    ],
)
def test_build_command_without_isolation(argv, fixed):
    got = _extension.without_isolation(argv)
    assert (None if got is None else shlex.join(got)) == fixed


def test_missing_torch_message_names_the_cause_and_the_command():
    command = ["/v/bin/python", "/v/bin/pip", "install", "."]
    hidden = _extension.torch_missing_message(command, isolated=True, torch_outside="2.13.0")
    assert "build isolation" in hidden and "2.13.0" in hidden
    assert hidden.endswith("pip install --no-build-isolation .")
    absent = _extension.torch_missing_message(command, False, None, "No module named 'torch'")
    assert "No module named 'torch'" in absent and "pip install torch==" in absent
    assert "isolation" not in absent.split("\n")[0].split("then")[0]
    unknown = _extension.torch_missing_message([], isolated=True, torch_outside="2.13.0")
    assert unknown.endswith(
        "with --no-build-isolation added, e.g. pip install --no-build-isolation ."
    )


def test_isolation_is_told_by_the_build_environments_own_marks(monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(sys, "prefix", "/home/me/build-env-project/.venv")  # a user's venv
    assert not _extension._isolated()
    monkeypatch.setattr(sys, "prefix", "/tmp/build-env-ab12cd")  # python -m build's
    assert _extension._isolated()
    monkeypatch.setattr(sys, "prefix", "/root/.cache/uv/builds-v0/.tmpQ2x")  # uv's
    assert _extension._isolated()
    monkeypatch.setattr(sys, "prefix", "/home/me/.venv")
    monkeypatch.setenv("PYTHONPATH", "/tmp/pip-build-env-x1y2/site")  # pip's
    assert _extension._isolated()


def test_setup_explains_build_isolation(tmp_path):
    # The environment pip's build isolation gives the build: a PYTHONPATH entry under a
    # pip-build-env folder whose sitecustomize hides the installed packages (here: torch).
    site = tmp_path / "pip-build-env-test" / "site"
    site.mkdir(parents=True)
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"}
    proc = subprocess.run(
        [sys.executable, "setup.py", "--name"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"the torch you installed ({torch.__version__})" in proc.stderr
    assert "--no-build-isolation" in proc.stderr
    assert "Traceback" not in proc.stderr


def _run_script(*args: str, **env: str) -> subprocess.CompletedProcess:
    so = next(ROOT.glob("tensortools/_C*.so"), None)
    inputs = [*ROOT.joinpath("csrc").rglob("*"), ROOT / "setup.py", _extension.__file__]
    if so is None or any(Path(p).stat().st_mtime > so.stat().st_mtime for p in inputs):
        pytest.skip("the build is older than its sources: the script would rebuild it")
    return subprocess.run(
        ["bash", "scripts/run.sh", *args],
        cwd=ROOT,
        env={**os.environ, "TENSORTOOLS_PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_run_script_says_how_long_the_tests_took_and_keeps_their_status():
    passed = _run_script("test", "-q", "-p", "no:cacheprovider", "tests/test_settings.py")
    assert passed.returncode == 0, passed.stdout[-2000:] + passed.stderr[-2000:]
    assert re.search(r"\[tensortools\] tests took \d+ s; a quick subset: ", passed.stderr)
    # pytest's own status passed through: 4, a usage error, on one worker (with two,
    # pytest-xdist reports the same as 5, no tests ran)
    args = ("-q", "-p", "no:cacheprovider", "tests/no_such_file.py")
    missing = _run_script("test", *args, TENSORTOOLS_TEST_WORKERS="0")
    assert missing.returncode == 4
    assert "tests took" in missing.stderr


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("readelf") is None,
    reason="reads the extension's ELF dynamic section with readelf",
)
def test_the_extension_shares_torchs_cpp_runtime():
    # A compiler that links libstdc++ statically gave the extension a second C++ runtime
    # (seen on a GPU machine): every error message that printed a size crashed the process.
    needed = subprocess.run(
        ["readelf", "-dW", tensortools._C.__file__], capture_output=True, text=True, check=True
    ).stdout
    assert "libstdc++.so" in needed, needed


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("nm") is None,
    reason="reads the extension's symbols with nm",
)
def test_the_lltm_pointwise_maths_is_inlined_into_its_loops():
    # Left out of line (GCC's heuristics did so once the kernel file grew), each element
    # cost a call and the loops stopped vectorising: the pointwise part of a 16x128 cell
    # took 172 us instead of 60. The maths is always inlined now.
    symbols = subprocess.run(
        ["nm", "-C", tensortools._C.__file__], capture_output=True, text=True, check=True
    ).stdout
    out_of_line = [
        line
        for line in symbols.splitlines()
        if "lltm::forward_element<" in line or "lltm::backward_element<" in line
    ]
    assert not out_of_line, out_of_line


def test_a_message_printed_by_libc10_does_not_crash_the_process():
    # The check's message streams the input's SymInt sizes through libc10's operator<<,
    # the call that crashed with two C++ runtimes in the process: run in a subprocess.
    code = (
        "import torch, tensortools\n"
        "try:\n"
        "    torch.ops.tensortools.add_diagonal(torch.zeros(3), torch.tensor(0.0))\n"
        "except ValueError as err:\n"
        "    print(err)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "'input' must be a square matrix" in proc.stdout and "got shape [3]" in proc.stdout


def test_jit_without_sources_says_it_needs_a_checkout(monkeypatch, tmp_path):
    # An installed wheel has no csrc/: TENSORTOOLS_JIT must say so, not fail inside torch.
    monkeypatch.setattr(_extension, "CSRC", tmp_path / "csrc")
    with pytest.raises(ImportError, match="TENSORTOOLS_JIT .* source checkout"):
        _extension.jit_load()


def test_the_build_writes_nothing_into_the_checkout_but_the_extension():
    """`scripts/run.sh` builds in place (an editable install: tensortools/_C*.so beside the
    sources) and the clean room builds its wheel from a copy: neither leaves build/, an
    egg-info, dist/ or object files in the checkout. Where this runs after run.sh's build
    (CI, a fresh clone), that build is what it judges."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    ignored = [line[3:] for line in listed if line.startswith("!! ")]
    built = re.compile(r"(^|/)(build|dist)/|\.egg-info(/|$)|\.o$|\.so$")
    strays = [
        p
        for p in ignored
        if built.search(p)
        and not p.startswith(".venv/")
        and not re.fullmatch(r"tensortools/_C\.[^/]*\.so", p)
    ]
    assert not strays, f"build output in the checkout: {strays[:10]}"


def test_the_clean_room_runs_every_install_block_of_the_readme():
    """The README's install commands are the clean room's: each bash block headed
    "# the clean room runs: NAME" is run by name by scripts/clean_room.sh, and the README
    has the three a user needs (build the wheel, install torch then the wheel, a project
    that depends on it)."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n# the clean room runs: (\w+)\n", readme)
    assert sorted(blocks) == ["install", "project", "wheel"]
    script = (ROOT / "scripts" / "clean_room.sh").read_text()
    ran = re.findall(r"^\s*(?:run_block|for block in) ([\w ]+?)(?: \"\$room|;)", script, re.M)
    names = {name for group in ran for name in group.split()}
    assert set(blocks) <= names, f"blocks the clean room does not run: {set(blocks) - names}"
    # torch comes first, and pinned: an open range would pull a CUDA build of several GB.
    install = readme.split("# the clean room runs: install\n", 1)[1].split("```", 1)[0]
    lines = [line for line in install.splitlines() if line.strip()]
    assert re.fullmatch(r"python -m pip install torch==[\d.]+", lines[0])
