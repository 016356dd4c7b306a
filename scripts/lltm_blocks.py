"""Step times of the LLTM sequence's persistent kernels against the size of their grid.

    python scripts/lltm_blocks.py [--json PATH]

For each case (batch/features/state, 128 steps, float32) and phase (inference: the
forward alone; training: forward and backward), the median time per step over CUDA-event
timed calls with the grid capped at 8, 16, 32, 64 and all blocks
(tensortools.ops.set_lltm_sequence_options(max_blocks=N)), beside the per-step loop and
nn.LSTM (cuDNN). Needs a GPU and a CUDA build of tensortools.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from tensortools import nn, ops

CASES = [(16, 32, 128), (64, 1024, 128), (32, 256, 512)]
CAPS = ["8", "16", "32", "64", "all", "loop"]
STEPS = 128


def median_ms(fn, runs: int = 30) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    torch.manual_seed(0)
    defaults = ops.lltm_sequence_options()
    rows = []
    print(
        f"{'case':<12} {'phase':<10} " + " ".join(f"{c:>8}" for c in [*CAPS, "LSTM"]) + "  us/step"
    )
    for batch, features, state in CASES:
        g = {"device": "cuda", "dtype": torch.float32}
        lltm = nn.LLTMSequence(features, state, **g)
        lstm = torch.nn.LSTM(features, state, **g)
        x = torch.randn(STEPS, batch, features, **g)
        h, c = torch.randn(batch, state, **g), torch.randn(batch, state, **g)
        for phase in ("inference", "training"):

            def run(layer, state_):
                if phase == "inference":
                    with torch.inference_mode():
                        layer(x, state_)
                else:
                    out, (h_n, c_n) = layer(x, state_)
                    torch.autograd.grad((out.sum() + h_n.sum()), list(layer.parameters()))

            per_step = {}
            for cap in CAPS:
                ops.set_lltm_sequence_options(
                    mode="loop" if cap == "loop" else "auto",
                    max_blocks=None if cap in ("all", "loop") else int(cap),
                )
                per_step[cap] = median_ms(lambda: run(lltm, (h, c))) * 1e3 / STEPS
            ops.set_lltm_sequence_options(**defaults._asdict())
            per_step["LSTM"] = (
                median_ms(lambda: run(lstm, (h.unsqueeze(0), c.unsqueeze(0)))) * 1e3 / STEPS
            )
            case = f"{batch}/{features}/{state}"
            print(f"{case:<12} {phase:<10} " + " ".join(f"{v:>8.2f}" for v in per_step.values()))
            rows.append({"case": case, "phase": phase, "us_per_step": per_step})
    print(f"device: {torch.cuda.get_device_name()}, T={STEPS}, float32, median of 30 calls")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"device": torch.cuda.get_device_name(), "steps": STEPS, "rows": rows}, f, indent=1
            )


if __name__ == "__main__":
    main()
