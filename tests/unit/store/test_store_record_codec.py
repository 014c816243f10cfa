"""The record codec (``store/record.py`` on ``write_record``) against an oracle of the layout.

The oracle is the v1/IPv4 record as store-and-replication.md §1.3 lays it out, packed field by
field (what the four encoders before the codec wrote, byte for byte): a put of a delayed message
goes to ``SCHEDULE_TOPIC_XXXX`` queue ``min(level, levels) - 1`` with REAL_TOPIC / REAL_QID
added and its properties in Java ``HashMap`` order; a batch item gets the header properties
appended after a 0x02 (none when its own text ends with one). Property-based, through the real
path: records are put into a real CommitLog (files in a temp dir) and into a real one-member
DLedger store, read back from the files and scanned by the dispatcher's ``RecordScanner``, with
RocketMQ's default delay levels and configured ones.
"""

from __future__ import annotations

import functools
import random
import socket
import struct
import tempfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.cluster.protocol.message import (
    BATCH_ITEM_HEAD,
    Message,
    MessageConst,
    decode_properties,
    encode_properties,
    encode_record,
    java_map_order,
    java_string_hash,
)
from rmq_cluster.dledger.commitlog_adapter import DLedgerCommitLog, open_dledger_store
from rmq_cluster.dledger.log_storage import BODY_OFFSET
from rmq_cluster.dledger.node import run_store_node
from rmq_cluster.store.commitlog import CommitLog, PutMessageStatus
from rmq_cluster.store.config import DELAY_LEVELS_MS, SCHEDULE_TOPIC
from rmq_cluster.store.message_store import MessageStore
from rmq_cluster.store.record import (
    SCAN_MORE,
    SCAN_WAIT,
    RecordScanner,
    Scanned,
    parse_delay_levels,
)
from tests.ports import free_port
from tests.unit.store.store_testlib import small_config

STORE_TS = 1_700_000_000_123
MAGIC_V1 = 0xDAA320A7
DELAY = MessageConst.PROPERTY_DELAY_TIME_LEVEL
FILE_BYTES = 1024 * 1024
WAIT_S = 20.0

# --------------------------------------------------------------------------- the oracle


def _host(host: tuple[str, int]) -> bytes:
    return socket.inet_aton(host[0]) + struct.pack(">i", host[1])


def _props_text(props: Mapping[str, str]) -> bytes:
    return "\x02".join(k + "\x01" + v for k, v in props.items()).encode()


def oracle_put(
    msg: Message, levels: tuple[int, ...]
) -> tuple[str, int, dict[str, str]]:
    """(topic, queue id, properties) a put stores."""
    props = dict(msg.properties)
    topic, queue_id = msg.topic, msg.queue_id
    text = props.get(DELAY)
    if text is not None and msg.sys_flag & 0xC in (0x0, 0x8):
        try:
            level = int(text)
        except ValueError:
            level = 0
        if level > 0:
            props["REAL_TOPIC"] = topic
            props["REAL_QID"] = str(queue_id)
            props = java_map_order(props)
            topic, queue_id = SCHEDULE_TOPIC, min(level, len(levels)) - 1
    return topic, queue_id, props


def oracle_record(
    msg: Message, topic: str, queue_id: int, props: bytes, queue_offset: int, phys: int,
) -> bytes:
    """The record, field by field (TOTALSIZE .. PROPERTIES)."""
    topic_b = topic.encode()
    body = msg.body
    fields = b"".join((
        struct.pack(">I", MAGIC_V1),
        struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),
        struct.pack(">i", queue_id),
        struct.pack(">i", msg.flag),
        struct.pack(">q", queue_offset),
        struct.pack(">q", phys),
        struct.pack(">i", msg.sys_flag & ~0x30),
        struct.pack(">q", msg.born_timestamp),
        _host(msg.born_host),
        struct.pack(">q", STORE_TS),
        _host(msg.store_host),
        struct.pack(">i", msg.reconsume_times),
        struct.pack(">q", msg.prepared_transaction_offset),
        struct.pack(">i", len(body)),
        body,
        bytes((len(topic_b),)),
        topic_b,
        struct.pack(">h", len(props)),
        props,
    ))
    return struct.pack(">i", 4 + len(fields)) + fields


