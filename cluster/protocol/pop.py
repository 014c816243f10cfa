"""RocketMQ 5 POP consumption on the wire and in the revive log, written and read here only.

* the request/response headers of POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME,
  NOTIFICATION and POLLING_INFO (typed extFields, as ``remoting/headers.py``);
* the receipt handle a popped message carries (``POP_CK``, Apache's ``extraInfo``): eight
  space-separated fields ``ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName
  queueId queueOffset`` -- built by the client from the pop answer's ``startOffsetInfo`` /
  ``msgOffsetInfo`` (``<retryFlag> <queueId> <offsets>`` items joined by ``;``), or by the broker
  for a message it read from the pop retry topic;
* the checkpoint (``ck``) and ack (``ack``) records of the revive log topic
  ``rmq_sys_REVIVE_LOG_<cluster>``: fastjson objects with Apache's short keys, so either broker
  reads the other's log;
* the QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE bodies.

Everything parsed here comes from a peer: every parser raises ``PopFormatError`` (a
``ValueError``) naming what is wrong, never anything else.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from ..remoting.headers import CommandHeader, hfield
from . import fastjson

#: Response codes RocketMQ 5 gives the numbers 4.x's ACL codes had (an IntEnum alias would
#: rename those): a pop that found nothing before its poll time ran out, or whose broker has
#: too many pops parked.
POLLING_FULL: Final = 209
POLLING_TIMEOUT: Final = 210

PROPERTY_POP_CK: Final = "POP_CK"
PROPERTY_FIRST_POP_TIME: Final = "1ST_POP_TIME"
#: The message group of a FIFO message (5.x clients hash it to pick the queue).
PROPERTY_SHARDING_KEY: Final = "__SHARDINGKEY"

REVIVE_TOPIC_PREFIX: Final = "rmq_sys_REVIVE_LOG_"
#: The group whose offsets on the revive topic say how far the revive scan got.
REVIVE_GROUP: Final = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG: Final = "ck"
ACK_TAG: Final = "ack"
#: The revive queue id an orderly pop's receipt handle names (no checkpoint is written).
ORDER_REVIVE_QID: Final = 999
#: Apache's cap on messages per pop.
MAX_POP_MSG_NUMS: Final = 32

RETRY_PREFIX: Final = "%RETRY%"
#: retryFlag field of a receipt handle: the message came from the topic itself, or from its
#: pop retry topic (v1 ``%RETRY%<group>_<topic>``, v2 ``%RETRY%<group>+<topic>``).
FLAG_NORMAL: Final = "0"
FLAG_RETRY_V1: Final = "1"
FLAG_RETRY_V2: Final = "2"
KEY_SEPARATOR: Final = " "


class PopFormatError(ValueError):
    """A receipt handle, offset info, revive record or body that does not parse."""


def revive_topic(cluster: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster


def pop_retry_topic(topic: str, group: str) -> str:
    """The pop retry topic of (topic, group), Apache 5.x's default (v1) naming."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def retry_flag(topic: str) -> str:
    if not topic.startswith(RETRY_PREFIX):
        return FLAG_NORMAL
    return FLAG_RETRY_V2 if "+" in topic else FLAG_RETRY_V1


def real_topic(topic: str, group: str, flag: str) -> str:
    """The topic a receipt handle's message was read from (its retry flag applied)."""
    if flag == FLAG_NORMAL:
        return topic
    if flag == FLAG_RETRY_V1:
        return pop_retry_topic(topic, group)
    if flag == FLAG_RETRY_V2:
        return f"{RETRY_PREFIX}{group}+{topic}"
    raise PopFormatError(f"unknown retry flag {flag!r}")


# =========================================================================== receipt handle


def _int(text: str, what: str, lo: int = -(2**63), hi: int = 2**63 - 1) -> int:
    try:
        value = int(text)
    except ValueError:
        raise PopFormatError(f"{what} is not an integer: {text[:32]!r}") from None
    if not lo <= value <= hi:
        raise PopFormatError(f"{what} out of range: {value}")
    return value


