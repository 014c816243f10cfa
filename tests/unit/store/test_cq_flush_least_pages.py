"""ConsumeQueue flushing as RocketMQ's FlushConsumeQueueService does it: every
``flushIntervalConsumeQueue`` only the queues with ``flushConsumeQueueLeastPages`` new pages,
every ``flushConsumeQueueThoroughInterval`` all of them, and only then does the checkpoint's
``logicsMsgTimestamp`` move. (Flushing every queue every second write-protected each page it
wrote back: with 1024 queues, the next unit of each took a page fault on the event loop.)"""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from rmq_cluster.store import flush
from rmq_cluster.store.message_store import MessageStore
from tests.unit.store.store_testlib import small_config
from tests.unit.store.test_store_reads import FakeClock, put

QUEUES = 50


def test_queues_with_few_new_units_wait_for_the_thorough_flush(tmp_path: Path) -> None:
    clock = FakeClock()
    cfg = small_config(tmp_path, mapped_file_size_consume_queue=20 * 3000,
                       mapped_file_size_commit_log=1024 * 1024,
                       flush_consume_queue_thorough_interval_ms=10_000)
    store = MessageStore.open(cfg, clock_ms=clock)
    assert store.checkpoint is not None
    assert cfg.flush_consume_queue_least_pages == 2
    assert cfg.flush_interval_consume_queue_ms == 1000

    def flushed(q: int) -> int:
        cq = store.cqs.find("T", q)
        assert cq is not None
        return cq.queue.flushed_where

    done: list[int] = []  # each finished flush's least pages
    real_flush = store.flush_logics

    async def counted(*least_pages: int) -> None:
        await real_flush(*least_pages)
        done.append(least_pages[0] if least_pages else 0)

    store.flush_logics = counted  # type: ignore[method-assign]

    async def flushes(n: int) -> None:
        target = len(done) + n
        with trio.fail_after(100):  # (mock seconds)
            while len(done) < target:  # noqa: ASYNC110 - the service's worker thread
                await trio.sleep(0.5)

    async def main() -> None:
        for q in range(QUEUES):
            clock.now += 1
            put(store, q, qid=q, size=40)
        store.dispatch_all()
        before = store.checkpoint.logics_msg_timestamp
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flush.logics_flush_service, store)
            await flushes(5)
            assert done == [2] * 5
            assert [flushed(q) for q in range(QUEUES)] == [0] * QUEUES
            assert store.checkpoint.logics_msg_timestamp == before
            for i in range(450):  # queue 0: 451 units, 9020 bytes: two pages past 0
                clock.now += 1
                put(store, i, qid=0, size=40)
            store.dispatch_all()
            await flushes(1)
            assert flushed(0) == 451 * 20
            assert [flushed(q) for q in range(1, QUEUES)] == [0] * (QUEUES - 1)
            assert store.checkpoint.logics_msg_timestamp == before
            while 0 not in done:  # the thorough flush, 10 s after the start
                await flushes(1)
            assert done.index(0) >= 6
            assert [flushed(q) for q in range(1, QUEUES)] == [20] * (QUEUES - 1)
            assert store.checkpoint.logics_msg_timestamp == clock.now
            nursery.cancel_scope.cancel()

    try:
        # (the clock jumps once the flush's worker thread is back, not while it runs)
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.05))
    finally:
        store.close()
