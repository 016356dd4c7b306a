"""tensortools/bench/compare.py and load.py: a run's ratios against a saved baseline's
(which moved beyond their noise, which did not, rows on one side only, files of the older
format), and the detector of measurements stalled by the machine's load. Synthetic rows
and fake clocks: nothing here asserts on a measured time."""

import itertools
import json
import os
import subprocess
import sys
import threading

import pytest
from torch.utils import benchmark

from tensortools.bench import compare as cmp
from tensortools.bench import dispatch_rows, load, timing
from tensortools.bench.lltm import EAGER, OP, lltm_verdict
from tensortools.bench.options import (
    BASELINE_LLTM_SIZES,
    BASELINE_RECURRENT_SIZES,
    BASELINE_RECURRENT_STEPS,
    BASELINE_SCALAR_SIZES,
    build_parser,
    resolve,
)

# Each section as its table reads it: the fields of one case, the baseline variant's
# field and name, and another variant. (Written out here, not taken from compare.RULES.)
SECTIONS = {
    "lltm": ({"size": [16, 32, 128], "dtype": "float32", "device": "cpu", "phase": "forward"},
             "variant", "reference (eager)", "tensortools op"),
    "sequence": ({"size": [16, 32, 128], "steps": 32, "dtype": "float32", "device": "cpu"},
                 "variant", "reference loop (eager)", "ops.lltm_sequence"),
    "conv_bn": ({"batch": 256}, "variant", "Conv2d + BatchNorm2d", "FusedConvBN2d"),
    "scalar": ({"size": [256], "dtype": "float32", "device": "cpu", "phase": "d @ x"},
               "variant", "dense matrix", "ScalarTensor (structured)"),
    "dispatch": ({"size": [1], "phase": "torch.add"}, "variant", "plain Tensor", "MetadataTensor"),
    "compiled": ({"size": [1000], "phase": "compiled chain"}, "variant", "plain Tensor",
                 "MetadataTensor"),
    "batch": ({"size": ["16x3x32x32"], "phase": "F.conv2d"}, "variant", "plain Tensor",
              "MetadataTensor batch"),
    "peers": ({"size": ["1 element"], "phase": "torch.sin"}, "variant", "plain Tensor",
              "MetadataTensor"),
    "recurrent": ({"kind": "sequence", "size": [16, 32, 128], "steps": 32, "dtype": "float32",
                   "device": "cpu", "phase": "training"}, "layer", "LSTM", "LLTM"),
    "per_sample": ({"size": [16, 32, 128], "steps": 32, "dtype": "float32", "device": "cpu",
                    "layer": "LLTM"}, "method", "loop", "vmap(grad)"),
}  # fmt: skip


def _row(section, variant, median, spread=0.01, case=None, **extra):
    fields, key, _, _ = SECTIONS[section]
    row = {**fields, **(case or {}), key: variant, "median_us": median}
    row.update(iqr_us=spread * median, runs=100, noisy=False, **extra)
    return row


def _pair(section, ratio, spread=0.01, base_median=200.0, **extra):
    """A section's baseline row and its other variant at `ratio` to it."""
    _, _, base, other = SECTIONS[section]
    return [
        _row(section, base, base_median, spread, **extra),
        _row(section, other, ratio * base_median, spread, **extra),
    ]


def _run(rows_by_section, **top):
    return {"machine": "test machine", **top, **rows_by_section}


@pytest.mark.parametrize("section", SECTIONS)
def test_each_sections_ratios_are_its_rows_over_its_tables_baseline(section):
    _, _, base, other = SECTIONS[section]
    has_size = "size" in SECTIONS[section][0]
    small = {"size": [2, 3, 4]} if has_size else {"batch": 2}
    lonely = {"size": [7]} if has_size else {"batch": 7}
    rows = _pair(section, 0.5) + [
        _row(section, base, 400.0, case=small),
        _row(section, other, 1000.0, case=small),
        _row(section, "a third variant", 90.0, case=small),
        _row(section, "without a baseline", 10.0, case=lonely),
    ]
    got = cmp.ratio_rows(_run({section: rows, "unknown": rows}))
    want = sorted([0.5, 1000.0 / 400.0, 90.0 / 400.0])  # the baseline rows give none
    assert sorted(r.ratio for r in got.values()) == pytest.approx(want)
    assert all(n.startswith(f"{section} ") and n.endswith(f" / {base}") for n in got)


def test_a_row_without_a_time_gives_no_ratio():
    rows = _pair("per_sample", 2.0)
    rows[1]["median_us"] = None  # vmap raised: its note stands in for a time
    assert cmp.ratio_rows(_run({"per_sample": rows})) == {}


