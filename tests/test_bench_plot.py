"""The benchmark figure (tensortools.bench.plot) says what is uncertain and hides nothing:
values marked ``?`` in the tables are drawn faded and hatched, reliable ones plainly, and
each panel's legend stands outside its axes. Judged on the figure's objects, from rows made
here (no timing)."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("matplotlib")

from tensortools.bench.plot import figure  # noqa: E402

SIZES = ([16, 32, 128], [64, 1024, 128])


def _lltm_rows(unsure: set[tuple[int, str]]) -> list[dict]:
    """LLTM rows of both sizes; (size index, variant) in `unsure` marked noisy."""
    rows = []
    for (i, size), (variant, us) in itertools.product(
        enumerate(SIZES), [("reference (eager)", 100.0), ("tensortools op", 60.0)]
    ):
        rows.append(
            {
                "size": size,
                "dtype": "float32",
                "device": "cpu",
                "variant": variant,
                "phase": "forward+backward",
                "median_us": us * (i + 1),
                "noisy": (i, variant) in unsure,
                "stalled": False,
            }
        )
    return rows


def _dispatch_rows(stalled_variant: str) -> list[dict]:
    return [
        {
            "size": [1],
            "dtype": "float32",
            "device": "cpu",
            "variant": v,
            "phase": "torch.add",
            "median_us": us,
            "noisy": False,
            "stalled": v == stalled_variant,
        }
        for v, us in (("plain Tensor", 1.0), ("MetadataTensor", 2.5), ("ScalarTensor", 4.0))
    ]


def _bars(ax) -> dict[tuple[str, int], object]:
    """The axes' bars by (series label, group index)."""
    out = {}
    for container in ax.containers:
        for i, bar in enumerate(container):
            out[(container.get_label(), i)] = bar
    return out


@pytest.mark.parametrize(
    "unsure",
    [set(), {(0, "tensortools op")}, {(1, "reference (eager)")}, {(0, "reference (eager)")}],
    ids=["none", "op-small", "base-large", "base-small"],
)
def test_uncertain_values_are_drawn_faded_and_hatched_and_only_they(unsure):
    import matplotlib.pyplot as plt

    fig = figure({"lltm": _lltm_rows(unsure), "dispatch": _dispatch_rows("ScalarTensor")})
    try:
        lltm_ax, dispatch_ax = fig.axes
        for (label, group), bar in _bars(lltm_ax).items():
            # a ratio is uncertain when its row or its baseline (eager, same size) is
            expected = (group, label) in unsure or (group, "reference (eager)") in unsure
            assert bool(bar.get_hatch()) == expected, (label, group)
            assert (bar.get_alpha() is not None and bar.get_alpha() < 1) == expected
        bars = _bars(dispatch_ax)
        assert bars[("ScalarTensor", 0)].get_hatch() and not bars[("MetadataTensor", 0)].get_hatch()
    finally:
        plt.close(fig)


def test_legends_stand_outside_their_axes_and_name_the_uncertain_mark():
    import matplotlib.pyplot as plt

    fig = figure({"lltm": _lltm_rows({(0, "tensortools op")}), "dispatch": _dispatch_rows("")})
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            box, axes_box = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
            assert box.x0 >= axes_box.x1, "the legend overlaps its axes"
        lltm_labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        dispatch_labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
        assert any("uncertain" in label for label in lltm_labels)
        assert not any("uncertain" in label for label in dispatch_labels)  # nothing uncertain
    finally:
        plt.close(fig)
