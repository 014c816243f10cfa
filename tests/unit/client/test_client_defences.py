"""The client's pure defences (issue 31 item 5): bounded inflation, pulled bodies that cannot
be inflated skipped one by one, reply futures bounded, offset tables from a peer checked."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.client.instance import parse_offset_table
from rmq_cluster.client.model import MessageQueue, ReceivedMessage
from rmq_cluster.client.request_reply import RequestFutureTable, reply_from_push
from rmq_cluster.cluster.protocol.message import (
    SYSFLAG_COMPRESSED,
    BodyInflateError,
    encode_record,
    inflate_body,
)
from rmq_cluster.cluster.protocol.message import Message as StoreMessage
from rmq_cluster.cluster.remoting.headers import ReplyMessageRequestHeader

ZLIB = SYSFLAG_COMPRESSED | 0x300


@given(st.binary(max_size=2048), st.integers(1, 4096), st.sampled_from([SYSFLAG_COMPRESSED, ZLIB]))
def test_inflate_body_is_zlib_within_the_bound(body: bytes, bound: int, flag: int) -> None:
    packed = zlib.compress(body)
    if len(body) <= bound:
        assert inflate_body(packed, flag, bound) == body
    else:
        with pytest.raises(BodyInflateError, match="inflates past"):
            inflate_body(packed, flag, bound)


def test_inflate_body_refuses_what_it_cannot_inflate() -> None:
    assert inflate_body(b"as stored", 0, 1) == b"as stored"  # not COMPRESSED: untouched
    packed = zlib.compress(b"x" * 100)
    assert inflate_body(packed, ZLIB, 100) == b"x" * 100  # exactly the bound
    for body, flag, reason in [
        (b"not zlib", ZLIB, "corrupt"),
        (packed[:-5], ZLIB, "truncated"),
        (packed, SYSFLAG_COMPRESSED | 0x100, "unsupported compression type 0x100"),  # LZ4
        (packed, SYSFLAG_COMPRESSED | 0x200, "unsupported compression type 0x200"),  # ZSTD
    ]:
        with pytest.raises(BodyInflateError, match=reason):
            inflate_body(body, flag, 1000)
    with pytest.raises(ValueError):  # BodyInflateError is a ValueError, as decoders raise
        inflate_body(b"", ZLIB, 1)


def _record(offset: int, body: bytes, sys_flag: int) -> bytes:
    return encode_record(StoreMessage("T", body, queue_id=1, sys_flag=sys_flag,
                                      properties={"UNIQ_KEY": f"U{offset}"}),
                         queue_offset=offset, phys_offset=offset * 1000, store_timestamp=1)


def test_decode_pulled_skips_only_the_bodies_it_cannot_inflate() -> None:
    data = b"".join([
        _record(0, b"first", 0),
        _record(1, zlib.compress(bytes(1 << 20)), ZLIB),  # 1 MiB of zeros, bound 64 KiB
        _record(2, b"\x78\x9c garbage", ZLIB),
        _record(3, zlib.compress(b"last" * 10), ZLIB),
    ])
    msgs, skipped = ReceivedMessage.decode_pulled(data, "b", max_body_bytes=64 * 1024)
    assert [(m.queue_offset, m.body) for m in msgs] == [(0, b"first"), (3, b"last" * 10)]
    assert [(s.queue_offset, s.msg_id, s.queue_id, s.topic) for s in skipped] == [
        (1, "U1", 1, "T"), (2, "U2", 1, "T")]
    assert "inflates past 65536" in skipped[0].reason and "corrupt" in skipped[1].reason
    assert skipped[0].commitlog_offset == 1000
    assert ReceivedMessage.decode_all(data, "b", max_body_bytes=64 * 1024) == msgs


def test_reply_futures_are_found_only_while_waiting_and_carry_their_bound() -> None:
    table = RequestFutureTable()
    assert table.waiting(None) is None and table.waiting("c") is None
    fut = table.register("c", 128)
    assert table.waiting("c") is fut and fut.max_body_bytes == 128
    fut.fail("too big")
    assert fut.arrived.is_set() and fut.error == "too big" and fut.reply is None
    table.remove("c")
    assert table.waiting("c") is None
    header = ReplyMessageRequestHeader.from_ext_fields({
        "producerGroup": "P", "topic": "C_REPLY_TOPIC", "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": str(ZLIB),
        "bornTimestamp": "1", "flag": "0", "properties": "CORRELATION_ID\x01c",
        "reconsumeTimes": "0", "unitMode": "false", "bornHost": "/1.2.3.4:5",
        "storeHost": "/1.2.3.4:6", "storeTimestamp": "2"})
    with pytest.raises(BodyInflateError):
        reply_from_push(header, zlib.compress(b"x" * 129), 3, max_body_bytes=128)
    assert reply_from_push(header, zlib.compress(b"x" * 128), 3, max_body_bytes=128).body == (
        b"x" * 128)


def test_offset_tables_from_a_peer_are_checked_entry_by_entry() -> None:
    mq = '{"brokerName":"b","queueId":%s,"topic":"T"}:%s'
    good = mq % (1, 5)
    body = ('{"offsetTable":{' + ",".join([
        good,
        mq % (1024, 5),  # queue id out of range
        mq % (2, -3),  # negative offset
        mq % (3, 9 * 10**18 + 10**18),  # past a Java long
        mq % (4, "9" * 5000),  # more digits than int() takes
    ]) + "}}").encode()
    assert parse_offset_table(body) == {MessageQueue("T", "b", 1): 5}
    cpp = (b'{"offsetTable":[1,"x",{"topic":"T"},{"brokerName":"b","offset":"n",'
           b'"queueId":0,"topic":"T"},{"brokerName":["b"],"offset":1,"queueId":0,"topic":"T"},'
           b'{"brokerName":"b","offset":7,"queueId":2,"topic":"T"}]}')
    assert parse_offset_table(cpp) == {MessageQueue("T", "b", 2): 7}
    for junk in (b"", b"{", b"[]", b'{"offsetTable":5}', b"\xff" * 64):
        assert parse_offset_table(junk) == {}