# (move of the ratio, each row's relative spread) -> the verdict. Steady rows: any move
# beyond 5% counts. Spread rows (15% each, two rows a run, two runs): moves of up to 25%
# are within their noise, not only within a fixed threshold.
MOVES = {
    **{(f, 0.005): "faster" for f in (0.5, 0.8, 0.9)},
    **{(f, 0.005): "slower" for f in (1.1, 1.25, 2.0)},
    **{(f, 0.005): "within noise" for f in (0.98, 1.0, 1.02)},
    **{(f, 0.15): "within noise" for f in (0.8, 0.9, 1.0, 1.1, 1.25)},
    (0.4, 0.15): "faster",
    (2.5, 0.15): "slower",
}


@pytest.mark.parametrize("section", SECTIONS)
def test_a_ratio_moved_only_beyond_both_runs_noise(section):
    for (move, spread), want in MOVES.items():
        for as_rounds in (False, True):
            extra = {}
            if as_rounds:  # the spread seen as the rounds' disagreement, the runs steady
                extra, spread_iqr = {"round_spread": spread}, 0.001
            else:
                spread_iqr = spread
            before = _run({section: _pair(section, 1.5, spread_iqr, **extra)})
            today = _run({section: _pair(section, 1.5 * move, spread_iqr, 100.0, **extra)})
            (change,) = cmp.compare(before, today)
            assert change.change == pytest.approx(move)
            assert change.verdict == want, (section, move, spread, as_rounds)


def test_noisy_or_stalled_rows_make_the_verdict_uncertain():
    for flags, side in itertools.product(({"noisy": True}, {"stalled": True}), ("before", "now")):
        runs = {
            "before": _run({"lltm": _pair("lltm", 1.0)}),
            "now": _run({"lltm": _pair("lltm", 3.0)}),
        }
        runs[side]["lltm"][0].update(flags)  # the baseline row of the ratio
        (change,) = cmp.compare(runs["before"], runs["now"])
        assert change.uncertain and change.verdict == "slower?"
    (steady,) = cmp.compare(_run({"lltm": _pair("lltm", 1.0)}), _run({"lltm": _pair("lltm", 1.0)}))
    assert not steady.uncertain and steady.verdict == "within noise"


def test_rows_on_one_side_only_are_listed_not_errors():
    other = {"size": [64, 1024, 128]}
    before = _run(
        {
            "lltm": _pair("lltm", 1.0)
            + [_row("lltm", EAGER, 9.0, case=other)]
            + [_row("lltm", OP, 8.0, case=other)],
            "scalar": _pair("scalar", 0.1),
        }
    )
    today = _run({"lltm": _pair("lltm", 1.0) + [_row("lltm", "new variant", 5.0)]})
    today["batch"] = _pair("batch", 2.0)
    changes = {c.name: c for c in cmp.compare(before, today)}
    verdicts = sorted(c.verdict for c in changes.values())
    assert verdicts == sorted(
        ["within noise", "only in the baseline", "only in the baseline", "only today", "only today"]
    )
    table = cmp.format_comparison(changes.values(), before, today)
    # rows of a section both runs measured: one line each; a section one run lacks: one line
    for c in changes.values():
        section = c.name.split(" ", 1)[0]
        if section == "lltm":
            assert any(line.startswith(c.name) for line in table.splitlines()), c.name
        else:
            assert not any(line.startswith(c.name) for line in table.splitlines())
    assert "scalar: not measured today (1 ratio)" in table
    assert "batch: not in the baseline (1 ratio)" in table


def test_a_file_of_the_older_format_compares():
    # the committed baseline, whatever its age, and rows without the fields added since
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "bench", "cpu.json")) as f:
        committed = json.load(f)
    ratios = cmp.ratio_rows(committed)
    assert ratios and all(
        c.verdict.startswith("within noise") for c in cmp.compare(committed, committed)
    )
    old = {
        k: [
            {f: v for f, v in r.items() if f not in ("round_spread", "stalled", "busy")}
            for r in rows
        ]
        for k, rows in (("lltm", _pair("lltm", 0.6)), ("sequence", _pair("sequence", 0.9)))
    }
    new = {"lltm": _pair("lltm", 0.6, stalled=False, round_spread=0.0),
           "sequence": _pair("sequence", 1.8, stalled=False, round_spread=0.0)}  # fmt: skip
    verdicts = {c.name.split(" ", 1)[0]: c.verdict for c in cmp.compare(_run(old), _run(new))}
    assert verdicts == {"lltm": "within noise", "sequence": "slower"}