def oracle_code(topic: str, props: Mapping[str, str], levels: tuple[int, ...]) -> int:
    if topic == SCHEDULE_TOPIC and DELAY in props:
        try:
            level = min(max(int(props[DELAY]), 1), len(levels))
        except ValueError:
            level = 1
        return STORE_TS + levels[level - 1]
    tags = props.get("TAGS")
    return java_string_hash(tags) if tags else 0


def oracle_scan(record: bytes, levels: tuple[int, ...]) -> Scanned:
    """What dispatch needs of a record, from a full decode of its properties."""
    (total, _m, _crc, queue_id, _f, queue_offset, phys, sys_flag) = struct.unpack_from(
        ">iIiiiqqi", record
    )
    body_len = struct.unpack_from(">i", record, 84)[0]
    tp = 88 + body_len
    topic = record[tp + 1 : tp + 1 + record[tp]].decode()
    props = decode_properties(record[tp + 3 + record[tp] :])
    uniq = props.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    keys = props.get(MessageConst.PROPERTY_KEYS)
    return (
        phys, total, topic, queue_id, queue_offset, sys_flag, STORE_TS,
        oracle_code(topic, props, levels), uniq.encode() if uniq else None,
        keys.encode() if keys else None,
    )


# --------------------------------------------------------------------------- strategies

TOPICS = ("TopicA", "TopicB", "t-中文", "%RETRY%g", "x" * 127)
_text = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]))
_value = st.one_of(_text.filter(bool), st.sampled_from(["k1 k2", "TagA", "é中", " "]))
_delay = st.sampled_from(["1", "3", "18", "19", "99", "0", "-2", "x", "", "2 "])
_names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "PGROUP", "WAIT", "TRAN_MSG", "A"])
_props = st.dictionaries(st.one_of(_names, _text.filter(bool)), _value, max_size=6)
_hosts = st.tuples(
    st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t))),
    st.integers(0, 65535),
)
_i32 = st.integers(-(2**31), 2**31 - 1)


@st.composite
def messages(draw: st.DrawFn, delayed: bool = True) -> Message:
    props = dict(draw(_props))
    if delayed and draw(st.booleans()):
        props[DELAY] = draw(_delay)
    return Message(
        topic=draw(st.sampled_from(TOPICS)),
        body=draw(st.binary(max_size=300)),
        queue_id=draw(st.integers(0, 7)),
        flag=draw(_i32),
        properties=props,
        sys_flag=draw(st.sampled_from([0, 0x1, 0x2, 0x4, 0x8, 0xC, 0x30, 0x3])),
        born_timestamp=draw(st.integers(0, 2**62)),
        born_host=draw(_hosts),
        store_host=draw(_hosts),
        reconsume_times=draw(st.integers(0, 2**31 - 1)),
        prepared_transaction_offset=draw(st.integers(0, 2**62)),
    )


_levels_text = st.lists(
    st.tuples(st.integers(1, 90), st.sampled_from("smhd")).map(lambda t: f"{t[0]}{t[1]}"),
    min_size=1, max_size=20,
).map(" ".join)
_levels = st.one_of(st.just(None), _levels_text)

# --------------------------------------------------------------------------- helpers


def _commitlog(root: str, levels_text: str | None) -> CommitLog:
    extra = {} if levels_text is None else {"message_delay_level": levels_text}
    config = small_config(root, mapped_file_size_commit_log=FILE_BYTES, **extra)
    return CommitLog(config, clock_ms=lambda: STORE_TS)


def _levels_of(levels_text: str | None) -> tuple[int, ...]:
    return DELAY_LEVELS_MS if levels_text is None else parse_delay_levels(levels_text)


def _scan_all(cl: CommitLog, levels: tuple[int, ...]) -> list[Scanned]:
    mf = cl.queue.files[-1]
    scanner = RecordScanner(cl.max_record, levels)
    out: list[Scanned] = []
    pos, stop, _left = scanner.scan(mf.mm, 0, mf.wrote, 1 << 40, out, True)
    assert (pos, stop) == (mf.wrote, SCAN_WAIT)
    return out


