"""New files off the event loop, without weakening durability (issue 39 item 1).

* A SYNC_FLUSH answer never passes before the directory entry of the CommitLog file holding
  its record is fsynced (and its bytes msynced): checked over an event log of a run that rolls
  into new files, with each directory fsync slowed down to widen any race.
* The checkpoint's logicsMsgTimestamp never covers ConsumeQueue units whose segment's name is
  not durable yet.
* With the store's services running and no inline creations allowed, no ConsumeQueue segment
  is created on the event loop's thread (dispatch waits for a worker to make it), and every
  message is still dispatched, in order, readable after a restart.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio

import rmq_cluster.store.dispatcher as dispatcher_mod
import rmq_cluster.store.mapped_file as mapped_file_mod
from rmq_cluster.cluster.protocol.message import Message
from rmq_cluster.store import flush
from rmq_cluster.store.checkpoint import StoreCheckpoint
from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.config import FlushDiskType
from rmq_cluster.store.mapped_file import DirSyncLedger, MappedFile, make_dirs
from rmq_cluster.store.message_store import GetMessageStatus, MessageStore
from tests.unit.store.store_testlib import small_config

HOST = ("127.0.0.1", 10911)
SLOW_FSYNC_S = 0.01  # fault injection: each directory fsync takes this much longer


def msg(topic: str, queue_id: int, i: int) -> Message:
    return Message(topic=topic, body=b"x" * 700, queue_id=queue_id, store_host=HOST,
                   properties={"UNIQ_KEY": f"U{topic}{queue_id}-{i}"})


class SyncLog:
    """Wraps ``fsync_dir``: each call slowed down, then logged with the names that were in
    the directory when it started (what that fsync made durable)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.durable: set[str] = set()
        self.lock = threading.Lock()
        real = mapped_file_mod.fsync_dir

        def slow_fsync(directory: str) -> None:
            names = {os.path.join(directory, n) for n in os.listdir(directory)}
            time.sleep(SLOW_FSYNC_S)  # (a slow disk, in whatever thread calls it)
            real(directory)
            with self.lock:
                self.durable |= names

        monkeypatch.setattr(mapped_file_mod, "fsync_dir", slow_fsync)

    def is_durable(self, path: str) -> bool:
        with self.lock:
            return path in self.durable


async def test_a_sync_flush_answer_waits_for_its_files_directory_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs = SyncLog(monkeypatch)
    cfg = small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store = MessageStore.open(cfg)
    acked: list[int] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(flush.run, store)

            async def writer(w: int) -> None:
                for j in range(40):
                    res = await store.put_message(msg("T", w % 4, j))
                    assert res.status is PutMessageStatus.PUT_OK and res.result is not None
                    # the answer is out: the file holding the record must be durable by name
                    mf = store.commitlog.queue.find(res.result.end_offset - 1)
                    assert mf is not None
                    assert syncs.is_durable(mf.path), f"{mf.path} answered before its name"
                    acked.append(res.result.end_offset)

            with trio.fail_after(60):
                async with trio.open_nursery() as writers:
                    for w in range(8):
                        writers.start_soon(writer, w)
            nursery.cancel_scope.cancel()
        files = len(store.commitlog.queue.files)
    finally:
        store.close()
    assert len(acked) == 8 * 40
    assert files >= 4  # ~230 KB of records in 64 KiB files: the run rolled over


