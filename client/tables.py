"""mqadmin's plain-text layouts, in one place: ``#``-headed column tables and ``Key: value`` views.

Tables (``render_table``) print a header line of ``#``-prefixed column names, as mqadmin does
(``#Cluster Name  #Broker Name  #BID  #Addr ...``), then one line per row. Every column is at
least as wide as mqadmin's printf width for it and as its widest cell (so a row never runs into
the next column), columns are separated by two spaces, numbers that mqadmin right-aligns are
right-aligned, and trailing blanks are stripped. An empty cell prints as nothing, so scripts
reading the plain text should split on runs of two or more blanks, or use ``--json``.

Single records (a message, a slave's HA state) print as mqadmin's ``%-20s %s`` key/value lines
(``render_kv``).

``--json`` (the rule every ``rmq-cluster`` mqadmin command follows):

* a command that answers about one thing (a cluster, a route, a topic's queues, a group's
  progress, a broker's config) prints exactly **one JSON object** on one line; its table rows are
  a list inside it under a named key (``queues``, ``connections``, ``brokers``, ...);
* a command that yields a **stream of records** whose count the caller does not fix in advance -
  the messages of ``consumeMessage`` and ``printMsg``, the rows of ``statsAll`` and the rounds of
  ``clusterRT`` - prints **JSON lines**, one object per record, nothing else;
* a failure prints one object ``{"error": ..., "code": ..., "remark": ...}`` and exits 1.

Cells: ``None`` prints empty, booleans as ``true``/``false``, floats with two decimals (mqadmin's
``%.2f``), timestamps through ``human_time`` (mqadmin's ``yyyy-MM-dd HH:mm:ss,SSS``).
Pure: no I/O, no trio.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from ..cluster.protocol.trace import TraceType, TraceView

#: Column separator (mqadmin's format strings put two blanks between most columns).
GAP: Final = "  "
#: mqadmin's key column width in its message views (``%-20s %s``).
KV_KEY_WIDTH: Final = 20


@attrs.frozen
class Col:
    """One column: its mqadmin header (without ``#``), mqadmin's printf width, alignment."""

    header: str
    width: int = 0
    right: bool = False


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def render_table(columns: Sequence[Col | str], rows: Iterable[Sequence[Any]]) -> str:
    """The header line and one line per row (no trailing newline when there are no rows either:
    the text always ends with one newline)."""
    cols = [c if isinstance(c, Col) else Col(c) for c in columns]
    texts = [[cell(v) for v in row] for row in rows]
    for row in texts:
        if len(row) != len(cols):
            raise ValueError(f"row has {len(row)} cells for {len(cols)} columns")
    widths = [
        max([c.width, len(c.header) + 1, *(len(r[i]) for r in texts)])
        for i, c in enumerate(cols)
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if c.right else v.ljust(w)
            for v, w, c in zip(values, widths, cols, strict=True)
        ]
        return GAP.join(parts).rstrip()

    out = [line(["#" + c.header for c in cols])]
    out.extend(line(r) for r in texts)
    return "\n".join(out) + "\n"


def render_kv(pairs: Iterable[tuple[str, Any]], key_width: int = KV_KEY_WIDTH) -> str:
    """mqadmin's ``%-20s %s`` lines (keys are printed as given, e.g. ``"Topic:"``)."""
    return "".join(f"{k:<{key_width}} {cell(v)}".rstrip() + "\n" for k, v in pairs)


def human_time(ms: int | None, *, millis: bool = True) -> str:
    """mqadmin's ``UtilAll.timeMillisToHumanString2``: local ``yyyy-MM-dd HH:mm:ss,SSS``
    (without ``,SSS`` when not ``millis``: its ``yyyy-MM-dd HH:mm:ss`` dates); empty for no
    time (0 or less)."""
    if ms is None or ms <= 0:
        return ""
    t = datetime.datetime.fromtimestamp(ms // 1000)
    text = t.strftime("%Y-%m-%d %H:%M:%S")
    return text + f",{ms % 1000:03d}" if millis else text


def json_lines(records: Iterable[Any]) -> str:
    """Records as JSON lines (sorted keys, one object per line)."""
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)


# ------------------------------------------------------------------ queryMsgTraceById

#: ``mqadmin queryMsgTraceById``'s row format (``%-10s %-20s %-20s %-20s %-10s %-10s``).
_TRACE_ROW: Final = "{:<10} {:<20} {:<20} {:<20} {:<10} {:<10}"


def _trace_line(kind: str, v: TraceView) -> str:
    try:
        when = human_time(v.timestamp, millis=False) if v.timestamp else "null"
    except (OverflowError, ValueError, OSError):  # a client wrote a time past year 9999
        when = str(v.timestamp)
    return _TRACE_ROW.format(kind, v.group or "null", v.client_host, when, f"{v.cost_ms}ms",
                             v.status).rstrip()


def render_trace(views: Sequence[TraceView]) -> str:
    """``mqadmin queryMsgTraceById``'s text: each Pub under its header and a blank line, then
    per consumer group (first seen first) a header, its consumptions (SubAfter records) and a
    blank line. SubBefore and EndTransaction records are not printed (nor by mqadmin)."""
    lines: list[str] = []
    subs: dict[str | None, list[TraceView]] = {}
    for v in views:
        if v.kind is TraceType.PUB:
            lines += [_TRACE_ROW.format("#Type", "#ProducerGroup", "#ClientHost", "#SendTime",
                                        "#CostTimes", "#Status").rstrip(),
                      _trace_line("Pub", v), ""]
        elif v.kind is TraceType.SUB_AFTER:
            subs.setdefault(v.group, []).append(v)
    for group_views in subs.values():
        lines.append(_TRACE_ROW.format("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime",
                                       "#CostTimes", "#Status").rstrip())
        lines += [_trace_line("Sub", v) for v in group_views]
        lines.append("")
    return "".join(line + "\n" for line in lines)


def trace_json(v: TraceView) -> dict[str, Any]:
    """One trace record about a message, for ``--json`` (one line each)."""
    return {
        "type": v.kind.value, "msgId": v.msg_id, "group": v.group, "clientHost": v.client_host,
        "timestamp": v.timestamp, "costMs": v.cost_ms,
        "status": v.status if v.kind is not TraceType.SUB_BEFORE else None,
        "topic": v.topic, "tags": v.tags, "keys": v.keys, "storeHost": v.store_host,
        "offsetMsgId": v.offset_msg_id, "requestId": v.request_id,
        "retryTimes": v.retry_times,
    }
