"""Inline SVG charts drawn from plain numbers: axes with round ticks, a stacked bar, a band, a scatter, a Gantt chart.

Coordinates are written with one decimal, so the same numbers give the same bytes. Colours are CSS classes
(style.css), so the print style can change them. An element with ``data-tip`` shows that text on hover or keyboard
focus (page.js).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from optimizer.report.html.html_shell import esc


def f1(x: float) -> str:
    """A coordinate with one decimal (``-0.0`` written as ``0.0``)."""
    s = f"{x:.1f}"
    return "0.0" if s == "-0.0" else s


def tip(text: str) -> str:
    """A ``data-tip`` attribute (newlines kept as character references) that also makes the element focusable."""
    return f' tabindex="0" data-tip="{esc(text).replace(chr(10), "&#10;")}"'


@dataclass(frozen=True)
class Scale:
    """Maps data values ``lo..hi`` to pixels ``a..b``, linearly or on a log scale (values must then be > 0)."""

    lo: float
    hi: float
    a: float
    b: float
    log: bool = False

    def __call__(self, v: float) -> float:
        """The pixel position of ``v``."""
        if self.log:
            lo, hi, v = math.log10(self.lo), math.log10(self.hi), math.log10(max(v, self.lo * 1e-3))
        else:
            lo, hi = self.lo, self.hi
        span = hi - lo or 1.0
        return self.a + (v - lo) / span * (self.b - self.a)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round values (1, 2 or 5 x 10^k steps) from ``lo`` to ``hi``."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9)
    return [round(k * step, 10) for k in range(first, int(math.floor(hi / step + 1e-9)) + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """1, 2, 5 x 10^k values between ``lo`` and ``hi`` (both > 0)."""
    out = []
    for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        out += [m * 10.0**k for m in (1, 2, 5) if lo <= m * 10.0**k <= hi]
    return out


def tick_label(v: float) -> str:
    """A tick value: thousands separators above 10, two significant digits below."""
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.2g}"


def axis_scale(values: Sequence[float], a: float, b: float, *, zero: bool = False) -> tuple[Scale, list[float]]:
    """A scale and its ticks covering ``values`` with a margin; log when they span more than 20x."""
    lo, hi = min(values), max(values)
    if not zero and lo > 0 and hi / lo > 20:
        lo_l, hi_l = lo / 1.3, hi * 1.3
        return Scale(lo_l, hi_l, a, b, log=True), log_ticks(lo_l, hi_l)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.1 or 1.0
    lo = 0.0 if zero else max(lo - pad, 0.0) if lo >= 0 else lo - pad
    hi = hi + pad
    return Scale(lo, hi, a, b), nice_ticks(lo, hi)


def frame(width: int, height: int, label: str, body: str) -> str:
    """An SVG element scaled to its container's width (the viewBox keeps the proportions)."""
    return (f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{esc(label)}" '
            f'xmlns="http://www.w3.org/2000/svg">{body}</svg>')  # fmt: skip


def x_axis(sx: Scale, ticks: Sequence[float], y0: float, y1: float, label: str, fmt: str = "") -> str:
    """Vertical grid lines at ``ticks`` from y0 to y1, tick labels below and the axis title."""
    out = []
    for t in ticks:
        x = f1(sx(t))
        out.append(f'<line class="grid" x1="{x}" y1="{f1(y0)}" x2="{x}" y2="{f1(y1)}"/>'
                   f'<text class="tick" x="{x}" y="{f1(y1 + 14)}" text-anchor="middle">{esc(fmt or tick_label(t))}'
                   "</text>")  # fmt: skip
    mid = f1((sx.a + sx.b) / 2)
    out.append(f'<text class="axis" x="{mid}" y="{f1(y1 + 32)}" text-anchor="middle">{esc(label)}</text>')
    return "".join(out)


def y_axis(sy: Scale, ticks: Sequence[float], x0: float, x1: float, label: str) -> str:
    """Horizontal grid lines at ``ticks`` from x0 to x1, tick labels left and the (rotated) axis title."""
    out = []
    for t in ticks:
        y = f1(sy(t))
        out.append(f'<line class="grid" x1="{f1(x0)}" y1="{y}" x2="{f1(x1)}" y2="{y}"/>'
                   f'<text class="tick" x="{f1(x0 - 6)}" y="{f1(sy(t) + 4)}" text-anchor="end">{esc(tick_label(t))}'
                   "</text>")  # fmt: skip
    mid = f1((sy.a + sy.b) / 2)
    out.append(f'<text class="axis" transform="translate(14 {mid}) rotate(-90)" text-anchor="middle">'
               f"{esc(label)}</text>")  # fmt: skip
    return "".join(out)


