"""tensortools/bench/peers.py: MetadataTensor beside MONAI's MetaTensor (the rows MONAI
needs are skipped without it)."""

import dataclasses
import functools
import itertools
import json

import pytest
from test_bench import assert_ratios, synthetic

from tensortools.bench.__main__ import main
from tensortools.bench.compiled import (
    CALLS,
    GOALS,
    CompiledRow,
    compiled_rows,
    format_compiled_table,
)
from tensortools.bench.peers import (
    BATCH,
    ROUND_TRIP_SAMPLES,
    format_peer_table,
    monai_version,
    peer_rows,
)


def test_every_call_is_timed_for_every_variant_and_printed():
    rows = peer_rows(min_run_time=0.01, rounds=1)
    variants = {"plain Tensor", "MetadataTensor", "MetadataTensor batch"}
    if monai_version() is not None:
        variants |= {"monai MetaTensor", "monai MetaTensor batch"}
    calls = {(r.size, r.phase) for r in rows}
    assert ((f"{ROUND_TRIP_SAMPLES}x3x32x32",), "round trip") in calls
    assert len(calls) == 2 * 3 + 1 + 1  # (add, sin, conv2d) x 2 shapes, b[1], round trip
    for size, phase in calls:
        got = {r.variant for r in rows if (r.size, r.phase) == (size, phase)}
        if phase == "round trip":
            want = {v for v in variants if not v.endswith("batch")}
        else:
            want = variants
        assert got == want, (size, phase)
        assert all(r.median_us > 0 for r in rows)
    # each row's baseline: the plain Tensor in the same call (the table from the rows'
    # data, with medians of the test's own)
    rows = synthetic(rows)
    base = {(r.size, r.phase): r for r in rows if r.variant == "plain Tensor"}
    assert all((r.size, r.phase) in base for r in rows)
    table = format_peer_table(rows)
    assert table.count("\n") >= len(rows)
    assert_ratios(table, rows, lambda r: [base[r.size, r.phase]], lambda r: f"{r.median_us:.2f}us")


def test_peers_only_prints_the_peer_table_alone(capsys):
    # (--no-compile: the compiled rows' compilations are test_compiled_rows_...'s)
    assert main(["--peers-only", "--no-compile", "--min-run-time", "0.01", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "MetadataTensor beside MONAI's MetaTensor" in out and "round trip" in out
    assert "LLTM" not in out and "Per-call cost" not in out
    assert "Compiled over batches" not in out and "compiled step" not in out


VARIANTS = ["plain Tensor", "MetadataTensor batch", "monai MetaTensor batch"]


@pytest.mark.slow  # compiles a chain and a training step per type
def test_compiled_rows_time_every_call_for_every_type_in_the_graphs_of_the_warm_up():
    rows = compiled_rows(backend="eager", min_run_time=0.01, rounds=1)
    want = VARIANTS if monai_version() is not None else VARIANTS[:2]
    assert sorted((r.phase, r.variant) for r in rows) == sorted(itertools.product(CALLS, want))
    assert all(r.size == (BATCH,) for r in rows)
    for r in rows:
        compiled = r.phase.startswith("compiled")
        if r.median_us is None:  # raised: only MONAI's, compiled, with torch's error
            assert r.variant.startswith("monai") and compiled and r.note, r
            continue
        assert r.median_us > 0 and r.runs >= 1, r
        if not compiled:
            assert r.kernels is None and r.graphs_warm is None, r
        else:  # graphs made in the warm-up; the timing's new ones, if any, on top
            assert 1 <= r.graphs_warm <= r.kernels, r
    # plain tensors' compiled functions: one set of graphs for every batch
    plain = {r.phase: r for r in rows if r.variant == "plain Tensor"}
    assert all(plain[c].kernels == plain[c].graphs_warm for c in GOALS)
    # the table from the rows' data, with medians of the test's own
    rows = synthetic(rows)
    plain = {r.phase: r for r in rows if r.variant == "plain Tensor"}
    table = format_compiled_table(rows)
    assert_ratios(table, rows, lambda r: [plain[r.phase]], lambda r: f"{r.median_us:.2f}us")
    assert all(f"{c} <= {g:.2f}x" in table for c, g in GOALS.items())
    assert ("monai 1." in table) == (monai_version() is not None)


@pytest.mark.slow  # compiles (the eager backend: the wiring, not inductor's compile time)
def test_peers_only_prints_the_compiled_table_and_writes_its_rows(monkeypatch, capsys, tmp_path):
    import tensortools.bench.__main__ as cli

    monkeypatch.setattr(cli, "compiled_rows", functools.partial(compiled_rows, backend="eager"))
    path = tmp_path / "out.json"
    assert (
        main(["--peers-only", "--min-run-time", "0.01", "--rounds", "1", "--json", str(path)]) == 0
    )
    out = capsys.readouterr().out
    assert "Compiled over batches" in out and "goals, MetadataTensor" in out
    saved = json.loads(path.read_text())["peers_compiled"]
    assert {(r["phase"], r["variant"]) for r in saved} >= set(
        itertools.product(CALLS, VARIANTS[:2])
    )
    assert all(
        r["graphs_warm"] is not None for r in saved if r["phase"] in GOALS and r["median_us"]
    )


def _row(call, variant, median, graphs=None, warm=None, note=""):
    return CompiledRow(
        (BATCH,),
        "float32",
        "cpu",
        variant,
        call,
        median,
        0.0,
        10,
        graphs,
        graphs_warm=warm,
        note=note,
    )


@pytest.mark.parametrize("warm, after", [(1, 1), (2, 2), (1, 3), (3, 8)])
@pytest.mark.parametrize("call", CALLS)
def test_the_compiled_table_gives_each_row_its_ratio_graphs_and_recompilations(call, warm, after):
    compiled = call.startswith("compiled")
    rows = [
        _row(call, "plain Tensor", 2000.0, *((1, 1) if compiled else ())),
        _row(call, "MetadataTensor batch", 3000.0, *((after, warm) if compiled else ())),
        _row(call, "monai MetaTensor batch", None, note="Unsupported: some error"),
    ]
    lines = [line for line in format_compiled_table(rows).splitlines() if line.startswith(call)]
    plain, ours, monai = lines
    assert "plain Tensor" in plain and "1.00x" in plain
    assert "MetadataTensor batch" in ours and "1.50x" in ours
    assert "monai" in monai and "raised" in monai and "Unsupported: some error" in monai
    if not compiled:
        assert "graph" not in ours + plain
    elif warm == after:
        assert ours.endswith(f"{after} graph{'s' * (after > 1)}, none while timed")
    else:
        assert f"{warm} graphs after warm-up, {after} after timing: RECOMPILED" in ours
    assert not any("?" in line for line in (plain, ours))
    noisy = [dataclasses.replace(r, noisy=True) if r.median_us else r for r in rows]
    assert "1.50x?" in format_compiled_table(noisy)
