"""The store's record codec (pure; no trio): what a put and a dispatch do with CommitLog records.

The byte layout of a v1/IPv4 record is written in one place, the "stored record" section of
``rmq_cluster.cluster.protocol.message`` (``write_record`` in place, ``pack_record`` as bytes,
``write_batch_records`` for a batch), beside the record decoder the client needs too; the batch
body of SEND_BATCH_MESSAGE is parsed in one place, ``batch_spans`` there. On top of them, here:

* **put**: ``put_properties`` / ``schedule_properties`` (a delayed message goes to
  ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with REAL_TOPIC / REAL_QID added, its properties
  written again in Java ``HashMap`` order as RocketMQ does), used by the file CommitLog and the
  DLedger CommitLog alike;
* **batch**: ``plan_batch`` sizes every record of a batch body (header properties appended to
  each item's) for ``write_batch_records`` to write;
* **the tagsCode rule**: ``tags_code`` of TAGS, or for a record of the schedule topic with a
  DELAY property its delivery time, ``store timestamp + delay of its level``
  (``delay_tags_code``), the level clamped to the configured levels (``messageDelayLevel``);
* **scan**: ``RecordScanner`` reads, straight from a buffer, the fields dispatch needs of each
  record (topic, queue id and offset, sysFlag, store timestamp, tagsCode, UNIQ_KEY, KEYS), with
  the template fast path for runs of records that differ only in their UNIQ_KEY.

Every integer is big-endian (store-and-replication.md §1.3).
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Mapping
from typing import Any, Final

from rmq_cluster.cluster.protocol.message import (
    BLANK_MAGIC,
    I16,
    MAGIC_V1,
    RECORD_FIXED_SIZE,
    RECORD_HEADER_SIZE,
    SIZE_MAGIC,
    SYSFLAG_TRANSACTION_COMMIT_TYPE,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NOT_TYPE,
    MessageConst,
    RecordError,
    batch_spans,
    java_map_order,
    tags_code,
)
from rmq_cluster.store.config import (
    DELAY_LEVELS_MS,
    MAX_PROPERTIES_LENGTH_BYTES,
    SCHEDULE_TOPIC,
)
from rmq_cluster.store.paths import is_valid_component

# --------------------------------------------------------------------------- the delay rule

_DELAY: Final = MessageConst.PROPERTY_DELAY_TIME_LEVEL
_UNITS_MS: Final = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL_RE: Final = re.compile(r"^(\d+)([smhd])$")
_DELAYABLE: Final = (SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT_TYPE)


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``messageDelayLevel`` (``"1s 5s 10s 30s 1m ..."``) -> the delay of each level in ms
    (level n is index n-1). Raises ValueError on a bad level or none."""
    out = []
    for part in text.split():
        m = _LEVEL_RE.match(part.strip())
        if m is None:
            raise ValueError(f"messageDelayLevel: bad level {part!r}")
        out.append(int(m.group(1)) * _UNITS_MS[m.group(2)])
    if not out:
        raise ValueError("messageDelayLevel: no levels")
    return tuple(out)


def schedule_properties(props: Mapping[str, str], topic: str, queue_id: int) -> dict[str, str]:
    """A delayed message's properties with its real topic and queue, in the order RocketMQ's
    broker writes a map it rebuilt (``java_map_order``)."""
    out = dict(props)
    out[MessageConst.PROPERTY_REAL_TOPIC] = topic
    out[MessageConst.PROPERTY_REAL_QUEUE_ID] = str(queue_id)
    return java_map_order(out)


class DueProperties(dict[str, str]):
    """The properties of a delayed message the schedule service puts back into its real topic
    once due. Their DELAY records the level it waited at (consumers read it, as from RocketMQ,
    whose broker keeps DELAY in the stored text while clearing it from the map it acts on); it
    asks for nothing. Only the broker builds one: properties decoded from the wire are plain."""

    __slots__ = ()


def put_properties(
    props: Mapping[str, str], topic: str, queue_id: int, sys_flag: int, levels: tuple[int, ...]
) -> tuple[str, int, Mapping[str, str], bytes]:
    """(topic, queue id, properties, properties text) a put of a message stores: its own, or
    for a delayed message the schedule topic's: a positive DELAY of a plain or committed
    message, the level clamped to the last one, goes to queue ``level - 1``
    (``schedule_properties``); ``DueProperties`` are stored as they are."""
    text = props.get(_DELAY)
    if (
        text is not None
        and (sys_flag & SYSFLAG_TRANSACTION_MASK) in _DELAYABLE
        and type(props) is not DueProperties
    ):
        try:
            level = int(text)
        except ValueError:
            level = 0
        if level > 0:
            props = schedule_properties(props, topic, queue_id)
            topic, queue_id = SCHEDULE_TOPIC, min(level, len(levels)) - 1
    text_b = "\x02".join(map("\x01".join, props.items())).encode() if props else b""
    return topic, queue_id, props, text_b