async def test_the_logics_checkpoint_waits_for_new_segments_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs = SyncLog(monkeypatch)
    cfg = small_config(tmp_path, flush_interval_consume_queue_ms=10)
    store = MessageStore.open(cfg)
    checked = 0
    real_flush = StoreCheckpoint.flush

    def checked_flush(cp: StoreCheckpoint) -> None:
        # every ConsumeQueue segment with a unit stored before the timestamp about to be
        # written must be durable by name (a unit of the same millisecond may be dispatched
        # after the flush's snapshot, into a segment made since: recovery re-dispatches from
        # 3 s before the checkpoint anyway)
        nonlocal checked
        for cq in list(store.cqs.queues.values()):
            for mf in list(cq.queue.files):
                if mf.wrote == 0 or mf.mm.closed:
                    continue
                phys, size, _tags = cq.get_unit(mf.file_from // 20) or (0, 0, 0)
                if size and store.commitlog.pickup_store_timestamp(phys, size) < (
                    cp.logics_msg_timestamp
                ):
                    assert syncs.is_durable(mf.path), f"checkpoint covers {mf.path}"
                    checked += 1
        real_flush(cp)

    monkeypatch.setattr(StoreCheckpoint, "flush", checked_flush)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(flush.run, store)
            with trio.fail_after(60):
                for i in range(300):  # 30 queues, 10 each: 30 new segments, some rollovers
                    assert (await store.put_message(msg("C", i % 30, i))).ok
                    if i % 50 == 0:
                        await trio.sleep(0.02)  # (let logics flushes interleave)
                while store.dispatch_behind_bytes:  # noqa: ASYNC110 - the reput task moves it
                    await trio.sleep(0.01)
                await store.flush_logics()
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    assert checked > 0


def _watch_loop_creations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ConsumeQueue files created on this (the event loop's) thread from now on."""
    loop_thread = threading.get_ident()
    created_on_loop: list[str] = []
    real_init = MappedFile.__init__

    def watching_init(self: MappedFile, path: str, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("create") and "consumequeue" in path and threading.get_ident() == (
            loop_thread
        ):
            created_on_loop.append(path)
        real_init(self, path, *args, **kwargs)

    monkeypatch.setattr(MappedFile, "__init__", watching_init)
    return created_on_loop


async def test_consume_queue_segments_are_made_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    created_on_loop = _watch_loop_creations(monkeypatch)
    # (no inline creations allowed: what is checked is the worker path itself)
    monkeypatch.setattr(dispatcher_mod, "INLINE_NEW_SEGMENTS_PER_WINDOW", 0)
    cfg = small_config(tmp_path)
    queues, rounds = 200, 3  # 64 units per segment: 200 new queues, then more segments
    store = MessageStore.open(cfg)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(flush.run, store)
            with trio.fail_after(60):
                for r in range(rounds):
                    for q in range(queues):
                        assert store.append_message(msg("W", q, r)).ok
                    await trio.lowlevel.checkpoint()
                # one queue through several segments (runs cut where a segment ends)
                for i in range(200):
                    assert store.append_message(msg("Long", 0, i)).ok
                while store.dispatch_behind_bytes:  # noqa: ASYNC110 - the reput task moves it
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert created_on_loop == []
        for q in (0, queues // 2, queues - 1):
            got = store.get_message("W", q, 0, 32)
            assert got.status is GetMessageStatus.FOUND and got.message_count == rounds
            got.release()
        assert store.get_max_offset_in_queue("Long", 0) == 200
    finally:
        store.close()
    store = MessageStore.open(cfg)  # a clean restart sees every unit
    try:
        assert store.get_max_offset_in_queue("W", queues - 1) == rounds
        got = store.get_message("Long", 0, 130, 32)
        assert got.status is GetMessageStatus.FOUND and got.queue_offsets[0] == 130
        got.release()
    finally:
        store.close()


def test_make_dirs_names_the_directories_whose_entries_changed(tmp_path: Path) -> None:
    assert make_dirs(str(tmp_path / "a" / "b" / "c")) == [
        str(tmp_path), str(tmp_path / "a"), str(tmp_path / "a" / "b")
    ]
    assert make_dirs(str(tmp_path / "a" / "b" / "c")) == []


def test_a_failed_directory_sync_stays_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = DirSyncLedger()
    ok, bad = str(tmp_path), str(tmp_path / "bad")
    os.mkdir(bad)
    ledger.add([ok, bad, str(tmp_path / "gone")])
    real = mapped_file_mod.fsync_dir

    def failing(directory: str) -> None:
        if directory == bad:
            raise OSError(5, "EIO")
        real(directory)

    monkeypatch.setattr(mapped_file_mod, "fsync_dir", failing)
    with pytest.raises(OSError):
        ledger.sync()
    assert ledger.pending == 2  # the failed one and the one after it
    monkeypatch.setattr(mapped_file_mod, "fsync_dir", real)
    assert ledger.sync() == 2  # (a directory gone meanwhile needs nothing)
    assert ledger.pending == 0


async def test_inline_segment_creations_are_bounded_per_window_not_per_dispatch_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a send load every pull (and, before, every offset query) calls dispatch when the
    reput is behind: a per-call allowance let those calls create 8 segments each on the event
    loop while a 1024-queue topic was primed (243 creations, ~13 ms each on a busy disk, in
    15 s). The allowance is per INLINE_SEGMENTS_WINDOW_MS of the store clock: with the clock
    standing still, 8 in all; the worker makes the rest."""
    created_on_loop = _watch_loop_creations(monkeypatch)
    queues = 256
    store = MessageStore.open(small_config(tmp_path), clock_ms=lambda: 1_700_000_000_000)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(flush.run, store)
            with trio.fail_after(60):
                while store.dispatcher.on_file_wanted is None:  # noqa: ASYNC110 - the reput task is up
                    await trio.sleep(0.001)
                for q in range(queues):
                    assert store.append_message(msg("W", q, 0)).ok
                    store.dispatch()  # a pull's own call, as the pull processor makes it
                    await trio.lowlevel.checkpoint()
                while store.dispatch_behind_bytes:  # noqa: ASYNC110 - the reput task moves it
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert len(created_on_loop) <= dispatcher_mod.INLINE_NEW_SEGMENTS_PER_WINDOW, (
            created_on_loop)
        for q in (0, queues // 2, queues - 1):
            assert store.get_max_offset_in_queue("W", q) == 1
    finally:
        store.close()
