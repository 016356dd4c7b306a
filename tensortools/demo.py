"""The tensortools demo: ``python -m tensortools.demo [--quick]``.

Runs the LLTM cell through the fused C++ kernel and through the plain-PyTorch reference,
shows that they agree (values and gradients), and prints a timing table.
"""

from __future__ import annotations

import argparse
import sys

import torch

import tensortools
from tensortools import bench, nn, reference


def _section(title: str) -> None:
    print(f"\n== {title} ==")


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
    rows = bench.lltm_rows(compile=not quick, min_run_time=0.1 if quick else 0.2,
                           rounds=2 if quick else 3)
    print(bench.format_table(rows))
    print("speed-up = reference (eager) median / variant median; "
          "full benchmarks: python -m tensortools.bench")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tensortools.demo", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="short timings, without torch.compile")
    args = parser.parse_args(argv)
    print(f"tensortools {tensortools.__version__} (torch {torch.__version__}, "
          f"{'with' if tensortools.with_cuda else 'without'} CUDA kernels)")
    lltm_agreement()
    lltm_timings(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
