"""python -m tensortools.bench.bandwidth: the LLTM forward pointwise kernel's memory
throughput on a GPU, against a device-to-device copy measured in the same run.

The kernel reads the B×3S gates and old_cell and writes the gates, new_cell and new_h:
9·B·S elements. Its time is the CUDA kernel's own, from torch.profiler (the matrix
product before it is left out); the copy's bandwidth counts bytes read plus written.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from tensortools import ops
from tensortools.bench.profiling import quiet_profiler


def _kernel_times_us(fn, name_part: str, repeats: int) -> list[float]:
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    times = [e.device_time for e in prof.events() if name_part in e.name]
    if not times:
        raise RuntimeError(f"no CUDA kernel named like {name_part!r} was recorded")
    return times


def build_parser() -> argparse.ArgumentParser:
    """The command line parser (its options and their help)."""
    parser = argparse.ArgumentParser(
        prog="python -m tensortools.bench.bandwidth", description=__doc__
    )
    parser.add_argument("--batch", type=int, default=65536, help="LLTM batch B (default 65536)")
    parser.add_argument("--state", type=int, default=1024, help="LLTM state size S (default 1024)")
    parser.add_argument(
        "--features", type=int, default=32, help="LLTM input features F (default 32)"
    )
    parser.add_argument(
        "--repeats", type=int, default=20, help="kernel runs timed per measurement (default 20)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    quiet_profiler()
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure")
        return 0
    B, S, F = args.batch, args.state, args.features
    g = {"device": "cuda", "dtype": torch.float32}
    inputs = [
        torch.randn(B, F, **g),
        torch.randn(3 * S, S + F, **g) / (S + F) ** 0.5,
        torch.randn(3 * S, **g),
        torch.randn(B, S, **g),
        torch.randn(B, S, **g),
    ]
    with torch.no_grad():
        kernel = _kernel_times_us(lambda: ops.lltm(*inputs), "forward_kernel", args.repeats)
    src = torch.empty(B * S * 9 // 2, **g)
    dst = torch.empty_like(src)
    copy = _kernel_times_us(lambda: dst.copy_(src), "copy", args.repeats)
    moved = 9 * B * S * 4  # bytes the kernel reads and writes
    copied = 2 * src.numel() * 4  # read + write, the same number of bytes
    k_gbs = moved / statistics.median(kernel) / 1e3
    c_gbs = copied / statistics.median(copy) / 1e3
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(
        f"LLTM forward pointwise kernel, B={B} S={S}: median {statistics.median(kernel):.1f} us"
        f" over {len(kernel)} runs, {k_gbs:.0f} GB/s"
    )
    print(
        f"device-to-device copy of {copied / 2**30:.2f} GiB moved: median "
        f"{statistics.median(copy):.1f} us, {c_gbs:.0f} GB/s"
    )
    print(f"kernel / copy bandwidth: {k_gbs / c_gbs:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
