"""The self-contained HTML report (pure: summary dict → str; plots are inline SVG, no JS)."""

from __future__ import annotations

import html
from typing import Any

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}
.ok{color:#176d2c;font-weight:600}.lag{color:#a36200;font-weight:600}
.bad{color:#b00020;font-weight:600}
.verdict{font-size:20px;padding:8px 12px;display:inline-block;border-radius:6px;background:#f6f6f6}
svg text{font:11px system-ui,sans-serif}
"""

_CLS = {"consistent": "ok", "lagging": "lag", "divergent": "bad"}


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _human(n: float | None) -> str:
    if n is None:
        return "not counted"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _n(x: int | None) -> str:
    """A count, or why there is none (a store proven byte-identical is not decoded)."""
    return "not counted" if x is None else str(x)


def lag_chart(group: str, g: dict[str, Any]) -> str:
    """Horizontal bars: each replica's end offset against the master's, lag labelled."""
    reps = g["replicas"]
    width, left, bar_h = 640, 150, 22
    height = 20 + bar_h * len(reps) + 10
    top = max([r["end_offset"] for r in reps.values()] + [1])
    out = [f'<svg width="{width + left + 160}" height="{height}" role="img" '
           f'aria-label="replica end offsets of {_e(group)}">']  # fmt: skip
    for i, (node, r) in enumerate(sorted(reps.items())):
        y = 10 + i * bar_h
        w = width * r["end_offset"] / top
        color = {"consistent": "#3a8f4f", "lagging": "#e0a030", "divergent": "#c0392b"}[
            r["verdict"]
        ]
        label = "master" if r["is_master"] else f"lag {_human(r['lag_bytes'])}"
        out.append(f'<text x="{left - 6}" y="{y + 15}" text-anchor="end">{_e(node)}</text>')
        out.append(f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{bar_h - 6}" '
                   f'fill="{color}"><title>{_e(node)}: end {r["end_offset"]}</title></rect>')
        out.append(f'<text x="{left + w + 6:.1f}" y="{y + 15}">{_e(label)} '
                   f'({_n(r["messages"])} msgs)</text>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def divergence_map(group: str, g: dict[str, Any], counts: dict[str, dict[str, int]],
                   buckets: int, bucket_bytes: int) -> str:  # fmt: skip
    """One row per replica, one cell per offset bucket, darker = more findings."""
    nodes = sorted(g["replicas"])
    cell, left = 7, 150
    height = 24 + 16 * len(nodes)
    peak = max([n for c in counts.values() for n in c.values()] + [1])
    out = [f'<svg width="{left + cell * buckets + 20}" height="{height}" role="img" '
           f'aria-label="divergence map of {_e(group)}">']  # fmt: skip
    for i, node in enumerate(nodes):
        y = 4 + 16 * i
        out.append(f'<text x="{left - 6}" y="{y + 11}" text-anchor="end">{_e(node)}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{cell * buckets}" height="14" '
                   f'fill="#eef4ee"/>')  # fmt: skip
        for b, n in counts.get(node, {}).items():
            k = int(b)
            if not 0 <= k < buckets:
                k = buckets - 1
            alpha = 0.25 + 0.75 * n / peak
            lo = k * bucket_bytes
            out.append(f'<rect x="{left + k * cell}" y="{y}" width="{cell}" height="14" '
                       f'fill="rgba(192,57,43,{alpha:.2f})"><title>{_e(node)} '
                       f'[{lo}, {lo + bucket_bytes}): {n} findings</title></rect>')  # fmt: skip
    y = 4 + 16 * len(nodes) + 12
    out.append(f'<text x="{left}" y="{y}">offset 0</text>')
    out.append(f'<text x="{left + cell * buckets}" y="{y}" text-anchor="end">'
               f'{_human(bucket_bytes * buckets)}</text></svg>')  # fmt: skip
    return "".join(out)


def _unverifiable(why: dict[str, str]) -> list[str]:
    """Live audits: the groups that could not be verified and why (a broker's words escaped)."""
    if not why:
        return []
    rows = "".join(f"<tr><td class='l'>{_e(g)}</td><td class='l bad'>{_e(w)}</td></tr>"
                   for g, w in sorted(why.items()))  # fmt: skip
    return [f"<h2>Unverifiable groups ({len(why)})</h2>",
            f"<table><tr><th class='l'>group</th><th class='l'>why</th></tr>{rows}</table>"]


def render_html(summary: dict[str, Any]) -> str:
    v = summary["verdict"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>replica-diff</title>",
        f"<style>{_CSS}</style></head><body><h1>RocketMQ replica-diff</h1>",
        f"<div class='verdict {_CLS.get(v, 'bad')}'>{_e(v)} (exit {summary['exit_code']})</div>",
        f"<p>allow lag: {summary['allow_lag']} · body CRC verified: {summary['verify_crc']} · "
        f"{summary['elapsed_s']} s</p>",
    ]
    dm = summary["divergence_map"]
    for group, g in sorted(summary["groups"].items()):
        parts.append(f"<h2>Group {_e(group)} (master {_e(g['master'])})</h2>")
        parts.append("<h3>Replica end offsets and lag</h3>" + lag_chart(group, g))
        parts.append("<h3>Divergence map (findings by offset)</h3>")
        parts.append(divergence_map(group, g, dm["counts"].get(group, {}), dm["buckets"],
                                    dm["bucket_bytes"].get(group, 1)))  # fmt: skip
        parts.append(
            "<table><tr><th class='l'>node</th><th class='l'>role</th><th class='l'>kind</th>"
            "<th>files</th><th>messages</th><th>bytes</th><th>end offset</th><th>lag bytes</th>"
            "<th>lag msgs</th><th>common prefix</th><th class='l'>findings</th>"
            "<th class='l'>verdict</th></tr>"
        )
        for node, r in sorted(g["replicas"].items()):
            fk = ", ".join(f"{k}: {n}" for k, n in r["findings"].items()) or "none"
            parts.append(
                f"<tr><td class='l'>{_e(node)}</td><td class='l'>{_e(r['role'])}</td>"
                f"<td class='l'>{_e(r['kind'])}</td><td>{r['files']}</td>"
                f"<td>{_n(r['messages'])}</td>"
                f"<td>{_human(r['bytes'])}</td><td>{r['end_offset']}</td><td>{r['lag_bytes']}</td>"
                f"<td>{_n(r['lag_messages'])}</td><td>{r['common_prefix']}</td>"
                f"<td class='l'>{_e(fk)}</td>"
                f"<td class='l {_CLS.get(r['verdict'], '')}'>{_e(r['verdict'])}</td></tr>"
            )
        parts.append("</table>")
    parts += _unverifiable(summary.get("unverifiable") or {})
    parts.append(f"<h2>First findings ({len(summary['first_findings'])})</h2>")
    if summary["first_findings"]:
        cols = ["group", "node", "kind", "phy_offset", "end_offset", "count", "topic",
                "queue_id", "queue_offset", "detail"]  # fmt: skip
        parts.append("<table><tr>" + "".join(f"<th class='l'>{c}</th>" for c in cols) + "</tr>")
        for f in summary["first_findings"]:
            parts.append("<tr>" + "".join(f"<td class='l'>{_e(f[c])}</td>" for c in cols) + "</tr>")
        parts.append("</table>")
    elif summary.get("unverifiable"):
        parts.append("<p>No findings in the groups audited.</p>")
    else:
        parts.append("<p class='ok'>No findings: every replica matches its master.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)
