"""Messages as RocketMQ 4.x stores and ships them (pure; no I/O, no trio).

* ``Message``: what a producer sends (topic, body, flag, properties, sysFlag, hosts, ...).
* Properties text: ``key 0x01 value 0x02 ...``; Java omits the final 0x02, C++ appends it, and the
  parser skips empty entries (docs/protocol/commitlog.md, "Properties").
* The stored record, v1 magic with IPv4 hosts (remoting-protocol.md §5.1,
  store-and-replication.md §1.3): one layout table (``RECORD_LAYOUT``: name, offset, struct
  code of each header field) and everything derived from it: the header struct the CommitLog
  packs straight into its mmap, the writers, and one family of readers (``head_status``,
  ``record_tail``; on them ``decode_record``, ``record_properties``, ``peek_field``,
  ``find_property``) that the store's check and scan and the replica audit use too.
* Batch bodies of SEND_BATCH_MESSAGE (§5.5), offset msgIds (§5.4) and the tagsCode rule
  (Java ``String.hashCode`` of TAGS, widened to int64).

Every integer is big-endian.
"""

from __future__ import annotations

import functools
import itertools
import operator
import socket
import struct
import sys
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from .crc import crc32

# --------------------------------------------------------------------------- constants

MAGIC_V1: Final = 0xDAA320A7  # -626843481 as a Java int
MAGIC_V2: Final = 0xDAA320AB
BLANK_MAGIC: Final = 0xCBD43194  # end-of-file filler, -875286124 as a Java int
END_FILE_MIN_BLANK_LENGTH: Final = 8

MAX_TOPIC_LENGTH_BYTES: Final = 127  # v1 records hold the topic length in one signed byte
MAX_PROPERTIES_LENGTH_BYTES: Final = 32767  # a signed short
MAX_MESSAGE_SIZE_BYTES: Final = 4 * 1024 * 1024  # RocketMQ maxMessageSize default

# MessageSysFlag
SYSFLAG_COMPRESSED: Final = 0x1
SYSFLAG_MULTI_TAGS: Final = 0x2
SYSFLAG_TRANSACTION_NOT_TYPE: Final = 0x0
SYSFLAG_TRANSACTION_PREPARED_TYPE: Final = 0x4
SYSFLAG_TRANSACTION_COMMIT_TYPE: Final = 0x8
SYSFLAG_TRANSACTION_ROLLBACK_TYPE: Final = 0xC
SYSFLAG_TRANSACTION_MASK: Final = 0xC
SYSFLAG_BORNHOST_V6: Final = 0x10
SYSFLAG_STOREHOST_V6: Final = 0x20
#: sysFlag bits 8-10: the compression type of a COMPRESSED body (RocketMQ 5; 0 with the
#: COMPRESSED bit means zlib, as every 4.x client writes it; 0x100 LZ4, 0x200 ZSTD, 0x300 ZLIB).
SYSFLAG_COMPRESSION_TYPE_MASK: Final = 0x700
SYSFLAG_COMPRESSION_ZLIB_TYPES: Final = frozenset({0x000, 0x300})

PROPERTY_SEPARATOR: Final = "\x02"
NAME_VALUE_SEPARATOR: Final = "\x01"
KEY_SEPARATOR: Final = " "


class MessageConst:
    """Property keys (RocketMQ ``MessageConst``)."""

    PROPERTY_KEYS: Final = "KEYS"
    PROPERTY_TAGS: Final = "TAGS"
    PROPERTY_WAIT_STORE_MSG_OK: Final = "WAIT"
    PROPERTY_DELAY_TIME_LEVEL: Final = "DELAY"
    PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
    PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
    PROPERTY_REAL_QUEUE_ID: Final = "REAL_QID"
    PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
    PROPERTY_PRODUCER_GROUP: Final = "PGROUP"
    PROPERTY_MIN_OFFSET: Final = "MIN_OFFSET"
    PROPERTY_MAX_OFFSET: Final = "MAX_OFFSET"
    PROPERTY_BUYER_ID: Final = "BUYER_ID"
    PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
    PROPERTY_TRANSFER_FLAG: Final = "TRANSFER_FLAG"
    PROPERTY_CORRECTION_FLAG: Final = "CORRECTION_FLAG"
    PROPERTY_MQ2_FLAG: Final = "MQ2_FLAG"
    PROPERTY_RECONSUME_TIME: Final = "RECONSUME_TIME"
    PROPERTY_MSG_REGION: Final = "MSG_REGION"
    PROPERTY_TRACE_SWITCH: Final = "TRACE_ON"
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: Final = "UNIQ_KEY"
    PROPERTY_MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
    PROPERTY_CONSUME_START_TIMESTAMP: Final = "CONSUME_START_TIME"
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
    PROPERTY_TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    PROPERTY_INSTANCE_ID: Final = "INSTANCE_ID"
    PROPERTY_CORRELATION_ID: Final = "CORRELATION_ID"
    PROPERTY_MESSAGE_REPLY_TO_CLIENT: Final = "REPLY_TO_CLIENT"
    PROPERTY_MESSAGE_TTL: Final = "TTL"
    PROPERTY_REPLY_MESSAGE_ARRIVE_TIME: Final = "ARRIVE_TIME"
    PROPERTY_PUSH_REPLY_TIME: Final = "PUSH_REPLY_TIME"
    PROPERTY_CLUSTER: Final = "CLUSTER"
    PROPERTY_MESSAGE_TYPE: Final = "MSG_TYPE"
    PROPERTY_INNER_MULTI_DISPATCH: Final = "INNER_MULTI_DISPATCH"
    PROPERTY_INNER_MULTI_QUEUE_OFFSET: Final = "INNER_MULTI_QUEUE_OFFSET"


