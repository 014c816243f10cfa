"""The store's record codec (pure; no trio): what a put and a dispatch do with CommitLog records.

The byte layout of a v1/IPv4 record is one table, ``RECORD_LAYOUT`` in
``rmq_cluster.cluster.protocol.message``; its writers (``write_record`` in place, ``pack_record``
as bytes, ``write_batch_records`` for a batch) and its one family of readers (``head_status``,
``record_tail``, the full and property-only decodes, the field and property peeks) live there
too; the batch body of SEND_BATCH_MESSAGE is parsed in one place, ``batch_spans`` there. On top
of them, here:

* **put**: ``put_properties`` / ``schedule_properties`` (a delayed message goes to
  ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with REAL_TOPIC / REAL_QID added, its properties
  written again in Java ``HashMap`` order as RocketMQ does), used by the file CommitLog and the
  DLedger CommitLog alike;
* **batch**: ``plan_batch`` sizes every record of a batch body (header properties appended to
  each item's) for ``write_batch_records`` to write; ``batch_keys`` reads from the body what
  dispatch reads of those records (tagsCode, UNIQ_KEYs), for a put that dispatches its batch;
* **the DELAY rule**: ``delay_level`` reads a DELAY property (a positive number, clamped to the
  configured levels, ``messageDelayLevel``) for the put's schedule queue and for the tagsCode;
* **the tagsCode rule**: ``tags_code`` of TAGS, or for a record of the schedule topic with a
  DELAY property its delivery time, ``store timestamp + delay of its level``
  (``delay_tags_code``);
* **scan**: ``RecordScanner`` reads, straight from a buffer with the codec's readers, the fields
  dispatch needs of each record (topic, queue id and offset, sysFlag, store timestamp, tagsCode,
  UNIQ_KEY, KEYS), with the template fast path for runs of records that differ only in their
  UNIQ_KEY.

Every integer is big-endian (store-and-replication.md §1.3).
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Mapping
from typing import Any, Final

from ..cluster.protocol.message import (
    MAGIC_V1,
    PROP_DELAY,
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    REC_BLANK,
    REC_CORRUPT,
    REC_EMPTY,
    REC_INCOMPLETE,
    RECORD_FIXED_SIZE,
    RECORD_HEADER_SIZE,
    SYSFLAG_HOSTS_V6,
    SYSFLAG_TRANSACTION_COMMIT_TYPE,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NOT_TYPE,
    MessageConst,
    RecordError,
    batch_spans,
    find_property,
    head_status,
    header_struct,
    java_map_order,
    record_tail,
    short_status,
    tags_code,
)
from .config import (
    DELAY_LEVELS_MS,
    MAX_PROPERTIES_LENGTH_BYTES,
    SCHEDULE_TOPIC,
)
from .paths import is_valid_component

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


def delay_level(text: str | None, levels: int) -> int:
    """The delay level a DELAY property names among ``levels`` levels: 0 (not delayed) unless
    it is a positive number, clamped to the last level. The one reading of DELAY: a put's
    schedule queue is ``level - 1``, a schedule-topic record's tagsCode its delivery time."""
    if text is None:
        return 0
    try:
        level = int(text)
    except ValueError:
        return 0
    return min(level, levels) if level > 0 else 0


def put_properties(
    props: Mapping[str, str], topic: str, queue_id: int, sys_flag: int, levels: tuple[int, ...]
) -> tuple[str, int, Mapping[str, str], bytes]:
    """(topic, queue id, properties, properties text) a put of a message stores: its own, or
    for a delayed message (a ``delay_level`` of a plain or committed message) the schedule
    topic's, queue ``level - 1`` (``schedule_properties``); ``DueProperties`` are stored as
    they are."""
    text = props.get(_DELAY)
    if (
        text is not None
        and (sys_flag & SYSFLAG_TRANSACTION_MASK) in _DELAYABLE
        and type(props) is not DueProperties
    ):
        level = delay_level(text, len(levels))
        if level:
            props = schedule_properties(props, topic, queue_id)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
    text_b = "\x02".join(map("\x01".join, props.items())).encode() if props else b""
    return topic, queue_id, props, text_b


