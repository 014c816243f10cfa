"""Request input: bounded form bodies, message bodies as text/JSON/hex. Pure."""

from __future__ import annotations

import json
import urllib.parse
from datetime import UTC, datetime

from ..cluster.protocol.message import MessageConst

#: Fields one form may carry.
MAX_FORM_FIELDS = 32
#: Every property name the brokers and clients set themselves (the rest are the user's).
SYSTEM_PROPERTIES = frozenset(
    v for k, v in vars(MessageConst).items() if k.startswith("PROPERTY_") and isinstance(v, str))


class FormError(ValueError):
    """A form that cannot be used: the page says why (400)."""


def parse_form(body: bytes) -> dict[str, str]:
    """``application/x-www-form-urlencoded`` -> the first value of each field."""
    try:
        text = body.decode("utf-8")
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, strict_parsing=False,
                                       max_num_fields=MAX_FORM_FIELDS)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormError(f"unreadable form: {exc}") from None
    out: dict[str, str] = {}
    for k, v in pairs:
        out.setdefault(k, v)
    return out


def int_field(form: dict[str, str], name: str, low: int, high: int, default: int | None = None
              ) -> int:
    raw = form.get(name, "").strip()
    if not raw and default is not None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise FormError(f"{name} must be a whole number") from None
    if not low <= value <= high:
        raise FormError(f"{name} must be within [{low}, {high}]")
    return value


def reset_timestamp(to: str, when: str) -> int:
    """The reset target as RocketMQ's resetOffsetByTime takes it: ms since the epoch, 0 for
    the first message, -1 for the queues' ends."""
    if to == "earliest":
        return 0
    if to == "latest":
        return -1
    if to != "time":
        raise FormError("reset to: earliest, latest or time")
    try:
        moment = datetime.fromisoformat(when).replace(tzinfo=UTC)
    except ValueError:
        raise FormError("time: YYYY-MM-DDTHH:MM[:SS] (UTC)") from None
    return int(moment.timestamp() * 1000)


def body_views(body: bytes, max_text: int, max_hex: int) -> dict[str, str]:
    """A body as text (UTF-8, undecodable bytes replaced), pretty JSON (or why not) and a hex
    dump; each cut at its bound, saying so."""
    text = body[:max_text].decode("utf-8", "replace")
    more = f"\n... ({len(body) - max_text} more bytes)" if len(body) > max_text else ""
    try:
        pretty = json.dumps(json.loads(body[:max_text]), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        pretty = "(not JSON)" if len(body) <= max_text else "(too long to show as JSON)"
    lines = []
    for at in range(0, min(len(body), max_hex), 16):
        chunk = body[at:at + 16]
        shown = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {chunk.hex(' '):<47}  {shown}")
    if len(body) > max_hex:
        lines.append(f"... ({len(body) - max_hex} more bytes)")
    return {"text": text + more, "json": pretty, "hex": "\n".join(lines)}


def when(ms: int | None) -> str:
    """A time in ms as UTC text; "-" for none, 0 or less, or past year 9999 (a trace record's
    time is whatever a client wrote)."""
    if ms is None or ms <= 0:
        return "-"
    try:
        t = datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, ValueError, OSError):
        return "-"
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def perm_text(perm: int) -> str:
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-") + ("X" if perm & 1 else "")


def pct(ratio: float) -> str:
    return "-" if ratio < 0 else f"{ratio * 100:.1f} %"
