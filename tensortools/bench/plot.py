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

__all__ = ["figure", "plot_results"]


def _uncertain(*rows: dict) -> bool:
    """Whether a value computed from these rows is marked ``?`` in the tables: one of them
    was noisy or stalled by the scheduler."""
    return any(r.get("noisy") or r.get("stalled") for r in rows)


def _bars(
    ax,
    groups: list[str],
    series: dict[str, list[float]],
    ylabel: str,
    title: str,
    log: bool = False,
    reference: float | None = None,
    uncertain: dict[str, list[bool]] | None = None,
) -> None:
    """Grouped bars, one series a colour. A value marked uncertain (``?`` in the tables) is
    drawn faded and hatched; the legend stands outside the axes, beside them, so that it
    hides no bar."""
    from matplotlib.patches import Patch

    width = 0.8 / max(1, len(series))
    any_uncertain = False
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, values, width, label=name)
        for bar, unsure in zip(bars, (uncertain or {}).get(name, [False] * len(values))):
            if unsure:
                any_uncertain = True
                bar.set_alpha(0.4)
                bar.set_hatch("///")
                bar.set_edgecolor("black")
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if log:
        ax.set_yscale("log")
    if reference is not None:
        ax.axhline(reference, color="grey", linewidth=0.8, linestyle="--")
    handles, labels = ax.get_legend_handles_labels()
    if any_uncertain:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", alpha=0.6))
        labels.append("uncertain (? in the table)")
    ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _lltm_panel(ax, rows: list[dict]) -> None:
    base = {
        (tuple(r["size"]), r["dtype"], r["phase"]): r
        for r in rows
        if r["variant"] == "reference (eager)"
    }
    keys = sorted({(tuple(r["size"]), r["dtype"]) for r in rows})
    groups = [
        "/".join(map(str, size)) + ("" if dtype == "float32" else f"\n{dtype}")
        for size, dtype in keys
    ]
    series: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(keys))
    unsure: dict[str, list[bool]] = defaultdict(lambda: [False] * len(keys))
    for r in rows:
        if r["phase"] == "forward+backward":
            i = keys.index((tuple(r["size"]), r["dtype"]))
            b = base[keys[i] + ("forward+backward",)]
            series[r["variant"]][i] = r["median_us"] / b["median_us"]
            unsure[r["variant"]][i] = _uncertain(r, b)
    _bars(
        ax,
        groups,
        dict(series),
        "time ratio to eager (below 1: faster)",
        f"LLTM forward+backward ({rows[0]['device']})",
        reference=1.0,
        uncertain=unsure,
    )


def _sequence_panel(ax, rows: list[dict]) -> None:
    keys = sorted({(tuple(r["size"]), r["steps"], r["dtype"]) for r in rows})
    groups = [
        "/".join(map(str, size)) + f" T={steps}" + ("" if dtype == "float32" else f"\n{dtype}")
        for size, steps, dtype in keys
    ]
    series: dict[str, list[float]] = defaultdict(lambda: [float("nan")] * len(keys))
    unsure: dict[str, list[bool]] = defaultdict(lambda: [False] * len(keys))
    for r in rows:
        i = keys.index((tuple(r["size"]), r["steps"], r["dtype"]))
        series[r["variant"]][i] = r["gflops"] / r["gemm_gflops"]
        unsure[r["variant"]][i] = _uncertain(r)
    _bars(
        ax,
        groups,
        dict(series),
        "GFLOP/s / large GEMM's",
        f"LLTM over a sequence, forward+backward ({rows[0]['device']})",
        reference=1.0,
        uncertain=unsure,
    )


def _dispatch_panel(ax, rows: list[dict]) -> None:
    base = {(tuple(r["size"]), r["phase"]): r for r in rows if r["variant"] == "plain Tensor"}
    keys = sorted({(tuple(r["size"]), r["phase"]) for r in rows})
    groups = [
        ("1 elem" if size == (1,) else f"{size[0]}x{size[0]}") + f"\n{phase}"
        for size, phase in keys
    ]
    series: dict[str, list[float]] = defaultdict(lambda: [float("nan")] * len(keys))
    unsure: dict[str, list[bool]] = defaultdict(lambda: [False] * len(keys))
    for r in rows:
        if r["variant"] != "plain Tensor":
            i = keys.index((tuple(r["size"]), r["phase"]))
            series[r["variant"]][i] = r["median_us"] / base[keys[i]]["median_us"]
            unsure[r["variant"]][i] = _uncertain(r, base[keys[i]])
    _bars(
        ax,
        groups,
        dict(series),
        "time ratio to plain Tensor (per call)",
        "Per-call cost of the tensor types",
        log=True,
        reference=1.0,
        uncertain=unsure,
    )


def _scalar_panel(ax, rows: list[dict]) -> None:
    dense = {(r["size"][0], r["phase"]): r for r in rows if r["variant"] == "dense matrix"}
    keys = sorted(dense)
    groups = [f"{op}  N={n}" for n, op in keys]
    series: dict[str, list[float]] = defaultdict(lambda: [float("nan")] * len(keys))
    unsure: dict[str, list[bool]] = defaultdict(lambda: [False] * len(keys))
    for r in rows:
        if r["variant"] != "dense matrix":
            i = keys.index((r["size"][0], r["phase"]))
            series[r["variant"]][i] = r["median_us"] / dense[keys[i]]["median_us"]
            unsure[r["variant"]][i] = _uncertain(r, dense[keys[i]])
    _bars(
        ax,
        groups,
        dict(series),
        "time ratio to the dense matrix",
        "ScalarTensor structured vs dense",
        log=True,
        reference=1.0,
        uncertain=unsure,
    )
    ax.tick_params(axis="x", labelrotation=90, labelsize=6)  # one bar a call: many groups


def _conv_bn_panel(ax, rows: list[dict]) -> None:
    base = rows[0]
    metrics = [
        ("saved for backward", "saved_bytes"),
        ("peak memory", "peak_bytes"),
        ("forward+backward time", "median_us"),
    ]
    series = {r["variant"]: [r[key] / base[key] for _, key in metrics] for r in rows}
    # Memory is counted, not timed: only the time can be uncertain.
    unsure = {r["variant"]: [False, False, _uncertain(r, base)] for r in rows}
    _bars(
        ax,
        [m for m, _ in metrics],
        series,
        f"ratio to {base['variant']}",
        f"Two conv-bn layers, batch {base['batch']}, training step",
        reference=1.0,
        uncertain=unsure,
    )


def figure(results: dict[str, Any]):
    """A matplotlib figure of each section present in `results` (lltm, sequence, dispatch,
    scalar, conv_bn), one panel each."""
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
    return fig


def plot_results(results: dict[str, Any], path: str) -> None:
    """Draw `results` (see `figure`) into `path` (its suffix picks the format)."""
    fig = figure(results)  # picks the Agg backend before pyplot is imported here
    import matplotlib.pyplot as plt

    # bbox_inches="tight" keeps the legends, which stand beside the axes, in the image.
    fig.savefig(path, dpi=110, bbox_inches="tight")
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
