"""Stores from a real cluster run: a NameServer, a SYNC_MASTER and a slave in one Trio loop
(tests/integration/broker), small CommitLog files so the store spans several segments."""

from __future__ import annotations

from pathlib import Path

import trio

from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.cluster.protocol.message import MessageConst
from rmq_cluster.cluster.remoting.codes import ResponseCode
from tests.integration.broker.conftest import WAIT_S, _run_broker, broker_settings, running_cluster

FILE_BYTES = 16 * 1024
TOPICS = ("DiffA", "DiffB")
QUEUES = 2


async def produce(tmp: Path, n: int) -> dict[str, int]:
    """Master store at tmp/store, slave store at tmp/slave; returns the master's end offset."""
    props = {
        "brokerRole": "SYNC_MASTER",
        "haListenPort": "0",
        "mappedFileSizeCommitLog": str(FILE_BYTES),
        "mappedFileSizeConsumeQueue": str(20 * 64),
    }
    async with running_cluster(tmp, **props) as cluster:
        master = cluster.broker
        assert master.ha is not None
        slave_settings = broker_settings(
            tmp / "slave", cluster.ns_addr, brokerId="1", brokerRole="SLAVE", haListenPort="0",
            mappedFileSizeCommitLog=str(FILE_BYTES), mappedFileSizeConsumeQueue=str(20 * 64),
        )  # fmt: skip
        slave = BrokerNode(slave_settings)
        await cluster.nursery.start(_run_broker, slave, trio.CancelScope(), trio.Event())
        with trio.fail_after(WAIT_S):
            await master.ha.wait_for_slaves(1)
        for i in range(n):
            topic = TOPICS[i % len(TOPICS)]
            body = (f"msg-{i}-".encode() * (i % 37 + 3))[: 40 + (i * 53) % 700]
            resp = await cluster.send(topic, body, queue_id=(i // 2) % QUEUES,
                                      props={MessageConst.PROPERTY_KEYS: f"key{i}"})  # fmt: skip
            assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        end = master.store.max_phys_offset
        with trio.fail_after(WAIT_S):
            await slave.store.wait_appended_beyond(end - 1)
        master.store.flush_all_sync()
        slave.store.flush_all_sync()
        # both dispatch their ConsumeQueues and index in their reput tasks: wait for it (a
        # fixed pause was too short on a loaded machine), then flush what they wrote
        with trio.fail_after(WAIT_S):
            while master.store.dispatch_behind_bytes or slave.store.dispatch_behind_bytes:  # noqa: ASYNC110 - two stores' progress, no one event
                await trio.sleep(0.02)  # polling the reput tasks' progress, under the deadline
        master.store.flush_all_sync()
        slave.store.flush_all_sync()
        return {"end": end}
