"""The tensortools demo: ``python -m tensortools.demo [--quick]``.

A short tour in seven steps: the three tensor types at work; the LLTM cell through the
fused C++ kernel against the plain-PyTorch reference (values and gradients), then on
typed tensors; how much of torch's API each type covers; and the timing tables (the LLTM,
and the per-call cost of each type). ``--quick`` shortens the timings and leaves out
``torch.compile``.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.utils.benchmark as benchmark

import tensortools
from tensortools import (
    LoggingTensor,
    MetadataTensor,
    ScalarTensor,
    bench,
    capture_logs,
    coverage,
    nn,
    reference,
)
from tensortools._progress import Progress

TYPES = (ScalarTensor, MetadataTensor, LoggingTensor)


def _section(number: int, title: str) -> None:
    print(f"\n== {number}. {title} ==")


def scalar_tensor() -> None:
    _section(1, "ScalarTensor: an N×N matrix stored as two numbers")
    d = ScalarTensor(3, 2.5)
    t = torch.arange(9.0).reshape(3, 3)
    print(f"d = {d!r}  (value * I_3)")
    print(f"  d + d    -> {d + d!r}")
    print(f"  d @ t    == 2.5 * t: {torch.equal(d @ t, 2.5 * t)}  (one scaling pass, no matmul)")
    print(f"  t + d    == t + d.tensor(): {torch.equal(t + d, t + d.tensor())}")
    print(f"  det(d)   -> {torch.det(d).item()}  (2.5 ** 3)")
    print(f"  sin(d)   -> {torch.sin(d)!r}  (f(0) = 0: two numbers)")
    big = ScalarTensor(100_000, -2.0)
    print(
        f"  with N = 100000 (a dense matrix of 40 GB): norm {torch.linalg.norm(big).item():.1f}, "
        f"var {big.var().item():.3g}, amax(dim=0) {tuple(torch.amax(big, 0).shape)}, "
        f"eigvalsh {tuple(torch.linalg.eigvalsh(big).shape)}, slogdet "
        f"{tuple(round(x.item(), 1) for x in torch.linalg.slogdet(big))}"
    )
    print(f"  exp(d)   -> dense {tuple(torch.exp(d).shape)} tensor (no handler: fallback)")
    with ScalarTensor.using_policy("strict"):
        try:
            torch.exp(d)
        except TypeError:
            print("  exp(d) under the strict policy -> TypeError (nothing dense is formed)")


def metadata_tensor() -> None:
    _section(2, "MetadataTensor: metadata that follows the data")
    m = MetadataTensor(torch.tensor([1.0, 2.0, 3.0]), metadata={"units": "m", "run": 7})
    y = torch.nn.functional.relu(m * 2 - 3).sum()
    print(f"relu(m * 2 - 3).sum(): value {y.item()}, metadata {y.metadata}")
    other = MetadataTensor(torch.ones(3), metadata={"units": "s"})
    with MetadataTensor.using_merge_policy("strict"):
        try:
            m + other
        except ValueError as err:
            print(f"m + other under the strict merge policy -> ValueError: {err}")
    with MetadataTensor.using_tracking(False):
        print(f"with tracking off, m + m is a {type(m + m).__name__}")
    scans = [MetadataTensor(torch.rand(1, 8, 8), {"id": f"scan{i}"}) for i in range(4)]
    batch = torch.utils.data.default_collate(scans)  # as a DataLoader batches them
    out = torch.nn.Conv2d(1, 2, 3)(batch)
    print(
        f"a collated batch of {batch.batch_size} through a Conv2d: out[2] is "
        f"{out[2].metadata['id']}, out[1:3] holds {out[1:3].metadata['id']}"
    )


def logging_tensor() -> None:
    _section(3, "LoggingTensor: every torch call recorded")
    x = LoggingTensor(torch.randn(4, 8))
    with capture_logs() as logs:
        torch.tanh(x @ x.T).mean()
    print("records of tanh(x @ x.T).mean():")
    for record in logs:
        print(f"  {record.function:<22} {record.arguments}")


def lltm_agreement() -> None:
    _section(4, "The LLTM cell: fused C++ kernel against plain PyTorch")
    torch.manual_seed(0)
    batch, features, state = 16, 32, 128
    cell = nn.LLTM(features, state).double()
    x = torch.randn(batch, features, dtype=torch.float64)
    h = torch.randn(batch, state, dtype=torch.float64)
    c = torch.randn(batch, state, dtype=torch.float64)
    grads = (
        torch.randn(batch, state, dtype=torch.float64),
        torch.randn(batch, state, dtype=torch.float64),
    )
    params = list(cell.parameters())

    fused = cell(x, (h, c))
    fused_grads = torch.autograd.grad(fused, params, grads)
    ref = reference.lltm(x, cell.weights, cell.bias, h, c)
    ref_grads = torch.autograd.grad(ref, params, grads)

    print(f"nn.LLTM({features}, {state}) on a batch of {batch}, float64:")
    for name, a, b in [
        ("new_h", fused[0], ref[0]),
        ("new_cell", fused[1], ref[1]),
        ("grad weights", fused_grads[0], ref_grads[0]),
        ("grad bias", fused_grads[1], ref_grads[1]),
    ]:
        print(f"  {name:<13} max |fused - reference| = {(a - b).abs().max().item():.2e}")

    steps = 32
    layer = nn.LLTMSequence(features, state).double()
    layer.load_state_dict(cell.state_dict())  # the same parameters as the cell
    xs = torch.randn(steps, batch, features, dtype=torch.float64)
    output, (h_n, c_n) = layer(xs, (h, c))
    out_grad = torch.randn_like(output)
    seq_grads = torch.autograd.grad((output * out_grad).sum(), list(layer.parameters()))
    ref_out, _, _ = reference.lltm_sequence(xs, cell.weights, cell.bias, h, c)
    ref_seq_grads = torch.autograd.grad((ref_out * out_grad).sum(), params)
    print(
        f"nn.LLTMSequence over {steps} steps (one operator call, against the Python loop "
        "of reference.lltm):"
    )
    for name, a, b in [
        ("output", output, ref_out),
        ("grad weights", seq_grads[0], ref_seq_grads[0]),
    ]:
        print(f"  {name:<13} max |op - loop| = {(a - b).abs().max().item():.2e}")


def lltm_on_types() -> None:
    _section(5, "The LLTM on typed tensors")
    torch.manual_seed(0)
    batch = features = 8
    state = 16
    cell = nn.LLTM(features, state)
    x = torch.randn(batch, features)
    h, c = torch.zeros(batch, state), torch.zeros(batch, state)
    plain_h, _ = cell(x, (h, c))

    meta_h, meta_c = cell(MetadataTensor(x, {"sequence": "walk-12", "step": 0}), (h, c))
    print(
        f"MetadataTensor input -> {type(meta_h).__name__} outputs with metadata "
        f"{meta_c.metadata}; values equal the plain call: "
        f"{torch.equal(meta_h.as_subclass(torch.Tensor), plain_h)}"
    )

    with capture_logs() as logs:
        log_h, _ = cell(LoggingTensor(x), (h, c))
        log_h.sum().backward()
    print(
        f"LoggingTensor input  -> records {[r.function for r in logs]} "
        "(the forward is one fused call)"
    )

    # A batch of N one-hot rows scaled by 0.5 is the ScalarTensor 0.5 * I_N: its handler
    # (tensortools.types.scalar.operators) forms the input's part of the gates as the
    # scaled slice 0.5 * W[:, S:]ᵀ (N × 3S), in place of the N×N matrix and its product,
    # and the cell's pointwise kernel runs on the gates.
    n = 1024
    one_hot = nn.LLTM(n, state)
    h, c = torch.zeros(n, state), torch.zeros(n, state)
    d = ScalarTensor(n, 0.5)
    scalar_h, _ = one_hot(d, (h, c))
    dense = d.tensor()
    dense_h, _ = one_hot(dense, (h, c))
    timer = lambda fn: benchmark.Timer("fn()", globals={"fn": fn}).timeit(10)  # noqa: E731
    structured_us = timer(lambda: one_hot(d, (h, c))).median * 1e6
    dense_us = timer(lambda: one_hot(dense, (h, c))).median * 1e6
    print(
        f"ScalarTensor input (0.5 * I_{n} as a batch of {n} one-hot rows) -> equals the "
        f"dense input: {torch.allclose(scalar_h, dense_h)}; {structured_us:.0f} us "
        f"structured (no {n}x{n} matrix) against {dense_us:.0f} us with the dense input"
    )


def coverage_counts() -> None:
    _section(6, "Override coverage: how each type answers torch's API")
    total = len(coverage.overridable_functions())
    print(f"{total} overridable functions (torch.overrides, plus tensortools.ops), answered by:")
    for cls in TYPES:
        rep = coverage.report(cls, samples=False)
        c, means = rep.counts(), rep.means
        answers = [(o, c[o]) for o in coverage.OUTCOMES if c[o] or o == "handled"]
        for i, (o, n) in enumerate(answers):
            name = cls.__name__ if i == 0 else ""
            print(f"  {name:<15} {n:>5} {o:<9} {means[o]}")
    print(
        "checked on PyTorch's own operator samples by python -m tensortools.coverage TYPE "
        "(docs/coverage.md)"
    )


def lltm_timings(quick: bool, progress: Progress) -> None:
    _section(7, "Timings: the LLTM (float32, CPU) and the per-call cost of each type")
    print(f"machine: {bench.machine_summary()}")
    rows = bench.lltm_rows(
        bench.LLTM_SIZES[:2],
        compile=not quick,
        min_run_time=0.1 if quick else 0.2,
        rounds=2 if quick else 3,
    )
    progress.step("timings: the LLTM over a sequence")
    print(bench.format_table(rows))
    for line in bench.lltm_verdict(rows):
        print(line)
    print()
    print(
        "The LLTM over 32 steps, forward+backward (the compiled loop: python -m tensortools.bench)"
    )
    rows = bench.sequence_rows(
        bench.SEQUENCE_SIZES[:1],
        [32],
        compile=False,
        min_run_time=0.1 if quick else 0.2,
        rounds=2 if quick else 3,
    )
    progress.step("timings: the per-call cost of each type")
    print(bench.format_sequence_table(rows))
    print()
    rows = bench.dispatch_rows(min_run_time=0.05 if quick else 0.2, rounds=1 if quick else 2)
    print(bench.format_dispatch_table(rows))
    print("full benchmarks: python -m tensortools.bench (docs/performance.md)")


def build_parser() -> argparse.ArgumentParser:
    """The command line parser (its options and their help)."""
    parser = argparse.ArgumentParser(prog="python -m tensortools.demo", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short timings, without torch.compile")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    bench.quiet_profiler()
    print(
        f"tensortools {tensortools.__version__} (torch {torch.__version__}, "
        f"{'with' if tensortools.with_cuda else 'without'} CUDA kernels)"
    )
    # A bar on stderr where it is a terminal (the timings take most of the run); none in
    # a pipe or a log, whose reader gets the tables alone.
    steps = [
        ("ScalarTensor", scalar_tensor),
        ("MetadataTensor", metadata_tensor),
        ("LoggingTensor", logging_tensor),
        ("the LLTM against its reference", lltm_agreement),
        ("the LLTM on typed tensors", lltm_on_types),
        ("coverage", coverage_counts),
        ("timings: the LLTM cell", lambda: lltm_timings(args.quick, progress)),
    ]
    progress = Progress.on_terminal(len(steps) + 2, steps[0][0], unit="step")
    try:
        for i, (_, step) in enumerate(steps):
            step()
            progress.step(steps[i + 1][0] if i + 1 < len(steps) else None)
    finally:
        progress.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
