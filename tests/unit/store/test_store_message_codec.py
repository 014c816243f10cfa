"""cluster/protocol/message.py: properties, hashes, msgId, records and batch bodies."""

from __future__ import annotations

import zlib

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.cluster.protocol.message import (
    MAGIC_V1,
    Message,
    RecordError,
    decode_batch,
    decode_offset_msg_id,
    decode_properties,
    decode_record,
    encode_batch,
    encode_offset_msg_id,
    encode_properties,
    encode_record,
    index_key_hash,
    iter_records,
    join_properties,
    new_message,
    tags_code,
)
from tests.unit.store.store_testlib import decode_one, java_hash

prop_text = st.text(
    alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=["Cs"]),
    min_size=1,
    max_size=20,
)


def test_properties_java_and_cpp_forms() -> None:
    assert encode_properties({"TAGS": "a", "KEYS": "k1 k2"}) == b"TAGS\x01a\x02KEYS\x01k1 k2"
    assert decode_properties(b"TAGS\x01a\x02KEYS\x01k1 k2") == {"TAGS": "a", "KEYS": "k1 k2"}
    # C++ appends a final separator; empty entries, keys and values are skipped
    assert decode_properties(b"TAGS\x01a\x02\x02\x01v\x02K\x01\x02X\x01y\x02") == {
        "TAGS": "a",
        "X": "y",
    }
    assert encode_properties({}) == b""
    assert decode_properties(b"") == {}


@given(st.dictionaries(prop_text, prop_text, max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


def test_java_hash_known_values() -> None:
    assert tags_code("a") == 97
    assert tags_code("hello") == 99162322
    assert tags_code("TagA") == java_hash("TagA")
    assert tags_code(None) == 0 and tags_code("") == 0
    # overflow wraps like a Java int, non-BMP characters hash as UTF-16 surrogate pairs
    assert tags_code("polygenelubricants") == -2147483648
    assert tags_code("中文标签😀") == java_hash("中文标签😀")
    assert index_key_hash("polygenelubricants") == 0  # abs(MIN_VALUE) -> 0
    assert index_key_hash("T#k") == abs(java_hash("T#k"))


def test_offset_msg_id_round_trip() -> None:
    msg_id = encode_offset_msg_id(("192.168.0.1", 10911), 0x1234)
    assert msg_id == "C0A80001" + "00002A9F" + "0000000000001234"
    assert decode_offset_msg_id(msg_id) == (("192.168.0.1", 10911), 0x1234)
    with pytest.raises(ValueError):
        decode_offset_msg_id("ABC")


def _msg(**kw: object) -> Message:
    base: dict[str, object] = dict(
        topic="TopicTest",
        body=b"hello world",
        queue_id=3,
        flag=7,
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABCDEF"},
        sys_flag=0,
        born_timestamp=1700000000123,
        born_host=("10.0.0.9", 50123),
        store_host=("127.0.0.1", 10911),
        reconsume_times=2,
        prepared_transaction_offset=99,
    )
    base.update(kw)
    return Message(**base)  # type: ignore[arg-type]


def test_record_layout_with_independent_decoder() -> None:
    msg = _msg()
    raw = encode_record(msg, queue_offset=42, phys_offset=4096, store_timestamp=1700000000999)
    rec = decode_one(raw, 0)
    props = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABCDEF"
    assert rec["total_size"] == len(raw) == 91 + 11 + 9 + len(props)
    assert rec["magic"] == MAGIC_V1
    assert rec["body_crc"] == zlib.crc32(b"hello world") & 0x7FFFFFFF
    assert rec["queue_id"] == 3 and rec["flag"] == 7
    assert rec["queue_offset"] == 42 and rec["physical_offset"] == 4096
    assert rec["born_timestamp"] == 1700000000123 and rec["store_timestamp"] == 1700000000999
    assert rec["born_host"] == ("10.0.0.9", 50123) and rec["store_host"] == ("127.0.0.1", 10911)
    assert rec["reconsume_times"] == 2 and rec["prepared_transaction_offset"] == 99
    assert rec["body"] == b"hello world" and rec["topic"] == "TopicTest"
    assert rec["properties"] == dict(msg.properties)
    decoded = decode_record(raw)
    assert decoded.msg_id == encode_offset_msg_id(("127.0.0.1", 10911), 4096)
    assert decoded.body == msg.body and decoded.properties == dict(msg.properties)


@given(
    body=st.binary(max_size=2000),
    topic=st.text(alphabet="abcXYZ_-%|0123456789", min_size=1, max_size=127),
    props=st.dictionaries(prop_text, prop_text, max_size=5),
    qo=st.integers(0, 2**63 - 1),
    phys=st.integers(0, 2**63 - 1),
)
def test_record_round_trip(
    body: bytes, topic: str, props: dict[str, str], qo: int, phys: int
) -> None:
    msg = _msg(body=body, topic=topic, properties=props)
    raw = encode_record(msg, queue_offset=qo, phys_offset=phys, store_timestamp=5)
    out = decode_record(raw)
    assert (out.body, out.topic, out.properties) == (body, topic, props)
    assert (out.queue_offset, out.commitlog_offset) == (qo, phys)
    assert decode_one(raw, 0)["computed_size"] == len(raw)


def test_record_errors() -> None:
    raw = bytearray(encode_record(_msg(), queue_offset=0, phys_offset=0, store_timestamp=1))
    with pytest.raises(RecordError):
        decode_record(bytes(raw[:-1]))
    bad = bytearray(raw)
    bad[88] ^= 0xFF  # body byte
    with pytest.raises(RecordError):
        decode_record(bytes(bad))
    assert decode_record(bytes(bad), check_crc=False).body != b"hello world"
    bad = bytearray(raw)
    bad[4] = 0
    with pytest.raises(RecordError):
        decode_record(bytes(bad))
    two = bytes(raw) * 2
    assert len(list(iter_records(two))) == 2


def test_batch_body_round_trip() -> None:
    items = [(0, b"a", {"UNIQ_KEY": "U1"}), (5, b"bb" * 100, {}), (1, b"", {"KEYS": "x"})]
    body = encode_batch(items)
    decoded = decode_batch(body)
    assert [(d.flag, d.body, decode_properties(d.properties)) for d in decoded] == items
    with pytest.raises(RecordError):
        decode_batch(body[:-1])
    assert join_properties(b"A\x01b", b"C\x01d") == b"A\x01b\x02C\x01d"
    assert join_properties(b"A\x01b\x02", b"C\x01d") == b"A\x01b\x02C\x01d"
    assert join_properties(b"", b"C\x01d") == b"C\x01d"


def test_new_message_is_the_same_frozen_message() -> None:
    props = {"TAGS": "a"}
    fast = new_message("T", b"body", 3, 7, props, 8, 1700, ("1.2.3.4", 5), ("5.6.7.8", 9), 2, 11)
    slow = Message(
        topic="T", body=b"body", queue_id=3, flag=7, properties=props, sys_flag=8,
        born_timestamp=1700, born_host=("1.2.3.4", 5), store_host=("5.6.7.8", 9),
        reconsume_times=2, prepared_transaction_offset=11,
    )
    assert type(fast) is Message
    assert fast == slow and repr(fast) == repr(slow)
    assert attrs.asdict(fast) == attrs.asdict(slow)
    assert attrs.evolve(fast, topic="U") == attrs.evolve(slow, topic="U")
    plain = new_message("T", b"", 0, 0, {}, 0, 0, ("0.0.0.0", 0), ("0.0.0.0", 0), 0)
    assert plain == Message(topic="T", body=b"")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.topic = "U"  # type: ignore[misc]
