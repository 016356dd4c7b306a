import os

import pytest
import torch
from _support import tiers
from hypothesis import settings

import tensortools

# Property tests draw the same examples on every run (CI stays deterministic);
# HYPOTHESIS_PROFILE=explore draws many new ones.
settings.register_profile("tensortools", derandomize=True, deadline=None, max_examples=60)
settings.register_profile("explore", deadline=None, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "tensortools"))


def cuda_usable() -> bool:
    return torch.cuda.is_available() and tensortools.with_cuda


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        help="the full tier: every sweep whole and the tests marked full (TENSORTOOLS_FULL=1)",
    )
    parser.addoption(
        "--seed", type=int, default=None, help="the seed of the default tier's sampled sweeps"
    )


def pytest_configure(config):
    tiers.configure(config.getoption("--full"), config.getoption("--seed"))


def pytest_report_header(config):
    return tiers.describe()


def pytest_collection_modifyitems(config, items):
    if not tiers.full():
        skip_full = pytest.mark.skip(reason="full tier only: bash scripts/run.sh test --full")
        for item in items:
            if "full" in item.keywords:
                item.add_marker(skip_full)
    if cuda_usable():
        return
    reason = (
        "no CUDA GPU" if not torch.cuda.is_available() else "tensortools was built without CUDA"
    )
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


# Every device test runs on the CPU, and on CUDA where it can.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


_NOTES = pytest.StashKey[list]()


@pytest.fixture
def summary_note(request):
    """note(text): a line for the "notes" section pytest prints at the end of the run
    (for what a passing test wants known, such as code examples it left out)."""
    return request.config.stash.setdefault(_NOTES, []).append


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    notes = config.stash.get(_NOTES, [])
    if notes:
        terminalreporter.write_sep("=", "notes")
        for line in notes:
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
