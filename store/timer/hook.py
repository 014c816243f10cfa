"""The put-path rule for timer messages (pure; no trio): RocketMQ 5's ``HookUtils`` rule.

A plain or committed message carrying ``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS`` or
``TIMER_DELIVER_MS`` (looked at in that order) is due at a time; when that time is ahead, the
message is stored to ``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS`` (the time rounded down
to the wheel's precision, one precision earlier when it is an exact multiple: the wheel delivers a
slot when the next one begins), ``REAL_TOPIC`` and ``REAL_QID`` added. A time not ahead leaves the
message as it is (delivered at once). A message with a delay level keeps using the levels, its
timer properties dropped; one already carrying ``TIMER_OUT_MS`` (a delivered timer message sent
again) is not a timer message. Refusals: a value that is no Java long, or a delay beyond
``timerMaxDelaySec`` (``ILLEGAL``, answered MESSAGE_ILLEGAL), any timer property while
``timerWheelEnable=false`` (``NOT_ENABLED``, answered SYSTEM_ERROR).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Final

from ...cluster.protocol.message import (
    SYSFLAG_TRANSACTION_COMMIT_TYPE,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NOT_TYPE,
    MessageConst,
    java_map_order,
)
from ..config import TIMER_PRECISIONS_MS, TIMER_TOPIC

TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
TIMER_OUT_MS: Final = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS: Final = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS: Final = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES: Final = "TIMER_ROLL_TIMES"
TIMER_DEL_UNIQKEY: Final = "TIMER_DEL_UNIQKEY"
_ASKED: Final = (TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS)
#: what Java's Long.parseLong accepts (and no more: no spaces, no underscores)
_JAVA_LONG_RE: Final = re.compile(r"[+-]?[0-9]{1,19}")
_LONG_MIN: Final = -(1 << 63)
_LONG_MAX: Final = (1 << 63) - 1
_TIMER_TYPES: Final = (SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT_TYPE)


class TimerRefusal(enum.Enum):
    ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"
    NOT_ENABLED = "WHEEL_TIMER_NOT_ENABLE"


def timer_precision(configured_ms: int) -> int:
    """timerPrecisionMs as RocketMQ 5 uses it: rounded down to 100, 200, 500 or 1000."""
    chosen = TIMER_PRECISIONS_MS[0]
    for candidate in TIMER_PRECISIONS_MS:
        if configured_ms >= candidate:
            chosen = candidate
    return chosen


def parse_java_long(text: str) -> int | None:
    if _JAVA_LONG_RE.fullmatch(text) is None:
        return None
    value = int(text)
    return value if _LONG_MIN <= value <= _LONG_MAX else None


def slot_time(deliver_ms: int, precision_ms: int) -> int:
    """TIMER_OUT_MS of a message due at ``deliver_ms`` (RocketMQ's rounding)."""
    if deliver_ms % precision_ms == 0:
        return deliver_ms - precision_ms
    return deliver_ms // precision_ms * precision_ms


def _has_delay_level(props: Mapping[str, str]) -> bool:
    text = props.get(MessageConst.PROPERTY_DELAY_TIME_LEVEL)
    if text is None:
        return False
    level = parse_java_long(text)
    return level is not None and level > 0


def timer_put(
    props: Mapping[str, str],
    topic: str,
    queue_id: int,
    sys_flag: int,
    now_ms: int,
    *,
    enabled: bool,
    max_delay_sec: int,
    precision_ms: int,
) -> tuple[str, int, Mapping[str, str]] | TimerRefusal:
    """(topic, queue id, properties) to store a message sent with ``props`` as, or why not."""
    if (sys_flag & SYSFLAG_TRANSACTION_MASK) not in _TIMER_TYPES or topic == TIMER_TOPIC:
        return topic, queue_id, props
    if _has_delay_level(props):
        if any(k in props for k in _ASKED):
            props = {k: v for k, v in props.items() if k not in _ASKED}
        return topic, queue_id, props
    if TIMER_OUT_MS in props or not any(k in props for k in _ASKED):
        return topic, queue_id, props
    if not enabled:
        return TimerRefusal.NOT_ENABLED
    deliver_ms = _deliver_ms(props, now_ms)
    if deliver_ms is None:
        return TimerRefusal.ILLEGAL
    if deliver_ms <= now_ms:
        if TIMER_DEL_UNIQKEY in props:
            return TimerRefusal.ILLEGAL
        return topic, queue_id, props
    if deliver_ms - now_ms > max_delay_sec * 1000:
        return TimerRefusal.ILLEGAL
    out = dict(props)
    out[TIMER_OUT_MS] = str(slot_time(deliver_ms, timer_precision(precision_ms)))
    out[MessageConst.PROPERTY_REAL_TOPIC] = topic
    out[MessageConst.PROPERTY_REAL_QUEUE_ID] = str(queue_id)
    return TIMER_TOPIC, 0, java_map_order(out)


def _deliver_ms(props: Mapping[str, str], now_ms: int) -> int | None:
    if (text := props.get(TIMER_DELAY_SEC)) is not None:
        value = parse_java_long(text)
        return None if value is None else now_ms + value * 1000
    if (text := props.get(TIMER_DELAY_MS)) is not None:
        value = parse_java_long(text)
        return None if value is None else now_ms + value
    return parse_java_long(props.get(TIMER_DELIVER_MS, ""))