@attrs.frozen
class ReceiptHandle:
    """A popped message's ``extraInfo``: where its checkpoint is and which message it is."""

    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    flag: str
    broker_name: str
    queue_id: int
    queue_offset: int

    @property
    def is_order(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QID

    def encode(self) -> str:
        return KEY_SEPARATOR.join(
            str(v) for v in (self.ck_offset, self.pop_time, self.invisible_time, self.revive_qid,
                             self.flag, self.broker_name, self.queue_id, self.queue_offset)
        )

    @classmethod
    def parse(cls, text: str, *, max_len: int = 512) -> ReceiptHandle:
        if len(text) > max_len:
            raise PopFormatError(f"extraInfo longer than {max_len} characters")
        parts = text.split(KEY_SEPARATOR)
        if len(parts) != 8:
            raise PopFormatError(f"extraInfo has {len(parts)} fields, not 8")
        flag = parts[4]
        if flag not in (FLAG_NORMAL, FLAG_RETRY_V1, FLAG_RETRY_V2):
            raise PopFormatError(f"unknown retry flag {flag[:8]!r}")
        return cls(
            ck_offset=_int(parts[0], "ckQueueOffset", 0),
            pop_time=_int(parts[1], "popTime", 0),
            invisible_time=_int(parts[2], "invisibleTime", 0),
            revive_qid=_int(parts[3], "reviveQid", 0, 2**31 - 1),
            flag=flag,
            broker_name=parts[5],
            queue_id=_int(parts[6], "queueId", 0, 2**31 - 1),
            queue_offset=_int(parts[7], "queueOffset", 0),
        )


def offset_info_item(topic: str, queue_id: int, values: Iterable[int]) -> str:
    """One ``startOffsetInfo``/``msgOffsetInfo``/``orderCountInfo`` item."""
    joined = ",".join(str(v) for v in values)
    return f"{retry_flag(topic)}{KEY_SEPARATOR}{queue_id}{KEY_SEPARATOR}{joined}"


def order_count_item(topic: str, queue_id: int, offset: int, count: int) -> str:
    """One ``orderCountInfo`` item: how often the message at ``offset`` was handed out."""
    return f"{retry_flag(topic)}{KEY_SEPARATOR}qo{queue_id}%{offset}{KEY_SEPARATOR}{count}"


#: items one ``startOffsetInfo``/``msgOffsetInfo``/``orderCountInfo`` may hold: a pop hands out
#: at most MAX_POP_MSG_NUMS messages, and orderCountInfo has one item per message and one per
#: queue at most
MAX_INFO_ITEMS: Final = 2 * MAX_POP_MSG_NUMS
#: an ASCII integer as Java's ``Integer.valueOf``/``Long.valueOf`` reads one (optional sign)
_JAVA_INT = re.compile(r"[+-]?[0-9]{1,19}")


def _java_split(text: str, sep: str) -> list[str]:
    """``text.split(sep)`` as Java splits: trailing empty pieces dropped (all of them, unless
    the text itself is empty)."""
    parts = text.split(sep)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return [] if parts == [""] and text else parts


def _java_int(text: str, what: str, bits: int) -> int:
    if not _JAVA_INT.fullmatch(text):
        raise PopFormatError(f"{what} is not an integer: {text[:32]!r}")
    value = int(text)
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise PopFormatError(f"{what} out of range: {text[:32]!r}")
    return value


def _info_items(text: str, what: str) -> dict[str, str]:
    """The items of an offset or count info as ``<retryFlag>@<key>`` → their value text, read
    as Apache's ``ExtraInfoUtil`` reads them: each ``;``-separated item has exactly three
    space-separated fields, no key twice (PopFormatError otherwise)."""
    items = _java_split(text, ";")
    if len(items) > MAX_INFO_ITEMS:
        raise PopFormatError(f"{what} has more than {MAX_INFO_ITEMS} items")
    out: dict[str, str] = {}
    for item in items:
        fields = _java_split(item, KEY_SEPARATOR)
        if len(fields) != 3:
            raise PopFormatError(f"{what} has an item of {len(fields)} fields, not 3")
        key = f"{fields[0]}@{fields[1]}"
        if key in out:
            raise PopFormatError(f"{what} names {key[:40]!r} twice")
        out[key] = fields[2]
    return out


def parse_start_offset_info(text: str | None) -> dict[str, int]:
    """``startOffsetInfo``: ``<retryFlag>@<queueId>`` → the queue's first popped offset
    (empty for none); PopFormatError for a malformed one."""
    items = _info_items(text or "", "startOffsetInfo") if text else {}
    return {k: _java_int(v, "startOffsetInfo's offset", 64) for k, v in items.items()}


def queue_info_key(topic: str, queue_id: int) -> str:
    """The key of a queue's item in ``startOffsetInfo``, ``msgOffsetInfo`` and
    ``orderCountInfo`` (Apache's getStartOffsetInfoMapKey)."""
    return f"{retry_flag(topic)}@{queue_id}"


def message_count_key(topic: str, queue_id: int, queue_offset: int) -> str:
    """The key of one message's item in ``orderCountInfo`` (Apache's getQueueOffsetMapKey)."""
    return f"{retry_flag(topic)}@qo{queue_id}%{queue_offset}"


@attrs.frozen
class OrderCounts:
    """An orderly pop's ``orderCountInfo``: how often each message was handed out before."""

    counts: dict[str, int] = attrs.field(factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> OrderCounts:
        """Apache's ``parseOrderCountInfo``; none or empty: no counts; PopFormatError for a
        malformed one (an item not of three fields, a key twice, a count not a Java int)."""
        items = _info_items(text or "", "orderCountInfo") if text else {}
        return cls({k: _java_int(v, "orderCountInfo's count", 32) for k, v in items.items()})

    def reconsume_times(self, topic: str, queue_id: int, queue_offset: int,
                        stored: int) -> int:
        """A popped message's reconsume times as Apache's client sets them: the count of its
        own item, else of its queue's item, when that count is above 0; ``stored`` (the
        record's own) otherwise."""
        count = self.counts.get(message_count_key(topic, queue_id, queue_offset))
        if count is None:
            count = self.counts.get(queue_info_key(topic, queue_id))
        return count if count is not None and count > 0 else stored


# =========================================================================== headers


@attrs.frozen
class PopMessageRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)
    topic: str = hfield("topic", required=True)
    queue_id: int = hfield("queueId", "int", required=True)
    max_msg_nums: int = hfield("maxMsgNums", "int", required=True)
    invisible_time: int = hfield("invisibleTime", "long", required=True)
    poll_time: int = hfield("pollTime", "long", required=True)
    born_time: int = hfield("bornTime", "long", required=True)
    init_mode: int = hfield("initMode", "int", required=True)
    exp_type: str | None = hfield("expType")
    exp: str | None = hfield("exp")
    order: bool = hfield("order", "bool", default=False)
    attempt_id: str | None = hfield("attemptId")


@attrs.frozen
class PopMessageResponseHeader(CommandHeader):
    pop_time: int = hfield("popTime", "long", required=True)
    invisible_time: int = hfield("invisibleTime", "long", required=True)
    revive_qid: int = hfield("reviveQid", "int", required=True)
    rest_num: int = hfield("restNum", "long", required=True)
    start_offset_info: str | None = hfield("startOffsetInfo")
    msg_offset_info: str | None = hfield("msgOffsetInfo")
    order_count_info: str | None = hfield("orderCountInfo")


@attrs.frozen
class AckMessageRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)
    topic: str = hfield("topic", required=True)
    queue_id: int = hfield("queueId", "int", required=True)
    extra_info: str = hfield("extraInfo", required=True)
    offset: int = hfield("offset", "long", required=True)


