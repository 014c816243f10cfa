"""SYNC_MASTER over real sockets: acks gate PUT_OK (puts wait on the ack watermark), shared acks,
SLAVE_NOT_AVAILABLE and FLUSH_SLAVE_TIMEOUT."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.config import BrokerRole
from tests.integration.ha.ha_testlib import (
    FakeSlave,
    MasterNode,
    SlaveNode,
    assert_commitlog_prefix,
    message,
)

TIMEOUT_S = 15
SYNC = BrokerRole.SYNC_MASTER


async def test_sync_put_without_slave_is_slave_not_available(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m", SYNC)
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            assert master.s.replicas is master.h  # attached by HAService.run
            r = await master.s.put_message(message(0))
            assert r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
            assert r.result is not None  # stored on the master all the same
            assert master.s.max_phys_offset == r.result.end_offset
            # WAIT=false puts do not wait for a slave
            r = await master.s.put_message(message(1, WAIT="false"))
            assert r.status is PutMessageStatus.PUT_OK
            await master.stop()


async def test_sync_put_ok_only_after_ack_two_slaves(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m", SYNC)
    slaves = [SlaveNode(tmp_path / "s1"), SlaveNode(tmp_path / "s2")]
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            for s in slaves:
                await s.start(n, master.addr)
            await master.h.wait_for_slaves(2)
            for i in range(200):
                r = await master.s.put_message(message(i))
                assert r.status is PutMessageStatus.PUT_OK, r.status
                assert r.result is not None
                # the put returned only once a slave had acked past its end
                assert master.h.table.push_to_slave_max_offset >= r.result.end_offset
            end = master.s.max_phys_offset
            for s in slaves:
                await s.wait_offset(end)
            st = master.h.status()
            assert len(st.slaves) == 2 and st.in_sync_slave_count == 2
            for s in slaves:
                await s.stop()
            await master.stop()
    for s in slaves:
        assert assert_commitlog_prefix(master.cfg, s.cfg) >= 2


async def test_group_transfer_256_concurrent_sync_puts(tmp_path: Path) -> None:
    """256 writers x 4 sequential SYNC puts: every put is PUT_OK with the ack past its end
    when it returns, and acks are shared (ack advances = group wakeups << puts)."""
    master = MasterNode(tmp_path / "m", SYNC)
    slave = SlaveNode(tmp_path / "s")
    results: list[tuple[PutMessageStatus, int, int]] = []
    writers, per_writer = 256, 4

    async def writer(w: int) -> None:
        for k in range(per_writer):
            r = await master.s.put_message(message(w * per_writer + k))
            assert r.result is not None
            results.append(
                (r.status, r.result.end_offset, master.h.table.push_to_slave_max_offset)
            )

    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            await slave.start(n, master.addr)
            await master.h.wait_for_slaves(1)
            advances_before = master.h.ack_advances
            async with trio.open_nursery() as puts:
                for w in range(writers):
                    puts.start_soon(writer, w)
            advances = master.h.ack_advances - advances_before
            assert master.h.waiting_puts == 0
            await slave.wait_offset(master.s.max_phys_offset)
            await slave.stop()
            await master.stop()
    assert len(results) == writers * per_writer
    assert all(status is PutMessageStatus.PUT_OK for status, _, _ in results)
    assert all(acked >= end for _, end, acked in results)
    assert 1 <= advances <= writers * per_writer // 16, advances
    assert_commitlog_prefix(master.cfg, slave.cfg)


async def test_pending_sync_puts_end_when_the_service_stops(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m", SYNC, slave_timeout_ms=60_000)
    statuses: list[PutMessageStatus] = []
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            fake = await FakeSlave.connect(master.port)
            await fake.report(0)
            await master.h.wait_for_slaves(1)

            async def put(i: int) -> None:
                statuses.append((await master.s.put_message(message(i))).status)

            async with trio.open_nursery() as puts:
                for i in range(10):
                    puts.start_soon(put, i)
                while master.h.waiting_puts < 10:
                    await trio.testing.wait_all_tasks_blocked()
                await master.stop()  # the HAService goes away: nobody will ack
            await fake.aclose()
    assert statuses == [PutMessageStatus.FLUSH_SLAVE_TIMEOUT] * 10


async def test_sync_put_times_out_when_slave_never_acks(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m", SYNC, slave_timeout_ms=300)
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            fake = await FakeSlave.connect(master.port)
            await fake.report(0)
            await master.h.wait_for_slaves(1)
            t0 = trio.current_time()
            r = await master.s.put_message(message(0))
            assert r.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
            assert 0.25 <= trio.current_time() - t0 < 3
            assert master.h.waiting_puts == 0
            # the slave finally acks: later puts at or below the ack need no wait
            assert r.result is not None
            await fake.report(r.result.end_offset)
            await master.h.ack_watermark.wait_for(r.result.end_offset)
            assert master.s.put_wait(r.result.end_offset) == (PutMessageStatus.PUT_OK, None)
            # the inline (no-task) form of the same decision
            assert master.h.sync_status_nowait(r.result.end_offset) is PutMessageStatus.PUT_OK
            assert master.h.sync_status_nowait(r.result.end_offset + 1) is None
            await fake.aclose()
            await master.stop()


async def test_slave_too_far_behind_is_slave_not_available(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m", SYNC, ha_slave_fallbehind_max=2000)
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            fake = await FakeSlave.connect(master.port)
            await fake.report(0)
            await master.h.wait_for_slaves(1)
            for i in range(5):  # > 2000 bytes beyond the slave's ack
                master.s.append_message(message(i))
            r = await master.s.put_message(message(99))
            assert r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
            assert r.result is not None
            assert master.h.sync_status_nowait(r.result.end_offset) is (
                PutMessageStatus.SLAVE_NOT_AVAILABLE)
            st = master.h.status()
            assert len(st.slaves) == 1 and not st.slaves[0].in_sync
            await fake.aclose()
            await master.stop()