def delay_tags_code(level_text: str, store_timestamp: int, levels: tuple[int, ...]) -> int:
    """tagsCode of a schedule-topic record: its delivery time, ``store timestamp + delay of
    its level`` (``delay_level``; a DELAY that names no level counts as level 1)."""
    return store_timestamp + levels[max(delay_level(level_text, len(levels)), 1) - 1]


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


# columns of a ``BatchPlan`` item
_BODY_LEN: Final = operator.itemgetter(2)
_PROPS_START: Final = operator.itemgetter(3)
_PROPS_LEN: Final = operator.itemgetter(4)
_RECORD_SIZE: Final = operator.itemgetter(5)


def plan_batch(
    body: memoryview, topic_part_len: int, extra_len: int, max_body: int
) -> tuple[BatchPlan, str, bool]:
    """The record of every item of a batch body whose records get ``extra_len`` bytes of header
    properties appended to their own, sized and checked (``batch_spans``: (flag, body start,
    body length, properties start, properties length, record size) per item).
    -> (plan, "", False), or ([], remark, properties too long). The limits are checked over
    the whole plan at once (``max`` over its columns, no Python step per item); only a batch
    that breaks one is walked item by item, to name the first item that does."""
    fixed = RECORD_FIXED_SIZE - 1 + topic_part_len
    try:
        plan = batch_spans(body, fixed, extra_len)
    except RecordError as exc:
        return [], f"bad batch body: {exc}", False
    if not plan:
        return [], "empty batch", False
    # a record's joined properties are its size less ``fixed`` and its body
    if (
        max(map(_BODY_LEN, plan)) > max_body
        or max(map(operator.sub, map(_RECORD_SIZE, plan), map(_BODY_LEN, plan)))
        > MAX_PROPERTIES_LENGTH_BYTES + fixed
    ):
        return _first_over_limit(plan, fixed, max_body)
    return plan, "", False


def _first_over_limit(plan: BatchPlan, fixed: int, max_body: int) -> tuple[BatchPlan, str, bool]:
    """``plan_batch``'s answer for a plan that breaks a limit: the refusal naming the first
    item that does."""
    for _flag, _b0, body_len, _p0, _props_len, size in plan:
        if body_len > max_body:
            return [], f"message body {body_len} > maxMessageSize {max_body}", False
        joined = size - fixed - body_len
        if joined > MAX_PROPERTIES_LENGTH_BYTES:
            return [], f"properties {joined} > {MAX_PROPERTIES_LENGTH_BYTES}", True
    return plan, "", False


def plan_size(plan: BatchPlan) -> int:
    """The bytes of all the records of a plan."""
    return sum(map(_RECORD_SIZE, plan))


#: (tagsCode of every record, UNIQ_KEY value of each record or None) of a batch's records
BatchKeys = tuple[int, list[bytes | None]]


def batch_keys(body: bytes, plan: BatchPlan, extra: bytes, topic: str) -> BatchKeys | None:
    """What dispatch reads of each record a batch's ``plan`` writes (``RecordScanner``: its
    tagsCode, UNIQ_KEY and KEYS), taken from the batch body before the records are read back;
    None when the records may differ in TAGS or carry KEYS (a ``TAGS`` / ``KEYS`` entry name in
    an item's properties, a UNIQ_KEY or KEYS in the header's properties ``extra``) or the topic
    is the schedule topic (tagsCode: a delivery time): the reput then reads the records.

    A record's properties are the item's own text, a 0x02 unless that is empty or ends with
    one, and ``extra`` (``join_properties``). No entry name holds a 0x02, so none spans that
    seam: every UNIQ_KEY entry lies in the item's own text, and a TAGS entry of ``extra`` comes
    after every entry of the item's (the last one wins, as in the scanner and the full
    decode). The items' texts are cut out and searched at once, iterated in C (a NUL between
    two: no entry name holds one either)."""
    if topic == SCHEDULE_TOPIC or PROP_UNIQ_KEY in extra or PROP_KEYS in extra:
        return None
    starts = list(map(_PROPS_START, plan))
    ends = map(operator.add, starts, map(_PROPS_LEN, plan))
    props = list(map(body.__getitem__, map(slice, starts, ends)))
    texts = b"\0".join(props)
    if PROP_KEYS in texts:
        return None
    tags = find_property(extra, PROP_TAGS, 0, len(extra))
    if tags is None and PROP_TAGS in texts:
        return None
    code = 0 if tags is None else tags_code(tags.decode("utf-8", "replace"))
    return code, _uniq_values(props)


