"""Plots of benchmark results (the JSON ``python -m tensortools.bench --json`` writes).

``python -m tensortools.bench.plot RESULTS.json OUT.png`` draws a saved run; the bench
command's ``--plot`` draws the run it just made. Needs matplotlib.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from typing import Any

__all__ = ["plot_results"]


def _bars(
    ax,
    groups: list[str],
    series: dict[str, list[float]],
    ylabel: str,
    title: str,
    log: bool = False,
    reference: float | None = None,
) -> None:
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, values, width, label=name)
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if log:
        ax.set_yscale("log")
    if reference is not None:
        ax.axhline(reference, color="grey", linewidth=0.8, linestyle="--")
    ax.legend(fontsize=7)


def _lltm_panel(ax, rows: list[dict]) -> None:
    base = {
        (tuple(r["size"]), r["dtype"], r["phase"]): r["median_us"]
        for r in rows
        if r["variant"] == "reference (eager)"
    }
    keys = sorted({(tuple(r["size"]), r["dtype"]) for r in rows})
    groups = [
        "/".join(map(str, size)) + ("" if dtype == "float32" else f"\n{dtype}")
        for size, dtype in keys
    ]
    series: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(keys))
    for r in rows:
        if r["phase"] == "forward+backward":
            i = keys.index((tuple(r["size"]), r["dtype"]))
            series[r["variant"]][i] = r["median_us"] / base[keys[i] + ("forward+backward",)]
    _bars(
        ax,
        groups,
        dict(series),
        "time ratio to eager (below 1: faster)",
        f"LLTM forward+backward ({rows[0]['device']})",
        reference=1.0,
    )


def _sequence_panel(ax, rows: list[dict]) -> None:
    keys = sorted({(tuple(r["size"]), r["steps"], r["dtype"]) for r in rows})
    groups = [
        "/".join(map(str, size)) + f" T={steps}" + ("" if dtype == "float32" else f"\n{dtype}")
        for size, steps, dtype in keys
    ]
    series: dict[str, list[float]] = defaultdict(lambda: [float("nan")] * len(keys))
    for r in rows:
        series[r["variant"]][keys.index((tuple(r["size"]), r["steps"], r["dtype"]))] = (
            r["gflops"] / r["gemm_gflops"]
        )
    _bars(
        ax,
        groups,
        dict(series),
        "GFLOP/s / large GEMM's",
        f"LLTM over a sequence, forward+backward ({rows[0]['device']})",
        reference=1.0,
    )


def _dispatch_panel(ax, rows: list[dict]) -> None:
    base = {
        (tuple(r["size"]), r["phase"]): r["median_us"]
        for r in rows
        if r["variant"] == "plain Tensor"
    }
    keys = sorted({(tuple(r["size"]), r["phase"]) for r in rows})
    groups = [
        ("1 elem" if size == (1,) else f"{size[0]}x{size[0]}") + f"\n{phase}"
        for size, phase in keys
    ]
    series: dict[str, list[float]] = defaultdict(lambda: [float("nan")] * len(keys))
    for r in rows:
        if r["variant"] != "plain Tensor":
            i = keys.index((tuple(r["size"]), r["phase"]))
            series[r["variant"]][i] = r["median_us"] / base[keys[i]]
    _bars(
        ax,
        groups,
        dict(series),
        "time ratio to plain Tensor (per call)",
        "Per-call cost of the tensor types",
        log=True,
        reference=1.0,
    )


def _scalar_panel(ax, rows: list[dict]) -> None:
    dense = {
        (r["size"][0], r["phase"]): r["median_us"] for r in rows if r["variant"] == "dense matrix"
    }
    keys = sorted(dense)
    groups = [f"N={n}\n{op}" for n, op in keys]
    series: dict[str, list[float]] = defaultdict(lambda: [float("nan")] * len(keys))
    for r in rows:
        if r["variant"] != "dense matrix":
            i = keys.index((r["size"][0], r["phase"]))
            series[r["variant"]][i] = r["median_us"] / dense[keys[i]]
    _bars(
        ax,
        groups,
        dict(series),
        "time ratio to the dense matrix",
        "ScalarTensor structured vs dense",
        log=True,
        reference=1.0,
    )


def _conv_bn_panel(ax, rows: list[dict]) -> None:
    base = rows[0]
    metrics = [
        ("saved for backward", "saved_bytes"),
        ("peak memory", "peak_bytes"),
        ("forward+backward time", "median_us"),
    ]
    series = {r["variant"]: [r[key] / base[key] for _, key in metrics] for r in rows}
    _bars(
        ax,
        [m for m, _ in metrics],
        series,
        f"ratio to {base['variant']}",
        f"Two conv-bn layers, batch {base['batch']}, training step",
        reference=1.0,
    )


def plot_results(results: dict[str, Any], path: str) -> None:
    """Draw each section present in `results` (lltm, sequence, dispatch, scalar, conv_bn) into one
    figure, saved to `path` (its suffix picks the format)."""
    try:
        import matplotlib
    except ImportError as exc:
        raise RuntimeError("plotting needs matplotlib (pip install matplotlib)") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        (name, draw)
        for name, draw in (
            ("lltm", _lltm_panel),
            ("sequence", _sequence_panel),
            ("dispatch", _dispatch_panel),
            ("scalar", _scalar_panel),
            ("conv_bn", _conv_bn_panel),
        )
        if results.get(name)
    ]
    if not panels:
        raise ValueError("plot_results: 'results' holds no rows to plot")
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 4 * len(panels)), squeeze=False)
    for ax, (name, draw) in zip(axes[:, 0], panels):
        draw(ax, results[name])
    fig.suptitle(results.get("machine", ""), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    """The command line parser (its options and their help)."""
    parser = argparse.ArgumentParser(prog="python -m tensortools.bench.plot", description=__doc__)
    parser.add_argument("results", help="JSON written by python -m tensortools.bench --json")
    parser.add_argument("output", help="image to write (.png, .svg, .pdf)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    with open(args.results) as f:
        plot_results(json.load(f), args.output)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
