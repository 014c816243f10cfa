"""Dispatch into ConsumeQueue and IndexFile, and every read a broker needs."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from rmq_cluster.cluster.protocol.message import Message, decode_record, tags_code
from rmq_cluster.store.message_store import GetMessageStatus, MessageStore
from tests.unit.store.store_testlib import (
    decode_commitlog_dir,
    java_hash,
    read_cq_dir,
    small_config,
)

HOST = ("127.0.0.1", 10911)


class FakeClock:
    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


def put(store: MessageStore, i: int, *, topic: str = "T", qid: int = 0, size: int = 200) -> int:
    res = store.append_message(
        Message(
            topic=topic, body=i.to_bytes(4, "big") * (size // 4), queue_id=qid,
            properties={"TAGS": f"tag{i % 3}", "KEYS": f"k{i} shared", "UNIQ_KEY": f"U{i}"},
            store_host=HOST,
        )
    )
    assert res.ok and res.result is not None
    return res.result.wrote_offset


def test_consume_queue_matches_commitlog(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    arrivals: list[tuple[str, int, int]] = []
    store = MessageStore.open(cfg, on_arrival=lambda t, q, o, _c, _s: arrivals.append((t, q, o)))
    try:
        for i in range(500):
            put(store, i, qid=i % 4, size=100 + i % 50)
        assert store.dispatch_behind_bytes > 0
        while store.dispatch():
            pass
        assert store.dispatch_behind_bytes == 0
    finally:
        store.close()
    recs = decode_commitlog_dir(cfg.commit_log_dir, cfg.mapped_file_size_commit_log)
    for q in range(4):
        units = read_cq_dir(str(tmp_path), "T", q)
        mine = [r for r in recs if r["queue_id"] == q]
        assert units == [
            (r["physical_offset"], r["total_size"], java_hash(r["properties"]["TAGS"]))
            for r in mine
        ]
        assert [r["queue_offset"] for r in mine] == list(range(len(mine)))
    assert len(os.listdir(tmp_path / "consumequeue" / "T" / "0")) > 1  # CQ rolled over
    assert arrivals[:2] == [("T", 0, 1), ("T", 1, 1)] and len(arrivals) == 500


def test_get_message_statuses_and_filter(tmp_path: Path) -> None:
    store = MessageStore.open(small_config(tmp_path))
    try:
        for i in range(100):
            put(store, i)
        store.dispatch_all()
        r = store.get_message("T", 0, 0, 10)
        assert r.status is GetMessageStatus.FOUND and r.message_count == 10
        assert (r.next_begin_offset, r.min_offset, r.max_offset) == (10, 0, 100)
        assert [decode_record(b).queue_offset for b in r.buffers] == list(range(10))
        r.release()
        r = store.get_message("T", 0, 95, 32)
        assert r.message_count == 5 and r.next_begin_offset == 100
        r.release()
        # max_bytes: records of 328 bytes -> 3 fit in 1000 bytes
        r = store.get_message("T", 0, 0, 32, max_bytes=1000)
        assert r.message_count == 3 and r.next_begin_offset == 3
        r.release()
        code1 = tags_code("tag1")
        r = store.get_message("T", 0, 0, 5, message_filter=lambda c: c == code1)
        assert [decode_record(b).queue_offset for b in r.buffers] == [1, 4, 7, 10, 13]
        assert r.next_begin_offset == 14
        r.release()
        r = store.get_message("T", 0, 0, 5, message_filter=lambda c: False)
        assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE and r.next_begin_offset == 64
        assert store.get_message("T", 0, 100, 5).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        bad = store.get_message("T", 0, 150, 5)
        assert bad.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and bad.next_begin_offset == 100
        assert store.get_message("T", 9, 0, 5).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.get_min_offset_in_queue("T", 0) == 0
        assert store.get_max_offset_in_queue("T", 0) == 100
        assert store.get_max_offset_in_queue("nope", 0) == 0
    finally:
        store.close()


def test_times_ids_and_index(tmp_path: Path) -> None:
    clock = FakeClock()
    store = MessageStore.open(small_config(tmp_path), clock_ms=clock)
    try:
        offsets = []
        for i in range(300):
            clock.now += 1000
            offsets.append(put(store, i, size=40))
        store.dispatch_all()
        t0 = FakeClock().now
        assert store.get_earliest_message_time() == t0 + 1000
        assert store.get_earliest_message_time("T", 0) == t0 + 1000
        # RocketMQ's rule: an exact store time, else the nearer neighbour (the older on a
        # tie); past the last message the last one (max - 1)
        assert store.get_offset_in_queue_by_time("T", 0, t0 + 51_000) == 50
        assert store.get_offset_in_queue_by_time("T", 0, t0 + 50_500) == 49
        assert store.get_offset_in_queue_by_time("T", 0, t0 + 50_600) == 50
        assert store.get_offset_in_queue_by_time("T", 0, t0 + 50_400) == 49
        assert store.get_offset_in_queue_by_time("T", 0, 0) == 0
        assert store.get_offset_in_queue_by_time("T", 0, t0 + 10**9) == 299
        assert store.get_message_store_timestamp("T", 0, 7) == t0 + 8000
        assert store.get_commitlog_offset_in_queue("T", 0, 7) == offsets[7]
        rec = store.lookup_message_by_offset(offsets[42])
        assert rec is not None and rec.properties["UNIQ_KEY"] == "U42"
        assert store.look_message_by_msg_id(rec.msg_id) == rec
        assert store.look_message_by_msg_id("zz") is None
        # many small index files (256 entries, 3 keys a message)
        assert len(os.listdir(tmp_path / "index")) >= 3
        for i in (0, 1, 150, 299):
            q = store.query_message("T", f"k{i}", 32, 0, 2**62)
            assert [decode_record(b).queue_offset for b in q.buffers] == [i]
            q.copy_body()
            q = store.query_message("T", f"U{i}", 32, 0, 2**62)
            assert len(q.buffers) == 1
            q.copy_body()
        q = store.query_message("T", "shared", 1000, 0, 2**62)
        assert len(q.buffers) == 64  # capped like maxMsgsNumBatch
        q.copy_body()
        # time range: only messages stored inside it
        q = store.query_message("T", "shared", 64, t0 + 100_000, t0 + 110_000)
        got = sorted(decode_record(b).queue_offset for b in q.buffers)
        q.copy_body()
        assert got == list(range(99, 110))
        assert store.query_message("Other", "k1", 10, 0, 2**62).buffers == []
    finally:
        store.close()


def test_read_raw_never_crosses_files(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store = MessageStore.open(cfg)
    try:
        for i in range(400):
            put(store, i)
        size = cfg.mapped_file_size_commit_log
        view = store.read_raw(size - 100, 1 << 20)
        assert view is not None and len(view) == 100
        view.release()
        chunks = []
        pos = 0
        for _ in itertools.count():
            v = store.read_raw(pos, 5000)
            if v is None or len(v) == 0:
                break
            chunks.append(bytes(v))
            v.release()
            pos += len(chunks[-1])
        assert pos == store.max_phys_offset
    finally:
        store.close()


def test_removed_files_statuses(tmp_path: Path) -> None:
    """Between deleting CommitLog/CQ files and correcting min offsets, pulls answer
    MESSAGE_WAS_REMOVING / OFFSET_FOUND_NULL and point past the hole."""
    cfg = small_config(tmp_path)
    per_cq_file = cfg.cq_file_size // 20
    store = MessageStore.open(cfg)
    try:
        for i in range(400):
            put(store, i)
        store.dispatch_all()
        store.flush_commitlog_sync()
        store.commitlog.queue.delete_first_files(1)  # CQ not corrected yet
        r = store.get_message("T", 0, 0, 4)
        assert r.status is GetMessageStatus.MESSAGE_WAS_REMOVING
        assert r.next_begin_offset == per_cq_file  # skipped to the end of the segment
        offset = r.next_begin_offset
        while (r := store.get_message("T", 0, offset, 4)).status is not GetMessageStatus.FOUND:
            assert r.status is GetMessageStatus.MESSAGE_WAS_REMOVING
            offset = r.next_begin_offset
        first = decode_record(r.buffers[0])
        r.release()
        assert first.commitlog_offset >= store.min_phys_offset
        cq = store.cqs.find("T", 0)
        assert cq is not None
        cq.queue.delete_first_files(1)  # CQ segment gone, min offset not corrected
        r = store.get_message("T", 0, 0, 4)
        assert r.status is GetMessageStatus.OFFSET_FOUND_NULL
        assert r.next_begin_offset == per_cq_file
        cq.correct_min_offset(store.min_phys_offset)
        r = store.get_message("T", 0, 0, 4)
        assert r.status is GetMessageStatus.OFFSET_TOO_SMALL
        assert r.next_begin_offset == first.queue_offset
    finally:
        store.close()


def test_config_from_properties() -> None:
    from rmq_cluster.cluster.config import load_config
    from rmq_cluster.store.config import FlushDiskType, MessageStoreConfig

    loaded = load_config(
        MessageStoreConfig,
        {
            "storePathRootDir": "/data/store",
            "mappedFileSizeCommitLog": "1048576",
            "flushDiskType": "SYNC_FLUSH",
            "deleteWhen": "04;05",
            "diskMaxUsedSpaceRatio": "80",
            "brokerName": "broker-a",
        },
    )
    cfg = loaded.config
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.mapped_file_size_commit_log == 1048576
    assert cfg.commit_log_dir == "/data/store/commitlog"
    assert cfg.delete_when == "04;05" and cfg.disk_max_used_space_ratio == 80
    assert loaded.unknown == {"brokerName": "broker-a"}
    d = MessageStoreConfig()
    assert (d.mapped_file_size_commit_log, d.mapped_file_size_consume_queue) == (1 << 30, 6_000_000)
    assert (d.flush_interval_commit_log_ms, d.flush_commit_log_least_pages) == (500, 4)
    assert (d.sync_flush_timeout_ms, d.max_message_size) == (5000, 4 * 1024 * 1024)
    assert (d.file_reserved_time_hours, d.delete_when) == (72, "04")
    assert d.disk_max_used_space_ratio == 75
    assert (d.max_hash_slot_num, d.max_index_num) == (5_000_000, 20_000_000)


def test_at_queue_end_is_a_read_that_would_answer_overflow_one(tmp_path: Path) -> None:
    """``at_queue_end`` (a caught-up long-polling pull parks on it without a read) says yes
    exactly where ``get_message`` answers OFFSET_OVERFLOW_ONE, and counts the miss as it does."""
    store = MessageStore.open(small_config(tmp_path))
    try:
        for i in range(6):
            put(store, i, qid=i % 2)
        while store.dispatch():
            pass
        for topic, qid, offset in itertools.product(("T", "none"), range(4), range(-1, 6)):
            misses = store.get_miss_times
            quick = store.at_queue_end(topic, qid, offset)
            assert store.get_miss_times == misses + quick
            result = store.get_message(topic, qid, offset, 32)
            result.release()
            assert quick == (result.status is GetMessageStatus.OFFSET_OVERFLOW_ONE), (
                topic, qid, offset, result.status)
            assert quick == (topic == "T" and qid < 2 and offset == 3)
    finally:
        store.close()