HostAddr = tuple[str, int]
ZERO_HOST: Final[HostAddr] = ("0.0.0.0", 0)


# --------------------------------------------------------------------------- values


@attrs.frozen(slots=True)
class Message:
    """A message to store. ``properties`` is never mutated after construction."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: Mapping[str, str] = attrs.field(factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: HostAddr = ZERO_HOST
    store_host: HostAddr = ZERO_HOST
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MessageConst.PROPERTY_KEYS)


_MESSAGE_FIELDS: Final = (
    "topic", "body", "queue_id", "flag", "properties", "sys_flag", "born_timestamp", "born_host",
    "store_host", "reconsume_times", "prepared_transaction_offset",
)
if tuple(f.name for f in attrs.fields(Message)) != _MESSAGE_FIELDS:  # keep new_message in step
    raise RuntimeError("Message fields changed: update new_message")
(
    _set_topic, _set_body, _set_queue_id, _set_flag, _set_properties, _set_sys_flag,
    _set_born_timestamp, _set_born_host, _set_store_host, _set_reconsume_times,
    _set_prepared_transaction_offset,
) = (Message.__dict__[name].__set__ for name in _MESSAGE_FIELDS)  # slot descriptors
_new_object: Final = object.__new__


def new_message(
    topic: str,
    body: bytes,
    queue_id: int,
    flag: int,
    properties: Mapping[str, str],
    sys_flag: int,
    born_timestamp: int,
    born_host: HostAddr,
    store_host: HostAddr,
    reconsume_times: int,
    prepared_transaction_offset: int = 0,
) -> Message:
    """``Message(...)`` with every field given, for the send hot path: the same frozen object,
    built through the slot descriptors (about half the cost of the attrs ``__init__``)."""
    m: Message = _new_object(Message)
    _set_topic(m, topic)
    _set_body(m, body)
    _set_queue_id(m, queue_id)
    _set_flag(m, flag)
    _set_properties(m, properties)
    _set_sys_flag(m, sys_flag)
    _set_born_timestamp(m, born_timestamp)
    _set_born_host(m, born_host)
    _set_store_host(m, store_host)
    _set_reconsume_times(m, reconsume_times)
    _set_prepared_transaction_offset(m, prepared_transaction_offset)
    return m


@attrs.frozen(slots=True)
class StoredMessage:
    """A decoded CommitLog record (RocketMQ ``MessageExt``)."""

    store_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commitlog_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: HostAddr
    store_timestamp: int
    store_host: HostAddr
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def msg_id(self) -> str:
        return encode_offset_msg_id(self.store_host, self.commitlog_offset)

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.PROPERTY_TAGS)


# --------------------------------------------------------------------------- properties


def encode_properties(props: Mapping[str, str]) -> bytes:
    """Java form: separators between entries, none after the last."""
    if not props:
        return b""
    return "\x02".join(map("\x01".join, props.items())).encode()


def decode_properties(data: bytes | memoryview | str) -> dict[str, str]:
    """Parse either form (trailing 0x02 or not); empty entries, keys or values are skipped."""
    if isinstance(data, str):
        text = data
    else:
        text = (data if isinstance(data, bytes) else bytes(data)).decode("utf-8", "replace")
    out: dict[str, str] = {}
    if not text:
        return out
    for entry in text.split("\x02"):
        key, sep, value = entry.partition("\x01")
        if sep and key and value:
            out[key] = value
    return out


# --------------------------------------------------------------------------- hashes


_HASH_MASK: Final = 0xFFFFFFFF
_POW31_MAX_UNITS: Final = 4096
# 31**(k-1), ..., 31**1, 31**0 (mod 2**32): the last n entries weight a string of n units
_POW31_DESC: Final = [pow(31, k, 1 << 32) for k in range(_POW31_MAX_UNITS - 1, -1, -1)]
_UTF16_NATIVE: Final = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


@functools.lru_cache(maxsize=4096)
def java_string_hash(text: str) -> int:
    """Java ``String.hashCode()`` (over UTF-16 code units) as a signed int32:
    sum(unit[i] * 31**(n-1-i)) mod 2**32, computed with C-level map/sum."""
    units: bytes | memoryview = (
        text.encode() if text.isascii() else memoryview(text.encode(_UTF16_NATIVE)).cast("H")
    )
    n = len(units)
    if n <= _POW31_MAX_UNITS:
        h = sum(map(operator.mul, units, _POW31_DESC[_POW31_MAX_UNITS - n :])) & _HASH_MASK
    else:
        h = 0
        for c in units:
            h = (31 * h + c) & _HASH_MASK
    return h - 0x100000000 if h & 0x80000000 else h


#: Java ``HashMap``: 16 buckets to start with, doubled whenever more than 3/4 are used.
_JAVA_MAP_BUCKETS: Final = 16


@functools.lru_cache(maxsize=1024)
def _java_map_permutation(keys: tuple[str, ...]) -> tuple[str, ...]:
    n = _JAVA_MAP_BUCKETS
    while len(keys) > n * 3 // 4:
        n *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key) & _HASH_MASK
        return (h ^ (h >> 16)) & (n - 1)

    return tuple(sorted(keys, key=bucket))  # stable: a bucket keeps insertion order


def java_map_order(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` in the order a Java ``HashMap`` iterates them (bucket of the spread hash,
    insertion order within a bucket): the order RocketMQ's broker writes properties it built
    as a map (``messageProperties2String``), so records it rewrites store the same bytes."""
    return {k: props[k] for k in _java_map_permutation(tuple(props))}


