"""CommitLog appends: layout on disk, rollover with blanks, limits, queue offsets, batches."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rmq_cluster.cluster.protocol.message import (
    SYSFLAG_TRANSACTION_COMMIT_TYPE,
    SYSFLAG_TRANSACTION_PREPARED_TYPE,
    Message,
    decode_record,
    encode_batch,
    encode_offset_msg_id,
)
from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.config import SCHEDULE_TOPIC
from rmq_cluster.store.message_store import MessageStore
from tests.unit.store.store_testlib import decode_commitlog_dir, read_cq_dir, small_config

HOST = ("127.0.0.1", 10911)


def msg(i: int, size: int = 100, **kw: object) -> Message:
    base: dict[str, object] = dict(
        topic="T",
        body=bytes([i % 256]) * size,
        queue_id=i % 3,
        properties={"TAGS": f"tag{i % 2}", "KEYS": f"key{i}", "UNIQ_KEY": f"U{i:08d}"},
        born_timestamp=1000 + i,
        born_host=("10.1.2.3", 5555),
        store_host=HOST,
    )
    base.update(kw)
    return Message(**base)  # type: ignore[arg-type]


def test_rollover_blank_and_independent_decode(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store = MessageStore.open(cfg)
    results = [store.append_message(msg(i, size=1000 + i)) for i in range(200)]
    assert all(r.ok for r in results)
    store.close()
    files = sorted(os.listdir(cfg.commit_log_dir))
    assert len(files) > 2
    assert files[1] == f"{64 * 1024:020d}"
    recs = decode_commitlog_dir(cfg.commit_log_dir, cfg.mapped_file_size_commit_log)
    assert len(recs) == 200
    per_queue: dict[int, int] = {}
    for i, (rec, res) in enumerate(zip(recs, results, strict=True)):
        assert res.result is not None
        assert rec["physical_offset"] == res.result.wrote_offset
        assert rec["total_size"] == res.result.wrote_bytes
        assert rec["body"] == bytes([i % 256]) * (1000 + i)
        assert rec["queue_id"] == i % 3
        assert rec["queue_offset"] == per_queue.get(i % 3, 0)
        per_queue[i % 3] = rec["queue_offset"] + 1
        assert rec["properties"]["KEYS"] == f"key{i}"
        assert rec["store_host"] == HOST and rec["born_host"] == ("10.1.2.3", 5555)
        assert res.result.msg_id == encode_offset_msg_id(HOST, rec["physical_offset"])
    # no record crosses a file boundary; each full file ends in a blank covering the rest
    for rec in recs:
        start = rec["physical_offset"]
        assert start // cfg.mapped_file_size_commit_log == (
            (start + rec["total_size"] + 8 - 1) // cfg.mapped_file_size_commit_log
        )


def test_limits(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mapped_file_size_commit_log=8 * 1024 * 1024)
    store = MessageStore.open(cfg)
    try:
        big = store.append_message(msg(1, size=4 * 1024 * 1024))
        assert big.status is PutMessageStatus.PUT_OK
        too_big = store.append_message(msg(1, size=4 * 1024 * 1024 + 1))
        assert too_big.status is PutMessageStatus.MESSAGE_ILLEGAL
        props = store.append_message(msg(2, properties={"X": "v" * 32767}))
        assert props.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
        topic = store.append_message(msg(3, topic="t" * 128))
        assert topic.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert store.append_message(msg(3, topic="t" * 127)).ok
        assert store.append_message(msg(3, topic="")).status is PutMessageStatus.MESSAGE_ILLEGAL
        # refused messages left nothing behind
        store.dispatch_all()
        assert store.get_max_offset_in_queue("T", 1) == 1
    finally:
        store.close()


def test_transaction_and_delay(tmp_path: Path) -> None:
    store = MessageStore.open(small_config(tmp_path))
    try:
        prepared = store.append_message(msg(0, sys_flag=SYSFLAG_TRANSACTION_PREPARED_TYPE))
        assert prepared.ok and prepared.result is not None
        assert prepared.result.logics_offset == 0
        commit = store.append_message(msg(0, sys_flag=SYSFLAG_TRANSACTION_COMMIT_TYPE))
        plain = store.append_message(msg(0))
        assert commit.result is not None and plain.result is not None
        assert (commit.result.logics_offset, plain.result.logics_offset) == (0, 1)
        delayed = store.append_message(
            msg(5, properties={"DELAY": "3", "TAGS": "x"}, queue_id=2)
        )
        assert delayed.ok and delayed.result is not None
        store.dispatch_all()
        assert store.get_max_offset_in_queue("T", 0) == 2  # prepared is not in the CQ
        rec = store.lookup_message_by_offset(delayed.result.wrote_offset)
        assert rec is not None
        assert rec.topic == SCHEDULE_TOPIC and rec.queue_id == 2
        assert rec.properties["REAL_TOPIC"] == "T" and rec.properties["REAL_QID"] == "2"
        units = read_cq_dir(str(tmp_path), SCHEDULE_TOPIC, 2)
        assert units == [(rec.commitlog_offset, rec.store_size, rec.store_timestamp + 10000)]
    finally:
        store.close()


def test_batch_append_one_pass(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store = MessageStore.open(cfg)
    try:
        store.append_message(msg(0, queue_id=1))
        items = [(i, bytes([i]) * 300, {"UNIQ_KEY": f"B{i}", "KEYS": f"bk{i}"}) for i in range(50)]
        batch = Message(
            topic="T", body=encode_batch(items), queue_id=1, properties={"CLUSTER": "c1"},
            store_host=HOST, born_timestamp=77,
        )
        res = store.append_messages(batch)
        assert res.ok and res.result is not None
        assert res.result.msg_num == 50 and res.result.logics_offset == 1
        ids = res.result.msg_id.split(",")
        assert len(ids) == 50
        # the whole batch lives in one file
        first, end = res.result.wrote_offset, res.result.end_offset
        size = cfg.mapped_file_size_commit_log
        assert first // size == (end - 1) // size
        store.dispatch_all()
        got = store.get_message("T", 1, 1, 100, max_bytes=1 << 20)
        recs = [decode_record(b) for b in got.buffers]
        got.release()
        assert [r.queue_offset for r in recs] == list(range(1, 51))
        assert [r.flag for r in recs] == list(range(50))
        assert recs[3].properties == {"UNIQ_KEY": "B3", "KEYS": "bk3", "CLUSTER": "c1"}
        assert all(r.born_timestamp == 77 for r in recs)
        assert store.look_message_by_msg_id(ids[7]) == recs[7]
        q = store.query_message("T", "bk9", 10, 0, 2**62)
        assert [decode_record(b).flag for b in q.buffers] == [9]
        q.copy_body()
        # bad bodies and forbidden kinds
        bad = store.append_messages(
            Message(topic="T", body=b"\x00\x00\x00\x05junk", store_host=HOST)
        )
        assert bad.status is PutMessageStatus.MESSAGE_ILLEGAL
        delayed = store.append_messages(
            Message(topic="T", body=encode_batch(items[:1]), properties={"DELAY": "1"})
        )
        assert delayed.status is PutMessageStatus.MESSAGE_ILLEGAL
        no_props: dict[str, str] = {}
        huge = [(0, b"x" * 30000, no_props), (0, b"y" * 40000, no_props)]
        assert store.append_messages(Message(topic="T", body=encode_batch(huge))).status is (
            PutMessageStatus.MESSAGE_ILLEGAL
        )
    finally:
        store.close()


def test_lock_file_refuses_second_open(tmp_path: Path) -> None:
    from rmq_cluster.store.message_store import StoreLockedError

    cfg = small_config(tmp_path)
    store = MessageStore.open(cfg)
    try:
        with pytest.raises(StoreLockedError, match="in use by another process"):
            MessageStore.open(cfg)
        assert (tmp_path / "lock").read_bytes()[:4] == b"lock"
        assert (tmp_path / "abort").exists()
    finally:
        store.close()
    assert not (tmp_path / "abort").exists()
    MessageStore.open(cfg).close()


def test_shutdown_and_slave_refuse(tmp_path: Path) -> None:
    from rmq_cluster.store.config import BrokerRole

    store = MessageStore.open(small_config(tmp_path, broker_role=BrokerRole.SLAVE))
    try:
        assert store.append_message(msg(0)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    finally:
        store.close()
    assert store.append_message(msg(0)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_batch_properties_join_both_forms(tmp_path: Path) -> None:
    """Items with Java-form, C++-form (trailing 0x02) and empty properties, plus header ones."""
    import struct

    def item(flag: int, body: bytes, props: bytes) -> bytes:
        total = 20 + len(body) + 2 + len(props)
        return struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + struct.pack(
            ">h", len(props)
        ) + props

    body = item(0, b"a", b"K\x01v") + item(1, b"b", b"K\x01w\x02") + item(2, b"c", b"")
    store = MessageStore.open(small_config(tmp_path))
    try:
        for extra in ({"CLUSTER": "c"}, {}):
            res = store.append_messages(
                Message(topic="T", body=body, store_host=HOST, properties=extra)
            )
            assert res.ok and res.result is not None
            recs = [store.lookup_message_by_offset(o) for o in res.result.offsets]
            assert [r.properties for r in recs if r is not None] == [
                {"K": "v", **extra}, {"K": "w", **extra}, dict(extra)
            ]
        store.close()
    finally:
        store.close()
    assert len(decode_commitlog_dir(small_config(tmp_path).commit_log_dir, 64 * 1024)) == 6


def test_bad_hosts_are_illegal_not_crashes(tmp_path: Path) -> None:
    store = MessageStore.open(small_config(tmp_path))
    try:
        bad = store.append_message(msg(0, store_host=("::1", 10911)))
        assert bad.status is PutMessageStatus.MESSAGE_ILLEGAL
        bad = store.append_message(msg(0, born_host=("10.0.0.1", 1 << 40)))
        assert bad.status is PutMessageStatus.MESSAGE_ILLEGAL
        batch = Message(topic="T", body=encode_batch([(0, b"x", {})]), store_host=("nope", 1))
        assert store.append_messages(batch).status is PutMessageStatus.MESSAGE_ILLEGAL
        ok = store.append_message(msg(0))
        assert ok.ok and ok.result is not None and ok.result.logics_offset == 0
    finally:
        store.close()
