import os
from collections import defaultdict

import pytest
import torch
from _support import durations, tiers
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
    parser.addoption(
        "--update-durations",
        action="store_true",
        help="rewrite .ci/durations.json with this run's times (after a whole run; or "
        "TENSORTOOLS_UPDATE_DURATIONS=1)",
    )


def pytest_configure(config):
    tiers.configure(config.getoption("--full"), config.getoption("--seed"))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Two workers share the machine's cores: one intra-op thread each.
        torch.set_num_threads(1)


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


@pytest.fixture
def summary_note(request):
    """note(text): a line for the "notes" section pytest prints at the end of the run
    (for what a passing test wants known, such as code examples it left out). Kept in the
    test's report, so that it reaches the summary from an xdist worker too."""
    return lambda text: request.node.user_properties.append(("note", text))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    notes, times, marked = [], defaultdict(float), {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            notes += [v for k, v in report.user_properties if k == "note" and v not in notes]
            times[report.nodeid] += report.duration
            if report.when == "call" or report.nodeid not in marked:
                marked[report.nodeid] = "slow" in report.keywords
    if notes:
        terminalreporter.write_sep("=", "notes")
        for line in notes:
            terminalreporter.write_line(line)
    unmarked = durations.unmarked_slow(times, marked)
    if unmarked:
        terminalreporter.write_sep("=", f"over {durations.SLOW_S:g} s, not marked slow")
        for nodeid, seconds in unmarked:
            terminalreporter.write_line(f"{seconds:6.1f} s  {nodeid}")
    if config.getoption("--update-durations") or os.environ.get("TENSORTOOLS_UPDATE_DURATIONS"):
        durations.write(times)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
