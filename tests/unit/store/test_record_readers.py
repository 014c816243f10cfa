"""One record layout, one reader family (issue 32, item 5).

Every reader of CommitLog bytes is built on the codec's layout table and its ``head_status`` /
``record_tail``: the full decode (``decode_record``), the store's check (``check_record``) and
scan (``RecordScanner``), the property-only decode (``record_properties``, the SQL92 filter's
read) and the replica audit's decoder (``spark_jobs.decode``). Here they must agree on every
record, a valid one or one with any of its bytes changed: the same verdict, the same fields.
The layout table itself is checked against the independent decoder of ``store_testlib``.
"""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq_cluster.cluster.protocol.message import (
    RECORD_FIELD,
    RECORD_FIXED_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    RECORD_LAYOUT,
    Message,
    RecordError,
    decode_properties,
    decode_record,
    encode_record,
    header_struct,
    peek_field,
    record_properties,
)
from rmq_cluster.spark_jobs.decode import decode_record_at
from rmq_cluster.store.commitlog import CommitLog
from rmq_cluster.store.config import DELAY_LEVELS_MS, SCHEDULE_TOPIC
from rmq_cluster.store.record import (
    SCAN_BLANK,
    SCAN_CORRUPT,
    SCAN_SKIP,
    SCAN_WAIT,
    RecordScanner,
    delay_level,
    delay_tags_code,
    put_properties,
)
from tests.unit.store.store_testlib import decode_one, small_config

HOST = ("10.0.0.7", 10911)
PHYS = 4096
STORE_TS = 1_700_000_000_123


def _record(topic: str = "T", body: bytes = b"hello", props: bytes | None = None) -> bytes:
    msg = Message(topic=topic, body=body, queue_id=3, flag=7, sys_flag=0,
                  born_timestamp=1_699_999_999_000, born_host=("127.0.0.1", 5555),
                  store_host=HOST, reconsume_times=2)  # fmt: skip
    return encode_record(msg, queue_offset=42, phys_offset=PHYS, store_timestamp=STORE_TS,
                         properties=props)  # fmt: skip


def test_the_layout_table_is_the_header() -> None:
    offset = 0
    for field in RECORD_LAYOUT:
        assert field.offset == offset
        offset += field.size
    assert offset == RECORD_HEADER_SIZE == RECORD_HEADER.size == 88
    assert RECORD_HEADER.format == ">" + "".join(f.code for f in RECORD_LAYOUT)
    # a reader of a few fields unpacks them where the full header has them
    few = header_struct("QUEUEID", "STORETIMESTAMP")
    raw = _record()
    full = dict(zip((f.name for f in RECORD_LAYOUT), RECORD_HEADER.unpack_from(raw), strict=True))
    assert few.unpack_from(raw) == (full["QUEUEID"], full["STORETIMESTAMP"])
    # and each peek reads what the independent decoder (store_testlib) reads at its offset
    ref = decode_one(raw, 0)
    assert peek_field(raw, "STORETIMESTAMP") == ref["store_timestamp"] == STORE_TS
    assert peek_field(raw, "PHYSICALOFFSET") == ref["physical_offset"] == PHYS
    assert peek_field(raw, "QUEUEOFFSET") == ref["queue_offset"] == 42
    assert peek_field(raw, "BODYLEN") == len(ref["body"]) == 5
    assert RECORD_FIELD["STORETIMESTAMP"].offset == 56
    with pytest.raises(struct.error):
        peek_field(raw[:60], "STORETIMESTAMP")


def _verdicts(raw: bytes, tmp_path: Path) -> dict[str, object]:
    """What each reader makes of ``raw`` (a lone record at file offset PHYS)."""
    out: dict[str, object] = {}
    try:
        m = decode_record(raw, check_crc=False)
        out["decode"] = (m.store_size, m.topic, m.queue_id, m.queue_offset, m.store_timestamp,
                         m.properties.get("KEYS"), m.properties.get("UNIQ_KEY"))  # fmt: skip
    except RecordError:
        out["decode"] = None
    try:
        out["properties"] = record_properties(raw)
    except RecordError:
        out["properties"] = None
    cl = CommitLog(small_config(tmp_path))
    size, req = cl.check_record(memoryview(raw), 0, PHYS, check_crc=False, strict=False)
    out["check"] = None if req is None else (
        size, req.topic, req.queue_id, req.queue_offset, req.store_timestamp,
        req.keys or None, req.uniq_key or None,
    )
    found: list = []
    scanner = RecordScanner(cl.max_record)
    _pos, why, _left = scanner.scan(raw, 0, len(raw), 1 << 20, found, True)
    out["scan"] = None if not found else (
        found[0][1], found[0][2], found[0][3], found[0][4], found[0][6],
        found[0][9].decode("utf-8", "replace") if found[0][9] else None,
        found[0][8].decode("utf-8", "replace") if found[0][8] else None,
    )
    out["scan_stop"] = why if not found else None
    row = decode_record_at(raw, 0, len(raw), PHYS, verify_crc=False)
    out["audit"] = None if row is None else (row[1], row[3], row[4], row[5], row[6], row[9],
                                             row[10])  # fmt: skip
    return out


