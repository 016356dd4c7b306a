"""The benchmark and demo entry points run and report sensible things (no timing asserts)."""

import json

from tensortools import bench, demo
from tensortools.bench.__main__ import main as bench_main


def test_lltm_rows_cover_every_variant_and_phase():
    rows = bench.lltm_rows([(2, 3, 4)], compile=False, min_run_time=0.01)
    assert {(r.variant, r.phase) for r in rows} == {
        (v, p) for v in ("reference (eager)", "tensortools op") for p in bench.PHASES}
    assert all(r.median_us > 0 and r.runs >= 1 and r.size == (2, 3, 4) for r in rows)
    table = bench.format_table(rows)
    assert table.count("\n") == len(rows)
    assert "1.00x" in table  # the baseline against itself


def test_bench_command_writes_json(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert bench_main(["--size", "2/3/4", "--no-compile", "--no-dispatch", "--no-conv-bn",
                       "--min-run-time",
                       "0.01", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["rows"]) == 6 and data["machine"]
    assert "tensortools op" in capsys.readouterr().out


def test_demo_shows_agreement(capsys, monkeypatch):
    # The timings have their own tests above; here only the agreement part is checked.
    monkeypatch.setattr(bench, "lltm_rows", lambda **kw: [])
    monkeypatch.setattr(bench, "dispatch_rows", lambda **kw: [])
    assert demo.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "d + d    -> ScalarTensor(N=3, value=5.0)" in out
    assert "metadata {'units': 'm', 'run': 7}" in out
    assert "torch.tanh" in out and "torch.Tensor.matmul" in out
    diffs = [float(line.rsplit("=", 1)[1]) for line in out.splitlines() if "max |fused" in line]
    assert len(diffs) == 4 and max(diffs) < 1e-12


def test_dispatch_rows_cover_every_type():
    rows = bench.dispatch_rows(sizes=(1, 8), min_run_time=0.01, rounds=1)
    variants = {r.variant for r in rows}
    assert {"plain Tensor", "pass-through subclass", "MetadataTensor", "ScalarTensor (structured)",
            "LoggingTensor (no listener)", "LoggingTensor (capturing)"} == variants
    assert all(r.median_us > 0 for r in rows)
    table = bench.format_dispatch_table(rows)
    assert "8x8" in table and "1 element" in table


def test_conv_bn_rows_measure_both_networks():
    rows = bench.conv_bn_rows(4, min_run_time=0.01, rounds=1)
    assert [r.variant for r in rows] == ["Conv2d + BatchNorm2d", "FusedConvBN2d"]
    unfused, fused = rows
    # 4 images of 1x28x28: the fused network keeps neither convolution's output
    conv1_out = 4 * 32 * 28 * 28 * 4
    assert unfused.saved_bytes - fused.saved_bytes >= conv1_out
    assert all(r.peak_bytes > 0 and r.median_us > 0 for r in rows)
    assert "FusedConvBN2d" in bench.format_conv_bn_table(rows)