@attrs.frozen
class ChangeInvisibleTimeRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)
    topic: str = hfield("topic", required=True)
    queue_id: int = hfield("queueId", "int", required=True)
    extra_info: str = hfield("extraInfo", required=True)
    offset: int = hfield("offset", "long", required=True)
    invisible_time: int = hfield("invisibleTime", "long", required=True)


@attrs.frozen
class ChangeInvisibleTimeResponseHeader(CommandHeader):
    pop_time: int = hfield("popTime", "long", required=True)
    invisible_time: int = hfield("invisibleTime", "long", required=True)
    revive_qid: int = hfield("reviveQid", "int", required=True)


@attrs.frozen
class NotificationRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)
    topic: str = hfield("topic", required=True)
    queue_id: int = hfield("queueId", "int", required=True)
    poll_time: int = hfield("pollTime", "long", required=True)
    born_time: int = hfield("bornTime", "long", required=True)
    order: bool = hfield("order", "bool", default=False)
    attempt_id: str | None = hfield("attemptId")


@attrs.frozen
class PollingInfoRequestHeader(CommandHeader):
    consumer_group: str = hfield("consumerGroup", required=True)
    topic: str = hfield("topic", required=True)
    queue_id: int = hfield("queueId", "int", required=True)


# =========================================================================== revive log


