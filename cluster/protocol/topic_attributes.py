"""RocketMQ 5 topic attributes (``TopicAttributes``, ``AttributeParser``, ``AttributeUtil``) and
message types (``TopicMessageType``), and the FIFO message group's queue. Pure.

An update carries a modification string: ``+key=value`` adds or changes, ``-key`` deletes,
entries joined by ``,`` (``+message.type=FIFO``); a topic created fresh may only add. Known keys
and their values:

==================  ===========================================================  ==========
key                 values                                                       changeable
==================  ===========================================================  ==========
``message.type``    UNSPECIFIED, NORMAL, FIFO, DELAY, TRANSACTION, MIXED           yes
``queue.type``      BatchCQ, SimpleCQ                                              no
``cleanup.policy``  DELETE, COMPACTION                                             no
``reserve.time``    -1 .. 2^63-1                                                   yes
==================  ===========================================================  ==========
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from .message import MessageConst, java_string_hash

MESSAGE_TYPE: Final = "message.type"
#: Attributes a topic holds at most, and the longest modification string read.
MAX_ATTRIBUTES: Final = 16
MAX_MODIFICATION_CHARS: Final = 1024
#: Distinct attribute sets whose declared message type is remembered (``declared_type``).
DECLARED_TYPE_CACHE_SIZE: Final = 1024

PROPERTY_SHARDING_KEY: Final = "__SHARDINGKEY"
PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"


class MessageType(enum.Enum):
    UNSPECIFIED = "UNSPECIFIED"
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"


#: key -> (allowed values or None for a long range, changeable after creation)
_KNOWN: Final[dict[str, tuple[frozenset[str] | None, bool]]] = {
    MESSAGE_TYPE: (frozenset(t.value for t in MessageType), True),
    "queue.type": (frozenset({"BatchCQ", "SimpleCQ"}), False),
    "cleanup.policy": (frozenset({"DELETE", "COMPACTION"}), False),
    "reserve.time": (None, True),
}


class AttributeError_(ValueError):
    """A modification string or attribute RocketMQ refuses (the message is its remark)."""


def parse_modification(text: str | None) -> dict[str, str]:
    """``+k=v,-k2`` -> {"+k": "v", "-k2": ""} (AttributeParser.parseToMap)."""
    if not text:
        return {}
    if len(text) > MAX_MODIFICATION_CHARS:
        raise AttributeError_(f"attributes longer than {MAX_MODIFICATION_CHARS} characters")
    out: dict[str, str] = {}
    for kv in text.split(","):
        if "=" in kv:
            key, _eq, value = kv.partition("=")
            if "+" not in key:
                raise AttributeError_(f"add/alter attribute format is wrong: {key}")
        else:
            key, value = kv, ""
            if "-" not in key:
                raise AttributeError_(f"delete attribute format is wrong: {key}")
        if key in out:
            raise AttributeError_(f"key duplication: {key}")
        out[key] = value
    if len(out) > MAX_ATTRIBUTES:
        raise AttributeError_(f"more than {MAX_ATTRIBUTES} attributes")
    return out


def _check_value(key: str, value: str) -> None:
    allowed, _changeable = _KNOWN[key]
    if allowed is None:
        try:
            number = int(value)
        except ValueError:
            raise AttributeError_(f"value is not a number: {key}={value}") from None
        if not -1 <= number < 2**63:
            raise AttributeError_(f"value is not in range(-1, 9223372036854775807), {key}")
    elif value not in allowed:
        raise AttributeError_(f"value is not in set: {sorted(allowed)}, {key}={value}")


def alter(create: bool, current: Mapping[str, str], modification: str | None) -> dict[str, str]:
    """The topic's attributes after ``modification`` (AttributeUtil.alterCurrentAttributes)."""
    changes = parse_modification(modification)
    final = dict(current)
    for key, value in changes.items():
        real = key[1:] if key[:1] in ("+", "-") else key
        if real not in _KNOWN:
            raise AttributeError_(f"unsupported key: {real}")
        changeable = _KNOWN[real][1]
        if create:
            if not key.startswith("+"):
                raise AttributeError_(
                    f"only add attribute is supported while creating topic. key: {real}")
            _check_value(real, value)
            final[real] = value
        elif key.startswith("+"):
            if real in current and not changeable:
                raise AttributeError_(f"attribute [{real}] can not be changed")
            if real not in current and not changeable:
                raise AttributeError_(f"attribute [{real}] can only be set while creating topic")
            _check_value(real, value)
            final[real] = value
        elif key.startswith("-"):
            if real not in current:
                raise AttributeError_(f"attempt to delete a nonexistent key: {real}")
            if not changeable:
                raise AttributeError_(f"attribute [{real}] can not be deleted")
            del final[real]
        else:
            raise AttributeError_(f"wrong format key: {real}")
    return final