@pytest.mark.parametrize("content", [None, "{not json", "[1, 2]", '{"machine": "x"}'])
def test_an_unreadable_baseline_is_a_clear_error(tmp_path, content):
    path = tmp_path / "baseline.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match="--compare: .*baseline.json"):
        cmp.load_results(str(path))


def test_the_compare_and_baseline_options_time_the_rows_issue_60_follows():
    for option in ("--compare", "--save-baseline"):
        args = resolve(build_parser().parse_args([option, "x.json"]))
        assert args.size == list(BASELINE_LLTM_SIZES) and args.recurrent
        assert args.recurrent_sizes == BASELINE_RECURRENT_SIZES and not args.recurrent_cells
        assert args.recurrent_steps == BASELINE_RECURRENT_STEPS
        assert not (args.no_lltm or args.no_dispatch or args.no_batch)
        assert args.no_compile and args.no_sequence and args.no_conv_bn
        assert not args.no_scalar and args.scalar_operators_only
        assert args.scalar_size == list(BASELINE_SCALAR_SIZES)
        assert (args.min_run_time, args.rounds) == (0.5, 3)
    quick = resolve(build_parser().parse_args(["--compare", "x", "--quick", "--rounds", "5"]))
    assert (quick.min_run_time, quick.rounds) == (0.1, 5)
    assert not resolve(build_parser().parse_args(["--compare", "x", "--no-recurrent"])).recurrent
    sized = resolve(build_parser().parse_args(["--compare", "x", "--size", "2/3/4"]))
    assert sized.size == sized.recurrent_sizes == [(2, 3, 4)]
    full = resolve(build_parser().parse_args([]))  # the full run: torch.compile, every table
    assert full.size is None and not full.no_compile and full.recurrent_cells


# --- the load detector -----------------------------------------------------------------


def _reading(wall, waits=None, thread_cpu=0.0):
    return load.Reading(wall, thread_cpu, waits)


@pytest.mark.parametrize("wall", [1e-4, 0.05, 3.0])
def test_the_stalled_share_is_the_threads_wait_for_a_cpu_over_the_wall_time(wall):
    before = {1: 5.0, 2: 1.0, 3: 0.2}
    for share in (0.0, 0.05, 0.5, 1.0, 1.8):
        one = {**before, 1: 5.0 + share * wall}
        split = {**before, 1: 5.0 + share * wall / 2, 2: 1.0 + share * wall / 2}
        began = {**before, 9: share * wall}  # a thread that started meanwhile counts from 0
        ended = {k: v + share * wall / 2 for k, v in before.items() if k in (1, 2)}  # 3 ended
        for after in (one, split, began, ended):
            got = load.stall_share(_reading(10.0, before), _reading(10.0 + wall, after))
            assert got == pytest.approx(share), (share, after)
    # without run-queue waits: the calling thread's time off the CPU
    for on_cpu in (0.0, 0.3, 1.0, 1.2):
        got = load.stall_share(
            _reading(1.0, None, 2.0), _reading(1.0 + wall, None, 2.0 + on_cpu * wall)
        )
        assert got == pytest.approx(max(0.0, 1.0 - on_cpu))  # fmt: skip
    assert load.stall_share(_reading(1.0, before), _reading(1.0, before)) is None


def test_run_queue_waits_are_read_per_thread(tmp_path):
    for tid, text in (("101", "123 4560000000 7\n"), ("102", "1 500000000 2")):
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "schedstat").write_text(text)
    (tmp_path / "103").mkdir()  # a thread that ended between the listing and the read
    assert load.run_queue_waits(str(tmp_path)) == {101: 4.56, 102: 0.5}
    assert load.run_queue_waits(str(tmp_path / "absent")) is None
    (tmp_path / "104").mkdir()
    (tmp_path / "104" / "schedstat").write_text("garbage")
    assert load.run_queue_waits(str(tmp_path)) is None
    if os.path.exists("/proc/self/task"):
        assert threading.get_native_id() in load.run_queue_waits()
    clocks = load.read(lambda: 7.0, lambda: 3.0, lambda: {5: 1.0})
    assert clocks == load.Reading(7.0, 3.0, {5: 1.0})


class _FakeLoad:
    """load.read for tests: each reading a second later, the threads having waited
    `share` of it for a CPU."""

    def __init__(self, share):
        self.share, self.wall = share, 0.0

    def __call__(self):
        self.wall += 1.0
        return load.Reading(self.wall, self.wall, {1: self.share * self.wall})


