"""Retention by age, hour and disk use; a full disk refuses writes but keeps reads."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rmq_cluster.cluster.protocol.message import Message, decode_record
from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.message_store import GetMessageStatus, MessageStore
from rmq_cluster.store.retention import is_delete_hour
from tests.unit.store.store_testlib import decode_commitlog_dir, small_config

HOST = ("127.0.0.1", 10911)
HOUR_MS = 3600 * 1000


class Disk:
    """An injectable free-space probe."""

    def __init__(self) -> None:
        self.ratio = 0.10

    def __call__(self, _path: str) -> float:
        return self.ratio


def put(store: MessageStore, i: int) -> PutMessageStatus:
    return store.append_message(
        Message(topic="T", body=bytes([i % 200 + 1]) * 2000, store_host=HOST,
                properties={"KEYS": f"k{i}"})
    ).status


def test_disk_full_refuses_writes_keeps_reads(tmp_path: Path) -> None:
    disk = Disk()
    cfg = small_config(tmp_path)
    store = MessageStore.open(cfg, disk_usage=disk)
    try:
        for i in range(50):
            assert put(store, i) is PutMessageStatus.PUT_OK
        store.dispatch_all()
        disk.ratio = 0.93
        store.check_disk_space()
        before = store.max_phys_offset
        for _ in range(10):
            res = store.append_message(Message(topic="T", body=b"z", store_host=HOST))
            assert res.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
            assert "disk is full" in res.remark
        assert store.max_phys_offset == before
        got = store.get_message("T", 0, 0, 100, max_bytes=1 << 20)
        assert got.status is GetMessageStatus.FOUND and got.message_count == 50
        got.release()
        disk.ratio = 0.80
        store.check_disk_space()
        assert put(store, 99) is PutMessageStatus.PUT_OK
    finally:
        store.close()
    recs = decode_commitlog_dir(cfg.commit_log_dir, cfg.mapped_file_size_commit_log)
    assert len(recs) == 51  # nothing corrupted, nothing half-written


def test_file_creation_failure_is_a_status(tmp_path: Path) -> None:
    store = MessageStore.open(small_config(tmp_path))
    try:
        assert put(store, 0) is PutMessageStatus.PUT_OK
        os.chmod(store.config.commit_log_dir, 0o500)
        try:
            statuses = {put(store, i) for i in range(1, 60)}
        finally:
            os.chmod(store.config.commit_log_dir, 0o755)
        if os.geteuid() != 0:  # root ignores directory permissions
            assert PutMessageStatus.CREATE_MAPEDFILE_FAILED in statuses
        assert put(store, 100) is PutMessageStatus.PUT_OK
    finally:
        store.close()


def test_retention_deletes_expired_files_and_queues(tmp_path: Path) -> None:
    disk = Disk()
    cfg = small_config(tmp_path, delete_when="04", file_reserved_time_hours=72)
    store = MessageStore.open(cfg, disk_usage=disk)
    try:
        for i in range(300):
            put(store, i)
        store.dispatch_all()
        store.flush_commitlog_sync()
        files = len(store.commitlog.queue.files)
        assert files > 5
        now = int(time.time() * 1000)
        # files are fresh: nothing expires, whatever the hour
        assert store.clean_once(now).commitlog_files_deleted == 0
        # 73 h later, but not at 04:00 and the disk is not full: kept
        later = now + 73 * HOUR_MS
        while time.localtime(later / 1000).tm_hour == 4:
            later += HOUR_MS
        assert store.clean_once(later).commitlog_files_deleted == 0
        # over diskMaxUsedSpaceRatio: expired files go, at most 10 a round, never the last
        disk.ratio = 0.80
        res = store.clean_once(later)
        assert res.commitlog_files_deleted == min(10, files - 1)
        while store.clean_once(later).commitlog_files_deleted:
            pass
        assert len(store.commitlog.queue.files) == 1
        cl_min = store.min_phys_offset
        assert cl_min > 0
        # the queue's min offset follows; old offsets answer OFFSET_TOO_SMALL
        min_q = store.get_min_offset_in_queue("T", 0)
        assert min_q > 0
        r = store.get_message("T", 0, 0, 10)
        assert r.status is GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == min_q
        r = store.get_message("T", 0, min_q, 10)
        assert r.status is GetMessageStatus.FOUND
        assert decode_record(r.buffers[0]).commitlog_offset >= cl_min
        r.release()
        # index and CQ segments below the min offset are gone too
        assert store.query_message("T", "k0", 10, 0, 2**62).buffers == []
    finally:
        store.close()
    # and it all reopens
    store = MessageStore.open(cfg, disk_usage=disk)
    try:
        assert store.get_min_offset_in_queue("T", 0) == min_q
        assert store.get_max_offset_in_queue("T", 0) == 300
        assert put(store, 1000) is PutMessageStatus.PUT_OK
    finally:
        store.close()


def test_forced_clean_ignores_age(tmp_path: Path) -> None:
    disk = Disk()
    store = MessageStore.open(small_config(tmp_path), disk_usage=disk)
    try:
        for i in range(100):
            put(store, i)
        store.dispatch_all()
        store.flush_commitlog_sync()
        disk.ratio = 0.88  # above diskSpaceCleanForciblyRatio, below the warning level
        res = store.clean_once()
        assert res.commitlog_files_deleted > 0 and not res.disk_full
        assert put(store, 1) is PutMessageStatus.PUT_OK
    finally:
        store.close()


def test_delete_when() -> None:
    assert is_delete_hour("04", 4) and not is_delete_hour("04", 5)
    assert is_delete_hour("04;05", 5)
