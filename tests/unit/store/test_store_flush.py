"""The Trio shell: group commit, flush timeouts, async flush, prompt dispatch, replica hook."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

import rmq_cluster.store.message_store as message_store_mod
from rmq_cluster.cluster.protocol.message import Message
from rmq_cluster.store import flush
from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.config import FlushDiskType
from rmq_cluster.store.mapped_file import FlushPlan
from rmq_cluster.store.message_store import MessageStore
from tests.unit.store.store_testlib import small_config

HOST = ("127.0.0.1", 10911)


def m(i: int, **props: str) -> Message:
    return Message(topic="T", body=b"x" * 1024, queue_id=i % 4, store_host=HOST,
                   properties={"UNIQ_KEY": f"U{i}", **props})


async def test_sync_flush_group_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fsyncs = 0
    real = message_store_mod.run_flush_plan

    def counting(plan: FlushPlan) -> None:
        nonlocal fsyncs
        fsyncs += 1
        real(plan)

    monkeypatch.setattr(message_store_mod, "run_flush_plan", counting)
    cfg = small_config(tmp_path, mapped_file_size_commit_log=1 << 20,
                       flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store = MessageStore.open(cfg)
    results: list[PutMessageStatus] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(flush.run, store)

            async def writer(w: int) -> None:
                for j in range(20):
                    res = await store.put_message(m(w * 100 + j))
                    results.append(res.status)
                    # PUT_OK under SYNC_FLUSH means flushed
                    assert res.result is not None
                    assert store.flushed_offset >= res.result.end_offset

            with trio.fail_after(30):
                async with trio.open_nursery() as writers:
                    for w in range(64):
                        writers.start_soon(writer, w)
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    assert results == [PutMessageStatus.PUT_OK] * 64 * 20
    assert 0 < fsyncs < len(results) // 8, f"{fsyncs} fsyncs for {len(results)} puts"


async def test_sync_flush_timeout(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    cfg = small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store = MessageStore.open(cfg)
    try:
        # no flush service is running: the wait runs out after syncFlushTimeout
        start = trio.current_time()
        res = await store.put_message(m(1))
        assert res.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert res.status.stored and res.result is not None
        assert trio.current_time() - start == pytest.approx(5.0)
        # WAIT=false does not wait for the disk
        res = await store.put_message(m(2, WAIT="false"))
        assert res.status is PutMessageStatus.PUT_OK
    finally:
        store.close()


async def test_async_flush_and_prompt_dispatch(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, flush_interval_commit_log_ms=10)
    arrived = trio.Event()
    last: list[int] = []

    def on_arrival(topic: str, qid: int, next_offset: int, _code: int, _ts: int) -> None:
        last.append(next_offset)
        if qid == 3 and next_offset == 25:
            arrived.set()

    store = MessageStore.open(cfg, on_arrival=on_arrival)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(flush.run, store)
            for i in range(100):
                res = await store.put_message(m(i))
                assert res.status is PutMessageStatus.PUT_OK
            with trio.fail_after(10):
                await arrived.wait()
                # ASYNC_FLUSH: the flusher catches up in the background (>= 4 dirty pages)
                await store.flush_watermark.wait_for(store.max_phys_offset)
            assert store.dispatch_behind_bytes == 0
            nursery.cancel_scope.cancel()
    finally:
        store.close()


class _Replicas:
    """A replica gate (what the HA service is to a SYNC_MASTER store): always wait."""

    def __init__(self) -> None:
        self.ack_watermark = flush.Watermark(0, timeout_s=0.2)
        self.asked: list[int] = []

    def sync_status_nowait(self, end_offset: int) -> PutMessageStatus | None:
        self.asked.append(end_offset)
        return None


async def test_a_put_waits_on_the_replicas_ack_watermark(tmp_path: Path) -> None:
    """Attached replicas: a put returns PUT_OK once their ack watermark passes its end, or
    FLUSH_SLAVE_TIMEOUT when it does not within its timeout (its sweeper expires it)."""
    store = MessageStore.open(small_config(tmp_path))
    gate = _Replicas()
    store.attach_replicas(gate)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gate.ack_watermark.run)

            async def ack_soon() -> None:
                while not gate.asked:
                    await trio.testing.wait_all_tasks_blocked()
                gate.ack_watermark.advance(gate.asked[0])

            nursery.start_soon(ack_soon)
            with trio.fail_after(5):
                res = await store.put_message(m(1))
            assert res.status is PutMessageStatus.PUT_OK
            assert res.result is not None and gate.asked == [res.result.end_offset]
            with trio.fail_after(5):
                res = await store.put_message(m(2))
            assert res.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_watermark_wakes_all_waiters_at_once() -> None:
    mark = flush.Watermark(0)
    woke: list[int] = []

    async def waiter(target: int) -> None:
        await mark.wait_for(target)
        woke.append(target)

    async with trio.open_nursery() as nursery:
        for t in (10, 20, 30, 40):
            nursery.start_soon(waiter, t)
        await trio.testing.wait_all_tasks_blocked()
        mark.advance(25)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(woke) == [10, 20]
        mark.advance(40)
    assert sorted(woke) == [10, 20, 30, 40]


async def test_next_file_is_preallocated_off_the_loop(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store = MessageStore.open(cfg)
    try:
        assert store.append_message(m(0)).ok
        queue = store.commitlog.queue
        start = queue.next_file_start()
        assert start == cfg.mapped_file_size_commit_log
        await trio.to_thread.run_sync(queue.preallocate, start)
        assert queue.next_file_start() is None  # prepared
        prepared = queue._prepared
        while len(queue.files) < 2:
            assert store.append_message(m(1)).ok
        assert queue.files[1] is prepared
        assert queue.next_file_start() == 2 * cfg.mapped_file_size_commit_log
        # with the services running, each new file in use triggers the next preallocation
        size = cfg.mapped_file_size_commit_log
        async with trio.open_nursery() as nursery:
            await nursery.start(flush.run, store)
            with trio.fail_after(10):
                await store.preallocated.wait_for(2 * size)
                while len(queue.files) < 3:
                    assert (await store.put_message(m(3))).ok
                await store.preallocated.wait_for(3 * size)
            assert queue.next_file_start() is None
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    # a prepared-but-unused file is removed on close, and a reopen is clean
    store = MessageStore.open(cfg)
    try:
        assert len(store.commitlog.queue.files) == 3
        assert store.append_message(m(2)).ok
    finally:
        store.close()


async def test_reput_service_waits_for_rest_of_record(tmp_path: Path) -> None:
    """A slave gets half a record, then the rest: the reput task dispatches it promptly."""
    from rmq_cluster.store.config import BrokerRole

    master = MessageStore.open(small_config(tmp_path / "m"))
    arrived = trio.Event()
    slave = MessageStore.open(
        small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE),
        on_arrival=lambda *_a: arrived.set(),
    )
    try:
        assert master.append_message(m(0)).ok
        raw = master.read_raw(0, 1 << 20)
        assert raw is not None
        data = bytes(raw)
        raw.release()
        async with trio.open_nursery() as nursery:
            await nursery.start(flush.run, slave)
            slave.append_raw(0, data[:100])
            await trio.testing.wait_all_tasks_blocked()
            assert not arrived.is_set() and slave.dispatch_behind_bytes == 100
            slave.append_raw(100, data[100:])
            with trio.fail_after(5):
                await arrived.wait()
            assert slave.get_max_offset_in_queue("T", 0) == 1
            # an HA writer can wait for bytes beyond what it has sent
            with trio.move_on_after(0.05) as scope:
                await slave.wait_appended_beyond(len(data))
            assert scope.cancelled_caught
            nursery.cancel_scope.cancel()
    finally:
        master.close()
        slave.close()


def test_pure_modules_do_not_import_trio() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import rmq_cluster.cluster.protocol.message, rmq_cluster.store.mapped_file, "
        "rmq_cluster.store.commitlog, rmq_cluster.store.consume_queue, "
        "rmq_cluster.store.index_file, rmq_cluster.store.checkpoint, "
        "rmq_cluster.store.dispatcher, rmq_cluster.store.recovery, "
        "rmq_cluster.store.retention, rmq_cluster.store.config\n"
        "assert 'trio' not in sys.modules, 'a pure module imported trio'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
