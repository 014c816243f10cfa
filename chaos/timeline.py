"""The timeline picture of a chaos run (pure: events and a result in, SVG text out).

``timeline.svg`` beside ``result.json``: one self-contained SVG (no scripts, fonts or links
to fetch) with, per second of the run, the sends invoked, the sends acked and the failures
(``fail`` + ``unknown``) as lines; every fault window shaded with its fault and nodes; each
fault's recovery (the first ok on the affected group invoked after the fault started, from
the checker) marked on its window; the heal and drain phases as dashed lines; and the
verdict in the title. Open it in any browser.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any, Final

import attrs

from .checker import EV_FAIL, EV_FAULT, EV_INVOKE, EV_OK, EV_PHASE, EV_UNKNOWN

TIMELINE_FILE: Final = "timeline.svg"
WIDTH: Final = 960
HEIGHT: Final = 420
MARGIN_LEFT: Final = 56
MARGIN_RIGHT: Final = 16
MARGIN_TOP: Final = 48
MARGIN_BOTTOM: Final = 64
#: At most this many points per series (a long run's seconds are binned).
MAX_POINTS: Final = 600
#: Series: (event types counted, label, colour); values are per second.
SERIES: Final = (
    ((EV_INVOKE,), "sent/s", "#4477aa"),
    ((EV_OK,), "acked/s", "#228833"),
    ((EV_FAIL, EV_UNKNOWN), "failed or unknown/s", "#cc3311"),
)
FAULT_FILL: Final = "#ee7733"
RECOVERY_COLOUR: Final = "#aa3377"
PHASE_COLOUR: Final = "#666666"
#: Phases drawn as dashed lines.
MARKED_PHASES: Final = ("heal", "drain")


def per_second(events: Iterable[Mapping[str, Any]], kinds: Sequence[str], seconds: int,
               *, bin_s: int = 1) -> list[float]:
    """Events of ``kinds`` per second in each bin of ``bin_s`` seconds over ``seconds``."""
    bins = max(1, math.ceil(seconds / bin_s))
    counts = [0] * bins
    for ev in events:
        if ev.get("type") in kinds:
            t = _num(ev.get("t"))
            if 0 <= t < bins * bin_s:
                counts[int(t // bin_s)] += 1
    return [c / bin_s for c in counts]


def fault_windows(events: Iterable[Mapping[str, Any]], end_s: float
                  ) -> list[tuple[float, float, str]]:
    """``(start, end, label)`` of every fault; one still open at the end lasts to ``end_s``."""
    open_: list[tuple[float, str, str | None]] = []
    out: list[tuple[float, float, str]] = []
    for ev in events:
        if ev.get("type") != EV_FAULT:
            continue
        t = _num(ev.get("t"))
        group = ev.get("group")
        if ev.get("phase") == "start":
            nodes = ",".join(str(n) for n in ev.get("nodes") or ())
            open_.append((t, f"{ev.get('fault', '?')} {nodes}".strip(), group))
        elif ev.get("phase") == "end":
            match = next((o for o in open_ if o[2] == group), open_[0] if open_ else None)
            if match is not None:
                open_.remove(match)
                out.append((match[0], t, match[1]))
    out.extend((t0, end_s, label) for t0, label, _g in open_)
    return sorted(out)


def render_svg(events: Sequence[Mapping[str, Any]], result: Mapping[str, Any] | None = None
               ) -> str:
    """The timeline of ``events`` (a history) with ``result``'s verdict and recoveries."""
    result = result or {}
    end_s = max((_num(ev.get("t")) for ev in events), default=0.0)
    seconds = max(1, math.ceil(end_s))
    # one point per second, or per a few seconds for a long run (at most MAX_POINTS)
    bin_s = max(1, math.ceil(seconds / MAX_POINTS))
    series = [(per_second(events, kinds, seconds, bin_s=bin_s), label, colour)
              for kinds, label, colour in SERIES]
    peak = max([1, *(max(counts) for counts, _l, _c in series)])
    plot = _Plot(seconds=seconds, y_max=_nice(peak))
    parts = _heading(result)
    parts += _fault_boxes(plot, fault_windows(events, end_s))  # under everything else
    parts += _axes(plot)
    parts += _phase_marks(plot, events)
    # the series, one point per second (at the middle of the second)
    for counts, label, colour in series:
        points = " ".join(f"{plot.x((i + 0.5) * bin_s):.1f},{plot.y(c):.1f}"
                          for i, c in enumerate(counts))
        parts.append(f'<polyline class="series" fill="none" stroke="{colour}" '
                     f'stroke-width="1.5" points="{points}"><title>{escape(label)}</title>'
                     "</polyline>")
    parts += _recovery_marks(plot, result.get("faults") or ())
    parts += _legend([(label, colour) for _c, label, colour in series])
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