def stacked_bar(parts: Sequence[tuple[str, float]], marks: Sequence[tuple[str, float, str]],
                whisker: tuple[float, float] | None, unit: float, unit_name: str, label: str) -> str:  # fmt: skip
    """One horizontal bar made of ``parts`` (name, value), vertical ``marks`` (css class, value, text) and a whisker.

    Values are divided by ``unit`` for the axis (e.g. bytes per GiB). The axis runs from 0 to the largest of the
    bar, the marks and the whisker's high end, plus 5%.
    """
    w, h, left, right, top = 760, 150, 20, 740, 34
    total = sum(v for _, v in parts)
    top_value = max([total, *(v for _, v, _ in marks), *(whisker or ())]) * 1.05 / unit
    sx = Scale(0.0, top_value or 1.0, left, right)
    body = [x_axis(sx, nice_ticks(0.0, top_value), top - 8, top + 50, unit_name)]
    x = 0.0
    for i, (name, v) in enumerate(parts):
        x0, x1 = sx(x / unit), sx((x + v) / unit)
        body.append(f'<rect class="part p{i}" x="{f1(x0)}" y="{top}" width="{f1(max(x1 - x0, 0.0))}" height="28"'
                    f"{tip(f'{name}: {v / unit:,.2f} {unit_name} ({100 * v / max(total, 1):.0f}%)')}/>")  # fmt: skip
        x += v
    if whisker is not None:
        a, b, y = sx(whisker[0] / unit), sx(whisker[1] / unit), top + 14
        text = f"10th-90th percentile of the peak: {whisker[0] / unit:,.2f}-{whisker[1] / unit:,.2f} {unit_name}"
        body.append(f'<g class="whisker"{tip(text)}><line x1="{f1(a)}" y1="{y}" x2="{f1(b)}" y2="{y}"/>'
                    f'<line x1="{f1(a)}" y1="{y - 8}" x2="{f1(a)}" y2="{y + 8}"/>'
                    f'<line x1="{f1(b)}" y1="{y - 8}" x2="{f1(b)}" y2="{y + 8}"/></g>')
    for k, (cls, v, text) in enumerate(marks):
        x = sx(v / unit)
        anchor = "start" if x < left + 90 else "end" if x > right - 90 else "middle"  # labels stay inside the chart
        body.append(f'<g class="mark {esc(cls)}"{tip(f"{text}: {v / unit:,.2f} {unit_name}")}>'
                    f'<line x1="{f1(x)}" y1="{top - 6}" x2="{f1(x)}" y2="{top + 34}"/>'
                    f'<text x="{f1(x)}" y="{top - 10 - 11 * (k % 2)}" text-anchor="{anchor}">{esc(text)}</text></g>')
    return frame(w, h, label, "".join(body))


def band(lo: float, mid: float, hi: float, unit_name: str, label: str) -> str:
    """A 10th-90th percentile range ``lo..hi`` with the predicted value ``mid`` marked, on an axis from 0."""
    w, h, left, right = 760, 74, 20, 740
    top_value = max(hi, mid) * 1.1 or 1.0
    sx = Scale(0.0, top_value, left, right)
    a, b, m = sx(lo), sx(hi), sx(mid)
    body = (x_axis(sx, nice_ticks(0.0, top_value), 6, 34, unit_name)
            + f'<rect class="range" x="{f1(a)}" y="12" width="{f1(max(b - a, 1.0))}" height="14"'
            f"{tip(f'10th-90th percentile: {lo:,.2f}-{hi:,.2f} {unit_name}')}/>"
            f'<circle class="point" cx="{f1(m)}" cy="19" r="5"{tip(f"predicted: {mid:,.2f} {unit_name}")}/>')
    return frame(w, h, label, body)


@dataclass(frozen=True)
class Dot:
    """A scatter point: x, y, the hover text and whether it is the chosen plan."""

    x: float
    y: float
    text: str
    chosen: bool = False


