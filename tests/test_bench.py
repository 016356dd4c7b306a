"""The benchmark and demo entry points run and report sensible things (no timing asserts).

A table is tested from its rows' data: the rows a bench function returns say which row is
each row's baseline, and the table is formatted from the same rows given medians of the
test's own (:func:`synthetic`), so that no assertion reads a measured number."""

import dataclasses
import json
import re

import pytest
import torch

from tensortools import LoggingTensor, MetadataTensor, ScalarTensor, bench, coverage, demo
from tensortools.bench import timing
from tensortools.bench.__main__ import main as bench_main
from tensortools.bench.plot import main as plot_main
from tensortools.bench.scalar import (
    ELEMENTWISE_ROWS,
    LINALG_ROWS,
    REDUCTION_ROWS,
    format_scalar_table,
    scalar_rows,
)

CALLS = {**ELEMENTWISE_ROWS, **REDUCTION_ROWS, **LINALG_ROWS}

#: A ratio as the tables print it ("0.62x", "2.50x?", "0.002x").
RATIO = re.compile(r"^\d+(?:\.\d+)?x\??$")


def synthetic(rows):
    """The rows with medians of the test's own, distinct multiples of 1 ms (a raised row's
    None kept), no spread and nothing noisy: a table of them says only what the rows'
    data says."""
    out = []
    for k, r in enumerate(rows):
        flags = {f: False for f in ("noisy", "busy", "stalled") if hasattr(r, f)}
        median = None if r.median_us is None else 1000.0 * (k + 2)
        out.append(dataclasses.replace(r, median_us=median, iqr_us=0.0, **flags))
    return out


def assert_ratios(table, rows, baselines, token):
    """Each row's line (found by its median as `token(row)` prints it) holds, as its
    ratios, its median over that of each of its baselines (`baselines(row)`: rows, None
    where it has none), and no other."""
    lines = table.splitlines()
    for r in rows:
        if r.median_us is None:
            continue
        (line,) = [line for line in lines if token(r) in line.split()]
        want = [
            timing.time_ratio(r.median_us, b.median_us).strip()
            for b in baselines(r)
            if b is not None
        ]
        assert [t for t in line.split() if RATIO.match(t)] == want, (line, r)


pytestmark = pytest.mark.slow  # runs the benchmarks


def test_lltm_rows_cover_every_variant_and_phase():
    rows = bench.lltm_rows([(2, 3, 4)], compile=False, min_run_time=0.01, input_sets=2)
    assert {(r.variant, r.phase) for r in rows} == {
        (v, p) for v in ("reference (eager)", "tensortools op") for p in bench.PHASES
    } | {(bench.lltm.PRODUCTS, p) for p in ("forward", "forward+backward")}
    assert all(r.median_us > 0 and r.runs >= 1 and r.size == (2, 3, 4) for r in rows)
    # each row's baseline: the eager reference at its size, phase and dtype
    rows = synthetic(rows)
    base = {(r.size, r.phase, r.dtype): r for r in rows if r.variant == bench.lltm.EAGER}
    assert len(base) == 3 and all((r.size, r.phase, r.dtype) in base for r in rows)
    text = bench.format_table(rows)
    assert_ratios(
        text, rows, lambda r: [base[r.size, r.phase, r.dtype]], lambda r: f"{r.median_us:.1f}us"
    )
    table = text.splitlines()
    assert table[0].split()[-2:] == ["ratio", "kernels"]
    assert all(line.startswith("2/3/4") for line in table[1 : 1 + len(rows)])
    assert table[1 + len(rows)].startswith("time ratio: the row's median over that of the ")


def test_lltm_kernel_counts():
    rows = {
        (r.variant, r.phase): r.kernels
        for r in bench.lltm_rows([(2, 3, 4)], compile=False, min_run_time=0.01, rounds=1)
    }
    # the fused op is one operator call each way
    assert rows["tensortools op", "forward"] == 1
    assert rows["tensortools op", "backward"] == 1
    eager = rows["reference (eager)", "forward"]
    assert eager > 6  # cat, addmm, then each activation and product separately
    assert rows["reference (eager)", "backward"] > eager
    assert rows["reference (eager)", "forward+backward"] == (
        eager + rows["reference (eager)", "backward"]
    )


