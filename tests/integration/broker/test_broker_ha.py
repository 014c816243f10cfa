"""Master/slave brokers wired with HA: a slave learns its master from the NameServer, replicates
the CommitLog byte for byte, serves pulls, refuses sends; SYNC_MASTER answers after the slave."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from rmq_cluster.broker.config import BrokerSettings
from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.cluster.protocol.message import StoredMessage, iter_records
from rmq_cluster.cluster.protocol.route import KVTable
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from tests.integration.broker.conftest import (
    WAIT_S,
    Cluster,
    _run_broker,
    broker_settings,
    ok,
    running_cluster,
)


async def _start_slave(cluster: Cluster, store_dir: Path) -> tuple[BrokerNode, str]:
    settings: BrokerSettings = broker_settings(
        store_dir, cluster.ns_addr, brokerId="1", brokerRole="SLAVE", haListenPort="0"
    )
    slave = BrokerNode(settings)
    host, port = await cluster.nursery.start(_run_broker, slave, trio.CancelScope(), trio.Event())
    return slave, f"{host}:{port}"


def _commitlog_bytes(root: Path) -> bytes:
    files = sorted((root / "commitlog").iterdir())
    return b"".join(f.read_bytes() for f in files)


async def test_sync_master_replicates_to_a_slave_that_serves_pulls(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, brokerRole="SYNC_MASTER", haListenPort="0") as cluster:
        master = cluster.broker
        assert master.ha is not None
        # no slave yet: stored, but the producer hears SLAVE_NOT_AVAILABLE
        resp = await cluster.send("HaTopic", b"before-slave")
        assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE, (resp.code, resp.remark)
        assert resp.ext_fields["msgId"]

        slave, slave_addr = await _start_slave(cluster, tmp_path / "slave")
        with trio.fail_after(WAIT_S):
            await master.ha.wait_for_slaves(1)

        with trio.fail_after(WAIT_S):  # it copied the master's topics (SlaveSynchronize)
            await slave.wait_until(lambda b: b.slave_sync_count >= 1)
        assert slave.topics.select("HaTopic") is not None

        for i in range(20):
            resp = ok(await cluster.send("HaTopic", f"m{i}".encode()))
            # SYNC_MASTER: the answer came after a slave acked past this message
            assert master.ha.status().push_to_slave_max_offset >= master.store.max_phys_offset

        # the slave has every message and serves it to consumers
        pull = RemotingCommand.request(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "CG",
                "topic": "HaTopic",
                "queueId": "0",
                "queueOffset": "0",
                "maxMsgNums": "64",
                "sysFlag": "6",
                "commitOffset": "0",
                "suspendTimeoutMillis": "3000",
                "subscription": "*",
                "subVersion": "0",
            },
        )
        bodies: list[bytes] = []
        with trio.fail_after(WAIT_S):
            while len(bodies) < 21:  # long polls: each waits for the slave's next arrival
                pull = RemotingCommand.request(
                    RequestCode.PULL_MESSAGE, {**pull.ext_fields, "queueOffset": str(len(bodies))}
                )
                resp = await cluster.client.invoke(slave_addr, pull, WAIT_S)
                assert resp.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), resp
                if resp.code == ResponseCode.SUCCESS:
                    msgs: list[StoredMessage] = list(iter_records(bytes(resp.body)))
                    bodies += [bytes(m.body) for m in msgs]
        assert bodies == [b"before-slave"] + [f"m{i}".encode() for i in range(20)]

        # a slave refuses sends with a clear code
        refused = await cluster.client.invoke(
            slave_addr,
            RemotingCommand.request(
                RequestCode.SEND_MESSAGE_V2,
                {
                    "a": "PG",
                    "b": "HaTopic",
                    "c": "TBW102",
                    "d": "4",
                    "e": "0",
                    "f": "0",
                    "g": "1700000000000",
                    "h": "0",
                },
                b"x",
            ),
            WAIT_S,
        )
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE

        # replication state is visible in the runtime info of both
        info = KVTable.decode(ok(await cluster.call(RequestCode.GET_BROKER_RUNTIME_INFO)).body)
        assert info.table["haConnectionCount"] == "1"
        slave_info = KVTable.decode(
            ok(
                await cluster.client.invoke(
                    slave_addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), WAIT_S
                )
            ).body
        )
        assert slave_info.table["haClientConnected"] == "true"

        # byte-identical CommitLog prefix
        master.store.flush_all_sync()
        slave.store.flush_all_sync()
        end = master.store.max_phys_offset
        assert slave.store.max_phys_offset == end
        master_bytes = _commitlog_bytes(tmp_path / "store")[:end]
        assert _commitlog_bytes(tmp_path / "slave")[:end] == master_bytes


async def test_async_master_answers_at_once_and_slave_catches_up(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, brokerRole="ASYNC_MASTER", haListenPort="0") as cluster:
        master = cluster.broker
        assert master.ha is not None
        for i in range(10):
            ok(await cluster.send("AsyncTopic", f"a{i}".encode()))  # no slave: still SUCCESS
        slave, _ = await _start_slave(cluster, tmp_path / "slave")
        end = master.store.max_phys_offset
        with trio.fail_after(WAIT_S):
            await slave.store.wait_appended_beyond(end - 1)
        assert slave.store.max_phys_offset == end


async def _fake_slave(
    port: int, acking: trio.Event, stop: trio.Event, task_status: trio.TaskStatus[None]
) -> None:
    """A slave speaking the HA protocol by hand: reports offset 0, reads every frame, and acks
    what it read only once ``acking`` is set (until then the master waits in vain)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all((0).to_bytes(8, "big"))
        task_status.started()
        buf = bytearray()
        received = 0
        while not stop.is_set():
            with trio.move_on_after(0.05):
                data = await stream.receive_some(65536)
                if not data:
                    return
                buf += data
            while len(buf) >= 12:
                offset = int.from_bytes(buf[:8], "big")
                size = int.from_bytes(buf[8:12], "big")
                if len(buf) < 12 + size:
                    break
                del buf[: 12 + size]
                received = max(received, offset + size)
            if acking.is_set() and received:
                await stream.send_all(received.to_bytes(8, "big"))