def _assert_agree(raw: bytes, tmp_path: Path) -> dict[str, object]:
    v = _verdicts(raw, tmp_path)
    if v["scan_stop"] == SCAN_SKIP:
        # a record whose topic names no store path: read alike, not dispatched (policy)
        assert v["decode"] is not None and v["decode"][:2] == v["check"][:2], v  # type: ignore[index]
        v["scan"] = v["decode"]
    assert v["decode"] == v["check"] == v["scan"], v
    # the audit also wants the record to name its own offset (how it finds record boundaries)
    names_itself = len(raw) >= RECORD_HEADER_SIZE and peek_field(raw, "PHYSICALOFFSET") == PHYS
    assert v["audit"] == (v["decode"] if names_itself else None), v
    assert (v["properties"] is None) == (v["decode"] is None), v
    return v


def test_every_reader_reads_the_same_record(tmp_path: Path) -> None:
    props = b"TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1"
    v = _assert_agree(_record(props=props), tmp_path)
    assert v["decode"] == (len(_record(props=props)), "T", 3, 42, STORE_TS, "k1 k2", "U1")


def test_a_later_duplicate_property_wins_for_every_reader(tmp_path: Path) -> None:
    """``decode_properties`` keeps the last entry of a name; the audit took the first."""
    raw = _record(props=b"KEYS\x01first\x02UNIQ_KEY\x01u0\x02KEYS\x01second\x02UNIQ_KEY\x01u1")
    v = _assert_agree(raw, tmp_path)
    assert decode_properties(b"KEYS\x01first\x02KEYS\x01second")["KEYS"] == "second"
    assert v["audit"] is not None and v["audit"][5:] == ("second", "u1")


def test_an_empty_topic_is_no_record_for_any_reader(tmp_path: Path) -> None:
    """TOPICLEN 0: the store's check and scan refused it, the full decode took it."""
    raw = bytearray(_record(topic="T"))
    t = RECORD_HEADER_SIZE + 5
    # drop the topic: TOPICLEN 0, the record one byte shorter
    raw = raw[:t] + b"\x00" + raw[t + 2 :]
    raw[0:4] = len(raw).to_bytes(4, "big")
    v = _assert_agree(bytes(raw), tmp_path)
    assert v["decode"] is None and v["scan_stop"] == SCAN_CORRUPT


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    at=st.integers(0, 200),
    value=st.integers(0, 255),
    cut=st.integers(0, 200),
    props=st.sampled_from([b"", b"TAGS\x01x", b"KEYS\x01a b\x02UNIQ_KEY\x01Z", b"\x02\x01KEYS"]),
)
def test_readers_agree_on_any_changed_byte(
    tmp_path: Path, at: int, value: int, cut: int, props: bytes
) -> None:
    raw = bytearray(_record(props=props))
    raw[at % len(raw)] = value
    raw = raw[: len(raw) - cut % 8]  # sometimes cut short
    _assert_agree(bytes(raw), tmp_path)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_hostile_bytes_raise_only_record_error(data: bytes) -> None:
    """The readers a request's bytes reach (a PULL body, a SQL92 filter's record) fail only
    with RecordError, whatever the bytes; the scanner only stops."""
    for read in (decode_record, record_properties):
        with contextlib.suppress(RecordError):
            read(data)
    found: list = []
    _pos, why, _left = RecordScanner(1 << 20).scan(data, 0, len(data), 1 << 20, found, True)
    assert found or why in (SCAN_WAIT, SCAN_BLANK, SCAN_CORRUPT, SCAN_SKIP)


def test_a_short_buffer_is_incomplete_or_empty_not_a_record(tmp_path: Path) -> None:
    cl = CommitLog(small_config(tmp_path))
    raw = _record()
    for n in (0, 5, 8, RECORD_HEADER_SIZE - 1, RECORD_FIXED_SIZE, len(raw) - 1):
        size, req = cl.check_record(memoryview(raw[:n]), 0, PHYS, check_crc=False, strict=False)
        assert req is None and size <= 0
    assert cl.check_record(memoryview(bytes(20)), 0, PHYS, check_crc=False, strict=False)[0] == 0


# --------------------------------------------------------------------------- the DELAY rule


@given(st.one_of(st.integers(-5, 40).map(str), st.sampled_from(["", "x", " 3", "1.5"])))
def test_one_delay_rule_for_the_put_and_the_tags_code(text: str) -> None:
    """A delayed put's schedule queue and that record's tagsCode read DELAY the same way."""
    levels = DELAY_LEVELS_MS
    topic, qid, _props, _raw = put_properties({"DELAY": text}, "T", 5, 0, levels)
    level = delay_level(text, len(levels))
    if level:
        assert (topic, qid) == (SCHEDULE_TOPIC, level - 1)
        assert delay_tags_code(text, STORE_TS, levels) == STORE_TS + levels[qid]
    else:
        assert (topic, qid) == ("T", 5)
        assert delay_tags_code(text, STORE_TS, levels) == STORE_TS + levels[0]


def test_a_topic_that_is_not_utf8_is_no_record_for_any_reader(tmp_path: Path) -> None:
    """A topic byte 0x80: the store's check and scan refused it, the full decode and the
    audit read it as U+FFFD (Hypothesis found it: at=197, value=128)."""
    raw = bytearray(_record(props=b"TAGS\x01x"))
    raw[197 % len(raw)] = 0x80
    v = _assert_agree(bytes(raw), tmp_path)
    assert v["decode"] is None and v["audit"] is None and v["scan_stop"] == SCAN_CORRUPT
