"""Master/slave replication over real sockets between real stores in one trio loop: ASYNC and
SYNC masters with one and two slaves, across CommitLog file rollovers."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from rmq_cluster.cluster.protocol.message import decode_record
from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.config import BrokerRole
from rmq_cluster.store.message_store import GetMessageStatus
from tests.integration.ha.ha_testlib import (
    FILE_SIZE,
    MasterNode,
    SlaveNode,
    append_many,
    assert_commitlog_prefix,
    message,
)

TIMEOUT_S = 15


@pytest.mark.parametrize("role", [BrokerRole.ASYNC_MASTER, BrokerRole.SYNC_MASTER])
@pytest.mark.parametrize("n_slaves", [1, 2])
async def test_slaves_are_byte_identical_and_readable(
    tmp_path: Path, role: BrokerRole, n_slaves: int
) -> None:
    master = MasterNode(tmp_path / "m", role)
    slaves = [SlaveNode(tmp_path / f"s{i}") for i in range(n_slaves)]
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            for s in slaves:
                await s.start(n, master.addr)
            await master.h.wait_for_slaves(n_slaves)
            end = append_many(master.s, 0, 300)
            assert end > 3 * FILE_SIZE  # several rollovers
            for i in range(300, 340):  # through the put path (SYNC: waits for an ack)
                r = await master.s.put_message(message(i))
                assert r.status is PutMessageStatus.PUT_OK, r.status
            end = master.s.max_phys_offset
            for s in slaves:
                await s.wait_offset(end)
            await master.h.ack_watermark.wait_for(end)
            for s in slaves:
                s.s.dispatch_all()
                master.s.dispatch_all()  # the master's own reput may lag too
                got = s.s.get_message("T", 1, 0, 32)
                assert got.status is GetMessageStatus.FOUND
                assert got.message_count == 32
                rec = decode_record(got.buffers[3], check_crc=True)
                assert rec.topic == "T" and rec.queue_offset == 3
                got.release()
                for q in range(4):
                    assert s.s.get_max_offset_in_queue("T", q) == (
                        master.s.get_max_offset_in_queue("T", q))
            st = master.h.status()
            assert len(st.slaves) == n_slaves
            assert max(x.ack_offset for x in st.slaves) == end
            assert st.in_sync_slave_count == n_slaves
            for s in slaves:
                await s.stop()
            await master.stop()
    for s in slaves:
        assert assert_commitlog_prefix(master.cfg, s.cfg) >= 4
