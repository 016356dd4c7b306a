"""python -m tensortools.bench: the fused operators against plain PyTorch (LLTM timings
and kernel counts, the LLTM over whole sequences, conv-bn memory and time), ScalarTensor's
structured handlers against
the dense matrix, and the per-call cost of the tensor types."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time

import torch

from tensortools.bench import (
    LLTM_SIZES,
    SEQUENCE_SIZES,
    SEQUENCE_STEPS,
    compiled_chain_rows,
    conv_bn_rows,
    dispatch_rows,
    format_conv_bn_table,
    format_dispatch_table,
    format_sequence_table,
    format_table,
    lltm_rows,
    lltm_verdict,
    machine_summary,
    quiet_profiler,
    sequence_rows,
)
from tensortools.bench.peers import format_peer_table, peer_rows
from tensortools.bench.per_sample import (
    PER_SAMPLE_SIZES,
    PER_SAMPLE_STEPS,
    format_per_sample_table,
    per_sample_rows,
)
from tensortools.bench.recurrent import (
    RECURRENT_SIZES,
    RECURRENT_STEPS,
    format_recurrent_table,
    recurrent_rows,
)
from tensortools.bench.scalar import SCALAR_SIZES, format_scalar_table, scalar_rows


def _size(text: str) -> tuple[int, int, int]:
    try:
        batch, features, state = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"size must be B/F/S, e.g. 16/32/128, got {text!r}"
        ) from None
    return batch, features, state


def build_parser() -> argparse.ArgumentParser:
    """The command line parser (its options and their help)."""
    parser = argparse.ArgumentParser(prog="python -m tensortools.bench", description=__doc__)
    parser.add_argument(
        "--size",
        type=_size,
        action="append",
        help="LLTM B/F/S (repeatable); default: "
        + ", ".join("/".join(map(str, s)) for s in LLTM_SIZES),
    )
    parser.add_argument(
        "--dtype",
        action="append",
        choices=["float32", "float64", "bfloat16", "float16"],
        help="LLTM dtype (repeatable); default float32, and bfloat16 too on a GPU",
    )
    parser.add_argument(
        "--device", default="cpu", help="device to time on: cpu (default), cuda or cuda:N"
    )
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="leave out torch.compile (of the LLTM reference, and of a MetadataTensor function)",
    )
    parser.add_argument(
        "--min-run-time",
        type=float,
        default=0.5,
        help="timed seconds per measurement and round (default 0.5)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds per measurement (default 3)"
    )
    parser.add_argument(
        "--input-sets",
        type=int,
        default=8,
        help="LLTM input sets that successive calls cycle through (default 8)",
    )
    parser.add_argument("--no-lltm", action="store_true", help="leave out the LLTM cell rows")
    parser.add_argument(
        "--no-sequence",
        action="store_true",
        help="leave out the LLTM over whole sequences (whose compiled loops take minutes)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        action="append",
        help="sequence lengths for the sequence rows (repeatable); default: "
        + ", ".join(map(str, SEQUENCE_STEPS)),
    )
    parser.add_argument(
        "--no-dispatch", action="store_true", help="leave out the per-call cost of the tensor types"
    )
    parser.add_argument(
        "--no-conv-bn",
        action="store_true",
        help="leave out fused against unfused Conv2d + BatchNorm2d",
    )
    parser.add_argument(
        "--conv-bn-batch",
        type=int,
        default=256,
        help="batch of 1x28x28 images for the conv-bn rows (default 256)",
    )
    parser.add_argument(
        "--no-scalar", action="store_true", help="leave out ScalarTensor structured against dense"
    )
    parser.add_argument(
        "--scalar-size",
        type=int,
        action="append",
        help="N for the ScalarTensor rows (repeatable); default: "
        + ", ".join(map(str, SCALAR_SIZES)),
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="also time MetadataTensor against MONAI's MetaTensor (per call, indexing a "
        "batch, a batch's round trip; MONAI's rows need monai installed)",
    )
    parser.add_argument(
        "--peers-only",
        action="store_true",
        help="time only the MetadataTensor and MONAI rows of --peers",
    )
    parser.add_argument(
        "--recurrent",
        action="store_true",
        help="also time nn.LLTMSequence against torch.nn.LSTM and nn.GRU, and nn.LLTM "
        "against nn.LSTMCell (training and inference; --size and --steps pick the cases)",
    )
    parser.add_argument(
        "--recurrent-only", action="store_true", help="time only the rows of --recurrent"
    )
    parser.add_argument(
        "--per-sample",
        action="store_true",
        help="also time per-sample gradients, vmap(grad) against a loop over samples, of "
        "nn.LLTMSequence and torch.nn.LSTM (--size N/F/S and --steps pick the cases; default: "
        + ", ".join("/".join(map(str, s)) for s in PER_SAMPLE_SIZES)
        + f", T={', '.join(map(str, PER_SAMPLE_STEPS))})",
    )
    parser.add_argument(
        "--per-sample-only", action="store_true", help="time only the rows of --per-sample"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--plot", metavar="PATH", help="also draw the results (PNG, SVG or PDF; needs matplotlib)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    interrupted = False
    quiet_profiler()
    if args.peers_only:
        args.peers = args.no_lltm = args.no_sequence = args.no_conv_bn = True
        args.no_scalar = args.no_dispatch = True
    if args.recurrent_only:
        args.recurrent = args.no_lltm = args.no_sequence = args.no_conv_bn = True
        args.no_scalar = args.no_dispatch = True
    if args.per_sample_only:
        args.per_sample = args.no_lltm = args.no_sequence = args.no_conv_bn = True
        args.no_scalar = args.no_dispatch = True

    machine = machine_summary()
    print(f"machine: {machine}")
    started = time.perf_counter()

    def progress(what: str) -> None:
        print(f"  [{time.perf_counter() - started:7.1f} s] timing {what}", file=sys.stderr)

    cuda = torch.device(args.device).type == "cuda"
    dtypes = args.dtype or (["float32", "bfloat16"] if cuda else ["float32"])
    results: dict[str, object] = {"machine": machine}
    if not args.no_lltm:
        lltm = []
        for name in dtypes:
            lltm += lltm_rows(
                args.size or LLTM_SIZES,
                dtype=getattr(torch, name),
                device=args.device,
                compile=not args.no_compile,
                min_run_time=args.min_run_time,
                rounds=args.rounds,
                input_sets=args.input_sets,
                progress=progress,
            )
        print(format_table(lltm))
        print("\n".join(lltm_verdict(lltm)))
        print(
            "kernels: per call, from torch.profiler (device kernels on a GPU; operators that "
            "compute on the CPU)"
        )
        results["lltm"] = lltm
    if not args.no_sequence:
        print(f"\nThe LLTM over whole sequences, forward+backward ({args.device})")
        results["sequence"] = []
        for name in dtypes:
            results["sequence"] += sequence_rows(
                args.size or SEQUENCE_SIZES,
                args.steps or SEQUENCE_STEPS,
                dtype=getattr(torch, name),
                device=args.device,
                compile=not args.no_compile,
                min_run_time=args.min_run_time,
                rounds=args.rounds,
                progress=progress,
            )
        print(format_sequence_table(results["sequence"]))
    if not args.no_conv_bn:
        print(
            f"\nTwo conv-bn layers, training step on {args.conv_bn_batch} x 1x28x28 "
            f"(float32, {args.device})"
        )
        results["conv_bn"] = conv_bn_rows(
            args.conv_bn_batch,
            device=args.device,
            min_run_time=args.min_run_time,
            rounds=args.rounds,
            progress=progress,
        )
        print(format_conv_bn_table(results["conv_bn"]))
    if not args.no_scalar:
        print(f"\nScalarTensor structured against the dense matrix (float32, {args.device})")
        results["scalar"] = scalar_rows(
            args.scalar_size or SCALAR_SIZES,
            device=args.device,
            min_run_time=args.min_run_time,
            rounds=args.rounds,
            progress=progress,
        )
        print(format_scalar_table(results["scalar"]))
    if not args.no_dispatch:
        print("\nPer-call cost of the tensor types (float32, CPU)")
        results["dispatch"] = dispatch_rows(min_run_time=args.min_run_time, rounds=args.rounds)
        print(format_dispatch_table(results["dispatch"]))
        if not args.no_compile:
            print("\nA compiled function of ten pointwise operations (float32, CPU)")
            results["compiled"] = compiled_chain_rows(
                min_run_time=args.min_run_time, rounds=args.rounds
            )
            print(format_dispatch_table(results["compiled"]))
    if args.recurrent:
        print(f"\nThe LLTM against torch's recurrent layers ({args.device})")
        results["recurrent"] = []
        # SIGTERM (a time limit's `timeout`) as Ctrl-C: the cases measured so far are kept.
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            for name in dtypes:
                recurrent_rows(
                    args.size or RECURRENT_SIZES,
                    args.steps or RECURRENT_STEPS,
                    dtype=getattr(torch, name),
                    device=args.device,
                    min_run_time=args.min_run_time,
                    rounds=args.rounds,
                    progress=progress,
                    into=results["recurrent"],
                )
        except KeyboardInterrupt:
            interrupted = True
            print("(interrupted: the cases measured until then)")
        finally:
            signal.signal(signal.SIGTERM, previous)
        print(format_recurrent_table(results["recurrent"]))
    if args.per_sample:
        print(f"\nPer-sample gradients: vmap(grad) against a loop over samples ({args.device})")
        results["per_sample"] = []
        for name in dtypes:
            results["per_sample"] += per_sample_rows(
                args.size or PER_SAMPLE_SIZES,
                args.steps or PER_SAMPLE_STEPS,
                dtype=getattr(torch, name),
                device=args.device,
                min_run_time=args.min_run_time,
                rounds=args.rounds,
                progress=progress,
            )
        print(format_per_sample_table(results["per_sample"]))
    if args.peers:
        print("\nMetadataTensor beside MONAI's MetaTensor (float32, CPU)")
        results["peers"] = peer_rows(min_run_time=args.min_run_time, rounds=args.rounds)
        print(format_peer_table(results["peers"]))
    as_data = {
        key: value if isinstance(value, str) else [dataclasses.asdict(r) for r in value]
        for key, value in results.items()
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(as_data, f, indent=1)
    if args.plot:
        from tensortools.bench.plot import plot_results

        plot_results(as_data, args.plot)
        print(f"\nplot written to {args.plot}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
