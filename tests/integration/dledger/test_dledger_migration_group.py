"""From master/slave to DLedger on the existing CommitLog, with real brokers on real sockets:
a plain master takes messages and stops; its store is copied to the two new members (what a
slave that was in sync already holds); the three start with ``enableDLegerCommitLog=true``;
the old messages are readable from every member, new ones continue the same queues, and a
query by key finds an old message."""

from __future__ import annotations

import shutil
from pathlib import Path

import trio

from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.model import Message as WireMessage
from rmq_cluster.client.producer import Producer
from rmq_cluster.cluster.protocol.message import iter_records
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer
from tests.integration.broker.conftest import _run_broker, broker_settings
from tests.integration.dledger.dledger_testlib import GROUP, WAIT_S, dledger_group
from tests.integration.dledger.test_dledger_transfer import TOPIC, read_queue

OLD = 120
NEW = 60


async def _plain_master_phase(tmp_path: Path) -> list[bytes]:
    ns_cfg = NamesrvConfig(
        kv_config_path=str(tmp_path / "ns0" / "kvConfig.json"),
        config_store_path=str(tmp_path / "ns0" / "namesrv.properties"),
        bind_address="127.0.0.1", listen_port=0,
    )
    sent: list[bytes] = []
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(NamesrvServer(ns_cfg).serve)
        ns_addr = f"{host}:{port}"
        settings = broker_settings(
            tmp_path / "n0", ns_addr, brokerName=GROUP, brokerClusterName="DlCluster",
            brokerRole="SYNC_MASTER",
        )
        ctrl = BrokerNode(settings, node="old-master")
        scope, done = trio.CancelScope(), trio.Event()
        await nursery.start(_run_broker, ctrl, scope, done)
        cc = ClientConfig(namesrv_addr=ns_addr, poll_namesrv_interval_s=0.2)
        async with Producer("PG", client_config=cc, send_timeout_s=10.0) as producer:
            for i in range(OLD):
                body = b"old-%04d" % i
                await producer.send(WireMessage(TOPIC, body, keys=f"key-{i}"), timeout=10.0)
                sent.append(body)
        scope.cancel()
        with trio.fail_after(WAIT_S):
            await done.wait()
        nursery.cancel_scope.cancel()
    return sent


async def test_master_slave_store_moves_to_a_dledger_group(tmp_path: Path) -> None:
    old = await _plain_master_phase(tmp_path)
    for member in ("n1", "n2"):  # the members that had no store get the master's
        shutil.copytree(tmp_path / "n0", tmp_path / member)
    async with dledger_group(tmp_path) as group:
        leader = await group.leader()
        assert leader.store.view is not None and leader.store.view.divided_offset > 0
        cc = ClientConfig(namesrv_addr=group.ns_addr, poll_namesrv_interval_s=0.2)
        new: list[bytes] = []
        async with Producer("PG", client_config=cc, send_timeout_s=10.0) as producer:
            for i in range(NEW):
                body = b"new-%04d" % i
                await producer.send(WireMessage(TOPIC, body), timeout=15.0)
                new.append(body)
            queues = [mq.queue_id for mq in await producer.queues_for(TOPIC)]
        target = leader.store.applied_index
        for m in group.members:
            with trio.fail_after(WAIT_S):
                await m.store.node.wait_for(  # type: ignore[union-attr]
                    lambda _n, m=m: m.store.applied_index >= target
                )
            bodies: list[bytes] = []
            for q in queues:
                got = await read_queue(group, m.addr, q)
                # per queue: the old messages first, then the new ones (offsets continue)
                kinds = [b[:3] for b in got]
                assert kinds == sorted(kinds, key=lambda k: k != b"old"), (m.self_id, q)
                bodies += got
            assert sorted(bodies) == sorted(old + new), m.self_id
            query = RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
                "topic": TOPIC, "key": "key-7", "maxNum": "32", "beginTimestamp": "0",
                "endTimestamp": str(2**62),
            })
            found = await group.client.invoke(m.addr, query, 5.0)
            assert found.code == ResponseCode.SUCCESS, (m.self_id, found.remark)
            assert [r.body for r in iter_records(bytes(found.body))] == [b"old-0007"]
