"""The tensortools demo: ``python -m tensortools.demo [--quick]``.

Shows the three tensor types at work, runs the LLTM cell through the fused C++ kernel
and through the plain-PyTorch reference, shows that they agree (values and gradients),
and prints timing tables: the LLTM, and the per-call cost of each tensor type.
"""

from __future__ import annotations

import argparse
import sys

import torch

import tensortools
from tensortools import (LoggingTensor, MetadataTensor, ScalarTensor, bench, capture_logs, nn,
                         ops, reference)


def _section(title: str) -> None:
    print(f"\n== {title} ==")


def tensor_types() -> None:
    _section("Tensor types")
    d = ScalarTensor(3, 2.5)
    t = torch.arange(9.0).reshape(3, 3)
    print(f"d = {d!r}  (value * I_3, stored as two numbers)")
    print(f"  d + d    -> {d + d!r}")
    print(f"  d @ t    == 2.5 * t: {torch.equal(d @ t, 2.5 * t)}  (one scaling pass, no matmul)")
    print(f"  t + d    == t + d.tensor(): {torch.equal(t + d, t + d.tensor())}")
    print(f"  det(d)   -> {torch.det(d).item()}  (2.5 ** 3)")
    print(f"  exp(d)   -> dense {tuple(torch.exp(d).shape)} tensor (no handler: fallback)")

    m = MetadataTensor(torch.tensor([1.0, 2.0, 3.0]), metadata={"units": "m", "run": 7})
    y = torch.nn.functional.relu(m * 2 - 3).sum()
    print(f"MetadataTensor through relu(m * 2 - 3).sum(): value {y.item()}, "
          f"metadata {y.metadata}")

    x = LoggingTensor(torch.randn(4, 8))
    with capture_logs() as logs:
        torch.tanh(x @ x.T).mean()
    print("LoggingTensor records of tanh(x @ x.T).mean():")
    for record in logs:
        print(f"  {record.function:<22} {record.arguments}")

    args = [torch.randn(2, 3), torch.randn(12, 7), torch.randn(12), torch.randn(2, 4),
            torch.randn(2, 4)]
    new_h, _ = ops.lltm(MetadataTensor(args[0], {"step": 1}), *args[1:])
    print(f"ops.lltm on a MetadataTensor input -> {type(new_h).__name__} with "
          f"metadata {new_h.metadata}")


def lltm_agreement() -> None:
    _section("LLTM: fused kernel vs plain PyTorch")
    torch.manual_seed(0)
    batch, features, state = 16, 32, 128
    cell = nn.LLTM(features, state).double()
    x = torch.randn(batch, features, dtype=torch.float64)
    h = torch.randn(batch, state, dtype=torch.float64)
    c = torch.randn(batch, state, dtype=torch.float64)
    grads = (torch.randn(batch, state, dtype=torch.float64),
             torch.randn(batch, state, dtype=torch.float64))
    params = list(cell.parameters())

    fused = cell(x, (h, c))
    fused_grads = torch.autograd.grad(fused, params, grads)
    ref = reference.lltm(x, cell.weights, cell.bias, h, c)
    ref_grads = torch.autograd.grad(ref, params, grads)

    print(f"nn.LLTM({features}, {state}) on a batch of {batch}, float64:")
    for name, a, b in [("new_h", fused[0], ref[0]), ("new_cell", fused[1], ref[1]),
                       ("grad weights", fused_grads[0], ref_grads[0]),
                       ("grad bias", fused_grads[1], ref_grads[1])]:
        print(f"  {name:<13} max |fused - reference| = {(a - b).abs().max().item():.2e}")


def lltm_timings(quick: bool) -> None:
    _section("LLTM timings (float32, CPU)")
    print(f"machine: {bench.machine_summary()}")
    rows = bench.lltm_rows(bench.LLTM_SIZES[:2], compile=not quick,
                           min_run_time=0.1 if quick else 0.2,
                           rounds=2 if quick else 3)
    print(bench.format_table(rows))
    print("speed-up = reference (eager) median / variant median; "
          "full benchmarks: python -m tensortools.bench")


def dispatch_costs(quick: bool) -> None:
    _section("Per-call cost of the tensor types (float32, CPU)")
    rows = bench.dispatch_rows(min_run_time=0.05 if quick else 0.2, rounds=1 if quick else 2)
    print(bench.format_dispatch_table(rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tensortools.demo", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="short timings, without torch.compile")
    args = parser.parse_args(argv)
    print(f"tensortools {tensortools.__version__} (torch {torch.__version__}, "
          f"{'with' if tensortools.with_cuda else 'without'} CUDA kernels)")
    tensor_types()
    lltm_agreement()
    lltm_timings(args.quick)
    dispatch_costs(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