def test_sequence_rows_cover_every_variant_with_flops_and_memory():
    rows = bench.sequence_rows([(2, 3, 4)], [5], compile=False, min_run_time=0.01, rounds=1)
    assert [r.variant for r in rows] == [
        "reference loop (eager)",
        "fused cell loop (ops.lltm)",
        "ops.lltm_sequence",
        "reference loop (eager), input needs no grad",
        "ops.lltm_sequence, input needs no grad",
        "its matrix products alone",
    ]
    flops = 3 * 2 * 5 * 2 * 12 * 7  # forward and the two gradients, T·B × (S+F) × 3S each
    assert bench.lltm_sequence.sequence_flops(5, (2, 3, 4)) == flops
    no_input_grad = flops - 2 * 5 * 2 * 12 * 3  # the input's part of X's gradient
    for r in rows:
        assert r.steps == 5 and r.median_us > 0 and r.gemm_gflops > 0
        needed = no_input_grad if r.variant.endswith("input needs no grad") else flops
        assert abs(r.gflops - needed / r.median_us / 1e3) < 1e-9
    saved = {r.variant: r.saved_bytes for r in rows}
    assert saved["its matrix products alone"] is None
    # the op keeps its outputs, cells and activated gates (T x B x (S + S + 3S) floats)
    assert saved["ops.lltm_sequence"] == 5 * 2 * 5 * 4 * 4
    assert saved["reference loop (eager)"] > saved["ops.lltm_sequence"]
    # each row's baseline: the eager loop in the same case, with or without the input's
    # gradient as the row
    from tensortools.bench.lltm_sequence import EAGER_LOOP, NO_INPUT_GRAD

    rows = synthetic(rows)
    loops = {r.variant: r for r in rows if r.variant.startswith(EAGER_LOOP)}
    assert set(loops) == {EAGER_LOOP, f"{EAGER_LOOP}, {NO_INPUT_GRAD}"}

    def baseline(r):
        return loops[
            f"{EAGER_LOOP}, {NO_INPUT_GRAD}" if r.variant.endswith(NO_INPUT_GRAD) else EAGER_LOOP
        ]

    text = bench.format_sequence_table(rows)
    assert_ratios(text, rows, lambda r: [baseline(r)], lambda r: f"{r.median_us / 1e3:.2f}ms")
    table = text.splitlines()
    assert table[1 + len(rows)].startswith("time ratio:") and "large GEMM:" in table[-1]


def test_recurrent_rows_compare_every_layer_with_lstm_in_both_phases():
    from tensortools.bench.recurrent import format_recurrent_table, gate_flops, recurrent_rows

    rows = recurrent_rows([(2, 3, 4)], [5], min_run_time=0.01, rounds=1)
    cases = {(r.kind, r.steps, r.phase, r.layer) for r in rows}
    assert cases == {
        (kind, steps, phase, layer)
        for kind, steps in (("sequence", 5), ("cell", 1))
        for phase in ("training", "inference")
        for layer in ("LLTM", "LSTM", "GRU") + (("floor",) if kind == "sequence" else ())
    }
    # forward: [h | x] (B x (S+F)) by (S+F) x G*S per step; training adds h's and the
    # weights' gradients (the input needs none)
    forward = 2 * 2 * 3 * 4 * 7
    assert gate_flops("LLTM", 5, (2, 3, 4), "inference") == 5 * forward
    assert gate_flops("LSTM", 5, (2, 3, 4), "inference") == 5 * forward * 4 / 3
    assert gate_flops("GRU", 5, (2, 3, 4), "training") == 5 * (2 * forward + 2 * 2 * 3 * 4 * 4)
    for r in rows:
        assert r.median_us > 0 and r.gemm_gflops > 0
        expected = gate_flops(r.layer, r.steps, r.size, r.phase) / r.median_us / 1e3
        assert abs(r.gflops - expected) < 1e-9
    # each row's baseline: nn.LSTM (LSTMCell) of the same kind, case and phase
    rows = synthetic(rows)
    key = lambda r: (r.kind, r.size, r.steps, r.dtype, r.phase)  # noqa: E731
    base = {key(r): r for r in rows if r.layer == "LSTM"}
    assert len(base) == 4 and all(key(r) in base for r in rows)
    text = format_recurrent_table(rows)
    assert_ratios(text, rows, lambda r: [base[key(r)]], lambda r: f"{r.median_us / 1e3:.3f}ms")
    table = text.splitlines()
    assert table[1 + len(rows)].startswith("time ratio:") and "large GEMM:" in table[-1]