@attrs.frozen
class _Plot:
    """The plot area: ``seconds`` across, ``y_max`` events per point up."""

    seconds: int
    y_max: float
    width: int = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    height: int = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def x(self, t: float) -> float:
        return MARGIN_LEFT + self.width * min(max(t, 0.0), self.seconds) / self.seconds

    def y(self, v: float) -> float:
        return MARGIN_TOP + self.height * (1 - v / self.y_max)


def _heading(result: Mapping[str, Any]) -> list[str]:
    """The SVG's opening, its title (profile, fault, seed, verdict) and the counts line."""
    title = " / ".join(str(result[k]) for k in ("profile", "fault", "seed") if k in result)
    verdict = result.get("verdict")
    head = f"chaos {title}" if title else "chaos run"
    if verdict:
        head += f" - {verdict} ({result.get('mode', '?')})"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(head)}</title>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{MARGIN_LEFT}" y="20" font-size="14" font-weight="bold">{escape(head)}</text>',
    ]
    summary = [f"{k} {result[k]}" for k in ("acked", "failed", "unknown", "lost") if k in result]
    if summary:
        parts.append(f'<text x="{MARGIN_LEFT}" y="36" fill="#333333">'
                     f'{escape(", ".join(summary))}</text>')
    return parts


def _fault_boxes(plot: _Plot, windows: Iterable[tuple[float, float, str]]) -> list[str]:
    """A shaded box and a label per fault window."""
    parts = []
    for n, (t0, t1, label) in enumerate(windows, 1):
        parts.append(
            f'<rect class="fault" x="{plot.x(t0):.1f}" y="{MARGIN_TOP}" '
            f'width="{max(plot.x(t1) - plot.x(t0), 1.0):.1f}" height="{plot.height}" '
            f'fill="{FAULT_FILL}" fill-opacity="0.18"><title>fault {n}: {escape(label)} '
            f"{t0:.1f}-{t1:.1f} s</title></rect>"
        )
        parts.append(f'<text x="{plot.x(t0) + 3:.1f}" y="{MARGIN_TOP + 12}" fill="#994411">'
                     f"{escape(label)}</text>")
    return parts


def _axes(plot: _Plot) -> list[str]:
    """The grid, both axes' ticks, the x axis' caption and the plot's frame."""
    parts = []
    for i in range(5):
        v = plot.y_max * i / 4
        parts.append(f'<line x1="{MARGIN_LEFT}" x2="{WIDTH - MARGIN_RIGHT}" y1="{plot.y(v):.1f}" '
                     f'y2="{plot.y(v):.1f}" stroke="#dddddd"/>')
        parts.append(f'<text x="{MARGIN_LEFT - 6}" y="{plot.y(v) + 4:.1f}" text-anchor="end">'
                     f"{v:g}</text>")
    step = _nice(plot.seconds / 10)
    t = 0.0
    while t <= plot.seconds:
        parts.append(f'<text x="{plot.x(t):.1f}" y="{MARGIN_TOP + plot.height + 14}" '
                     f'text-anchor="middle">{t:g}</text>')
        t += step
    parts.append(f'<text x="{MARGIN_LEFT + plot.width / 2:.1f}" '
                 f'y="{MARGIN_TOP + plot.height + 30}" '
                 'text-anchor="middle">seconds since the workload started</text>')
    parts.append(f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{plot.width}" '
                 f'height="{plot.height}" fill="none" stroke="#999999"/>')
    return parts