def test_a_stalled_measurement_is_marked_and_measured_longer(monkeypatch):
    for share in (0.0, 0.05, 0.099, 0.101, 0.5, 1.9):
        monkeypatch.setattr(timing.load, "read", _FakeLoad(share))
        m = timing.time_call(lambda: None, min_run_time=0.001)
        assert m.metadata["stalled"] == pytest.approx(share)
        each = timing.time_each(lambda: None, lambda state: None, 0.001, "cpu", "step")
        assert each.metadata["stalled"] == pytest.approx(share)
        pooled = timing.interleaved(
            {"a": lambda: timing.time_call(lambda: None, 0.001)}, 2, extra_budget=0
        )["a"]
        assert pooled.stalled == (share > timing.STALL_SHARE)
        assert not pooled.stalled or pooled.noisy
        row = timing.Row.of((1,), "float32", "cpu", "v", "p", pooled)
        assert row.stalled == pooled.stalled and row.noisy == pooled.noisy


def _measurement(times, stalled, calls_per_block=1):
    return benchmark.Measurement(
        calls_per_block, times, benchmark.TaskSpec(stmt="f()", setup=""), {"stalled": stalled}
    )


def test_rounds_stalled_shares_pool_by_their_timed_time():
    cases = [  # (each round's block times, stalled share [, calls a block]) -> pooled share
        ([([1.0] * 3, 0.5), ([1.0], 0.0)], 1.5 / 4),
        ([([1.0], 0.5), ([1.0] * 3, 0.0)], 0.5 / 4),
        ([([1.0] * 2, 0.6), ([1.0] * 2, 0.0), ([1.0] * 2, 0.0)], 0.2),
        ([([1.0] * 2, 0.15), ([1.0] * 2, 0.0), ([1.0] * 2, 0.0)], 0.05),
        ([([1.0] * 2, None), ([1.0] * 2, 0.3)], 0.3),  # unknown rounds are left out
        # blocks of many short calls weigh by their time, not their calls
        ([([0.1], 0.0, 5000), ([0.05] * 2, 1.5, 1)], 0.75),
        ([([0.1] * 3, 0.9, 1000), ([0.1], 0.1, 1)], 0.7),
    ]
    for rounds, want in cases:
        source = iter([_measurement(*round_) for round_ in rounds])
        p = timing.interleaved({"a": lambda: next(source)}, len(rounds), extra_budget=0)["a"]
        assert p.waited == pytest.approx(want) and p.stalled == (want > timing.STALL_SHARE)


def test_the_per_call_rows_carry_the_mark_when_the_load_stalls_them(monkeypatch):
    # what demo --quick prints: the ScalarTensor rows among them
    for share, stalled in ((0.9, True), (0.0, False)):
        monkeypatch.setattr(timing.load, "read", _FakeLoad(share))
        rows = dispatch_rows(sizes=(1,), min_run_time=0.001, rounds=1)
        assert {r.variant for r in rows} >= {"ScalarTensor", "ScalarTensor N=2, as d + d"}
        assert all(r.stalled == stalled for r in rows)
        assert all(r.noisy for r in rows if stalled)


def test_the_lltm_verdict_does_not_judge_a_stalled_ratio():
    phase = "forward+backward"
    rows = [
        timing.Row((9, 9, 9), "float32", "cpu", EAGER, phase, 100.0, 1.0, 10, 1, True, False),
        timing.Row((9, 9, 9), "float32", "cpu", OP, phase, 30.0, 1.0, 10, 1, False, False),
    ]
    rows[0].stalled = True
    (line,) = lltm_verdict(rows)
    assert line.endswith("cannot tell whether the fused op wins")


@pytest.mark.slow  # starts a process that runs a few benchmark rows
def test_the_compare_command_prints_every_selected_row(tmp_path):
    baseline = _run(
        {"batch": _pair("batch", 1.5) + [_row("batch", "gone", 99.0)]},
        recorded={"date": "2026-01-01"},
    )  # a plain Tensor row of the batch table's F.conv2d, and two variants
    (tmp_path / "base.json").write_text(json.dumps(baseline))
    out = tmp_path / "today.json"
    command = [sys.executable, "-m", "tensortools.bench", "--compare", str(tmp_path / "base.json")]
    command += ["--no-lltm", "--no-dispatch", "--no-recurrent", "--no-scalar"]
    command += ["--min-run-time", "0.01"]
    command += ["--rounds", "1", "--save-baseline", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    today = json.loads(out.read_text())
    assert set(today) >= {"machine", "recorded", "batch"} and "lltm" not in today
    names = list(cmp.ratio_rows(today)) + list(cmp.ratio_rows(baseline))
    assert len(names) >= 3
    printed = done.stdout.split("Today's ratios beside those of", 1)[1].splitlines()
    for name in names:
        assert any(line.startswith(name) for line in printed), name