def tags_code(tags: str | None) -> int:
    """ConsumeQueue tagsCode: 0 without tags, else hashCode of the whole TAGS value (also for
    MULTI_TAGS messages; RocketMQ 4.x ignores the filter type here)."""
    if not tags:
        return 0
    return java_string_hash(tags)


def index_key_hash(key: str) -> int:
    """IndexFile key hash: abs(hashCode), Integer.MIN_VALUE mapped to 0."""
    h = java_string_hash(key)
    if h == -0x80000000:
        return 0
    return -h if h < 0 else h


def body_crc(body: bytes | memoryview) -> int:
    return crc32(body) & 0x7FFFFFFF


class BodyInflateError(ValueError):
    """A COMPRESSED body that cannot be inflated within its bound: corrupt, truncated, of an
    unsupported compression type, or larger than the bound once inflated (a zip bomb)."""


def inflate_body(body: bytes | memoryview, sys_flag: int, max_bytes: int) -> bytes:
    """The body a consumer sees: ``body`` itself unless ``sys_flag`` marks it COMPRESSED, else
    its zlib inflation of at most ``max_bytes`` bytes (``maxMessageSize``). Inflates
    incrementally and stops one byte past the bound, so a bomb costs at most ``max_bytes``
    of memory and the time to produce them. Raises ``BodyInflateError``."""
    if not sys_flag & SYSFLAG_COMPRESSED:
        return bytes(body)
    kind = sys_flag & SYSFLAG_COMPRESSION_TYPE_MASK
    if kind not in SYSFLAG_COMPRESSION_ZLIB_TYPES:
        raise BodyInflateError(f"unsupported compression type 0x{kind:x}")
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise BodyInflateError(f"corrupt zlib body: {exc}") from None
    if len(out) > max_bytes:
        raise BodyInflateError(f"body inflates past {max_bytes} bytes (maxMessageSize)")
    if not inflater.eof:
        raise BodyInflateError("truncated zlib body")
    return out


# --------------------------------------------------------------------------- hosts and msgId

_HOST = struct.Struct(">4si")


@functools.lru_cache(maxsize=1024)
def encode_host(host: HostAddr) -> bytes:
    """IPv4 address + int32 port, 8 bytes."""
    return _HOST.pack(socket.inet_aton(host[0]), host[1])


def decode_host(data: bytes | memoryview) -> HostAddr:
    ip, port = _HOST.unpack(data)
    return (socket.inet_ntoa(ip), port)


_OFFSET = struct.Struct(">q")


def encode_offset_msg_id(store_host: HostAddr, phys_offset: int) -> str:
    return (encode_host(store_host) + _OFFSET.pack(phys_offset)).hex().upper()