# --------------------------------------------------------------------------- tests


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(msgs=st.lists(messages(), min_size=1, max_size=8), levels_text=_levels)
def test_puts_write_the_oracle_bytes_and_scan_as_decoded(
    msgs: list[Message], levels_text: str | None
) -> None:
    levels = _levels_of(levels_text)
    table: dict[tuple[str, int], int] = {}
    with tempfile.TemporaryDirectory() as root:
        cl = _commitlog(root, levels_text)
        try:
            expected = []
            for msg in msgs:
                result = cl.append(msg)
                assert result.status is PutMessageStatus.PUT_OK, result.remark
                assert result.result is not None
                topic, queue_id, props = oracle_put(msg, levels)
                if msg.sys_flag & 0xC in (0x4, 0xC):
                    qo = 0
                else:
                    qo = table.get((topic, queue_id), 0)
                    table[(topic, queue_id)] = qo + 1
                phys = result.result.wrote_offset
                want = oracle_record(msg, topic, queue_id, _props_text(props), qo, phys)
                got = cl.get_message(phys, result.result.wrote_bytes)
                assert got is not None and bytes(got) == want
                expected.append(oracle_scan(want, levels))
            assert _scan_all(cl, levels) == expected
        finally:
            cl.close()


def _batch_body(items: list[tuple[int, bytes, bytes]]) -> bytes:
    parts = []
    for flag, body, props in items:
        total = BATCH_ITEM_HEAD.size + len(body) + 2 + len(props)
        parts += [BATCH_ITEM_HEAD.pack(total, 0, 0, flag, len(body)), body,
                  struct.pack(">h", len(props)), props]
    return b"".join(parts)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    header=messages(delayed=False),
    items=st.lists(
        st.tuples(_i32, st.binary(max_size=200), _props, st.booleans()), min_size=1, max_size=12
    ),
    rounds=st.integers(1, 2),
)
def test_batches_write_the_oracle_bytes_and_scan_as_decoded(
    header: Message, items: list[tuple[int, bytes, dict[str, str], bool]], rounds: int
) -> None:
    header = Message(  # batches are never transactional (they are refused)
        header.topic, b"", header.queue_id, 0, header.properties, header.sys_flag & ~0xC,
        header.born_timestamp, header.born_host, header.store_host, header.reconsume_times,
    )
    # an item's properties in Java form, or C++ form (a trailing 0x02)
    raw = [(f, b, _props_text(p) + (b"\x02" if cpp and p else b"")) for f, b, p, cpp in items]
    body = _batch_body(raw)
    extra = _props_text(header.properties)
    with tempfile.TemporaryDirectory() as root:
        cl = _commitlog(root, None)
        try:
            expected = []
            for r in range(rounds):
                batch = Message(
                    header.topic, body, header.queue_id, 0, header.properties, header.sys_flag,
                    header.born_timestamp, header.born_host, header.store_host,
                    header.reconsume_times,
                )
                result = cl.append_batch(batch)
                assert result.status is PutMessageStatus.PUT_OK, result.remark
                assert result.result is not None
                offsets = result.result.offsets
                assert len(offsets) == len(raw)
                for i, ((flag, item_body, own), phys) in enumerate(zip(raw, offsets, strict=True)):
                    sep = b"\x02" if own and extra and not own.endswith(b"\x02") else b""
                    item = Message(
                        header.topic, item_body, header.queue_id, flag, {}, header.sys_flag,
                        header.born_timestamp, header.born_host, header.store_host,
                        header.reconsume_times,
                    )
                    want = oracle_record(
                        item, header.topic, header.queue_id, own + sep + extra,
                        r * len(raw) + i, phys,
                    )
                    got = cl.get_message(phys, len(want))
                    assert got is not None and bytes(got) == want
                    expected.append(oracle_scan(want, DELAY_LEVELS_MS))
            assert _scan_all(cl, DELAY_LEVELS_MS) == expected
        finally:
            cl.close()


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    msgs=st.lists(
        st.tuples(messages(), st.sampled_from([None, SCHEDULE_TOPIC])), min_size=1, max_size=10
    ),
    levels_text=_levels,
)
def test_scanner_reads_any_record_as_a_full_decode(
    msgs: list[tuple[Message, str | None]], levels_text: str | None
) -> None:
    """Records as written (``encode_record``: any DELAY text in the schedule topic, any
    properties), concatenated: the scanner (template path included) agrees with the oracle."""
    levels = _levels_of(levels_text)
    buf = bytearray()
    expected = []
    for msg, topic in msgs:
        if topic is not None:
            msg = Message(
                topic, msg.body, msg.queue_id, msg.flag, msg.properties, msg.sys_flag,
                msg.born_timestamp, msg.born_host, msg.store_host, msg.reconsume_times,
                msg.prepared_transaction_offset,
            )
        for qo in (0, 1):  # twice: the second one may take the template path
            rec = encode_record(
                msg, queue_offset=qo, phys_offset=len(buf), store_timestamp=STORE_TS
            )
            assert rec == oracle_record(
                msg, msg.topic, msg.queue_id, encode_properties(msg.properties), qo, len(buf)
            )
            expected.append(oracle_scan(rec, levels))
            buf += rec
    out: list[Scanned] = []
    scanner = RecordScanner(1 << 30, levels)
    pos, stop, _left = scanner.scan(bytes(buf), 0, len(buf), 1 << 40, out, True)
    assert (pos, stop) == (len(buf), SCAN_WAIT)
    assert out == expected
    # one record per call (a DLedger follower applying entries)
    one: list[Scanned] = []
    pos = 0
    while pos < len(buf):
        pos, stop, _left = scanner.scan(bytes(buf), pos, len(buf), 1, one, True)
        assert stop == SCAN_MORE
    assert one == expected


