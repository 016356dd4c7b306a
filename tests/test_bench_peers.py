"""tensortools/bench/peers.py: MetadataTensor beside MONAI's MetaTensor (the rows MONAI
needs are skipped without it)."""

from test_bench import assert_ratios, synthetic

from tensortools.bench.__main__ import main
from tensortools.bench.peers import ROUND_TRIP_SAMPLES, format_peer_table, monai_version, peer_rows


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
    assert main(["--peers-only", "--min-run-time", "0.01", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "MetadataTensor beside MONAI's MetaTensor" in out and "round trip" in out
    assert "LLTM" not in out and "Per-call cost" not in out