def encode_offset_msg_id_raw(store_host_bytes: bytes, phys_offset: int) -> str:
    return (store_host_bytes + _OFFSET.pack(phys_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[HostAddr, int]:
    """-> (store host, physical offset); raises ValueError unless 32 hex characters."""
    if len(msg_id) != 32:
        raise ValueError(f"offset msgId must be 32 hex characters, got {len(msg_id)}")
    raw = bytes.fromhex(msg_id)
    return decode_host(raw[:8]), _OFFSET.unpack(raw[8:])[0]


# --------------------------------------------------------------------------- stored record
#
# The one layout table of a v1/IPv4 CommitLog record: every offset, struct and reader below is
# derived from it. After the fixed header come BODY (BODYLEN bytes), TOPICLEN (one unsigned
# byte), TOPIC, PROPERTIESLENGTH (a signed short) and PROPERTIES; ``record_tail`` is the one
# reader of those lengths.


@attrs.frozen(slots=True)
class RecordField:
    """One field of the fixed record header: RocketMQ's name, its offset and struct code."""

    name: str
    offset: int
    code: str  # a big-endian struct format code: "i", "I", "q", "8s"

    @property
    def size(self) -> int:
        return struct.calcsize(">" + self.code)


def _layout(spec: tuple[tuple[str, str], ...]) -> tuple[RecordField, ...]:
    out: list[RecordField] = []
    offset = 0
    for name, code in spec:
        out.append(RecordField(name, offset, code))
        offset += struct.calcsize(">" + code)
    return tuple(out)


RECORD_LAYOUT: Final = _layout((
    ("TOTALSIZE", "i"),
    ("MAGIC", "I"),
    ("BODYCRC", "i"),
    ("QUEUEID", "i"),
    ("FLAG", "i"),
    ("QUEUEOFFSET", "q"),
    ("PHYSICALOFFSET", "q"),
    ("SYSFLAG", "i"),
    ("BORNTIMESTAMP", "q"),
    ("BORNHOST", "8s"),  # IPv4 address + int32 port (``encode_host``)
    ("STORETIMESTAMP", "q"),
    ("STOREHOST", "8s"),
    ("RECONSUMETIMES", "i"),
    ("PREPAREDTXOFFSET", "q"),
    ("BODYLEN", "i"),
))
RECORD_FIELD: Final = {f.name: f for f in RECORD_LAYOUT}


def header_struct(*names: str) -> struct.Struct:
    """A struct over the record header from its start to the last of ``names`` that unpacks
    only those fields (in layout order), padding over the others: what a reader of a few
    fields unpacks in one call. Raises KeyError on a name not in ``RECORD_LAYOUT``."""
    wanted = {RECORD_FIELD[n].name for n in names}
    last = max(RECORD_FIELD[n].offset for n in names)
    parts = []
    for f in RECORD_LAYOUT:
        if f.offset > last:
            break
        parts.append(f.code if f.name in wanted else f"{f.size}x")
    return struct.Struct(">" + "".join(parts))


RECORD_HEADER: Final = header_struct(*(f.name for f in RECORD_LAYOUT))
RECORD_HEADER_SIZE: Final = RECORD_HEADER.size  # 88; the body starts here
RECORD_FIXED_SIZE: Final = RECORD_HEADER_SIZE + 1 + 2  # 91 + body + topic + properties
BLANK: Final = struct.Struct(">iI")

# Field offsets inside a v1/IPv4 record (from the table)
OFF_TOTALSIZE: Final = RECORD_FIELD["TOTALSIZE"].offset
OFF_MAGIC: Final = RECORD_FIELD["MAGIC"].offset
OFF_BODYCRC: Final = RECORD_FIELD["BODYCRC"].offset
OFF_QUEUEID: Final = RECORD_FIELD["QUEUEID"].offset
OFF_FLAG: Final = RECORD_FIELD["FLAG"].offset
OFF_QUEUEOFFSET: Final = RECORD_FIELD["QUEUEOFFSET"].offset
OFF_PHYSICALOFFSET: Final = RECORD_FIELD["PHYSICALOFFSET"].offset
OFF_SYSFLAG: Final = RECORD_FIELD["SYSFLAG"].offset
OFF_BORNTIMESTAMP: Final = RECORD_FIELD["BORNTIMESTAMP"].offset
OFF_STORETIMESTAMP: Final = RECORD_FIELD["STORETIMESTAMP"].offset
OFF_BODYLEN: Final = RECORD_FIELD["BODYLEN"].offset

SIZE_MAGIC: Final = header_struct("TOTALSIZE", "MAGIC")
I32: Final = struct.Struct(">i")
I16: Final = struct.Struct(">h")
I64: Final = struct.Struct(">q")
_PROPS_LEN: Final = tuple(I16.pack(n) for n in range(256))  # short properties: no pack call
_ITEM_RECORD_SIZE: Final = operator.itemgetter(5)  # of a ``batch_spans`` item


def record_size(body_len: int, topic_len: int, props_len: int) -> int:
    return RECORD_FIXED_SIZE + body_len + topic_len + props_len


def write_record(
    buf: bytearray | memoryview | Any,
    pos: int,
    total: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    phys_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_offset: int,
    body: bytes | memoryview,
    topic_part: bytes,
    props: bytes | memoryview,
) -> int:
    """Write one v1/IPv4 record of ``total`` bytes at ``buf[pos:]`` (a writable buffer: an mmap,
    a bytearray) and return its end. ``topic_part`` is the topic-length byte + the topic, hosts
    are ``encode_host`` bytes, ``total`` is ``RECORD_FIXED_SIZE - 1 + len(body) +
    len(topic_part) + len(props)`` (the caller sized the room for it already). ``pack_record``
    (the same record as new bytes) and ``write_batch_records`` (a batch's records) are the
    only other writers of the layout, all here."""
    body_len = len(body)
    RECORD_HEADER.pack_into(
        buf, pos, total, MAGIC_V1, crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset,
        phys_offset, sys_flag, born_timestamp, born_host, store_timestamp, store_host,
        reconsume_times, prepared_offset, body_len,
    )
    p = pos + RECORD_HEADER_SIZE
    q = p + body_len
    buf[p:q] = body
    end = pos + total
    n = len(props)  # the tail, as _pack_tail (inlined: the put path's cost)
    buf[q:end] = b"".join((topic_part, _PROPS_LEN[n] if n < 256 else I16.pack(n), props))
    return end


def pack_record(
    total: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    phys_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_offset: int,
    body: bytes | memoryview,
    topic_part: bytes,
    props: bytes | memoryview,
) -> bytes:
    """``write_record``'s record as new bytes (a DLedger entry body, a test's record): the
    same header struct and tail, one join instead of a zeroed buffer and a copy."""
    return b"".join((
        RECORD_HEADER.pack(
            total, MAGIC_V1, crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset,
            phys_offset, sys_flag, born_timestamp, born_host, store_timestamp, store_host,
            reconsume_times, prepared_offset, len(body),
        ),
        body,
        _pack_tail(topic_part, props),
    ))


def write_batch_records(
    buf: bytearray | memoryview | Any,
    pos: int,
    base: int,
    items: Sequence[tuple[int, int, int, int, int, int]],
    src: memoryview,
    extra: bytes,
    topic_part: bytes,
    queue_id: int,
    queue_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
) -> tuple[int, list[int]]:
    """The records of a SEND_BATCH_MESSAGE body at ``buf[pos:]`` (``base`` = the file offset of
    ``buf[0]``), consecutive queue offsets from ``queue_offset``: ``write_record`` per item,
    unrolled (the batch put's cost). ``items`` are (flag, body start, body length, properties
    start, properties length, record size) of the items in ``src``; ``extra`` (the request's
    own properties) is appended to each item's, after a 0x02 unless the item's text is empty or
    ends with one (``join_properties``); the record sizes count it. -> (end, record offsets:
    the running sum of the sizes, in C)."""
    first = base + pos
    pack_into = RECORD_HEADER.pack_into
    tlen = len(topic_part)
    len_extra = len(extra)
    for flag, b0, body_len, p0, props_len, total in items:
        body = src[b0 : b0 + body_len]
        pack_into(
            buf, pos, total, MAGIC_V1, crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset,
            base + pos, sys_flag, born_timestamp, born_host, store_timestamp, store_host,
            reconsume_times, 0, body_len,
        )
        p = pos + RECORD_HEADER_SIZE + body_len
        buf[p - body_len : p] = body
        end = pos + total
        if len_extra:
            # PROPLEN = what is left of the record after the topic
            joined = end - p - tlen - 2
            buf[p:end] = b"".join((
                topic_part,
                _PROPS_LEN[joined] if joined < 256 else I16.pack(joined),
                src[p0 : p0 + props_len],
                b"\x02" if joined - props_len - len_extra else b"",
                extra,
            ))
        else:
            # the item holds PROPLEN right before its properties: copy both
            buf[p : p + tlen] = topic_part
            buf[p + tlen : end] = src[p0 - 2 : p0 + props_len]
        pos = end
        queue_offset += 1
    sizes = map(_ITEM_RECORD_SIZE, items)
    return pos, list(itertools.accumulate(sizes, initial=first))[:-1]


def _pack_tail(topic_part: bytes, props: bytes | memoryview) -> bytes:
    """TOPICLEN, TOPIC, PROPERTIESLENGTH, PROPERTIES."""
    n = len(props)
    return b"".join((topic_part, _PROPS_LEN[n] if n < 256 else I16.pack(n), props))


def encode_record(
    msg: Message,
    *,
    queue_offset: int,
    phys_offset: int,
    store_timestamp: int,
    properties: bytes | None = None,
) -> bytes:
    """One complete v1/IPv4 record of ``msg`` as it is (no delay rewrite: the store's
    ``rmq_cluster.store.record`` prepares a put), through ``pack_record``."""
    props = encode_properties(msg.properties) if properties is None else properties
    topic = msg.topic.encode()
    total = record_size(len(msg.body), len(topic), len(props))
    return pack_record(
        total, msg.queue_id, msg.flag, queue_offset, phys_offset,
        msg.sys_flag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6), msg.born_timestamp,
        encode_host(msg.born_host), store_timestamp, encode_host(msg.store_host),
        msg.reconsume_times, msg.prepared_transaction_offset, msg.body,
        bytes((len(topic),)) + topic, props,
    )


class RecordError(ValueError):
    """Bytes that are not a valid v1/IPv4 record."""


# --------------------------------------------------------------------------- record readers
#
# One family over the table: ``head_status`` / ``short_status`` (what the bytes at a position
# are), ``record_tail`` (the lengths after the header), and on them the full decode
# (``record_fields``, ``decode_record``), the property-only decode (``record_properties``), the
# field peek (``peek_field``) and the property peek (``find_property``). The store's check and
# scan (``CommitLog.check_record``, ``store.record.RecordScanner``) and the replica audit
# (``spark_jobs.decode``) are built on the same functions.

# what the bytes at a position of a CommitLog buffer are, besides a record of that many bytes
REC_EMPTY: Final = 0  # nothing written here: no bytes, or zeros
REC_BLANK: Final = -1  # an end-of-file blank: the rest of the file is filler
REC_INCOMPLETE: Final = -2  # the bytes available end inside this record
REC_CORRUPT: Final = -3  # not a record
#: ``max_record`` of a reader that takes any size a TOTALSIZE can say
ANY_RECORD_SIZE: Final = 0x7FFFFFFF
#: sysFlag bits of a record with IPv6 hosts: not the v1/IPv4 layout these readers know
SYSFLAG_HOSTS_V6: Final = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
_HOST_V6: Final = SYSFLAG_HOSTS_V6


def head_status(total: int, magic: int, avail: int, max_record: int) -> int:
    """What a position's TOTALSIZE and MAGIC say, with ``avail`` bytes from there: the record's
    size when it is a v1 record of ``RECORD_FIXED_SIZE..max_record`` bytes, all available;
    else REC_BLANK, REC_EMPTY (both words zero), REC_INCOMPLETE or REC_CORRUPT."""
    if magic != MAGIC_V1:
        if magic == BLANK_MAGIC:
            return REC_BLANK
        return REC_CORRUPT if total or magic else REC_EMPTY
    if total < RECORD_FIXED_SIZE or total > max_record:
        return REC_CORRUPT
    return REC_INCOMPLETE if total > avail else total


def short_status(buf: Any, pos: int, end: int, max_record: int) -> int:
    """``head_status`` of ``buf[pos:end]`` when it is shorter than a record header (never a
    size: a record is longer): fewer than 8 bytes are REC_EMPTY when all zero, else
    REC_INCOMPLETE."""
    avail = end - pos
    if avail < SIZE_MAGIC.size:
        return REC_INCOMPLETE if avail > 0 and any(buf[pos:end]) else REC_EMPTY
    total, magic = SIZE_MAGIC.unpack_from(buf, pos)
    return head_status(total, magic, avail, max_record)


def record_tail(
    buf: Any, pos: int, total: int, body_len: int, sys_flag: int
) -> tuple[int, int, int]:
    """(topic start, properties start, properties length) of the record of ``total`` bytes at
    ``buf[pos:]`` whose BODYLEN is ``body_len``: the body, TOPICLEN + a non-empty topic and
    PROPERTIESLENGTH + the properties must fill the record exactly, and its SYSFLAG must say
    IPv4 hosts (an IPv6 host moves every field after it). Raises RecordError."""
    if sys_flag & _HOST_V6:
        raise RecordError("IPv6 hosts are not supported")
    if body_len < 0 or body_len > total - RECORD_FIXED_SIZE:
        raise RecordError("body length beyond record")
    tp = pos + RECORD_HEADER_SIZE + body_len
    topic_len = buf[tp]
    pp = tp + 1 + topic_len
    end = pos + total
    if pp + 2 > end or not topic_len:
        raise RecordError("topic length beyond record")
    (props_len,) = I16.unpack_from(buf, pp)
    if props_len < 0 or pp + 2 + props_len != end:
        raise RecordError("size mismatch")
    return tp, pp + 2, props_len


def _head_error(status: int, magic: int) -> RecordError:
    if magic != MAGIC_V1:
        return RecordError(f"bad magic {magic:#x}")
    return RecordError("truncated record" if status == REC_INCOMPLETE else "bad record size")


RecordFields = tuple[
    int, int, int, int, int, int, int, int, bytes, int, bytes, int, int, bytes, str, dict[str, str]
]


def record_fields(view: memoryview, offset: int = 0, *, check_crc: bool = True) -> RecordFields:
    """The full decode, as a tuple (what ``decode_record`` wraps; decoders of many records
    build their own values from it): total size, body CRC, queue id, flag, queue offset,
    commit-log offset, sysFlag, born timestamp, born host (8 raw bytes), store timestamp,
    store host (8 raw bytes), reconsume times, prepared offset, body, topic, properties.
    Raises RecordError on a bad magic, size or CRC."""
    avail = len(view) - offset
    if avail < RECORD_HEADER_SIZE:
        raise RecordError("truncated header")
    (
        total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_host,
        store_ts, store_host, reconsume, prepared, body_len,
    ) = RECORD_HEADER.unpack_from(view, offset)
    status = head_status(total, magic, avail, ANY_RECORD_SIZE)
    if status <= 0:
        raise _head_error(status, magic)
    tp, p0, props_len = record_tail(view, offset, total, body_len, sys_flag)
    body = bytes(view[offset + RECORD_HEADER_SIZE : tp])
    try:  # (a topic that is not UTF-8 is no record, for the store's check and scan too)
        topic = bytes(view[tp + 1 : p0 - 2]).decode()
    except UnicodeDecodeError:
        raise RecordError("topic is not UTF-8") from None
    props = decode_properties(view[p0 : p0 + props_len])
    if check_crc and body_crc(body) != crc:
        raise RecordError("body CRC mismatch")
    return (
        total, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_host, store_ts,
        store_host, reconsume, prepared, body, topic, props,
    )


def decode_record(
    data: bytes | memoryview, offset: int = 0, *, check_crc: bool = True
) -> StoredMessage:
    """Decode the record at ``offset``; raises RecordError on a bad magic, size or CRC."""
    (
        total, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_host, store_ts,
        store_host, reconsume, prepared, body, topic, props,
    ) = record_fields(memoryview(data), offset, check_crc=check_crc)
    return StoredMessage(
        store_size=total,
        magic=MAGIC_V1,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        commitlog_offset=phys,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=decode_host(born_host),
        store_timestamp=store_ts,
        store_host=decode_host(store_host),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=body,
        topic=topic,
        properties=props,
    )


def iter_records(data: bytes | memoryview, *, check_crc: bool = True) -> Iterator[StoredMessage]:
    """Decode a concatenation of records (a PULL / QUERY body)."""
    pos = 0
    while pos < len(data):
        msg = decode_record(data, pos, check_crc=check_crc)
        pos += msg.store_size
        yield msg


_PROPERTIES_HEAD: Final = header_struct("TOTALSIZE", "MAGIC", "SYSFLAG", "BODYLEN")


def record_properties(buf: Any, pos: int = 0) -> dict[str, str]:
    """The property-only decode: the properties of the record at ``buf[pos:]`` (a SQL92
    filter's read), the body not copied. Raises RecordError as ``record_fields``."""
    avail = len(buf) - pos
    if avail < RECORD_HEADER_SIZE:
        raise RecordError("truncated header")
    total, magic, sys_flag, body_len = _PROPERTIES_HEAD.unpack_from(buf, pos)
    status = head_status(total, magic, avail, ANY_RECORD_SIZE)
    if status <= 0:
        raise _head_error(status, magic)
    tp, p0, props_len = record_tail(buf, pos, total, body_len, sys_flag)
    try:  # (no record for any reader when its topic is not UTF-8)
        bytes(buf[tp + 1 : p0 - 2]).decode()
    except UnicodeDecodeError:
        raise RecordError("topic is not UTF-8") from None
    return decode_properties(buf[p0 : p0 + props_len]) if props_len else {}


_PEEK: Final = {
    f.name: (struct.Struct(">" + f.code).unpack_from, f.offset)
    for f in RECORD_LAYOUT
    if f.code != "8s"
}


def peek_field(buf: Any, name: str, pos: int = 0) -> int:
    """One integer field (``RECORD_LAYOUT`` name: "STORETIMESTAMP", "PHYSICALOFFSET", ...) of
    the record at ``buf[pos:]``, nothing else read. Raises struct.error when the bytes end
    before it, KeyError on a name that is no integer field."""
    unpack, at = _PEEK[name]
    value: int = unpack(buf, pos + at)[0]
    return value


# property names as they start an entry of the properties text (``name + 0x01``)
PROP_TAGS: Final = b"TAGS\x01"
PROP_KEYS: Final = b"KEYS\x01"
PROP_UNIQ_KEY: Final = b"UNIQ_KEY\x01"
PROP_DELAY: Final = b"DELAY\x01"


def find_property(buf: Any, key: bytes, start: int, end: int) -> bytes | None:
    """The property peek: the raw value ``decode_properties`` would keep for ``key`` (``name +
    0x01``) among the properties text at ``buf[start:end]``, found by a bytes search instead
    of a full decode: the last entry with that name and a non-empty value (a later duplicate
    wins, as in the dict). An entry starts at ``start`` or right after a 0x02; names never
    overlap themselves."""
    i = buf.rfind(key, start, end)
    while i >= 0:
        if i == start or buf[i - 1] == 2:
            v0 = i + len(key)
            v1 = buf.find(b"\x02", v0, end)
            if v1 < 0:
                v1 = end
            if v1 > v0:
                value: bytes = buf[v0:v1]
                return value
        i = buf.rfind(key, start, i)
    return None


# --------------------------------------------------------------------------- batch body

BATCH_ITEM_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLEN
BATCH_ITEM_FIXED_SIZE: Final = BATCH_ITEM_HEAD.size + 2


@attrs.frozen(slots=True)
class BatchItem:
    flag: int
    body: bytes
    properties: bytes  # raw properties text, as sent


def encode_batch(items: Iterable[tuple[int, bytes, Mapping[str, str]]]) -> bytes:
    """(flag, body, properties) per message -> SEND_BATCH_MESSAGE body (§5.5)."""
    parts: list[bytes] = []
    for flag, body, props in items:
        p = encode_properties(props)
        total = BATCH_ITEM_FIXED_SIZE + len(body) + len(p)
        parts += (BATCH_ITEM_HEAD.pack(total, 0, 0, flag, len(body)), body, I16.pack(len(p)), p)
    return b"".join(parts)


BatchSpan = tuple[int, int, int, int, int, int]


def batch_spans(
    data: bytes | memoryview, record_fixed: int = 0, extra_len: int = 0
) -> list[BatchSpan]:
    """The items of a SEND_BATCH_MESSAGE body (§5.5) as (flag, body start, body length,
    properties start, properties length, record size), nothing copied: the one parser of the
    batch body. The record size is ``record_fixed + body length + properties length`` with
    ``extra_len`` bytes of properties appended (``join_properties``: after a 0x02 unless the
    item's own text is empty or ends with one). Raises RecordError on a malformed body."""
    out: list[BatchSpan] = []
    add = out.append
    unpack_item = BATCH_ITEM_HEAD.unpack_from
    unpack_i16 = I16.unpack_from
    head_size = BATCH_ITEM_HEAD.size
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < BATCH_ITEM_FIXED_SIZE:
            raise RecordError("truncated batch item")
        total, _magic, _crc, flag, body_len = unpack_item(data, pos)
        item_end = pos + total
        if total < BATCH_ITEM_FIXED_SIZE or item_end > end or body_len < 0:
            raise RecordError("bad batch item size")
        b0 = pos + head_size
        if b0 + body_len + 2 > item_end:
            raise RecordError("batch body length beyond item")
        (props_len,) = unpack_i16(data, b0 + body_len)
        p0 = b0 + body_len + 2
        if props_len < 0 or p0 + props_len != item_end:
            raise RecordError("batch item size mismatch")
        joined = props_len + extra_len
        if extra_len and props_len and data[item_end - 1] != 2:
            joined += 1
        add((flag, b0, body_len, p0, props_len, record_fixed + body_len + joined))
        pos = item_end
    return out


def decode_batch(data: bytes | memoryview) -> list[BatchItem]:
    """SEND_BATCH_MESSAGE body -> items; raises RecordError on a malformed body."""
    view = memoryview(data)
    return [
        BatchItem(flag, bytes(view[b0 : b0 + body_len]), bytes(view[p0 : p0 + props_len]))
        for flag, b0, body_len, p0, props_len, _size in batch_spans(view)
    ]


def join_properties(own: bytes, extra: bytes) -> bytes:
    """Append header properties to a batch item's properties (adding 0x02 when needed)."""
    if not extra:
        return own
    if not own:
        return extra
    if own.endswith(b"\x02"):
        return own + extra
    return own + b"\x02" + extra