async def test_sync_master_answers_waiting_sends_on_ack_or_timeout(tmp_path: Path) -> None:
    """Sends waiting for a slave are answered without holding the connection: other requests
    are served meanwhile; a slave that never acks yields FLUSH_SLAVE_TIMEOUT (message stored, msgId
    given); once it acks, every waiting send hears SUCCESS."""
    async with running_cluster(
        tmp_path, brokerRole="SYNC_MASTER", haListenPort="0", slaveTimeout="1000"
    ) as cluster:
        master = cluster.broker
        assert master.ha is not None and master.ha.port is not None
        ok(await cluster.call(RequestCode.GET_BROKER_RUNTIME_INFO))
        acking, stop = trio.Event(), trio.Event()
        await cluster.nursery.start(_fake_slave, master.ha.port, acking, stop)
        with trio.fail_after(WAIT_S):
            await master.ha.wait_for_slaves(1)

        async def sends(n: int) -> list[RemotingCommand]:
            out: list[RemotingCommand] = []

            async def one(i: int) -> None:
                out.append(await cluster.send("HaWait", f"w{i}".encode()))

            async with trio.open_nursery() as n_:
                for i in range(n):
                    n_.start_soon(one, i)
            return out

        started = trio.current_time()
        async with trio.open_nursery() as n_:
            waited: list[RemotingCommand] = []

            async def collect() -> None:
                waited.extend(await sends(10))

            n_.start_soon(collect)
            with trio.fail_after(WAIT_S):
                while master.ha.waiting_puts < 10:
                    await trio.testing.wait_all_tasks_blocked(0.01)
            # the same connection still answers while the sends wait for the slave: all ten
            # still wait when the answer is in (no time bound: a loaded machine stalls)
            ok(await cluster.call(RequestCode.GET_BROKER_RUNTIME_INFO))
            assert master.ha.waiting_puts == 10 and not waited
        assert len(waited) == 10
        for resp in waited:
            assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (resp.code, resp.remark)
            assert resp.ext_fields["msgId"] and resp.ext_fields["queueOffset"]
        assert trio.current_time() - started >= 1.0

        acking.set()
        for resp in await sends(20):
            assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        assert master.ha.status().push_to_slave_max_offset == master.store.max_phys_offset
        stop.set()