def _get_int(obj: dict[str, Any], key: str, alt: str, lo: int = -(2**63)) -> int:
    value = obj.get(key, obj.get(alt))
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value < 2**63:
        raise PopFormatError(f"{key} is not a valid integer")
    return value


def _get_str(obj: dict[str, Any], key: str, alt: str) -> str:
    value = obj.get(key, obj.get(alt))
    if not isinstance(value, str):
        raise PopFormatError(f"{key} is not a string")
    return value


def _json_obj(body: bytes | bytearray | memoryview) -> dict[str, Any]:
    try:
        obj = fastjson.loads(bytes(body))
    except ValueError as exc:
        raise PopFormatError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise PopFormatError("not a JSON object")
    return obj


@attrs.frozen
class Checkpoint:
    """One pop of one queue: the messages at ``start_offset + d`` for each diff ``d``, popped
    by group ``cid`` at ``pop_time``, invisible for ``invisible_time`` ms."""

    topic: str
    cid: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    diffs: tuple[int, ...]
    broker_name: str
    bit_map: int = 0
    revive_offset: int = 0
    re_put_times: str | None = None

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(self.start_offset + d for d in self.diffs)

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "bm": self.bit_map, "bn": self.broker_name, "c": self.cid, "d": list(self.diffs),
            "it": self.invisible_time, "n": len(self.diffs), "pt": self.pop_time,
            "q": self.queue_id,
            # Apache writes its reviveTime getter too (popTime + invisibleTime); nobody reads it
            "reviveTime": self.pop_time + self.invisible_time,
            "ro": self.revive_offset, "so": self.start_offset, "t": self.topic,
        }
        if self.re_put_times is not None:
            obj["rp"] = self.re_put_times
        return fastjson.dumps(obj)

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview, *,
               max_diffs: int = MAX_POP_MSG_NUMS) -> Checkpoint:
        obj = _json_obj(body)
        raw = obj.get("d")
        if raw is None:
            raw = []
        if not isinstance(raw, list) or len(raw) > max_diffs:
            raise PopFormatError("d is not a short list")
        diffs = []
        for d in raw:
            if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d < 2**31:
                raise PopFormatError("d holds a bad offset difference")
            diffs.append(d)
        rp = obj.get("rp")
        return cls(
            topic=_get_str(obj, "t", "topic"), cid=_get_str(obj, "c", "cid"),
            queue_id=_get_int(obj, "q", "queueId", 0),
            start_offset=_get_int(obj, "so", "startOffset", 0),
            pop_time=_get_int(obj, "pt", "popTime", 0),
            invisible_time=_get_int(obj, "it", "invisibleTime", 0),
            diffs=tuple(diffs), broker_name=str(obj.get("bn") or ""),
            bit_map=_get_int(obj, "bm", "bitMap") if "bm" in obj else 0,
            revive_offset=_get_int(obj, "ro", "reviveOffset") if "ro" in obj else 0,
            re_put_times=str(rp) if rp is not None else None,
        )


