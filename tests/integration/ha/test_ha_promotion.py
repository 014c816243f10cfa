"""Promotion, the 4.x manual switch: a slave's store restarted as brokerId 0 / ASYNC_MASTER
continues where the old master left off: same messages at the same queue offsets, new sends
take the next queue and CommitLog offsets, consumer offsets copied by SlaveSynchronize are
still valid, and a record the slave had only partly received is cut off on recovery."""

from __future__ import annotations

from pathlib import Path

import trio

from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.cluster.protocol.message import decode_offset_msg_id
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from tests.integration.broker.conftest import (
    WAIT_S,
    Cluster,
    _run_broker,
    broker_settings,
    messages,
    ok,
    running_cluster,
)

TOPIC = "PromoteTopic"
PER_QUEUE = 10
QUEUES = 2
COMMITTED = 7  # CG's committed offset of queue 0, made on the old master


async def _start_slave(
    cluster: Cluster, store_dir: Path
) -> tuple[BrokerNode, trio.CancelScope, trio.Event]:
    settings = broker_settings(
        store_dir, cluster.ns_addr, brokerId="1", brokerRole="SLAVE", haListenPort="0"
    )
    slave = BrokerNode(settings)
    scope, done = trio.CancelScope(), trio.Event()
    await cluster.nursery.start(_run_broker, slave, scope, done)
    return slave, scope, done


def _phys(resp_ext: dict[str, str]) -> int:
    return decode_offset_msg_id(resp_ext["msgId"])[1]  # the offset msgId


async def _max_offset(cluster: Cluster, queue_id: int) -> int:
    ext = {"topic": TOPIC, "queueId": str(queue_id)}
    resp = ok(await cluster.call(RequestCode.GET_MAX_OFFSET, ext))
    return int(resp.ext_fields["offset"])


def _write_at(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


async def test_slave_store_restarted_as_master_continues_offsets(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, brokerRole="ASYNC_MASTER", haListenPort="0") as cluster:
        old_master = cluster.broker
        slave_dir = tmp_path / "slave"
        slave, slave_scope, slave_done = await _start_slave(cluster, slave_dir)
        bodies: dict[int, list[bytes]] = {q: [] for q in range(QUEUES)}
        for i in range(PER_QUEUE):
            for q in range(QUEUES):
                body = f"q{q}-m{i}".encode()
                resp = ok(await cluster.send(TOPIC, body, queue_id=q))
                assert int(resp.ext_fields["queueOffset"]) == i
                bodies[q].append(body)
        ok(
            await cluster.call(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {
                    "consumerGroup": "CG",
                    "topic": TOPIC,
                    "queueId": "0",
                    "commitOffset": str(COMMITTED),
                },
            )
        )
        end = old_master.store.max_phys_offset
        with trio.fail_after(WAIT_S):
            await slave.store.wait_appended_beyond(end - 1)
        await slave.slave_sync_once(cluster.addr)  # SlaveSynchronize: topics and offsets
        assert slave.offsets.query("CG", TOPIC, 0) == COMMITTED

        # the slave goes down first; the master takes one more message the slave never sees
        # whole: the slave's CommitLog ends with the first bytes of that record
        slave_scope.cancel()
        with trio.fail_after(WAIT_S):
            await slave_done.wait()
        ok(await cluster.send(TOPIC, b"lost-on-the-slave", queue_id=0))
        old_master.store.flush_all_sync()
        name = f"{0:020d}"
        record = (cluster.store_dir / "commitlog" / name).read_bytes()[end : end + 60]
        assert len(record) == 60 and record[:4] != b"\0\0\0\0"
        _write_at(slave_dir / "commitlog" / name, end, record)
        await cluster.stop_broker()  # the old master is gone for good

        # promotion: the slave's store, brokerId 0, master role
        await cluster.start_broker(
            broker_settings(
                slave_dir,
                cluster.ns_addr,
                brokerId="0",
                brokerRole="ASYNC_MASTER",
                haListenPort="0",
            )
        )
        promoted = cluster.broker
        assert not promoted.is_slave
        assert promoted.store.max_phys_offset == end  # the partial record was cut off
        assert promoted.topics.select(TOPIC) is not None
        for q in range(QUEUES):
            assert await _max_offset(cluster, q) == PER_QUEUE
            got = messages(ok(await cluster.pull(TOPIC, 0, queue_id=q)))
            assert [bytes(m.body) for m in got] == bodies[q]
            assert [m.queue_offset for m in got] == list(range(PER_QUEUE))

        # new sends continue the queue offsets and the CommitLog where the slave's ended
        resp = ok(await cluster.send(TOPIC, b"after-promotion", queue_id=0))
        assert int(resp.ext_fields["queueOffset"]) == PER_QUEUE
        assert _phys(resp.ext_fields) == end
        resp = ok(await cluster.send(TOPIC, b"after-promotion-1", queue_id=1))
        assert int(resp.ext_fields["queueOffset"]) == PER_QUEUE

        # the old consumer offset is still there and still valid
        resp = ok(
            await cluster.call(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": "CG", "topic": TOPIC, "queueId": "0"},
            )
        )
        assert int(resp.ext_fields["offset"]) == COMMITTED
        resumed = ok(await cluster.pull(TOPIC, COMMITTED, queue_id=0))
        assert [bytes(m.body) for m in messages(resumed)] == (
            [*bodies[0][COMMITTED:], b"after-promotion"]
        )
        assert resumed.code == ResponseCode.SUCCESS