def scatter(dots: Sequence[Dot], xlabel: str, ylabel: str, vline: tuple[float, str] | None,
            hline: tuple[float, str] | None, label: str) -> str:  # fmt: skip
    """Points with hover text, the chosen one ringed, a line through them in x order, and optional limit lines."""
    w, h, left, right, top, bottom = 760, 430, 78, 740, 20, 370
    xs = [d.x for d in dots] + ([vline[0]] if vline else [])
    ys = [d.y for d in dots] + ([hline[0]] if hline else [])
    sx, xt = axis_scale(xs, left, right)
    sy, yt = axis_scale(ys, bottom, top)
    body = [x_axis(sx, xt, top, bottom, xlabel), y_axis(sy, yt, left, right, ylabel)]
    steps = sorted((d.x, d.y) for d in dots)
    path = " ".join(f"{f1(sx(x))},{f1(sy(y))}" for x, y in steps)
    body.append(f'<polyline class="stair" points="{path}"/>')
    if hline is not None:
        y = sy(hline[0])
        body.append(f'<g class="limit budget"><line x1="{left}" y1="{f1(y)}" x2="{right}" y2="{f1(y)}"/>'
                    f'<text x="{right - 4}" y="{f1(y - 5)}" text-anchor="end">{esc(hline[1])}</text></g>')
    if vline is not None:
        x = sx(vline[0])
        body.append(f'<g class="limit deadline"><line x1="{f1(x)}" y1="{top}" x2="{f1(x)}" y2="{bottom}"/>'
                    f'<text x="{f1(x - 5)}" y="{top + 12}" text-anchor="end">{esc(vline[1])}</text></g>')
    for i, d in enumerate(dots):
        cls = "dot chosen" if d.chosen else "dot"
        ring = (f'<circle class="ring" cx="{f1(sx(d.x))}" cy="{f1(sy(d.y))}" r="11"/>' if d.chosen else "")
        body.append(f'{ring}<circle class="{cls}" id="dot-{i}" cx="{f1(sx(d.x))}" cy="{f1(sy(d.y))}" r="6"'
                    f"{tip(d.text)}/>")
    return frame(w, h, label, "".join(body))


@dataclass(frozen=True)
class Bar:
    """A Gantt bar on row ``row`` from ``start`` to ``end`` (days), its CSS class, hover text and inline label."""

    row: int
    start: float
    end: float
    cls: str
    text: str
    label: str = ""


LANE_FONT_PX = 11  # ``svg .lane`` in style.css
MAX_LANE_LABEL_PX = 360.0  # a longer row label is cut with an ellipsis (the whole of it in its <title>)


def text_width(text: str, font_px: float) -> float:
    """A generous estimate of ``text``'s rendered width in pixels, with no font metrics at hand.

    0.62 em per character (a sans-serif's widest common glyphs average less), 1 em per East Asian wide or
    full-width one (CJK ideographs), so a label placed by it is not clipped in the fonts style.css names.
    """
    return sum(1.0 if unicodedata.east_asian_width(c) in "WF" else 0.62 for c in text) * font_px


def fit_text(text: str, max_px: float, font_px: float) -> str:
    """``text`` itself when its :func:`text_width` is at most ``max_px``, else its longest prefix that fits with "…"."""
    if text_width(text, font_px) <= max_px:
        return text
    cut = text
    while cut and text_width(cut + "…", font_px) > max_px:
        cut = cut[:-1]
    return cut + "…"


def gantt(rows: Sequence[str], bars: Sequence[Bar], horizon_days: float, label: str) -> str:
    """One lane per row (label left), bars and windows on a day axis from 0 to the horizon.

    The label margin is sized from the longest row label (:func:`text_width` at the lane font size), at least 120 and
    at most MAX_LANE_LABEL_PX pixels; a label longer than that is cut with an ellipsis and keeps its whole text in a
    ``<title>`` (the browser's tooltip). The day axis is always 730 pixels wide, so no label starts left of x = 0.
    """
    shown = [fit_text(name, MAX_LANE_LABEL_PX, LANE_FONT_PX) for name in rows]
    widest = max((text_width(name, LANE_FONT_PX) for name in shown), default=0.0)
    lane, top = 30, 10
    left = math.ceil(max(widest, 120.0)) + 14  # the label ends 8 px left of the axis, 6 px spare at the edge
    right = left + 730
    height = top + lane * max(len(rows), 1) + 44
    sx = Scale(0.0, horizon_days, left, right)
    ticks = nice_ticks(0.0, horizon_days, 9)
    bottom = top + lane * len(rows)
    body = [x_axis(sx, ticks, top, bottom, "days from the start of the horizon")]
    for i, (name, short) in enumerate(zip(rows, shown, strict=True)):
        y = top + lane * i
        whole = f"<title>{esc(name)}</title>" if short != name else ""
        body.append(f'<text class="lane" x="{left - 8}" y="{y + 19}" text-anchor="end">{whole}{esc(short)}</text>'
                    f'<line class="lanesep" x1="{left}" y1="{y + lane}" x2="{right}" y2="{y + lane}"/>')
    for b in bars:
        x0, x1 = sx(b.start), sx(b.end)
        pad = 2 if b.cls.startswith("window") else 6
        y = top + lane * b.row + pad
        body.append(f'<rect class="{esc(b.cls)}" x="{f1(x0)}" y="{y}" width="{f1(max(x1 - x0, 1.5))}" '
                    f'height="{lane - 2 * pad}"{tip(b.text)}/>')
        if b.label and x1 - x0 >= 6.5 * len(b.label) + 6:  # the label only where it fits inside the bar
            ty = f1(y + lane / 2 - pad + 4)
            body.append(f'<text class="barlabel" x="{f1(x0 + 3)}" y="{ty}">{esc(b.label)}</text>')
    return frame(right + 20, height, label, "".join(body))
