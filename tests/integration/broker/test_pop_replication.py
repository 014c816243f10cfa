"""POP state on a slave (issue 33 item 4): checkpoints and acks are CommitLog records, so HA
copies them with the messages; the consumer offsets (the pop positions and the revive scan's
CID_RMQ_SYS_REVIVE_GROUP offsets) come with the slave's offset sync. A SYNC_MASTER answers an
ack only once the slave has it. The slave's store then boots as the new master and carries on:
the acked message is not delivered again, the unacked one comes back after its invisible time."""

from __future__ import annotations

from pathlib import Path

import trio

from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.cluster.remoting.codes import RequestCode
from tests.integration.broker.conftest import (
    WAIT_S,
    _run_broker,
    broker_settings,
    ok,
    running_cluster,
)
from tests.integration.broker.pop_testlib import ack, handle_of, pop, pop_until, popped


async def test_slave_store_carries_pop_state_after_failover(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, brokerRole="SYNC_MASTER", haListenPort="0",
                               reviveInterval="100") as cluster:
        master = cluster.broker
        assert master.ha is not None
        slave = BrokerNode(broker_settings(
            tmp_path / "slave", cluster.ns_addr, brokerId="1", brokerRole="SLAVE",
            haListenPort="0"))
        slave_scope, slave_done = trio.CancelScope(), trio.Event()
        await cluster.nursery.start(_run_broker, slave, slave_scope, slave_done)
        with trio.fail_after(WAIT_S):
            await master.ha.wait_for_slaves(1)
        ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "RepT", "defaultTopic": "TBW102", "readQueueNums": "1",
            "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG"}))
        for body in (b"acked", b"unacked"):
            ok(await cluster.send("RepT", body))
        got = {m.body: m for m in popped(await pop(cluster, "RepT", "RepG", invisible_ms=1500))}
        assert sorted(got) == [b"acked", b"unacked"]
        ok(await ack(cluster, got[b"acked"], "RepG"))  # SYNC_MASTER: the slave has the ack
        assert master.ha.status().push_to_slave_max_offset >= master.store.max_phys_offset
        await slave.slave_sync_once(cluster.addr)  # the offsets (RocketMQ: every 10 s)
        assert slave.offsets.query("RepG", "RepT", 0) == 2
        # the master dies; the slave's store boots as the group's master
        await cluster.stop_broker()
        slave_scope.cancel()  # (it writes its configs, the synced offsets, as it stops)
        with trio.fail_after(WAIT_S):
            await slave_done.wait()
        new = broker_settings(tmp_path / "slave", cluster.ns_addr, reviveInterval="100")
        await cluster.start_broker(new)
        back = await pop_until(cluster, "RepT", "RepG", 1)
        assert [m.body for m in back] == [b"unacked"] and back[0].reconsume_times == 1
        assert handle_of(back[0]).flag == "1"
        ok(await ack(cluster, back[0], "RepG"))
        service = cluster.broker.pop.service
        service.scan()
        assert len(service.ledger) == 0


async def test_recovery_reads_the_revive_log_without_its_topic_config(tmp_path: Path) -> None:
    """The pop offsets a promoted slave moves again come from the revive log its store holds,
    whatever its topic table says (a copy up to 10 s old, here without the revive topic):
    a message acked on the old master is not popped again."""
    async with running_cluster(tmp_path, brokerRole="SYNC_MASTER", haListenPort="0") as cluster:
        master = cluster.broker
        assert master.ha is not None
        slave = BrokerNode(broker_settings(
            tmp_path / "slave", cluster.ns_addr, brokerId="1", brokerRole="SLAVE",
            haListenPort="0"))
        slave_scope, slave_done = trio.CancelScope(), trio.Event()
        await cluster.nursery.start(_run_broker, slave, slave_scope, slave_done)
        with trio.fail_after(WAIT_S):
            await master.ha.wait_for_slaves(1)
        ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "RepT", "defaultTopic": "TBW102", "readQueueNums": "1",
            "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG"}))
        await slave.slave_sync_once(cluster.addr)  # the offsets and topics, before any pop
        ok(await cluster.send("RepT", b"acked"))
        (got,) = popped(await pop(cluster, "RepT", "RepG"))
        ok(await ack(cluster, got, "RepG"))  # SYNC_MASTER: the slave has the ack
        await cluster.stop_broker()
        slave_scope.cancel()
        with trio.fail_after(WAIT_S):
            await slave_done.wait()
        # the slave's store boots as the master; no revive round before the first pop
        await cluster.start_broker(broker_settings(tmp_path / "slave", cluster.ns_addr,
                                                   reviveInterval="600000"))
        new = cluster.broker
        assert new.topics.delete(new.pop.service.revive_topic)
        ok(await cluster.send("RepT", b"after"))
        back = await pop_until(cluster, "RepT", "RepG", 1, deadline_s=3.0)
        assert [m.body for m in back] == [b"after"]
