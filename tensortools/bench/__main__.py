"""python -m tensortools.bench: the fused operators against plain PyTorch (LLTM timings
and kernel counts, the LLTM over whole sequences, conv-bn memory and time), ScalarTensor's
structured handlers against the dense matrix, the per-call cost of the tensor types, and
calls on a batch. --save-baseline and --compare record and compare the rows a change to a
hot path must keep (docs/performance.md)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import signal
import sys

import torch

from tensortools._progress import Progress
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
from tensortools.bench.compare import compare, format_comparison, load_results
from tensortools.bench.compiled import compiled_rows, format_compiled_table
from tensortools.bench.options import build_parser, resolve
from tensortools.bench.peers import BATCH, batch_rows, format_peer_table, peer_rows
from tensortools.bench.per_sample import (
    PER_SAMPLE_SIZES,
    PER_SAMPLE_STEPS,
    format_per_sample_table,
    per_sample_rows,
)
from tensortools.bench.recurrent import (
    format_recurrent_table,
    recurrent_rows,
)
from tensortools.bench.scalar import (
    OPERATOR_SIZES,
    SCALAR_SIZES,
    format_scalar_table,
    operator_rows,
    scalar_rows,
)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    interrupted = False
    quiet_profiler()
    baseline = None
    if args.compare:
        try:
            baseline = load_results(args.compare)
        except ValueError as exc:
            parser.error(str(exc))
    resolve(args)

    machine = machine_summary()
    print(f"machine: {machine}")
    # A bar on stderr naming what is being timed, where stderr is a terminal; nothing in a
    # pipe or a log, whose reader gets the tables alone.
    bar = Progress.on_terminal(None, "bench", unit="case", delay=1.0)

    def progress(what: str) -> None:
        bar.step(f"timing {what}")

    cuda = torch.device(args.device).type == "cuda"
    dtypes = args.dtype or (["float32", "bfloat16"] if cuda else ["float32"])
    results: dict[str, object] = {"machine": machine}
    results["recorded"] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(
            ["python -m tensortools.bench", *(sys.argv[1:] if argv is None else argv)]
        ),
        "min_run_time": args.min_run_time,
        "rounds": args.rounds,
    }
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
        structured = (
            []
            if args.scalar_operators_only
            else scalar_rows(
                args.scalar_size or SCALAR_SIZES,
                device=args.device,
                min_run_time=args.min_run_time,
                rounds=args.rounds,
                progress=progress,
            )
        )
        results["scalar"] = structured + operator_rows(  # tensortools.ops, ScalarTensor
            args.scalar_size or OPERATOR_SIZES,
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
    if not args.no_batch and not cuda:  # (CPU calls: a GPU run leaves them out)
        print(f"\nCalls on a batch of {BATCH} (float32, CPU, one intra-op thread)")
        results["batch"] = batch_rows(
            min_run_time=args.min_run_time, rounds=args.rounds, progress=progress
        )
        print(format_peer_table(results["batch"]))
    if args.recurrent:
        print(f"\nThe LLTM against torch's recurrent layers ({args.device})")
        results["recurrent"] = []
        # SIGTERM (a time limit's `timeout`) as Ctrl-C: the cases measured so far are kept.
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            for name in dtypes:
                recurrent_rows(
                    args.recurrent_sizes,
                    args.recurrent_steps,
                    dtype=getattr(torch, name),
                    device=args.device,
                    min_run_time=args.min_run_time,
                    rounds=args.rounds,
                    cells=args.recurrent_cells,
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
        if not args.no_compile:
            print(f"\nCompiled over batches of {BATCH}: MetadataTensor, MONAI, plain (CPU)")
            results["peers_compiled"] = compiled_rows(
                min_run_time=args.min_run_time, rounds=args.rounds, progress=progress
            )
            print(format_compiled_table(results["peers_compiled"]))
    bar.close()
    as_data = {
        key: [dataclasses.asdict(r) for r in value] if isinstance(value, list) else value
        for key, value in results.items()
    }
    for path in dict.fromkeys(p for p in (args.json, args.save_baseline) if p):
        with open(path, "w") as f:
            json.dump(as_data, f, indent=1)
    if baseline is not None:
        print(f"\nToday's ratios beside those of {args.compare}")
        print(format_comparison(compare(baseline, as_data), baseline, as_data))
    if args.plot:
        from tensortools.bench.plot import plot_results

        plot_results(as_data, args.plot)
        print(f"\nplot written to {args.plot}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