def _phase_marks(plot: _Plot, events: Sequence[Mapping[str, Any]]) -> list[str]:
    """A dashed line and a label at each marked phase."""
    parts = []
    for ev in events:
        if ev.get("type") == EV_PHASE and ev.get("name") in MARKED_PHASES:
            px = plot.x(_num(ev.get("t")))
            parts.append(f'<line class="phase" x1="{px:.1f}" x2="{px:.1f}" y1="{MARGIN_TOP}" '
                         f'y2="{MARGIN_TOP + plot.height}" stroke="{PHASE_COLOUR}" '
                         'stroke-dasharray="4 3"/>')
            parts.append(f'<text x="{px + 3:.1f}" y="{MARGIN_TOP + plot.height - 4}" '
                         f'fill="{PHASE_COLOUR}">{escape(str(ev["name"]))}</text>')
    return parts


def _recovery_marks(plot: _Plot, faults: Iterable[Any]) -> list[str]:
    """Per fault with a recovery: a line from its start to the first ok on its group."""
    parts = []
    for n, f in enumerate(faults, 1):
        if not isinstance(f, Mapping) or f.get("recovery_s") is None:
            continue
        t0 = _num(f.get("start_s"))
        tr = t0 + _num(f.get("recovery_s"))
        group = f.get("group") or "any group"
        ry = MARGIN_TOP + 24 + 12 * ((n - 1) % 3)
        parts.append(f'<line class="recovery" x1="{plot.x(t0):.1f}" x2="{plot.x(tr):.1f}" '
                     f'y1="{ry}" y2="{ry}" stroke="{RECOVERY_COLOUR}" stroke-width="2"/>')
        parts.append(f'<circle cx="{plot.x(tr):.1f}" cy="{ry}" r="4" fill="{RECOVERY_COLOUR}">'
                     f"<title>fault {n}: {escape(str(group))} ok again after "
                     f"{_num(f.get('recovery_s')):.2f} s</title></circle>")
        parts.append(f'<text x="{plot.x(tr) + 6:.1f}" y="{ry + 4}" fill="{RECOVERY_COLOUR}">'
                     f"{escape(str(group))} +{_num(f.get('recovery_s')):.1f}s</text>")
    return parts


def _legend(series: Sequence[tuple[str, str]]) -> list[str]:
    """The legend along the bottom: each series, the fault box, the recovery dot."""
    parts = []
    lx = MARGIN_LEFT
    ly = HEIGHT - 14
    legend = [*((label, colour, "line") for label, colour in series),
              ("fault window", FAULT_FILL, "box"), ("recovery", RECOVERY_COLOUR, "dot")]
    for label, colour, shape in legend:
        if shape == "line":
            parts.append(f'<line x1="{lx}" x2="{lx + 18}" y1="{ly - 4}" y2="{ly - 4}" '
                         f'stroke="{colour}" stroke-width="2"/>')
        elif shape == "box":
            parts.append(f'<rect x="{lx}" y="{ly - 10}" width="18" height="10" '
                         f'fill="{colour}" fill-opacity="0.3"/>')
        else:
            parts.append(f'<circle cx="{lx + 9}" cy="{ly - 4}" r="4" fill="{colour}"/>')
        parts.append(f'<text x="{lx + 22}" y="{ly}">{escape(label)}</text>')
        lx += 30 + 7 * len(label)
    return parts


#: Times beyond this (a year) are not a run's: treated as 0 like any other bad value.
MAX_T_S: Final = 366 * 86400.0


def _num(value: Any) -> float:
    """A finite float within +-MAX_T_S from a history field (anything else: 0)."""
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return f if math.isfinite(f) and abs(f) <= MAX_T_S else 0.0


def _nice(value: float) -> float:
    """The next 1, 2 or 5 times a power of ten at or above ``value`` (axis steps and tops)."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 5, 10):
        if value <= m * power:
            return float(m * power)
    return float(10 * power)
