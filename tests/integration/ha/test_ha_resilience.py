"""Slave and master restarts, re-pointing, a new empty slave, heartbeats, housekeeping, a slave
ahead of its master, and promotion of a slave's store to master."""

from __future__ import annotations

from pathlib import Path

import trio

from rmq_cluster.ha.protocol import FRAME_HEADER_SIZE_BYTES
from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.config import BrokerRole
from rmq_cluster.store.message_store import GetMessageStatus, MessageStore
from tests.integration.ha.ha_testlib import (
    FILE_SIZE,
    FakeSlave,
    MasterNode,
    SlaveNode,
    append_many,
    assert_commitlog_prefix,
    message,
    store_config,
)

TIMEOUT_S = 15


async def test_slave_restart_resumes_at_its_offset(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m")
    slave = SlaveNode(tmp_path / "s")
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            await slave.start(n, master.addr)
            await master.h.wait_for_slaves(1)
            mid = append_many(master.s, 0, 100)
            await slave.wait_offset(mid)
            await slave.stop()
            end = append_many(master.s, 100, 150)  # written while the slave is down
            assert end > mid + FILE_SIZE
            await slave.start(n, master.addr)
            await slave.wait_offset(end)
            # resumed where it stopped, not from 0 (the old connection may still be closing)
            assert mid in {c.requested_offset for c in master.h.connections.values()}
            slave.s.dispatch_all()
            master.s.dispatch_all()  # the master's own reput may lag too
            assert slave.s.get_max_offset_in_queue("T", 2) == master.s.get_max_offset_in_queue(
                "T", 2)
            await slave.stop()
            await master.stop()
    assert assert_commitlog_prefix(master.cfg, slave.cfg) >= 3


async def test_master_restart_slave_reconnects_and_continues(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m", BrokerRole.SYNC_MASTER)
    slave = SlaveNode(tmp_path / "s")
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            await slave.start(n, master.addr)
            await master.h.wait_for_slaves(1)
            for i in range(50):
                assert (await master.s.put_message(message(i))).status is PutMessageStatus.PUT_OK
            await master.stop()
            port = master.port
            await master.start(n)  # same directory, same port
            assert master.port == port
            await master.h.wait_for_slaves(1)
            assert slave.c.connects == 2
            for i in range(50, 150):
                assert (await master.s.put_message(message(i))).status is PutMessageStatus.PUT_OK
            await slave.wait_offset(master.s.max_phys_offset)
            await slave.stop()
            await master.stop()
    assert assert_commitlog_prefix(master.cfg, slave.cfg) >= 2


async def test_new_empty_slave_starts_at_masters_last_file(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m")
    slave = SlaveNode(tmp_path / "s")
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            end = append_many(master.s, 0, 200)
            last_file = end - end % FILE_SIZE
            assert last_file >= 2 * FILE_SIZE
            await slave.start(n, master.addr)
            await master.h.wait_for_slaves(1)
            (conn,) = master.h.connections.values()
            assert conn.requested_offset == 0
            end = append_many(master.s, 200, 100)
            await slave.wait_offset(end)
            assert slave.s.min_phys_offset == last_file
            # the slave dispatches from its first file: the queues' tails are readable
            slave.s.dispatch_all()
            master.s.dispatch_all()  # the master's own reput may lag too
            assert slave.s.dispatch_behind_bytes == 0
            for q in range(4):
                last = master.s.get_max_offset_in_queue("T", q) - 1
                assert slave.s.get_max_offset_in_queue("T", q) == last + 1
                got = slave.s.get_message("T", q, last, 1)
                assert got.status is GetMessageStatus.FOUND, got.status
                got.release()
            await slave.stop()
            await master.stop()
    assert assert_commitlog_prefix(master.cfg, slave.cfg, from_offset=last_file) >= 1


async def test_slave_is_repointed_at_a_new_master_address(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m")
    slave = SlaveNode(tmp_path / "s")
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            await slave.start(n, None)  # no address yet: waits
            end = 0
            assert not slave.c.connected
            # a dead address first (nothing listens on it), then the real one
            dead = trio.socket.socket()
            await dead.bind(("127.0.0.1", 0))
            slave.h.update_master_address(f"127.0.0.1:{dead.getsockname()[1]}")
            dead.close()
            slave.h.update_master_address(master.addr)  # REGISTER_BROKER's haServerAddr
            await master.h.wait_for_slaves(1)
            end = append_many(master.s, 0, 40)
            await slave.wait_offset(end)
            await master.h.ack_watermark.wait_for(end)
            st = slave.h.status()
            assert st.client is not None and st.client.master_address == master.addr
            assert st.client.connected and st.client.max_offset == end
            info = slave.h.runtime_info()
            assert info["haMasterAddress"] == master.addr and info["haClientConnected"] == "true"
            minfo = master.h.runtime_info()
            assert minfo["haConnectionCount"] == "1" and minfo["slaveFallBehindMuch"] == "0"
            assert master.h.status().to_json()["haConnectionInfo"][0]["slaveAckOffset"] == end
            # a registration without a live master (None) keeps the current connection
            slave.h.update_master_address(None)
            end = append_many(master.s, 40, 10)
            await slave.wait_offset(end)
            assert slave.c.connected and slave.c.connects == 1
            await slave.stop()
            await master.stop()


async def test_master_heartbeats_and_housekeeping(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m", ha_send_heartbeat_interval_ms=100,
                        ha_housekeeping_interval_ms=500)
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            end = append_many(master.s, 0, 5)
            fake = await FakeSlave.connect(master.port)
            await fake.report(end)
            frames = await fake.next_frames()  # idle: a heartbeat at the slave's offset
            assert frames[0].offset == end and frames[0].is_heartbeat
            assert len(fake.decoder.feed(b"")) == 0 and FRAME_HEADER_SIZE_BYTES == 12
            # silent for longer than haHousekeepingInterval: the master closes the connection
            t0 = trio.current_time()
            await fake.wait_closed()
            assert trio.current_time() - t0 >= 0.3
            await master.h.wait_for_slaves(0)
            assert master.h.status().slaves == ()
            await fake.aclose()
            await master.stop()


async def test_slave_ahead_of_master_is_closed(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m")
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            append_many(master.s, 0, 5)
            fake = await FakeSlave.connect(master.port)
            await fake.report(10 * FILE_SIZE)
            await fake.wait_closed()
            await fake.aclose()
            await master.stop()


async def test_diverged_slave_drops_the_connection(tmp_path: Path) -> None:
    """A slave whose offset differs from the frames' drops and retries (4.x never truncates)."""
    master = MasterNode(tmp_path / "m")
    slave = SlaveNode(tmp_path / "s")
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            append_many(master.s, 0, 10)
            # a raw slave-side check: feed a frame at a foreign offset through a fake master
            listener = trio.socket.socket()
            await listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            await slave.start(n, f"127.0.0.1:{listener.getsockname()[1]}")
            conn, _ = await listener.accept()
            first = await conn.recv(8)
            assert int.from_bytes(first, "big") == 0
            from rmq_cluster.ha.protocol import encode_frame
            await conn.send(encode_frame(0, b"\x00" * 100))  # slave is empty: accepted
            await slave.wait_offset(100)
            await conn.send(encode_frame(5000, b"\x01" * 10))  # not at the slave's end
            while await conn.recv(4096):
                pass  # the slave closed it
            conn.close()
            listener.close()
            assert slave.s.max_phys_offset == 100
            await slave.stop()
            await master.stop()


async def test_promoted_slave_store_continues_offsets(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m")
    slave = SlaveNode(tmp_path / "s")
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            await slave.start(n, master.addr)
            await master.h.wait_for_slaves(1)
            end = append_many(master.s, 0, 120)
            await slave.wait_offset(end)
            master.s.dispatch_all()
            master_q1 = master.s.get_max_offset_in_queue("T", 1)
            await master.stop()  # the master dies
            # in place: the running slave store becomes a master and continues the offsets
            s = slave.s
            assert s.append_message(message(0)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
            s.role = BrokerRole.ASYNC_MASTER
            s.rebuild_queue_offsets()
            r = s.append_message(message(5))  # queue 1
            assert r.result is not None and r.result.wrote_offset == end
            assert r.result.logics_offset == master_q1
            await slave.stop()
            end += r.result.wrote_bytes
            master_q1 += 1
    # reopen the former slave's directory as a master: offsets continue
    promoted = MessageStore.open(store_config(tmp_path / "s", BrokerRole.ASYNC_MASTER))
    try:
        assert promoted.max_phys_offset == end
        promoted.rebuild_queue_offsets()
        r = promoted.append_message(message(1))  # queue 1
        assert r.status is PutMessageStatus.PUT_OK and r.result is not None
        assert r.result.wrote_offset == end
        assert r.result.logics_offset == master_q1
        promoted.dispatch_all()
        got = promoted.get_message("T", 1, master_q1, 1)
        assert got.status is GetMessageStatus.FOUND
        got.release()
    finally:
        promoted.close()


async def test_promoted_store_serves_a_new_slave(tmp_path: Path) -> None:
    """A slave's store reopened as master (rebuild_queue_offsets) serves HA, and a fresh slave
    replicates the continued log."""
    old_master = MasterNode(tmp_path / "m")
    promoted = MasterNode(tmp_path / "s")  # the slave's directory, run as a master below
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await old_master.start(n)
            slave = SlaveNode(tmp_path / "s")
            await slave.start(n, old_master.addr)
            await old_master.h.wait_for_slaves(1)
            end = append_many(old_master.s, 0, 80)
            await slave.wait_offset(end)
            old_master.s.dispatch_all()
            q0 = old_master.s.get_max_offset_in_queue("T", 0)
            await old_master.stop()  # the master dies
            await slave.stop()
            await promoted.start(n)  # its store reopened as ASYNC_MASTER
            promoted.s.rebuild_queue_offsets()
            new_slave = SlaveNode(tmp_path / "s2")
            await new_slave.start(n, promoted.addr)
            await promoted.h.wait_for_slaves(1)
            r = await promoted.s.put_message(message(0))
            assert r.result is not None and r.result.logics_offset == q0
            end2 = append_many(promoted.s, 1, 50)
            await new_slave.wait_offset(end2)
            await new_slave.stop()
            await promoted.stop()
    assert assert_commitlog_prefix(promoted.cfg, new_slave.cfg, from_offset=end) >= 1


async def test_configured_master_address_wins_over_registration(tmp_path: Path) -> None:
    master = MasterNode(tmp_path / "m")
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            slave = SlaveNode(tmp_path / "s", ha_master_address=master.addr)
            await slave.start(n, None)
            await master.h.wait_for_slaves(1)
            slave.h.update_master_address("127.0.0.1:1")  # ignored: haMasterAddress is set
            assert slave.c.master_address == master.addr
            end = append_many(master.s, 0, 10)
            await slave.wait_offset(end)
            master.h.update_master_address("127.0.0.1:1")  # a master has no client: no-op
            assert master.h.client is None
            await slave.stop()
            await master.stop()


async def test_slave_stopped_mid_stream_resumes(tmp_path: Path) -> None:
    """The slave stops while a backlog streams (its log may end inside a record); on restart the
    store recovers to a record boundary, reports it, and the master resends from there."""
    master = MasterNode(tmp_path / "m")
    slave = SlaveNode(tmp_path / "s")
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            await master.start(n)
            await slave.start(n, master.addr)
            await master.h.wait_for_slaves(1)
            end = append_many(master.s, 0, 400)
            await slave.wait_offset(end // 3 + 1)  # part of the backlog
            await slave.stop()
            stopped_at = slave.last_max_offset
            assert stopped_at < end
            await slave.start(n, master.addr)
            resumed_at = slave.s.max_phys_offset
            assert 0 < resumed_at <= stopped_at
            await slave.wait_offset(end)
            slave.s.dispatch_all()
            master.s.dispatch_all()  # the master's own reput may lag too
            for q in range(4):
                assert slave.s.get_max_offset_in_queue("T", q) == (
                    master.s.get_max_offset_in_queue("T", q))
            await slave.stop()
            await master.stop()
    assert assert_commitlog_prefix(master.cfg, slave.cfg) >= 3


async def test_slave_drops_a_silent_master_and_reconnects(tmp_path: Path) -> None:
    """5.x rule: nothing read from the master for haHousekeepingInterval -> reconnect."""
    slave = SlaveNode(tmp_path / "s", ha_housekeeping_interval_ms=300)
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as n:
            listener = trio.socket.socket()
            await listener.bind(("127.0.0.1", 0))
            listener.listen(4)
            await slave.start(n, f"127.0.0.1:{listener.getsockname()[1]}")
            first, _ = await listener.accept()
            assert await first.recv(8) == bytes(8)  # the first report at once: offset 0
            t0 = trio.current_time()
            second, _ = await listener.accept()  # silent master: the slave reconnects
            assert trio.current_time() - t0 >= 0.25
            assert await second.recv(8) == bytes(8)  # reported again on the new connection
            assert slave.c.connects == 2
            for s in (first, second, listener):
                s.close()
            await slave.stop()
