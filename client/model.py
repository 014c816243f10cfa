"""Typed values of the client API (frozen attrs): messages, queues, results, enums. Pure."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ..cluster.protocol.message import (
    MAX_MESSAGE_SIZE_BYTES,
    BodyInflateError,
    MessageConst,
    StoredMessage,
    body_crc,
    decode_host,
    encode_offset_msg_id,
    encode_offset_msg_id_raw,
    inflate_body,
    record_fields,
)

MC = MessageConst
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


@attrs.frozen(order=True)
class MessageQueue:
    """(topic, brokerName, queueId); ordered as Java's ``MessageQueue.compareTo``."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json_obj(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json_obj(cls, obj: Mapping[str, Any]) -> MessageQueue:
        return cls(str(obj["topic"]), str(obj["brokerName"]), int(obj["queueId"]))

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


def _props(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return dict(value or {})


def _keys(value: Any) -> str | tuple[str, ...] | None:
    return tuple(value) if isinstance(value, list | tuple) else value


PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"


@attrs.frozen
class Message:
    """A message to send. ``keys``: one string (space-separated) or a list of keys."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | tuple[str, ...] | None = attrs.field(default=None, converter=_keys)
    properties: Mapping[str, str] = attrs.field(factory=dict, converter=_props)
    delay_level: int = 0
    flag: int = 0
    wait_store_msg_ok: bool = True
    #: a timer message (RocketMQ 5): delivered at this time (ms since the epoch, the broker's
    #: clock), or after ``delay_ms`` from its arrival; the broker refuses more than its
    #: ``timerMaxDelaySec`` (3 days by default) ahead. One of the two, not with a delay level.
    deliver_time_ms: int | None = None
    delay_ms: int | None = None

    def wire_properties(self) -> dict[str, str]:
        """Properties in the order a Java ``Message`` gets them (TAGS, KEYS, WAIT, DELAY,
        TIMER_DELIVER_MS / TIMER_DELAY_MS, user)."""
        props: dict[str, str] = {}
        if self.tags:
            props[MC.PROPERTY_TAGS] = self.tags
        if self.keys:
            keys = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
            props[MC.PROPERTY_KEYS] = keys
        props[MC.PROPERTY_WAIT_STORE_MSG_OK] = "true" if self.wait_store_msg_ok else "false"
        if self.delay_level > 0:
            props[MC.PROPERTY_DELAY_TIME_LEVEL] = str(self.delay_level)
        if self.deliver_time_ms is not None:
            props[PROPERTY_TIMER_DELIVER_MS] = str(self.deliver_time_ms)
        if self.delay_ms is not None:
            props[PROPERTY_TIMER_DELAY_MS] = str(self.delay_ms)
        for k, v in self.properties.items():
            props.setdefault(k, v)
        return props


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@attrs.frozen
class SendResult:
    """``msg_id`` is the client-side UNIQ_KEY (comma-joined for a batch); ``offset_msg_id`` the
    broker's (commit-log) id."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str | None = None


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@attrs.frozen
class ReceivedMessage:
    """A message as a consumer sees it (Java ``MessageExt``); ``msg_id`` is UNIQ_KEY when set."""

    topic: str
    body: bytes
    properties: Mapping[str, str]
    queue: MessageQueue
    queue_offset: int
    commitlog_offset: int
    msg_id: str
    reconsume_times: int
    born_timestamp: int
    store_timestamp: int
    sys_flag: int
    flag: int
    born_host: tuple[str, int]
    store_host: tuple[str, int]
    body_crc: int

    @property
    def tags(self) -> str | None:
        return self.properties.get(MC.PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MC.PROPERTY_KEYS)

    @property
    def queue_id(self) -> int:
        return self.queue.queue_id

    @property
    def offset_msg_id(self) -> str:
        """The broker's id: store host + commit-log offset (32 hex characters for IPv4)."""
        return encode_offset_msg_id(self.store_host, self.commitlog_offset)

    @classmethod
    def decode_all(
        cls, data: bytes | bytearray | memoryview, broker_name: str, *, check_crc: bool = False,
        max_body_bytes: int = MAX_MESSAGE_SIZE_BYTES,
    ) -> list[ReceivedMessage]:
        """The messages of ``decode_pulled`` (a body that cannot be inflated is left out)."""
        return cls.decode_pulled(
            data, broker_name, check_crc=check_crc, max_body_bytes=max_body_bytes)[0]

    @classmethod
    def decode_pulled(
        cls, data: bytes | bytearray | memoryview, broker_name: str, *, check_crc: bool = False,
        max_body_bytes: int = MAX_MESSAGE_SIZE_BYTES,
    ) -> tuple[list[ReceivedMessage], list[SkippedMessage]]:
        """Every record of a PULL (or QUERY) body, as ``from_stored`` would make each, without
        the intermediate ``StoredMessage``: the records of one body share their queue and hosts,
        which are made once per body. A COMPRESSED body that cannot be inflated within
        ``max_body_bytes`` (corrupt, or a bomb) is not delivered: it comes back as a
        ``SkippedMessage`` and the records after it are decoded as usual. Raises ``RecordError``
        on a bad record."""
        view = memoryview(data)
        end = len(view)
        hosts: dict[bytes, tuple[str, int]] = {}
        queues: dict[tuple[str, int], MessageQueue] = {}
        uniq_key = MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
        out = []
        skipped = []
        pos = 0
        while pos < end:
            (
                total, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_raw,
                store_ts, store_raw, reconsume, _prepared, body, topic, props,
            ) = record_fields(view, pos, check_crc=check_crc)
            pos += total
            msg_id = props.get(uniq_key) or encode_offset_msg_id_raw(store_raw, phys)
            try:
                body = inflate_body(body, sys_flag, max_body_bytes)
            except BodyInflateError as exc:
                skipped.append(SkippedMessage(topic, queue_id, queue_offset, phys, msg_id,
                                              str(exc)))
                continue
            born_host = hosts.get(born_raw)
            if born_host is None:
                born_host = hosts[born_raw] = decode_host(born_raw)
            store_host = hosts.get(store_raw)
            if store_host is None:
                store_host = hosts[store_raw] = decode_host(store_raw)
            queue = queues.get((topic, queue_id))
            if queue is None:
                queue = queues[topic, queue_id] = MessageQueue(topic, broker_name, queue_id)
            out.append(cls(
                topic=topic,
                body=body,
                properties=props,
                queue=queue,
                queue_offset=queue_offset,
                commitlog_offset=phys,
                msg_id=msg_id,
                reconsume_times=reconsume,
                born_timestamp=born_ts,
                store_timestamp=store_ts,
                sys_flag=sys_flag,
                flag=flag,
                born_host=born_host,
                store_host=store_host,
                body_crc=crc,
            ))
        return out, skipped

    @classmethod
    def from_stored(
        cls, stored: StoredMessage, broker_name: str, *,
        max_body_bytes: int = MAX_MESSAGE_SIZE_BYTES,
    ) -> ReceivedMessage:
        """Raises ``BodyInflateError`` (a ValueError) when a COMPRESSED body cannot be inflated
        within ``max_body_bytes``."""
        body = inflate_body(stored.body, stored.sys_flag, max_body_bytes)
        props = stored.properties
        uniq = props.get(MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if not uniq:
            uniq = encode_offset_msg_id(stored.store_host, stored.commitlog_offset)
        topic = stored.topic
        return cls(
            topic=topic,
            body=body,
            properties=props,
            queue=MessageQueue(topic, broker_name, stored.queue_id),
            queue_offset=stored.queue_offset,
            commitlog_offset=stored.commitlog_offset,
            msg_id=uniq,
            reconsume_times=stored.reconsume_times,
            born_timestamp=stored.born_timestamp,
            store_timestamp=stored.store_timestamp,
            sys_flag=stored.sys_flag,
            flag=stored.flag,
            born_host=stored.born_host,
            store_host=stored.store_host,
            body_crc=stored.body_crc,
        )

    def restore_retry_topic(self, group: str) -> ReceivedMessage:
        """A ``%RETRY%group`` message shows its original topic (Java resetRetryAndNamespace)."""
        origin = self.properties.get(MC.PROPERTY_RETRY_TOPIC)
        if origin and self.topic == retry_topic(group):
            return attrs.evolve(self, topic=origin)
        return self

    def checksum(self) -> int:
        """CRC32 of the (uncompressed) body, as the CLI prints it."""
        return body_crc(self.body)


@attrs.frozen
class SkippedMessage:
    """A pulled message a consumer does not deliver: its body cannot be inflated within the
    consumer's ``max_message_bytes`` (``reason`` says why). It stays in the store; the consumer
    moves past it as past a filtered message."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    msg_id: str
    reason: str


@attrs.frozen
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: tuple[ReceivedMessage, ...] = ()
    suggest_which_broker_id: int = 0
    #: messages found but not delivered (their bodies cannot be inflated within the bound)
    skipped: tuple[SkippedMessage, ...] = ()


class ConsumeResult(enum.Enum):
    """Concurrent listener answers (Java ConsumeConcurrentlyStatus)."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class OrderlyResult(enum.Enum):
    """Orderly listener answers (Java ConsumeOrderlyStatus)."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class ConsumeFromWhere(enum.Enum):
    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeType(enum.Enum):
    PULL = "CONSUME_ACTIVELY"
    PUSH = "CONSUME_PASSIVELY"


class TransactionState(enum.Enum):
    """Java LocalTransactionState; ``value`` is the END_TRANSACTION commitOrRollback code."""

    COMMIT_MESSAGE = 8
    ROLLBACK_MESSAGE = 12
    UNKNOW = 0