def _uniq_values(props: list[bytes]) -> list[bytes | None]:
    """``find_property(p, UNIQ_KEY, 0, len(p))`` of each item's properties ``p``. When every
    text is the first's but for its UNIQ_KEY value, of the same length and without a 0x02 (a
    client's batch), the values are cut at the first's place, no search each: the scanner's
    template rule (``RecordScanner``), the entries being where the first's are."""
    first = props[0]
    size = len(first)
    _value, v0, v1 = _entry_value(first, PROP_UNIQ_KEY, size)
    if v0 >= 0 and set(map(len, props)) == {size}:
        head, tail = first[:v0], first[v1:]
        repeat = itertools.repeat
        if all(map(bytes.startswith, props, repeat(head))) and all(
            map(bytes.endswith, props, repeat(tail))
        ):
            values = list(map(operator.itemgetter(slice(v0, v1)), props))
            if b"\x02" not in b"".join(values):
                return list(values)
    return [find_property(p, PROP_UNIQ_KEY, 0, len(p)) for p in props]


# --------------------------------------------------------------------------- scan

# The fields dispatch needs, from the layout table (the rest padded over)
DISPATCH_HEADER: Final = header_struct(
    "TOTALSIZE", "MAGIC", "QUEUEID", "QUEUEOFFSET", "PHYSICALOFFSET", "SYSFLAG",
    "STORETIMESTAMP", "BODYLEN",
)
if DISPATCH_HEADER.size != RECORD_HEADER_SIZE:
    raise RuntimeError("DISPATCH_HEADER must span the record header")

# why RecordScanner.scan stopped
SCAN_MORE: Final = 0  # the byte budget is spent: more records may follow
SCAN_WAIT: Final = 1  # nothing (more) written, or a record still being written
SCAN_BLANK: Final = 2  # an end-of-file blank: the rest of the file is filler
SCAN_CORRUPT: Final = 3  # not a record
SCAN_SKIP: Final = 4  # a record whose topic names no store path (see ``skipped``)
#: ``head_status`` / ``short_status`` outcomes that stop a scan
_SCAN_STOP: Final = {
    REC_EMPTY: SCAN_WAIT, REC_INCOMPLETE: SCAN_WAIT, REC_BLANK: SCAN_BLANK,
    REC_CORRUPT: SCAN_CORRUPT,
}

#: (commit-log offset, size, topic, queue id, queue offset, sysFlag, store timestamp,
#: tagsCode, UNIQ_KEY, KEYS) of a scanned record; the keys are raw bytes, None when absent or
#: not asked for
Scanned = tuple[int, int, str, int, int, int, int, int, bytes | None, bytes | None]
#: (length, head, tail, UNIQ_KEY value start, end, topic, tagsCode) of a template record:
#: topic + properties bytes from the topic-length byte on; length -1 = none
Template = tuple[int, bytes, bytes, int, int, str, int]
_NO_TEMPLATE: Final[Template] = (-1, b"", b"", 0, 0, "", 0)
TOPIC_CACHE_MAX_ENTRIES: Final = 100_000
TAGS_CACHE_MAX_ENTRIES: Final = 4096


