"""python -m tensortools.bench: the fused operators against plain PyTorch (LLTM timings,
conv-bn memory and time) and the per-call cost of the tensor types."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import torch

from tensortools.bench import (LLTM_SIZES, conv_bn_rows, dispatch_rows, format_conv_bn_table,
                               format_dispatch_table, format_table, lltm_rows,
                               machine_summary)


def _size(text: str) -> tuple[int, int, int]:
    try:
        batch, features, state = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be B/F/S, e.g. 16/32/128, got {text!r}")
    return batch, features, state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tensortools.bench", description=__doc__)
    parser.add_argument("--size", type=_size, action="append",
                        help="B/F/S (repeatable); default: 16/32/128 and 64/1024/128")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-compile", action="store_true",
                        help="leave out torch.compile of the reference")
    parser.add_argument("--min-run-time", type=float, default=0.5,
                        help="timed seconds per measurement and round (default 0.5)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds per measurement (default 3)")
    parser.add_argument("--no-dispatch", action="store_true",
                        help="leave out the per-call cost of the tensor types")
    parser.add_argument("--no-conv-bn", action="store_true",
                        help="leave out fused against unfused Conv2d + BatchNorm2d")
    parser.add_argument("--conv-bn-batch", type=int, default=256,
                        help="batch of 1x28x28 images for the conv-bn rows (default 256)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = parser.parse_args(argv)

    print(f"machine: {machine_summary()}")
    progress = lambda what: print(f"  timing {what}", file=sys.stderr)  # noqa: E731
    dtype = getattr(torch, args.dtype)
    rows = lltm_rows(args.size or LLTM_SIZES, dtype=dtype, device=args.device,
                     compile=not args.no_compile, min_run_time=args.min_run_time,
                     rounds=args.rounds, progress=progress)
    print(format_table(rows))
    if not args.no_conv_bn:
        print(f"\nTwo conv-bn layers, training step on {args.conv_bn_batch} x 1x28x28 "
              f"({args.dtype}, {args.device})")
        conv_bn = conv_bn_rows(args.conv_bn_batch, dtype=dtype, device=args.device,
                               min_run_time=args.min_run_time, rounds=args.rounds,
                               progress=progress)
        print(format_conv_bn_table(conv_bn))
        rows += conv_bn
    if not args.no_dispatch:
        print("\nPer-call cost of the tensor types (float32, CPU)")
        dispatch = dispatch_rows(min_run_time=args.min_run_time, rounds=args.rounds)
        print(format_dispatch_table(dispatch))
        rows += dispatch
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_summary(),
                       "rows": [dataclasses.asdict(r) for r in rows]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
