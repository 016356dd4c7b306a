"""The command line of ``python -m tensortools.bench``: its options, and the selections
some of them make (--quick, --save-baseline and --compare, the --...-only options)."""

from __future__ import annotations

import argparse

from tensortools.bench.lltm import LLTM_SIZES
from tensortools.bench.lltm_sequence import SEQUENCE_STEPS
from tensortools.bench.peers import BATCH
from tensortools.bench.per_sample import PER_SAMPLE_SIZES, PER_SAMPLE_STEPS
from tensortools.bench.recurrent import RECURRENT_SIZES, RECURRENT_STEPS
from tensortools.bench.scalar import SCALAR_SIZES

__all__ = [
    "BASELINE_LLTM_SIZES",
    "BASELINE_RECURRENT_SIZES",
    "BASELINE_RECURRENT_STEPS",
    "BASELINE_SCALAR_SIZES",
    "DESCRIPTION",
    "QUICK",
    "build_parser",
    "resolve",
]

DESCRIPTION = (
    "The fused operators against plain PyTorch (LLTM timings and kernel counts, the LLTM "
    "over whole sequences, conv-bn memory and time), ScalarTensor's structured handlers "
    "against the dense matrix, the per-call cost of the tensor types, and calls on a "
    "batch. --save-baseline and --compare record and compare the rows a change to a hot "
    "path must keep (docs/performance.md)."
)
#: The baseline's rows (--save-baseline, --compare): the LLTM cell at these sizes (eager
#: and fused, no torch.compile), the per-call cost of the types, the calls on a batch,
#: nn.LLTMSequence against nn.LSTM at these sizes and lengths, and tensortools.ops with a
#: ScalarTensor against the dense matrix at these N.
BASELINE_LLTM_SIZES = LLTM_SIZES[:2]
BASELINE_RECURRENT_SIZES, BASELINE_RECURRENT_STEPS = ((16, 32, 128),), (32,)
BASELINE_SCALAR_SIZES = (256,)
#: --quick: timed seconds per measurement and round, and rounds.
QUICK = (0.1, 2)


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
    parser = argparse.ArgumentParser(prog="python -m tensortools.bench", description=DESCRIPTION)
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
        help=f"timed seconds per measurement and round (default 0.5; {QUICK[0]} with --quick)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help=f"interleaved rounds per measurement (default 3; {QUICK[1]} with --quick)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short measurements (a look, e.g. for --compare; their spread widens the noise)",
    )
    parser.add_argument(
        "--save-baseline",
        metavar="PATH",
        help="time the baseline's rows alone (the LLTM cell at "
        + " and ".join("/".join(map(str, s)) for s in BASELINE_LLTM_SIZES)
        + ", the per-call cost of the types, the calls on a batch, nn.LLTMSequence against "
        "nn.LSTM) and write them as JSON to PATH (docs/bench/cpu.json: on a quiet machine)",
    )
    parser.add_argument(
        "--compare",
        metavar="PATH",
        help="time the baseline's rows (as --save-baseline; the --no-... options leave some "
        "out) and print each ratio beside the one saved in PATH, marking those that moved "
        "beyond their noise",
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
        "--no-batch",
        action="store_true",
        help=f"leave out the calls on a batch of {BATCH} (one intra-op thread)",
    )
    parser.add_argument(
        "--no-recurrent",
        action="store_true",
        help="leave out nn.LLTMSequence against nn.LSTM from the baseline's rows",
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
        "batch, a batch's round trip, and unless --no-compile a compiled chain and training "
        "step over batches; MONAI's rows need monai installed)",
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


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Apply the selections the options make, in place: --quick's timing where none is
    given, the --...-only options, and the baseline's rows for --save-baseline and
    --compare. Sets ``recurrent_sizes``, ``recurrent_steps``, ``recurrent_cells`` and
    ``scalar_operators_only`` (the ScalarTensor table's operator rows alone)."""
    if args.min_run_time is None:
        args.min_run_time = QUICK[0] if args.quick else 0.5
    if args.rounds is None:
        args.rounds = QUICK[1] if args.quick else 3
    if args.peers_only or args.recurrent_only or args.per_sample_only:
        args.no_lltm = args.no_sequence = args.no_conv_bn = args.no_scalar = True
        args.no_dispatch = args.no_batch = True
        args.peers |= args.peers_only
        args.recurrent |= args.recurrent_only
        args.per_sample |= args.per_sample_only
    baseline = bool(args.compare or args.save_baseline)
    # --size and --steps pick the recurrent cases too
    args.recurrent_sizes = args.size or (BASELINE_RECURRENT_SIZES if baseline else RECURRENT_SIZES)
    args.recurrent_steps = args.steps or (BASELINE_RECURRENT_STEPS if baseline else RECURRENT_STEPS)
    args.recurrent_cells = not baseline
    args.scalar_operators_only = baseline
    if baseline:
        args.no_compile = args.no_sequence = args.no_conv_bn = True
        args.scalar_size = args.scalar_size or list(BASELINE_SCALAR_SIZES)
        args.size = args.size or list(BASELINE_LLTM_SIZES)
        args.recurrent = not args.no_recurrent
    return args