def delay_tags_code(level_text: str, store_timestamp: int, levels: tuple[int, ...]) -> int:
    """tagsCode of a schedule-topic record: its delivery time. The level is clamped to
    1..len(levels); a DELAY that is no number counts as level 1."""
    try:
        level = min(max(int(level_text), 1), len(levels))
    except ValueError:
        level = 1
    return store_timestamp + levels[level - 1]


def record_tags_code(
    topic: str, props: Mapping[str, str], store_timestamp: int, levels: tuple[int, ...]
) -> int:
    """The ConsumeQueue tagsCode of a record (from its decoded properties)."""
    if topic == SCHEDULE_TOPIC:
        text = props.get(_DELAY)
        if text is not None:
            return delay_tags_code(text, store_timestamp, levels)
    return tags_code(props.get(MessageConst.PROPERTY_TAGS))


def is_dispatchable(sys_flag: int) -> bool:
    """ConsumeQueue entries exist for plain and committed-transaction records only."""
    return (sys_flag & SYSFLAG_TRANSACTION_MASK) in (
        SYSFLAG_TRANSACTION_NOT_TYPE,
        SYSFLAG_TRANSACTION_COMMIT_TYPE,
    )


# --------------------------------------------------------------------------- batches

#: (flag, body start, body length, properties start, properties length, record size)
BatchPlan = list[tuple[int, int, int, int, int, int]]


def plan_batch(
    body: memoryview, topic_part_len: int, extra_len: int, max_body: int
) -> tuple[BatchPlan, str, bool]:
    """The record of every item of a batch body whose records get ``extra_len`` bytes of header
    properties appended to their own, sized and checked (``batch_spans``: (flag, body start,
    body length, properties start, properties length, record size) per item).
    -> (plan, "", False), or ([], remark, properties too long)."""
    fixed = RECORD_FIXED_SIZE - 1 + topic_part_len
    try:
        plan = batch_spans(body, fixed, extra_len)
    except RecordError as exc:
        return [], f"bad batch body: {exc}", False
    for _flag, _b0, body_len, _p0, _props_len, size in plan:
        if body_len > max_body:
            return [], f"message body {body_len} > maxMessageSize {max_body}", False
        joined = size - fixed - body_len
        if joined > MAX_PROPERTIES_LENGTH_BYTES:
            return [], f"properties {joined} > {MAX_PROPERTIES_LENGTH_BYTES}", True
    if not plan:
        return [], "empty batch", False
    return plan, "", False


# --------------------------------------------------------------------------- scan

# The fields dispatch needs, at their fixed offsets in a v1/IPv4 record: TOTALSIZE, MAGIC,
# QUEUEID, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, STORETIMESTAMP, BODYLEN (the rest padded over)
DISPATCH_HEADER: Final = struct.Struct(">iI4xi4xqqi16xq20xi")
if DISPATCH_HEADER.size != RECORD_HEADER_SIZE:
    raise RuntimeError("DISPATCH_HEADER must span the record header")

PROP_TAGS: Final = b"TAGS\x01"
PROP_KEYS: Final = b"KEYS\x01"
PROP_UNIQ_KEY: Final = b"UNIQ_KEY\x01"
PROP_DELAY: Final = b"DELAY\x01"


def find_property(buf: bytes | mmap.mmap, key: bytes, start: int, end: int) -> bytes | None:
    """The raw value ``decode_properties`` would keep for ``key`` (``name + 0x01``) among the
    properties text at ``buf[start:end]``, found by a bytes search instead of a full decode:
    the last entry with that name and a non-empty value (a later duplicate wins, as in the dict).
    An entry starts at ``start`` or right after a 0x02; names never overlap themselves."""
    i = buf.rfind(key, start, end)
    while i >= 0:
        if i == start or buf[i - 1] == 2:
            v0 = i + len(key)
            v1 = buf.find(b"\x02", v0, end)
            if v1 < 0:
                v1 = end
            if v1 > v0:
                return buf[v0:v1]
        i = buf.rfind(key, start, i)
    return None


# why RecordScanner.scan stopped
SCAN_MORE: Final = 0  # the byte budget is spent: more records may follow
SCAN_WAIT: Final = 1  # nothing (more) written, or a record still being written
SCAN_BLANK: Final = 2  # an end-of-file blank: the rest of the file is filler
SCAN_CORRUPT: Final = 3  # not a record
SCAN_SKIP: Final = 4  # a record whose topic names no store path (see ``skipped``)

