"""RocketMQ 4.x message traces (``enableMsgTrace``): the records a client writes into the trace
topic and how they read back. Pure: no I/O, no trio.

A trace message is an ordinary message of the trace topic (``RMQ_SYS_TRACE_TOPIC`` unless the
client names another); its keys are the traced messages' ids and keys, so a key query on the
trace topic by message id finds it. Its body is UTF-8 text: records, each ended by
``FIELD_SPLITOR`` (char 2), fields inside a record separated by ``CONTENT_SPLITOR`` (char 1),
the first field naming the record's kind. The fields in order:

``Pub``
    timestamp, region, producer group, topic, msgId, tags, keys, store host, body length,
    cost (ms), message type (ordinal, ``TraceMessageType``), offset msgId, success
    [, client host -- written by 5.x clients only]
``SubBefore``
    timestamp, region, consumer group, request id, msgId, reconsume times, keys
``SubAfter``
    request id, msgId, cost (ms), success, keys [, context code [, timestamp [, consumer
    group -- written since 4.9.x]]]
``EndTransaction``
    timestamp, region, producer group, topic, msgId, tags, keys, store host, message type,
    transaction id, transaction state (``COMMIT_MESSAGE``/``ROLLBACK_MESSAGE``/``UNKNOW``),
    from a check-back (boolean)

A SubBefore and the SubAfter of the same consumption share the request id; an older client's
SubAfter carries no group of its own. A value the client did not have is written as Java
prints a null (``null``). Booleans read as Java's ``Boolean.parseBoolean`` does (``true`` in
any case, else false).

``decode`` is for bodies read off a broker: a record that does not parse is skipped (and
counted), never raised, and at most ``MAX_RECORDS_PER_BODY`` records are read from one body.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import attrs

CONTENT_SPLITOR: Final = "\x01"
FIELD_SPLITOR: Final = "\x02"
#: Apache's default trace topic (``TopicValidator.RMQ_SYS_TRACE_TOPIC``).
DEFAULT_TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
#: Region written when the broker's answer names none (Apache's ``DefaultRegion``).
DEFAULT_REGION: Final = "DefaultRegion"
#: Java's text for an absent value.
NULL: Final = "null"
#: Records read from one trace body at most (a body is bounded by the message size already;
#: this bounds the work a hostile one can cause).
MAX_RECORDS_PER_BODY: Final = 10_000
#: Keys a trace message carries are joined with this (``MessageConst.KEY_SEPARATOR``).
KEY_SEPARATOR: Final = " "


class TraceType(enum.Enum):
    PUB = "Pub"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"
    END_TRANSACTION = "EndTransaction"


class TraceMessageType(enum.IntEnum):
    """The message type a Pub/EndTransaction record names, as its ordinal (Java's
    ``MessageType``; 5.x added ORDER)."""

    NORMAL = 0
    TRANS_HALF = 1
    TRANS_COMMIT = 2
    DELAY = 3
    ORDER = 4


class ConsumeReturnType(enum.IntEnum):
    """The context code of a SubAfter record (Java's ``ConsumeReturnType`` ordinal)."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


@attrs.frozen
class PubRecord:
    timestamp: int
    region: str
    group: str
    topic: str
    msg_id: str
    tags: str
    keys: str
    store_host: str
    body_length: int
    cost_ms: int
    msg_type: int
    offset_msg_id: str
    success: bool
    client_host: str | None = None
    kind: TraceType = TraceType.PUB


@attrs.frozen
class SubBeforeRecord:
    timestamp: int
    region: str
    group: str
    request_id: str
    msg_id: str
    retry_times: int
    keys: str
    kind: TraceType = TraceType.SUB_BEFORE


@attrs.frozen
class SubAfterRecord:
    request_id: str
    msg_id: str
    cost_ms: int
    success: bool
    keys: str
    context_code: int | None = None
    timestamp: int | None = None
    group: str | None = None
    kind: TraceType = TraceType.SUB_AFTER


@attrs.frozen
class EndTransactionRecord:
    timestamp: int
    region: str
    group: str
    topic: str
    msg_id: str
    tags: str
    keys: str
    store_host: str
    msg_type: int
    transaction_id: str
    transaction_state: str
    from_check: bool
    kind: TraceType = TraceType.END_TRANSACTION


TraceRecord = PubRecord | SubBeforeRecord | SubAfterRecord | EndTransactionRecord

TRANSACTION_STATES: Final = frozenset({"COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW"})


def text(value: str | None) -> str:
    """A field as Java appends it (an absent value reads ``null``)."""
    return NULL if value is None else value


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _fields(r: TraceRecord) -> list[str]:
    if isinstance(r, PubRecord):
        out = [str(r.timestamp), r.region, r.group, r.topic, r.msg_id, r.tags, r.keys,
               r.store_host, str(r.body_length), str(r.cost_ms), str(r.msg_type),
               r.offset_msg_id, _bool(r.success)]
        return out if r.client_host is None else [*out, r.client_host]
    if isinstance(r, SubBeforeRecord):
        return [str(r.timestamp), r.region, r.group, r.request_id, r.msg_id,
                str(r.retry_times), r.keys]
    if isinstance(r, SubAfterRecord):
        out = [r.request_id, r.msg_id, str(r.cost_ms), _bool(r.success), r.keys]
        optional = [None if r.context_code is None else str(r.context_code),
                    None if r.timestamp is None else str(r.timestamp), r.group]
        for value in optional:  # each needs the ones before it
            if value is None:
                break
            out.append(value)
        return out
    return [str(r.timestamp), r.region, r.group, r.topic, r.msg_id, r.tags, r.keys,
            r.store_host, str(r.msg_type), r.transaction_id, r.transaction_state,
            _bool(r.from_check)]


def encode_record(r: TraceRecord) -> str:
    """One record, ended by ``FIELD_SPLITOR``. Fields must not hold chars 1 or 2
    (``clean`` them first)."""
    return CONTENT_SPLITOR.join([r.kind.value, *_fields(r)]) + FIELD_SPLITOR


def encode(records: Iterable[TraceRecord]) -> bytes:
    """A trace message body holding ``records``."""
    return "".join(encode_record(r) for r in records).encode("utf-8")


def clean(value: str | None) -> str:
    """A field value safe to write: ``null`` for none or empty (Apache's reader splits as
    Java does, dropping trailing empty fields, and fails on a record so shortened), the two
    splitters replaced by blanks (a tag or key holding one would shift every later field)."""
    if not value:
        return NULL
    if CONTENT_SPLITOR in value or FIELD_SPLITOR in value:
        return value.replace(CONTENT_SPLITOR, " ").replace(FIELD_SPLITOR, " ")
    return value


def trace_keys(records: Iterable[TraceRecord]) -> list[str]:
    """The keys of a trace message holding ``records``: every message id, then every non-empty
    keys value, each once, in first-seen order (Apache's transKey set)."""
    seen: dict[str, None] = {}
    for r in records:
        seen.setdefault(r.msg_id, None)
        if r.keys and r.keys != NULL:
            seen.setdefault(r.keys, None)
    return list(seen)


# ------------------------------------------------------------------ decoding


def _parse_bool(value: str) -> bool:
    return value.lower() == "true"


def _int(value: str) -> int:
    # Java's Long.parseLong: optional sign, ASCII digits only
    v = value[1:] if value[:1] in "+-" else value
    if not v or not v.isascii() or not v.isdigit() or len(v) > 19:
        raise ValueError(f"not a number: {value[:32]!r}")
    return int(value)


def _msg_type(value: str) -> int:
    n = _int(value)
    if n not in TraceMessageType._value2member_map_:
        raise ValueError(f"unknown message type {n}")
    return n


def _pub(f: Sequence[str]) -> PubRecord:
    if len(f) < 13:
        raise ValueError("short Pub record")
    offset_id, success = (f[12], f[13]) if len(f) >= 14 else ("", f[12])
    return PubRecord(
        timestamp=_int(f[1]), region=f[2], group=f[3], topic=f[4], msg_id=f[5], tags=f[6],
        keys=f[7], store_host=f[8], body_length=_int(f[9]), cost_ms=_int(f[10]),
        msg_type=_msg_type(f[11]), offset_msg_id=offset_id, success=_parse_bool(success),
        client_host=f[14] if len(f) >= 15 else None,
    )


def _sub_before(f: Sequence[str]) -> SubBeforeRecord:
    if len(f) < 8:
        raise ValueError("short SubBefore record")
    return SubBeforeRecord(timestamp=_int(f[1]), region=f[2], group=f[3], request_id=f[4],
                           msg_id=f[5], retry_times=_int(f[6]), keys=f[7])


def _sub_after(f: Sequence[str]) -> SubAfterRecord:
    if len(f) < 6:
        raise ValueError("short SubAfter record")
    return SubAfterRecord(
        request_id=f[1], msg_id=f[2], cost_ms=_int(f[3]), success=_parse_bool(f[4]), keys=f[5],
        context_code=_int(f[6]) if len(f) >= 7 else None,
        timestamp=_int(f[7]) if len(f) >= 8 else None,
        group=f[8] if len(f) >= 9 else None,
    )


def _end_transaction(f: Sequence[str]) -> EndTransactionRecord:
    if len(f) < 13:
        raise ValueError("short EndTransaction record")
    if f[11] not in TRANSACTION_STATES:
        raise ValueError(f"unknown transaction state {f[11][:32]!r}")
    return EndTransactionRecord(
        timestamp=_int(f[1]), region=f[2], group=f[3], topic=f[4], msg_id=f[5], tags=f[6],
        keys=f[7], store_host=f[8], msg_type=_msg_type(f[9]), transaction_id=f[10],
        transaction_state=f[11], from_check=_parse_bool(f[12]),
    )


_DECODERS: Final[dict[str, Callable[[Sequence[str]], TraceRecord]]] = {
    TraceType.PUB.value: _pub,
    TraceType.SUB_BEFORE.value: _sub_before,
    TraceType.SUB_AFTER.value: _sub_after,
    TraceType.END_TRANSACTION.value: _end_transaction,
}


@attrs.frozen
class Decoded:
    records: tuple[TraceRecord, ...]
    #: records that did not parse (unknown kind, missing or malformed fields) or were past
    #: ``MAX_RECORDS_PER_BODY``
    skipped: int


def decode(body: bytes | str) -> Decoded:
    """Every record of a trace message body; nothing in it raises."""
    data = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    out: list[TraceRecord] = []
    skipped = 0
    for chunk in data.split(FIELD_SPLITOR):
        if not chunk:
            continue
        if len(out) >= MAX_RECORDS_PER_BODY:
            skipped += 1
            continue
        fields = chunk.split(CONTENT_SPLITOR)
        fn = _DECODERS.get(fields[0])
        if fn is None:
            skipped += 1
            continue
        try:
            out.append(fn(fields))
        except ValueError:
            skipped += 1
    return Decoded(tuple(out), skipped)


# ------------------------------------------------------------------ the views mqadmin prints


@attrs.frozen
class TraceView:
    """One record about one message, as ``mqadmin queryMsgTraceById`` reads it: the trace
    message's born host stands for the client's host."""

    kind: TraceType
    msg_id: str
    group: str | None
    client_host: str
    timestamp: int | None
    cost_ms: int
    success: bool
    topic: str | None = None
    tags: str | None = None
    keys: str | None = None
    store_host: str | None = None
    offset_msg_id: str | None = None
    request_id: str | None = None
    retry_times: int | None = None

    @property
    def status(self) -> str:
        return "success" if self.success else "failed"


def views_of(messages: Iterable[tuple[Sequence[TraceRecord], str]], msg_id: str
             ) -> list[TraceView]:
    """The views about ``msg_id`` in trace messages, each given as (its records, the host it
    was born at), in record order. A SubAfter without a group (or time) of its own takes the
    SubBefore's of the same request, in whichever trace message that is."""
    batches = [(list(recs), host) for recs, host in messages]
    before = {r.request_id: r for recs, _h in batches for r in recs
              if isinstance(r, SubBeforeRecord) and r.msg_id == msg_id}
    return [_view(r, host, before) for recs, host in batches for r in recs if r.msg_id == msg_id]


def _view(r: TraceRecord, host: str, before: dict[str, SubBeforeRecord]) -> TraceView:
    if isinstance(r, PubRecord):
        return TraceView(r.kind, r.msg_id, r.group, host, r.timestamp, r.cost_ms, r.success,
                         topic=r.topic, tags=r.tags, keys=r.keys, store_host=r.store_host,
                         offset_msg_id=r.offset_msg_id)
    if isinstance(r, SubBeforeRecord):
        return TraceView(r.kind, r.msg_id, r.group, host, r.timestamp, 0, False, keys=r.keys,
                         request_id=r.request_id, retry_times=r.retry_times)
    if isinstance(r, SubAfterRecord):
        b = before.get(r.request_id)
        ts = r.timestamp if r.timestamp is not None else (b.timestamp if b else None)
        group = r.group if r.group is not None else (b.group if b else None)
        return TraceView(r.kind, r.msg_id, group, host, ts, r.cost_ms,
                         r.success, keys=r.keys, request_id=r.request_id,
                         retry_times=b.retry_times if b else None)
    return TraceView(r.kind, r.msg_id, r.group, host, r.timestamp, 0, True, topic=r.topic,
                     tags=r.tags, keys=r.keys, store_host=r.store_host)