async def test_sync_flush_sync_master_sends_are_held_until_flush_and_ack(tmp_path: Path) -> None:
    """SYNC_FLUSH and SYNC_MASTER at once: a send's answer is held (no task) on the lower of the
    flush and the slaves' ack; a slave that never acks yields FLUSH_SLAVE_TIMEOUT (stored,
    msgId given), one that acks yields SUCCESS only once both passed the message."""
    async with running_cluster(
        tmp_path, brokerRole="SYNC_MASTER", flushDiskType="SYNC_FLUSH", haListenPort="0",
        slaveTimeout="300", syncFlushTimeout="300",
    ) as cluster:
        master = cluster.broker
        store = master.store
        assert master.ha is not None and master.ha.port is not None
        both = store.both_watermark
        assert both is not None and store.replicas is master.ha
        acking, stop = trio.Event(), trio.Event()
        await cluster.nursery.start(_fake_slave, master.ha.port, acking, stop)
        with trio.fail_after(WAIT_S):
            await master.ha.wait_for_slaves(1)
            late = await cluster.send("HaBoth", b"unacked")
        assert late.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (late.code, late.remark)
        assert late.ext_fields["msgId"] and late.ext_fields["queueOffset"] == "0"
        assert both.held.held_total == 1 and both.held.expired_total == 1

        acking.set()
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as sends:
                for i in range(10):
                    sends.start_soon(cluster.send, "HaBoth", b"m%d" % i)
            resp = ok(await cluster.send("HaBoth", b"last"))
        end = int(resp.ext_fields["msgId"][16:], 16)
        assert store.flushed_offset > end and master.ha.table.push_to_slave_max_offset > end
        assert both.held.released_total >= 1 and both.held.waiting == 0
        assert both.value == min(store.flush_watermark.value, master.ha.ack_watermark.value)
        stop.set()


async def test_slave_serves_a_topic_replicated_before_its_config_sync(tmp_path: Path) -> None:
    """A topic created on the master after the slave's last SlaveSynchronize: the slave has
    its messages (ConsumeQueues) but not its config; it still serves pulls (read-only)."""
    async with running_cluster(tmp_path, brokerRole="ASYNC_MASTER", haListenPort="0") as cluster:
        master = cluster.broker
        assert master.ha is not None
        slave, slave_addr = await _start_slave(cluster, tmp_path / "slave")
        with trio.fail_after(WAIT_S):
            await master.ha.wait_for_slaves(1)
            await slave.wait_until(lambda b: b.slave_sync_count >= 1)
        ok(await cluster.send("LateTopic", b"late-1"))
        ok(await cluster.send("LateTopic", b"late-2"))
        with trio.fail_after(WAIT_S):
            while slave.store.max_phys_offset < master.store.max_phys_offset:
                await trio.testing.wait_all_tasks_blocked(0.01)
        slave.store.dispatch_all()
        assert slave.topics.select("LateTopic") is None  # not synced yet
        pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "CG", "topic": "LateTopic", "queueId": "0", "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
            "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
        })
        resp = await cluster.client.invoke(slave_addr, pull, WAIT_S)
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        assert [bytes(m.body) for m in iter_records(bytes(resp.body))] == [b"late-1", b"late-2"]
        # nothing there yet for an unknown topic
        unknown = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            **pull.ext_fields, "topic": "NeverSent"})
        resp = await cluster.client.invoke(slave_addr, unknown, WAIT_S)
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