def test_configured_levels_clamp_the_put_and_the_tags_code(tmp_path: Path) -> None:
    """With three levels a DELAY of 10 goes to queue 2 and is due after the third level."""
    cl = _commitlog(str(tmp_path), "1s 2s 3s")
    try:
        assert cl.delay_levels == (1000, 2000, 3000)
        msg = Message("T", b"x", 5, 0, {DELAY: "10", "TAGS": "a"}, born_host=("1.2.3.4", 5))
        result = cl.append(msg)
        assert result.ok and result.result is not None
        (scanned,) = _scan_all(cl, cl.delay_levels)
        assert scanned[2:5] == (SCHEDULE_TOPIC, 2, 0)
        assert scanned[7] == STORE_TS + 3000
        size, req = cl.check_record(
            cl.queue.files[-1].view, 0, 0, check_crc=True, strict=True
        )
        assert size == result.result.wrote_bytes and req is not None
        assert req.tags_code == STORE_TS + 3000
    finally:
        cl.close()
    assert parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h") == (
        DELAY_LEVELS_MS
    )
    with pytest.raises(ValueError):
        parse_delay_levels("1s 5x")


# --------------------------------------------------------------------------- DLedger


def _open_dledger(root: Path, port: int) -> tuple[MessageStore, DLedgerCommitLog]:
    values = {
        "storePathRootDir": str(root), "brokerName": "b", "enableDLegerCommitLog": "true",
        "dLegerGroup": "g", "dLegerPeers": f"n0-127.0.0.1:{port}", "dLegerSelfId": "n0",
        "heartBeatTimeIntervalMs": "200", "mappedFileSizeConsumeQueue": str(20 * 1000),
        "maxHashSlotNum": "1000", "maxIndexNum": "4000",
    }
    settings_ = load_broker_config(values).settings
    return open_dledger_store(settings_.store, settings_.dledger)


def _random_message(rng: random.Random) -> Message:
    """A message like ``messages()`` draws, from a seeded generator (one real store for all)."""
    props: dict[str, str] = {}
    names = ["TAGS", "KEYS", "UNIQ_KEY", "PGROUP", "A", "Zz", "é"]
    for name in rng.sample(names, rng.randint(0, 5)):
        props[name] = rng.choice(["v", "TagA", "k1 k2", "é中", "x" * rng.randint(1, 40)])
    if rng.random() < 0.4:
        props[DELAY] = rng.choice(["1", "3", "18", "19", "99", "0", "-2", "x"])
    return Message(
        topic=rng.choice(TOPICS), body=rng.randbytes(rng.randint(0, 300)),
        queue_id=rng.randint(0, 7), flag=rng.randint(-(2**31), 2**31 - 1), properties=props,
        sys_flag=rng.choice([0, 0x1, 0x2, 0x4, 0x8, 0xC, 0x30]),
        born_timestamp=rng.randint(0, 2**62),
        born_host=(".".join(str(rng.randint(0, 255)) for _ in range(4)), rng.randint(0, 65535)),
        store_host=("127.0.0.1", rng.randint(0, 65535)),
        reconsume_times=rng.randint(0, 2**31 - 1),
        prepared_transaction_offset=rng.randint(0, 2**62),
    )