#: (commit-log offset, size, topic, queue id, queue offset, sysFlag, store timestamp,
#: tagsCode, UNIQ_KEY, KEYS) of a scanned record; the keys are raw bytes, None when absent or
#: not asked for
Scanned = tuple[int, int, str, int, int, int, int, int, bytes | None, bytes | None]
TOPIC_CACHE_MAX_ENTRIES: Final = 100_000
TAGS_CACHE_MAX_ENTRIES: Final = 4096


class RecordScanner:
    """Reads the fields dispatch needs from consecutive records of a buffer (an mmap'd
    CommitLog file, a DLedger entry body), with the size checks of
    ``CommitLog.check_record(strict=False, check_crc=False)``. Keeps caches (topic bytes ->
    topic, TAGS bytes -> tagsCode) and the template record across calls: one scanner per
    reader."""

    def __init__(self, max_record: int, delay_levels: tuple[int, ...] = DELAY_LEVELS_MS) -> None:
        self.max_record = max_record
        self.delay_levels = delay_levels
        self._topics: dict[bytes, str] = {}
        self._tags: dict[bytes, int] = {}
        #: (length, head, tail, UNIQ_KEY value start, end, topic, tagsCode) of the template
        #: record: topic + properties bytes from the topic-length byte on; length -1 = none
        self._template: tuple[int, bytes, bytes, int, int, str, int] = (-1, b"", b"", 0, 0, "", 0)
        #: (size, topic, store timestamp) of the record a SCAN_SKIP stopped at
        self.skipped: tuple[int, str, int] = (0, "", 0)

    def scan(
        self, buf: Any, pos: int, end: int, budget: int, out: list[Scanned], want_keys: bool
    ) -> tuple[int, int, int]:
        """Scan records from ``buf[pos:end]`` while ``budget`` bytes are left, appending each
        to ``out``; UNIQ_KEY and KEYS are read only ``want_keys``. -> (position of the first
        record not scanned, SCAN_* reason, budget left)."""
        max_record = self.max_record
        levels = self.delay_levels
        unpack_head = DISPATCH_HEADER.unpack_from
        unpack_i16 = I16.unpack_from
        topic_cache = self._topics
        tags_cache = self._tags
        add = out.append
        tpl_len, tpl_head, tpl_tail, tpl_u0, tpl_u1, tpl_topic, tpl_code = self._template
        uniq: bytes | None = None
        keys: bytes | None = None
        while budget > 0:
            avail = end - pos
            if avail < RECORD_HEADER_SIZE:
                # a blank, the start of a record still being written, or nothing
                if avail >= 8:
                    total, magic = SIZE_MAGIC.unpack_from(buf, pos)
                    if magic == BLANK_MAGIC:
                        return pos, SCAN_BLANK, budget
                    if magic != MAGIC_V1:
                        if total or magic:
                            return pos, SCAN_CORRUPT, budget
                    elif total < RECORD_FIXED_SIZE or total > max_record:
                        return pos, SCAN_CORRUPT, budget
                return pos, SCAN_WAIT, budget
            (
                total, magic, queue_id, queue_offset, phys, sys_flag, store_ts, body_len,
            ) = unpack_head(buf, pos)
            if magic != MAGIC_V1:
                if magic == BLANK_MAGIC:
                    return pos, SCAN_BLANK, budget
                return pos, (SCAN_CORRUPT if total or magic else SCAN_WAIT), budget
            if total < RECORD_FIXED_SIZE or total > max_record:
                return pos, SCAN_CORRUPT, budget
            if total > avail:
                return pos, SCAN_WAIT, budget
            if body_len < 0 or body_len > total - RECORD_FIXED_SIZE:
                return pos, SCAN_CORRUPT, budget
            tp = pos + RECORD_HEADER_SIZE + body_len
            rec_end = pos + total
            # The template path: a record whose topic + properties bytes equal the previous
            # fully read record's except for the UNIQ_KEY value (same length, no 0x02 in it)
            # -- the records of a batch, a producer's run of sends -- has that record's topic
            # and tagsCode and no KEYS: the property entries sit at the same places and only
            # the UNIQ_KEY value differs, so the full read below would find the same (the size
            # checks it makes hold too: topic length, properties length and record end are the
            # same bytes). A template record without UNIQ_KEY (and KEYS) must match whole.
            hit = False
            if rec_end - tp == tpl_len:
                rest = buf[tp:rec_end]
                if rest.startswith(tpl_head) and rest.endswith(tpl_tail):
                    uniq = rest[tpl_u0:tpl_u1]
                    hit = 2 not in uniq
            if hit:
                if not uniq:
                    uniq = None  # a template without a UNIQ_KEY
                add((
                    phys, total, tpl_topic, queue_id, queue_offset, sys_flag, store_ts, tpl_code,
                    uniq, None,
                ))
                pos = rec_end
                budget -= total
                continue
            topic_len = buf[tp]
            pp = tp + 1 + topic_len
            if pp + 2 > rec_end:
                return pos, SCAN_CORRUPT, budget
            (props_len,) = unpack_i16(buf, pp)
            p0 = pp + 2
            if props_len < 0 or p0 + props_len != rec_end or topic_len == 0:
                return pos, SCAN_CORRUPT, budget
            topic_raw = buf[tp + 1 : pp]
            topic = topic_cache.get(topic_raw)
            if topic is None:
                try:
                    topic = topic_raw.decode()
                except UnicodeDecodeError:
                    return pos, SCAN_CORRUPT, budget
                if not is_valid_component(topic):
                    # no ConsumeQueue or index for a topic that names no store path (checked
                    # on a cache miss only: valid topics are cached)
                    self.skipped = (total, topic, store_ts)
                    return pos, SCAN_SKIP, budget
                if len(topic_cache) < TOPIC_CACHE_MAX_ENTRIES:
                    topic_cache[topic_raw] = topic
            # tagsCode: hash of TAGS, or the delivery time for a delayed record
            props = buf[p0:rec_end] if props_len else b""
            if props_len == 0:
                code = 0
            elif topic == SCHEDULE_TOPIC and (
                dl := find_property(props, PROP_DELAY, 0, props_len)
            ) is not None:
                code = delay_tags_code(dl.decode("utf-8", "replace"), store_ts, levels)
            else:
                # find_property, inlined for the usual case: the last TAGS entry starts an
                # entry and has a value
                tags = None
                i = props.rfind(PROP_TAGS)
                if i >= 0:
                    v0 = i + 5
                    j = props.find(b"\x02", v0)
                    if j < 0:
                        j = props_len
                    if j > v0 and (i == 0 or props[i - 1] == 2):
                        tags = props[v0:j]
                    else:
                        tags = find_property(props, PROP_TAGS, 0, props_len)
                if tags is None:
                    code = 0
                else:
                    code = tags_cache.get(tags)  # type: ignore[assignment]
                    if code is None:
                        code = tags_code(tags.decode("utf-8", "replace"))
                        if len(tags_cache) < TAGS_CACHE_MAX_ENTRIES:
                            tags_cache[tags] = code
            if want_keys and props_len:
                uniq = None
                i = props.rfind(PROP_UNIQ_KEY)
                if i >= 0:
                    v0 = i + 9
                    j = props.find(b"\x02", v0)
                    if j < 0:
                        j = props_len
                    if j > v0 and (i == 0 or props[i - 1] == 2):
                        uniq = props[v0:j]
                    else:
                        uniq = find_property(props, PROP_UNIQ_KEY, 0, props_len)
                        v0 = -1
                keys = (
                    find_property(props, PROP_KEYS, 0, props_len) if PROP_KEYS in props else None
                )
                if keys is None and topic != SCHEDULE_TOPIC:
                    if uniq is not None and v0 >= 0:
                        # this record is the template for the next ones
                        tpl_len = rec_end - tp
                        tpl_head = buf[tp:p0] + props[:v0]
                        tpl_tail = props[j:]
                        tpl_u0 = p0 - tp + v0
                        tpl_u1 = p0 - tp + j
                        tpl_topic = topic
                        tpl_code = code
                        self._template = (
                            tpl_len, tpl_head, tpl_tail, tpl_u0, tpl_u1, tpl_topic, tpl_code,
                        )
                    elif uniq is None:
                        # no UNIQ_KEY, no KEYS: a template that must match whole
                        tpl_len = rec_end - tp
                        tpl_head = buf[tp:rec_end]
                        tpl_tail = b""
                        tpl_u0 = tpl_u1 = 0
                        tpl_topic = topic
                        tpl_code = code
                        self._template = (
                            tpl_len, tpl_head, tpl_tail, tpl_u0, tpl_u1, tpl_topic, tpl_code,
                        )
            else:
                uniq = keys = None
            add((phys, total, topic, queue_id, queue_offset, sys_flag, store_ts, code, uniq, keys))
            pos = rec_end
            budget -= total
        return pos, SCAN_MORE, budget