def test_an_interrupted_recurrent_run_keeps_the_cases_it_finished():
    from tensortools.bench.recurrent import recurrent_rows

    rows, seen = [], []

    def progress(label: str) -> None:  # stop as the second case starts
        seen.append(label.split(" T=")[0])
        if len(set(seen)) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        recurrent_rows([(2, 3, 4)], [5], min_run_time=0.01, rounds=1, progress=progress, into=rows)
    # 3 layers and the floor, 2 phases each
    assert len(rows) == 8 and {r.kind for r in rows} == {"sequence"}


def test_per_sample_rows_time_both_methods_on_both_layers():
    from tensortools.bench.per_sample import format_per_sample_table, per_sample_rows

    rows = per_sample_rows([(3, 4, 5)], [2], min_run_time=0.01, rounds=1)
    assert {(r.layer, r.method) for r in rows} == {
        (layer, method) for layer in ("LLTM", "LSTM") for method in ("vmap(grad)", "loop")
    }
    for r in rows:  # (on the CPU torch runs the LSTM under vmap: a loop, with a warning)
        assert r.median_us > 0 and r.runs > 0, r
    # each row's baselines: the same layer's loop, and nn.LSTM by the same method
    rows = synthetic(rows)
    by = {(r.layer, r.method): r for r in rows}
    text = format_per_sample_table(rows)
    assert_ratios(
        text,
        rows,
        lambda r: [by[r.layer, "loop"], by["LSTM", r.method]],
        lambda r: f"{r.median_us / 1e3:.2f}ms",
    )
    assert text.splitlines()[1 + len(rows)].startswith("time ratio:")


# nn.LSTM in float32: in float64 torch's CPU LSTM raises under vmap(grad) (torch 2.13:
# "output with shape [1, 20] doesn't match the broadcast shape [3, 1, 20]"; in float32 its
# oneDNN kernel runs through the batching fallback).
@pytest.mark.parametrize(
    "layer, dtype, tol", [("LLTM", torch.float64, 1e-10), ("LSTM", torch.float32, 1e-5)]
)
def test_per_sample_gradients_by_vmap_equal_the_loop(layer, dtype, tol):
    # a small size: vmap(grad) gives each sample's own gradient, as the loop does
    from tensortools.bench.per_sample import _layer, per_sample_grads

    module = _layer(layer, 4, 5, {"dtype": dtype, "device": "cpu"})
    samples = torch.randn(3, 6, 4, dtype=dtype)
    got = per_sample_grads(module, samples, "vmap(grad)")
    want = per_sample_grads(module, samples, "loop")
    assert got.keys() == want.keys() == dict(module.named_parameters()).keys()
    for k in want:
        assert got[k].shape == (3, *module.get_parameter(k).shape)
        torch.testing.assert_close(got[k], want[k], rtol=tol, atol=tol)
    # and the samples' gradients differ (a batch's gradient repeated would not)
    assert not torch.allclose(want[k][0], want[k][1])


def test_a_method_that_raises_stands_in_its_row(monkeypatch):
    from tensortools.bench import per_sample

    real = per_sample.per_sample_grads

    def refusing(module, samples, method):
        if isinstance(module, torch.nn.LSTM) and method == "vmap(grad)":
            raise RuntimeError("no batching rule\nmore")
        return real(module, samples, method)

    monkeypatch.setattr(per_sample, "per_sample_grads", refusing)
    rows = per_sample.per_sample_rows([(2, 3, 4)], [2], min_run_time=0.01, rounds=1)
    (raised,) = [r for r in rows if r.median_us is None]
    assert (raised.layer, raised.method) == ("LSTM", "vmap(grad)")
    assert raised.note == "RuntimeError: no batching rule"
    line = next(x for x in per_sample.format_per_sample_table(rows).splitlines() if "raised" in x)
    assert "LSTM" in line and "no batching rule" in line


