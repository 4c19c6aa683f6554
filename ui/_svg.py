"""Intervals drawn as small inline SVG: a difference B − A with its 95% interval on a shared axis."""

from __future__ import annotations

from typing import Final

from markupsafe import Markup

WIDTH: Final = 240
HEIGHT: Final = 26
_PAD: Final = 10


def interval_svg(value: float, low: float, high: float, *, scale: float, label: str) -> Markup:
    """An axis from ``-scale`` to ``+scale`` (rates, e.g. 0.4 = 40 pp) with 0 marked, the interval as a
    bar and the estimate as a dot; coloured by whether the interval excludes 0."""

    def x(v: float) -> float:
        v = max(-scale, min(scale, v))
        return round(_PAD + (v + scale) / (2 * scale) * (WIDTH - 2 * _PAD), 1)

    tone = "up" if low > 0 else "down" if high < 0 else "flat"
    mid = HEIGHT // 2
    title = f"{label}: {value * 100:+.1f} pp [{low * 100:+.1f}, {high * 100:+.1f}]"
    return Markup(
        f'<svg class="interval {tone}" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{Markup.escape(title)}"><title>{Markup.escape(title)}</title>'
        f'<line class="axis" x1="{_PAD}" y1="{mid}" x2="{WIDTH - _PAD}" y2="{mid}"/>'
        f'<line class="zero" x1="{x(0)}" y1="3" x2="{x(0)}" y2="{HEIGHT - 3}"/>'
        f'<line class="bar" x1="{x(low)}" y1="{mid}" x2="{x(high)}" y2="{mid}"/>'
        f'<line class="cap" x1="{x(low)}" y1="{mid - 5}" x2="{x(low)}" y2="{mid + 5}"/>'
        f'<line class="cap" x1="{x(high)}" y1="{mid - 5}" x2="{x(high)}" y2="{mid + 5}"/>'
        f'<circle class="dot" cx="{x(value)}" cy="{mid}" r="3.5"/></svg>'
    )


def axis_scale(bounds: list[float]) -> float:
    """A symmetric axis half-width covering every bound, rounded up to a tenth (at least 0.1)."""
    widest = max((abs(b) for b in bounds), default=0.1)
    return max(0.1, -(-round(widest * 100) // 10) / 10)