@attrs.frozen
class AckRecord:
    """One acked message of a checkpoint (the checkpoint is named by its queue, start offset
    and pop time)."""

    topic: str
    consumer_group: str
    queue_id: int
    start_offset: int
    ack_offset: int
    pop_time: int
    broker_name: str

    def encode(self) -> bytes:
        return fastjson.dumps({
            "ao": self.ack_offset, "bn": self.broker_name, "c": self.consumer_group,
            "pt": self.pop_time, "q": self.queue_id, "so": self.start_offset, "t": self.topic,
        })

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview) -> AckRecord:
        obj = _json_obj(body)
        return cls(
            topic=_get_str(obj, "t", "topic"),
            consumer_group=_get_str(obj, "c", "consumerGroup"),
            queue_id=_get_int(obj, "q", "queueId", 0),
            start_offset=_get_int(obj, "so", "startOffset", 0),
            ack_offset=_get_int(obj, "ao", "ackOffset", 0),
            pop_time=_get_int(obj, "pt", "popTime", 0),
            broker_name=str(obj.get("bn") or ""),
        )


BATCH_ACK_TAG: Final = "bAck"
#: Acks one BATCH_ACK_MESSAGE may carry, and acked offsets one of them may name.
MAX_BATCH_ACKS: Final = 1024
MAX_BATCH_ACK_OFFSETS: Final = 1024


def decode_batch_ack_record(body: bytes | bytearray | memoryview) -> list[AckRecord]:
    """A ``bAck`` revive log record (Apache's BatchAckMsg: an ack's fields and ``aol``, the
    acked offsets) as one AckRecord per offset."""
    obj = _json_obj(body)
    offsets = obj.get("aol", obj.get("ackOffsetList"))
    if not isinstance(offsets, list) or len(offsets) > MAX_BATCH_ACK_OFFSETS:
        raise PopFormatError("aol is not a short list")
    base = AckRecord.decode(fastjson.dumps({**obj, "ao": 0}))
    out = []
    for o in offsets:
        if isinstance(o, bool) or not isinstance(o, int) or not 0 <= o < 2**63:
            raise PopFormatError("aol holds a bad offset")
        out.append(attrs.evolve(base, ack_offset=o))
    return out


@attrs.frozen
class BatchAck:
    """One entry of BATCH_ACK_MESSAGE's body: the acked messages of one checkpoint, as bits
    over ``start_offset`` (Java's ``BitSet.toByteArray``, base64 in the JSON)."""

    consumer_group: str
    topic: str
    retry: str
    start_offset: int
    queue_id: int
    revive_qid: int
    pop_time: int
    invisible_time: int
    offsets: tuple[int, ...]


def _bits(text: Any) -> tuple[int, ...]:
    import base64
    import binascii

    if not isinstance(text, str) or len(text) > 4 * MAX_BATCH_ACK_OFFSETS:
        raise PopFormatError("b is not a short base64 string")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise PopFormatError("b is not base64") from None
    out = [i * 8 + bit for i, byte in enumerate(raw) for bit in range(8) if byte >> bit & 1]
    if len(out) > MAX_BATCH_ACK_OFFSETS:
        raise PopFormatError("b names too many offsets")
    return tuple(out)