async def test_dledger_entries_hold_the_oracle_bytes(tmp_path: Path) -> None:
    """A one-member DLedger store: every entry body is the oracle's record (delayed messages,
    transactions, batches), and what it applied matches the records' scan."""
    port = free_port()
    store, dl = await trio.to_thread.run_sync(_open_dledger, tmp_path / "s", port)
    store.clock_ms = lambda: STORE_TS
    rng = random.Random(20)
    msgs = [_random_message(rng) for _ in range(150)]
    table: dict[tuple[str, int], int] = {}
    expected: list[tuple[int, bytes]] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(run_store_node, dl, host="127.0.0.1"))
            node = dl.node
            assert node is not None
            with trio.fail_after(WAIT_S):
                await node.wait_for(lambda _n: dl.leader_ready)
            for i, msg in enumerate(msgs):
                result = store.append_message(msg)
                assert result.status is PutMessageStatus.PUT_OK, result.remark
                assert result.result is not None
                topic, queue_id, props = oracle_put(msg, DELAY_LEVELS_MS)
                if msg.sys_flag & 0xC in (0x4, 0xC):
                    qo = 0
                else:
                    qo = table.get((topic, queue_id), 0)
                    table[(topic, queue_id)] = qo + 1
                phys = result.result.wrote_offset
                expected.append(
                    (phys, oracle_record(msg, topic, queue_id, _props_text(props), qo, phys))
                )
                if i % 10 == 9:
                    await trio.lowlevel.checkpoint()
            # a batch: items with the header's properties appended
            items = [(7, b"a" * 10, b"TAGS\x01t1"), (8, b"", b""), (9, b"bb", b"KEYS\x01k\x02")]
            batch = Message(
                "TopicA", _batch_body(items), 3, 0, {"PGROUP": "pg"}, 0, 5, ("10.0.0.1", 1),
                ("127.0.0.1", 10911),
            )
            result = store.append_messages(batch)
            assert result.status is PutMessageStatus.PUT_OK and result.result is not None
            qo = table.get(("TopicA", 3), 0)
            for j, ((flag, body, own), phys) in enumerate(
                zip(items, result.result.offsets, strict=True)
            ):
                sep = b"\x02" if own and not own.endswith(b"\x02") else b""
                item = Message(
                    "TopicA", body, 3, flag, {}, 0, 5, ("10.0.0.1", 1), ("127.0.0.1", 10911)
                )
                expected.append(
                    (phys, oracle_record(item, "TopicA", 3, own + sep + b"PGROUP\x01pg", qo + j,
                                         phys))
                )
            last = node.core.storage.last_index()
            with trio.fail_after(WAIT_S):
                await node.wait_for(lambda _n: dl.applied_index >= last)
            storage = dl.storage
            assert storage is not None
            got = [
                (storage.entry_pos(i) + BODY_OFFSET, bytes(storage.body_at(i)))
                for i in range(last + 1) if storage.body_at(i)
            ]
            assert got == expected
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    # the ConsumeQueues the leader built (from what it knew when encoding) hold the oracle's
    cqs: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for phys, rec in expected:
        s = oracle_scan(rec, DELAY_LEVELS_MS)
        if s[5] & 0xC in (0, 0x8):
            cqs.setdefault((s[2], s[3]), []).append((phys, len(rec), s[7]))
    assert _read_cqs(tmp_path / "s") == cqs


def _read_cqs(root: Path) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    out: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for path in sorted((root / "consumequeue").glob("*/*/*")):
        data = path.read_bytes()
        units = []
        for pos in range(0, len(data), 20):
            phys, size, code = struct.unpack_from(">qiq", data, pos)
            if size:
                units.append((phys, size, code))
        if units:
            out[(path.parent.parent.name, int(path.parent.name))] = units
    return out