def topic_message_type(attributes: Mapping[str, str]) -> MessageType | None:
    """The topic's declared message type, None when it declares none (a 4.x topic)."""
    value = attributes.get(MESSAGE_TYPE)
    if value is None:
        return None
    try:
        return MessageType(value)
    except ValueError:
        return MessageType.UNSPECIFIED


class DeclaredTypes:
    """``topic_message_type`` of topic configs' attributes as they hold them (``TopicConfig
    .attributes``), remembered per attribute set (at most ``size``: past it, forgotten and
    learnt anew), so a send to a typed topic looks its type up."""

    def __init__(self, size: int = DECLARED_TYPE_CACHE_SIZE) -> None:
        self._size = size
        self._known: dict[tuple[tuple[str, str], ...], MessageType | None] = {}

    def of(self, attributes: tuple[tuple[str, str], ...]) -> MessageType | None:
        known = self._known
        if attributes in known:
            return known[attributes]
        if len(known) >= self._size:
            known.clear()
        declared = known[attributes] = topic_message_type(dict(attributes))
        return declared


def message_type(properties: Mapping[str, str]) -> MessageType:
    """What a message is, from its properties (TopicMessageType.parseFromMessageProperty; a
    property is there when its value is not null: our values are strings)."""
    if properties.get(MessageConst.PROPERTY_TRANSACTION_PREPARED) == "true":
        return MessageType.TRANSACTION
    if (
        MessageConst.PROPERTY_DELAY_TIME_LEVEL in properties
        or PROPERTY_TIMER_DELIVER_MS in properties
        or PROPERTY_TIMER_DELAY_SEC in properties
        or PROPERTY_TIMER_DELAY_MS in properties
    ):
        return MessageType.DELAY
    if PROPERTY_SHARDING_KEY in properties:
        return MessageType.FIFO
    return MessageType.NORMAL


#: how a refusal by the message type check begins (the 5.x proxy answers such a send with
#: MESSAGE_PROPERTY_CONFLICT_WITH_TYPE)
TYPE_MISMATCH_REMARK: Final = "TopicMessageType validate failed"


def type_mismatch(expected: MessageType | None, actual: MessageType) -> str | None:
    """None when a message of type ``actual`` may go to a topic declaring ``expected`` (as the
    5.x proxy's DefaultTopicMessageTypeValidator decides), else the remark refusing it. A topic
    that declares no type takes anything (4.x topics keep working)."""
    if expected is None or expected is MessageType.MIXED:
        return None
    if actual is MessageType.UNSPECIFIED or actual is not expected:
        return (f"{TYPE_MISMATCH_REMARK}, the expected type is {expected.value}, "
                f"but actual type is {actual.value}")
    return None


# =========================================================================== FIFO message groups


_LCG_MULTIPLIER: Final = 2862933555777941757
_MASK64: Final = (1 << 64) - 1


def consistent_hash(value: int, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash(long, int)`` (a linear congruential walk): the 5.x
    proxy's queue for a message group is ``consistentHash(group.hashCode(), writeQueues)``."""
    if buckets <= 0:
        raise ValueError("buckets must be positive")
    state = value & _MASK64
    candidate = 0
    while True:
        state = (_LCG_MULTIPLIER * state + 1) & _MASK64
        top = state >> 33  # (int) (state >>> 33): fits 31 bits, never negative
        nxt = int((candidate + 1) / ((top + 1) / 2.0**31))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def fifo_queue_index(message_group: str, write_queues: int) -> int:
    """The write queue (index into the topic's writable queues) a FIFO message group uses."""
    return consistent_hash(java_string_hash(message_group), write_queues)
