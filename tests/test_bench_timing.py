"""How the benchmark tables judge their own numbers: noisy measurements are measured
longer and then flagged, ratios follow one labelled convention, and the LLTM verdict says
where the fused op does not win and why. Synthetic timings: nothing here is timed."""

import importlib
import itertools
import os

import pytest
from torch.utils import benchmark

from tensortools import bench
from tensortools.bench import timing
from tensortools.bench.lltm import EAGER, OP, PRODUCTS, lltm_verdict


def _measurement(times: list[float]) -> benchmark.Measurement:
    return benchmark.Measurement(1, times, benchmark.TaskSpec(stmt="f()", setup=""))


def _measure_from(rounds_of_times):
    """A measure function returning the given rounds' run times, the last one forever."""
    source = itertools.chain(rounds_of_times, itertools.repeat(rounds_of_times[-1]))
    return lambda: _measurement(next(source))


def test_a_steady_measurement_takes_the_planned_rounds_and_is_not_flagged():
    steady = [1.0, 1.01, 0.99, 1.0]
    pooled = timing.interleaved({"a": _measure_from([steady])}, rounds=3, extra_budget=1.0)
    assert pooled["a"].rounds == 3 and not pooled["a"].noisy
    assert pooled["a"].median_us == pytest.approx(1e6)


def test_a_noisy_measurement_is_measured_longer_until_it_settles():
    # a slow spell in the first round only: more rounds dilute it below the threshold
    spell, calm = [1.0, 3.0, 5.0, 2.0], [1.0, 1.02, 0.98, 1.0]
    pooled = timing.interleaved(
        {"spell": _measure_from([spell, calm]), "calm": _measure_from([calm])},
        rounds=2,
        extra_budget=5.0,
    )
    # whole rounds: the ratio of the two compares runs taken side by side
    assert pooled["calm"].rounds == pooled["spell"].rounds
    assert 2 < pooled["spell"].rounds < 50 and not pooled["spell"].noisy


def test_a_measurement_that_stays_noisy_is_flagged_within_the_budget():
    wild = [1.0, 4.0, 2.0, 8.0]
    pooled = timing.interleaved({"wild": _measure_from([wild])}, rounds=2, extra_budget=0.02)
    assert pooled["wild"].noisy and pooled["wild"].rounds > 2
    none = timing.interleaved({"wild": _measure_from([wild])}, rounds=2, extra_budget=0)
    assert none["wild"].rounds == 2 and none["wild"].noisy