def encode_bits(diffs: Iterable[int]) -> str:
    import base64

    values = sorted(set(diffs))
    raw = bytearray((values[-1] // 8 + 1) if values else 0)
    for d in values:
        raw[d // 8] |= 1 << (d % 8)
    return base64.b64encode(bytes(raw)).decode()


def decode_batch_ack_body(body: bytes | bytearray | memoryview) -> list[BatchAck]:
    obj = _json_obj(body)
    acks = obj.get("acks")
    if not isinstance(acks, list) or len(acks) > MAX_BATCH_ACKS:
        raise PopFormatError("acks is not a short list")
    out = []
    for a in acks:
        if not isinstance(a, dict):
            raise PopFormatError("an ack is not an object")
        retry = _get_str(a, "r", "retry")
        if retry not in (FLAG_NORMAL, FLAG_RETRY_V1, FLAG_RETRY_V2):
            raise PopFormatError("r is not a retry flag")
        start = _get_int(a, "so", "startOffset", 0)
        out.append(BatchAck(
            consumer_group=_get_str(a, "c", "consumerGroup"), topic=_get_str(a, "t", "topic"),
            retry=retry, start_offset=start, queue_id=_get_int(a, "q", "queueId", 0),
            revive_qid=_get_int(a, "rq", "reviveQueueId", 0),
            pop_time=_get_int(a, "pt", "popTime", 0),
            invisible_time=_get_int(a, "it", "invisibleTime", 0),
            offsets=tuple(start + d for d in _bits(a.get("b", a.get("bitSet", ""))))))
    return out


# =========================================================================== assignment bodies


class RequestMode(enum.Enum):
    PULL = "PULL"
    POP = "POP"


@attrs.frozen
class RequestModeSetting:
    """SET_MESSAGE_REQUEST_MODE's body, and one entry of the broker's mode table."""

    topic: str
    consumer_group: str
    mode: RequestMode = RequestMode.PULL
    pop_share_queue_num: int = 0

    def to_json_obj(self) -> dict[str, Any]:
        return {"consumerGroup": self.consumer_group, "mode": self.mode.value,
                "popShareQueueNum": self.pop_share_queue_num, "topic": self.topic}

    @classmethod
    def from_json_obj(cls, obj: Any) -> RequestModeSetting:
        if not isinstance(obj, dict):
            raise PopFormatError("mode setting is not an object")
        mode = obj.get("mode", "PULL")
        try:
            parsed = RequestMode(mode)
        except ValueError:
            raise PopFormatError(f"unknown mode {str(mode)[:16]!r}") from None
        share = obj.get("popShareQueueNum", 0)
        if isinstance(share, bool) or not isinstance(share, int) or not -1 <= share <= 1024:
            raise PopFormatError("popShareQueueNum is not a small integer")
        return cls(_get_str(obj, "topic", "topic"),
                   _get_str(obj, "consumerGroup", "consumerGroup"), parsed, share)

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview) -> RequestModeSetting:
        return cls.from_json_obj(_json_obj(body))


@attrs.frozen
class AssignmentQuery:
    """QUERY_ASSIGNMENT's body."""

    topic: str
    consumer_group: str
    client_id: str
    strategy_name: str | None
    broadcasting: bool

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview) -> AssignmentQuery:
        obj = _json_obj(body)
        strategy = obj.get("strategyName")
        model = obj.get("messageModel", "CLUSTERING")
        if model not in ("CLUSTERING", "BROADCASTING"):
            raise PopFormatError("messageModel is neither CLUSTERING nor BROADCASTING")
        return cls(_get_str(obj, "topic", "topic"),
                   _get_str(obj, "consumerGroup", "consumerGroup"),
                   _get_str(obj, "clientId", "clientId"),
                   strategy if isinstance(strategy, str) else None, model == "BROADCASTING")


def encode_assignments(
    assigned: Sequence[tuple[str, str, int]], mode: RequestMode
) -> bytes:
    """QUERY_ASSIGNMENT's answer body: (topic, brokerName, queueId) each with the mode."""
    return fastjson.dumps({"messageQueueAssignments": [
        {"messageQueue": {"brokerName": b, "queueId": q, "topic": t}, "mode": mode.value}
        for t, b, q in assigned
    ]})
