"""The report's plots, drawn with matplotlib and returned as inline SVG (no pyplot state, no files)."""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailcut.analysis._estimates import CategoryRate

_COLOURS = {"tail-kept": "#d62728", "baseline slice": "#1f77b4", "truth": "#2ca02c"}


def _svg(figure: Any) -> str:
    """The figure as an ``<svg>`` element (the XML prolog and DOCTYPE dropped)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _figure(width: float, height: float, columns: int = 1) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    axes = figure.subplots(1, columns)
    return figure, axes


def distribution_plot(distributions: Mapping[str, Mapping[str, Sequence[float]]]) -> str:
    """Histograms (log-spaced bins) of tokens and duration per trace, tail-kept vs baseline slice."""
    import numpy as np

    panels = [
        (name, values) for name, values in distributions.items() if any(len(v) for v in values.values())
    ]
    if not panels:
        return ""
    figure, axes = _figure(5.5 * len(panels), 3.4, len(panels))
    axes = np.atleast_1d(axes)
    for ax, (name, by_sample) in zip(axes, panels, strict=True):
        positive = [np.asarray(v, dtype=float) for v in by_sample.values() if len(v)]
        joined = np.concatenate(positive)
        joined = joined[joined > 0]
        low, high = (joined.min(), joined.max()) if joined.size else (1.0, 10.0)
        bins = np.geomspace(max(low, 1e-3), max(high, low * 1.01, 1e-3 * 1.01), 40)
        for sample, values in by_sample.items():
            data = np.asarray(values, dtype=float)
            data = data[data > 0]
            if data.size:
                ax.hist(
                    data,
                    bins=bins,
                    alpha=0.55,
                    density=True,
                    color=_COLOURS.get(sample),
                    label=f"{sample} (n={data.size})",
                )
        ax.set_xscale("log")
        ax.set_xlabel("tokens per trace" if name == "tokens" else "duration per trace (ms)")
        ax.set_ylabel("density")
        ax.legend(fontsize=8)
    return _svg(figure)


def category_plot(rates: Sequence[CategoryRate], truth: Mapping[str, float] | None) -> str:
    """Each category's 1/π-weighted and baseline-slice rate with its 95% interval (and the true rate)."""
    if not rates:
        return ""
    figure, ax = _figure(8.5, 3.8)
    offsets = {"kept, 1/π weighted": -0.15, "baseline slice": 0.15}
    for label, offset in offsets.items():
        xs, ys, lows, highs = [], [], [], []
        for i, rate in enumerate(rates):
            estimate = rate.weighted if label.startswith("kept") else rate.baseline
            if estimate is None:
                continue
            xs.append(i + offset)
            ys.append(estimate.value)
            lows.append(estimate.value - estimate.low)
            highs.append(estimate.high - estimate.value)
        colour = _COLOURS["tail-kept"] if label.startswith("kept") else _COLOURS["baseline slice"]
        ax.errorbar(xs, ys, yerr=[lows, highs], fmt="o", capsize=4, color=colour, label=label)
    if truth:
        points = [(i, truth[r.category]) for i, r in enumerate(rates) if r.category in truth]
        ax.scatter(
            [p[0] for p in points],
            [p[1] for p in points],
            marker="x",
            s=60,
            color=_COLOURS["truth"],
            label="true rate",
            zorder=3,
        )
    ax.set_xticks(range(len(rates)), [r.category for r in rates], rotation=20, fontsize=8)
    ax.set_ylabel("share of traces")
    ax.yaxis.set_major_formatter(lambda value, _: f"{value:.0%}")
    ax.legend(fontsize=8)
    return _svg(figure)


def timeline_plot(timeline: Sequence[tuple[dt.datetime, int, int]]) -> str:
    """Traces kept and dropped per time bucket of their decision, stacked."""
    if not timeline:
        return ""
    figure, ax = _figure(8.5, 3.0)
    positions = range(len(timeline))
    kept = [k for _, k, _ in timeline]
    dropped = [d for _, _, d in timeline]
    ax.bar(positions, kept, color=_COLOURS["tail-kept"], label="kept")
    ax.bar(positions, dropped, bottom=kept, color="#bbbbbb", label="dropped")
    step = max(1, len(timeline) // 6)
    ax.set_xticks(
        list(positions)[::step], [f"{t:%m-%d %H:%M:%S}" for t, _, _ in timeline][::step], fontsize=7
    )
    ax.set_ylabel("traces decided")
    ax.legend(fontsize=8)
    return _svg(figure)