class FakeClock:
    """A clock for timing.interleaved that moves only when a measurement says so."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


@pytest.mark.parametrize(
    "step, rounds, budget, extra",
    [
        (0.0625, 2, 0.15, 2),  # a third extra round would end at 0.1875 > 0.15
        (0.0625, 2, 0.125, 2),  # (exactly at the budget: still taken)
        (0.0625, 2, 0.1, 1),
        (0.25, 3, 0.2, 0),  # one round costs more than the budget
        (0.125, 1, 1.0, 8),
    ],
)
def test_extra_rounds_stop_before_they_would_overrun_the_budget(
    monkeypatch, step, rounds, budget, extra
):
    clock = FakeClock()
    monkeypatch.setattr(timing, "time", clock)

    def slow_noisy():  # each measurement takes `step` seconds of the fake clock
        slow_noisy.calls += 1
        clock.now += step
        return _measurement([1.0, 4.0, 2.0, 8.0])

    slow_noisy.calls = 0
    pooled = timing.interleaved({"a": slow_noisy}, rounds=rounds, extra_budget=budget)
    assert pooled["a"].noisy and slow_noisy.calls == rounds + extra
    assert pooled["a"].rounds == rounds + extra
    # the extra rounds fit in the budget, and one more would not have
    assert extra * step <= budget < (extra + 1) * step


def test_a_measurement_taken_while_others_used_the_cpus_is_busy():
    # steady runs, and still off: the machine was shared (see BUSY_SHARE)
    def measure(share):
        m = _measurement([1.0, 1.0, 1.01, 0.99])
        m.metadata = {"others_cpu": share}
        return lambda: m

    pooled = timing.interleaved(
        {"shared": measure(0.6), "alone": measure(0.02), "unknown": measure(None)},
        rounds=3,
        extra_budget=0,
    )
    assert pooled["shared"].busy and pooled["shared"].noisy
    assert not pooled["alone"].noisy and not pooled["unknown"].noisy


@pytest.mark.parametrize(
    "before, after, share",
    [
        ((100, 1000, 10), (250, 1200, 60), 0.5),  # others: 150 busy - 50 own of 200 ticks
        ((100, 1000, 10), (110, 1200, 20), 0.0),  # only this process
        ((100, 1000, 10), (300, 1200, 10), 1.0),  # every tick another's
        ((100, 1000, 10), (105, 1010, 10), None),  # under 20 ticks: too short to tell
        (None, (300, 1200, 10), None),  # no /proc
    ],
)
def test_time_call_records_the_share_other_processes_took(monkeypatch, before, after, share):
    # the readings of /proc/stat are the test's own: nothing here depends on the machine
    readings = iter([before, after])
    monkeypatch.setattr(timing, "_cpu_jiffies", lambda: next(readings))
    m = timing.time_call(lambda: None, min_run_time=0.001)
    assert m.metadata["others_cpu"] == share


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux's /proc")
def test_cpu_jiffies_reads_busy_total_and_own_ticks():
    busy, total, own = timing._cpu_jiffies()
    assert 0 <= busy <= total and own >= 0


def test_time_ratio_is_the_rows_time_over_the_baselines():
    assert timing.time_ratio(62.0, 100.0) == "0.62x "
    assert timing.time_ratio(250.0, 100.0, noisy=True) == "2.50x?"
    assert timing.time_ratio(0.2, 100.0) == "0.002x "  # small ratios keep two digits
    assert timing.time_ratio(1.0, None).strip() == "-"
    notes = timing.ratio_notes("the eager loop", any_noisy=False)
    assert notes == "time ratio: the row's median over that of the eager loop (below 1.00x: faster)"
    assert "?:" in timing.ratio_notes("x", any_noisy=True).splitlines()[1]


def _row(size, variant, phase, median, noisy=False, busy=False):
    return timing.Row(size, "float32", "cpu", variant, phase, median, 1.0, 10, 1, noisy, busy)


def test_lltm_table_flags_ratios_with_a_noisy_row_or_baseline():
    rows = [
        _row((2, 3, 4), EAGER, "forward", 100.0),
        _row((2, 3, 4), OP, "forward", 50.0),
        _row((8, 3, 4), EAGER, "forward", 100.0, noisy=True),
        _row((8, 3, 4), OP, "forward", 80.0),
    ]
    lines = bench.format_table(rows).splitlines()
    ratios = {line.split()[0] + " " + line.split()[3]: line.split()[-2] for line in lines[1:5]}
    assert ratios == {
        "2/3/4 reference": "1.00x",
        "2/3/4 tensortools": "0.50x",
        "8/3/4 reference": "1.00x?",
        "8/3/4 tensortools": "0.80x?",  # its baseline was noisy
    }
    assert lines[5].startswith("time ratio:") and lines[6].startswith("?:")
    quiet = bench.format_table(rows[:2])
    assert "?" not in quiet


def test_lltm_verdict_says_where_the_op_does_not_win_and_why():
    phase = "forward+backward"
    rows = [
        _row((16, 32, 128), EAGER, phase, 1000.0),
        _row((16, 32, 128), OP, phase, 600.0),
        _row((64, 1024, 128), EAGER, phase, 8000.0),
        _row((64, 1024, 128), OP, phase, 7900.0),
        _row((64, 1024, 128), PRODUCTS, phase, 7200.0),
        _row((64, 1024, 128), OP, "forward", 100.0),  # other phases are not judged
        _row((8, 8, 8), EAGER, phase, 100.0),
        _row((8, 8, 8), OP, phase, 110.0, noisy=True),
        _row((4, 4, 4), EAGER, phase, 100.0, noisy=True),
        _row((4, 4, 4), OP, phase, 30.0),
        _row((2, 2, 2), EAGER, phase, 100.0),
        _row((2, 2, 2), OP, phase, 150.0),
        _row((2, 2, 2), PRODUCTS, phase, 20.0),
        _row((1, 1, 1), EAGER, phase, 100.0),
        _row((1, 1, 1), OP, phase, 95.0),
        _row((9, 9, 9), EAGER, phase, 100.0, noisy=True, busy=True),
        _row((9, 9, 9), OP, phase, 300.0),
    ]
    small, large, busy, clear, slower, unmeasured, shared = lltm_verdict(rows)
    assert small == "16/32/128 float32, forward+backward: the fused op wins: 0.60x eager's time"
    assert large == (
        "64/1024/128 float32, forward+backward: the fused op does not win clearly (0.99x "
        "eager's time): beyond the matrix products both run (0.90x eager's time alone), it "
        "spends 0.09x against eager's 0.10x: the products leave little for fusing to save"
    )
    assert busy.startswith("8/8/8 float32, forward+backward: 1.10x eager's time, but the ")
    assert busy.endswith("cannot tell whether the fused op wins")
    # far from 1, a noisy ratio still tells which is faster, and says it is uncertain
    assert clear.startswith("4/4/4 float32, forward+backward: the fused op wins: 0.30x")
    assert "runs spread: uncertain" in clear
    # a loss is called one, and the time beyond the products says where it goes
    assert slower == (
        "2/2/2 float32, forward+backward: the fused op is slower (1.50x eager's time): beyond "
        "the matrix products both run (0.20x eager's time alone), it spends 1.30x against "
        "eager's 0.80x"
    )
    assert unmeasured.endswith("its matrix products were not measured steadily enough to say why")
    # other processes on the CPUs: steady runs can be off by any factor
    assert shared.startswith("9/9/9 float32, forward+backward: 3.00x eager's time, but the")


@pytest.mark.parametrize(
    "module",
    [
        "tensortools.bench.__main__",
        "tensortools.bench.bandwidth",
        "tensortools.bench.plot",
        "tensortools.coverage.cli",
        "tensortools.demo",
    ],
)
def test_every_command_option_has_help(module):
    parser = importlib.import_module(module).build_parser()
    missing = [a.option_strings or a.dest for a in parser._actions if not a.help]
    assert not missing, f"{parser.prog}: options without help: {missing}"
    assert parser.description