def _entry_value(props: bytes, key: bytes, props_len: int) -> tuple[bytes | None, int, int]:
    """``find_property`` for the usual case, inlined: (value, start, end) of the last ``key``
    entry when it starts an entry and has a value; else ``find_property``'s answer with
    start -1 (not where the last search hit ended)."""
    i = props.rfind(key)
    if i < 0:
        return None, -1, -1
    v0 = i + len(key)
    j = props.find(b"\x02", v0)
    if j < 0:
        j = props_len
    if j > v0 and (i == 0 or props[i - 1] == 2):
        return props[v0:j], v0, j
    return find_property(props, key, 0, props_len), -1, -1


class RecordScanner:
    """Reads the fields dispatch needs from consecutive records of a buffer (an mmap'd
    CommitLog file, a DLedger entry body) with the record readers of the codec
    (``head_status``, ``record_tail``, ``find_property``): the checks of
    ``CommitLog.check_record(strict=False, check_crc=False)``. Keeps caches (topic bytes ->
    topic, TAGS bytes -> tagsCode) and the template record across calls: one scanner per
    reader.

    The template path: a record whose topic + properties bytes equal the previous fully read
    record's except for the UNIQ_KEY value (same length, no 0x02 in it) -- the records of a
    batch, a producer's run of sends -- has that record's topic and tagsCode and no KEYS: the
    property entries sit at the same places and only the UNIQ_KEY value differs, so the full
    read would find the same (the size checks it makes hold too: topic length, properties
    length and record end are the same bytes). A template without UNIQ_KEY (and KEYS) must
    match whole."""

    def __init__(self, max_record: int, delay_levels: tuple[int, ...] = DELAY_LEVELS_MS) -> None:
        self.max_record = max_record
        self.delay_levels = delay_levels
        self._topics: dict[bytes, str] = {}
        self._tags: dict[bytes, int] = {}
        self._template: Template = _NO_TEMPLATE
        #: (size, topic, store timestamp) of the record a SCAN_SKIP stopped at
        self.skipped: tuple[int, str, int] = (0, "", 0)

    def scan(
        self, buf: Any, pos: int, end: int, budget: int, out: list[Scanned], want_keys: bool
    ) -> tuple[int, int, int]:
        """Scan records from ``buf[pos:end]`` while ``budget`` bytes are left, appending each
        to ``out``; UNIQ_KEY and KEYS are read only ``want_keys``. -> (position of the first
        record not scanned, SCAN_* reason, budget left)."""
        max_record = self.max_record
        unpack_head = DISPATCH_HEADER.unpack_from
        add = out.append
        read = self._read
        tpl_len, tpl_head, tpl_tail, tpl_u0, tpl_u1, tpl_topic, tpl_code = self._template
        while budget > 0:
            avail = end - pos
            if avail < RECORD_HEADER_SIZE:
                return pos, _SCAN_STOP[short_status(buf, pos, end, max_record)], budget
            (
                total, magic, queue_id, queue_offset, phys, sys_flag, store_ts, body_len,
            ) = unpack_head(buf, pos)
            # head_status's record case, inlined (the per-record cost); any other case asks it
            if magic != MAGIC_V1 or not RECORD_FIXED_SIZE <= total <= max_record or total > avail:
                return pos, _SCAN_STOP[head_status(total, magic, avail, max_record)], budget
            tp = pos + RECORD_HEADER_SIZE + body_len
            rec_end = pos + total
            # the template path (class docstring); a template is >= 4 bytes long, so a match
            # of its length leaves BODYLEN within the record once it is not negative
            if rec_end - tp == tpl_len and body_len >= 0 and not sys_flag & SYSFLAG_HOSTS_V6:
                rest = buf[tp:rec_end]
                if rest.startswith(tpl_head) and rest.endswith(tpl_tail):
                    uniq = rest[tpl_u0:tpl_u1]
                    if 2 not in uniq:
                        add((
                            phys, total, tpl_topic, queue_id, queue_offset, sys_flag, store_ts,
                            tpl_code, uniq or None, None,
                        ))
                        pos = rec_end
                        budget -= total
                        continue
            got = read(buf, pos, total, body_len, sys_flag, store_ts, want_keys)
            if type(got) is int:
                return pos, got, budget
            topic, code, uniq_key, keys = got  # type: ignore[misc]
            add((phys, total, topic, queue_id, queue_offset, sys_flag, store_ts, code, uniq_key,
                 keys))  # fmt: skip
            pos = rec_end
            budget -= total
            tpl_len, tpl_head, tpl_tail, tpl_u0, tpl_u1, tpl_topic, tpl_code = self._template
        return pos, SCAN_MORE, budget

    def _read(
        self, buf: Any, pos: int, total: int, body_len: int, sys_flag: int, store_ts: int,
        want_keys: bool,
    ) -> tuple[str, int, bytes | None, bytes | None] | int:
        """The full read of a record off the template path: (topic, tagsCode, UNIQ_KEY,
        KEYS), or SCAN_CORRUPT / SCAN_SKIP. Makes the record the template when it can be."""
        try:
            tp, p0, props_len = record_tail(buf, pos, total, body_len, sys_flag)
        except RecordError:
            return SCAN_CORRUPT
        raw = buf[tp + 1 : p0 - 2]
        topic = self._topics.get(raw) or self._topic(raw, total, store_ts)
        if isinstance(topic, int):
            return topic
        if not props_len:
            return topic, 0, None, None
        props = buf[p0 : pos + total]
        code = self._tags_code(topic, props, props_len, store_ts)
        if not want_keys:
            return topic, code, None, None
        uniq, v0, v1 = _entry_value(props, PROP_UNIQ_KEY, props_len)
        keys = find_property(props, PROP_KEYS, 0, props_len) if PROP_KEYS in props else None
        if keys is None and topic != SCHEDULE_TOPIC and (uniq is None or v0 >= 0):
            self._set_template(buf[tp:p0], props, v0, v1, topic, code)
        return topic, code, uniq, keys

    def _topic(self, raw: bytes, total: int, store_ts: int) -> str | int:
        """The topic of raw bytes (cached), or SCAN_CORRUPT (no UTF-8) / SCAN_SKIP (a topic
        that names no store path: no ConsumeQueue or index for it; checked on a cache miss
        only, as valid topics are cached)."""
        topic = self._topics.get(raw)
        if topic is not None:
            return topic
        try:
            topic = raw.decode()
        except UnicodeDecodeError:
            return SCAN_CORRUPT
        if not is_valid_component(topic):
            self.skipped = (total, topic, store_ts)
            return SCAN_SKIP
        if len(self._topics) < TOPIC_CACHE_MAX_ENTRIES:
            self._topics[raw] = topic
        return topic

    def _tags_code(self, topic: str, props: bytes, props_len: int, store_ts: int) -> int:
        """tagsCode: the hash of TAGS (cached), or the delivery time of a delayed record."""
        if topic == SCHEDULE_TOPIC:
            level = find_property(props, PROP_DELAY, 0, props_len)
            if level is not None:
                return delay_tags_code(
                    level.decode("utf-8", "replace"), store_ts, self.delay_levels
                )
        tags = _entry_value(props, PROP_TAGS, props_len)[0]
        if tags is None:
            return 0
        code = self._tags.get(tags)
        if code is None:
            code = tags_code(tags.decode("utf-8", "replace"))
            if len(self._tags) < TAGS_CACHE_MAX_ENTRIES:
                self._tags[tags] = code
        return code

    def _set_template(
        self, head: bytes, props: bytes, v0: int, v1: int, topic: str, code: int
    ) -> None:
        """Make a record without KEYS the template: ``head`` its topic part (TOPICLEN, TOPIC,
        PROPERTIESLENGTH), ``props[v0:v1]`` its UNIQ_KEY value (v0 = -1: it has none, so the
        template must match whole)."""
        size = len(head) + len(props)
        if v0 < 0:
            self._template = (size, head + props, b"", 0, 0, topic, code)
        else:
            start = len(head)
            self._template = (
                size, head + props[:v0], props[v1:], start + v0, start + v1, topic, code,
            )