def test_kernel_count_leaves_out_views_and_nested_calls():
    x = torch.randn(4, 4)
    assert bench.kernel_count(lambda: x.t().contiguous()) == 1  # the copy only
    assert bench.kernel_count(lambda: torch.nn.functional.linear(x, x)) == 1
    assert bench.kernel_count(lambda: (x + 1).sum()) == 2


def test_bench_command_writes_json_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out, image = tmp_path / "rows.json", tmp_path / "bench.png"
    assert (
        bench_main(
            [
                "--size",
                "2/3/4",
                "--steps",
                "3",
                "--no-compile",
                "--conv-bn-batch",
                "2",
                "--scalar-size",
                "4",
                "--min-run-time",
                "0.01",
                "--rounds",
                "1",
                "--json",
                str(out),
                "--plot",
                str(image),
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    # two variants in three phases, and the matrix products in two
    assert data["machine"] and len(data["lltm"]) == 8 and len(data["conv_bn"]) == 2
    assert len(data["sequence"]) == 6  # eager and cell loops, the op, the two without
    # the input's gradient, the op's products
    # ScalarTensor's rows: 11 of its own calls, each of CALLS and 6 tensortools.ops calls
    # structured and dense; each row's baseline, the dense matrix in the same operation
    scalar = data["scalar"]
    assert len(scalar) == 11 + 2 * len(CALLS) + 2 * 6
    dense = {(tuple(r["size"]), r["phase"]) for r in scalar if r["variant"] == "dense matrix"}
    assert all((tuple(r["size"]), r["phase"]) in dense for r in scalar)
    assert len(data["dispatch"]) == 33 and "compiled" not in data
    printed = capsys.readouterr().out
    assert "tensortools op" in printed
    assert "2/3/4 float32, forward+backward: " in printed  # the verdict
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = tmp_path / "again.svg"
    assert plot_main([str(out), str(again)]) == 0
    assert again.read_text().lstrip().startswith("<?xml")


def test_scalar_rows_compare_structured_with_dense():
    rows = scalar_rows((8,), min_run_time=0.01, rounds=1)
    assert {(r.phase, r.variant) for r in rows} == {
        ("d @ x", "ScalarTensor (structured)"),
        ("d @ x", "dense matrix"),
        ("d @ x", "dense, eye * value formed per call"),
        ("x + d", "ScalarTensor (structured)"),
        ("x + d", "dense matrix"),
        ("d @ d", "ScalarTensor (structured)"),
        ("d @ d", "dense matrix"),
        ("inverse(d)", "ScalarTensor (structured)"),
        ("inverse(d)", "dense matrix"),
        ("solve(d, x)", "ScalarTensor (structured)"),
        ("solve(d, x)", "dense matrix"),
    } | {(op, v) for op in CALLS for v in ("ScalarTensor (structured)", "dense matrix")}
    # each row's baseline: the dense matrix in the same operation and N
    from tensortools.bench.scalar import DENSE

    rows = synthetic(rows)
    base = {(r.size, r.phase): r for r in rows if r.variant == DENSE}
    assert len(base) == 5 + len(CALLS) and all((r.size, r.phase) in base for r in rows)
    text = format_scalar_table(rows)
    assert_ratios(text, rows, lambda r: [base[r.size, r.phase]], lambda r: f"{r.median_us:.1f}us")
    assert text.splitlines()[1 + len(rows)].startswith("time ratio:")


@pytest.mark.parametrize("size", [8, 1000])
def test_every_structured_row_times_a_structured_call(size):
    # Under the strict policy a call without a structured answer raises: each row of the
    # ScalarTensor table times the handler, not the dense fallback, at the sizes timed.
    from tensortools import ScalarTensor

    d, x = ScalarTensor(size, 0.999), torch.randn(size, size)
    with ScalarTensor.using_policy("strict"):
        for fn in CALLS.values():
            fn(d)
        torch.linalg.solve(d, x), d @ x, x + d, d @ d, torch.inverse(d)


def test_demo_tells_the_story(capsys, monkeypatch):
    # The timings have their own tests above; here the rest of the story is checked.
    monkeypatch.setattr(bench, "lltm_rows", lambda *a, **kw: [])
    monkeypatch.setattr(bench, "dispatch_rows", lambda **kw: [])
    monkeypatch.setattr(bench, "sequence_rows", lambda *a, **kw: [])
    assert demo.main(["--quick"]) == 0
    out = capsys.readouterr().out
    titles = [line for line in out.splitlines() if line.startswith("== ")]
    assert [t.split(".")[0] for t in titles] == [f"== {n}" for n in range(1, 8)]
    # the three types
    assert "d + d    -> ScalarTensor(N=3, value=5.0)" in out
    assert "exp(d) under the strict policy -> TypeError" in out
    assert "metadata {'units': 'm', 'run': 7}" in out
    assert "torch.tanh" in out and "torch.Tensor.matmul" in out
    # the LLTM against the reference, then on typed tensors
    diffs = [float(line.rsplit("=", 1)[1]) for line in out.splitlines() if "max |fused" in line]
    assert len(diffs) == 4 and max(diffs) < 1e-12
    seq = [float(line.rsplit("=", 1)[1]) for line in out.splitlines() if "max |op - loop|" in line]
    assert len(seq) == 2 and max(seq) < 1e-10
    assert "metadata {'sequence': 'walk-12', 'step': 0}; values equal the plain call: True" in out
    assert "records ['tensortools.ops.lltm'," in out
    assert "equals the dense input: True" in out
    # the coverage counts, as the report gives them
    for cls in (ScalarTensor, MetadataTensor, LoggingTensor):
        c = coverage.report(cls, samples=False).counts()
        spec = coverage.spec_for(cls)
        assert f"  {cls.__name__:<15} {c['handled']:>5} handled   {spec.handled_means}" in out
        assert f" {c['fallback']:>5} fallback  {spec.fallback_means}" in out


def test_dispatch_rows_cover_every_type():
    rows = bench.dispatch_rows(sizes=(1, 8), min_run_time=0.01, rounds=1)
    variants = {r.variant for r in rows}
    assert {
        "plain Tensor",
        bench.dispatch.PROTOCOL,
        "pass-through subclass",
        "MetadataTensor",
        "ScalarTensor",
        "LoggingTensor (no listener)",
        "LoggingTensor (capturing)",
        "user TensorWrapper type",
        "MetadataTensor (tracking off)",
        "ScalarTensor N=2, as d + d",
    } == variants
    # torch.add and torch.sin for each type but the capturing logger (add only), per size,
    # and d + d once; the protocol alone only on 1 element, where the call costs little
    assert len(rows) == 2 * (8 * 2 + 1) + 1 - 2
    assert {r.size for r in rows if r.variant == bench.dispatch.PROTOCOL} == {(1,)}
    assert all(r.median_us > 0 for r in rows)
    table = bench.format_dispatch_table(rows)
    assert "8x8" in table and "1 element" in table and "as d + d" in table


def test_compiled_chain_rows_compile_one_graph_per_type():
    rows = bench.compiled_chain_rows(16, backend="eager", min_run_time=0.01, rounds=1)
    assert {(r.variant, r.phase, r.kernels) for r in rows} == {
        ("plain Tensor", "compiled chain", 1),
        ("MetadataTensor", "compiled chain", 1),
        ("plain Tensor", "eager chain", None),
        ("MetadataTensor", "eager chain", None),
    }
    assert "(1 graph)" in bench.format_dispatch_table(rows)


def test_conv_bn_rows_measure_both_networks():
    rows = bench.conv_bn_rows(4, min_run_time=0.01, rounds=1)
    assert [r.variant for r in rows] == ["Conv2d + BatchNorm2d", "FusedConvBN2d"]
    unfused, fused = rows
    # 4 images of 1x28x28: the fused network keeps neither convolution's output
    conv1_out = 4 * 32 * 28 * 28 * 4
    assert unfused.saved_bytes - fused.saved_bytes >= conv1_out
    assert all(r.peak_bytes > 0 and r.median_us > 0 for r in rows)
    assert "FusedConvBN2d" in bench.format_conv_bn_table(rows)
