"""A 3-node DLedger group of real brokers in one Trio loop: election, produce through our
client, reads from the leader and from followers, leader loss and catch-up."""

from __future__ import annotations

from pathlib import Path

import trio

from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.model import Message as WireMessage
from rmq_cluster.client.producer import Producer
from rmq_cluster.cluster.protocol.message import decode_offset_msg_id, iter_records
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.dledger.core import Role
from rmq_cluster.dledger.log_storage import BODY_OFFSET
from tests.integration.dledger.dledger_testlib import WAIT_S, Group, Member, dledger_group

TOPIC = "DlTopic"
POLL_S = 0.05


async def pull_all(group: Group, m: Member, queue_id: int, upto: int) -> list[bytes]:
    """Every body of queue ``queue_id`` on member ``m`` (waits until ``upto`` are there)."""
    with trio.fail_after(WAIT_S):
        while True:
            ext = {
                "consumerGroup": "CG", "topic": TOPIC, "queueId": str(queue_id),
                "queueOffset": "0", "maxMsgNums": "1000", "sysFlag": "4",
                "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                "subVersion": "0",
            }
            req = RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)
            resp = await group.client.invoke(m.addr, req, 5.0)
            if resp.code == ResponseCode.SUCCESS:
                bodies = [r.body for r in iter_records(bytes(resp.body))]
                if len(bodies) >= upto:
                    return bodies
            await trio.sleep(POLL_S)


async def test_group_replicates_serves_follower_reads_and_fails_over(tmp_path: Path) -> None:
    async with dledger_group(tmp_path) as group:
        leader = await group.leader()
        followers = [m for m in group.members if m is not leader]
        # a follower refuses sends with a clear code
        ext = {"a": "PG", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
               "g": "0", "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
        refused = await group.client.invoke(
            followers[0].addr,
            RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"x"), 5.0,
        )
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused.remark
        assert "leader" in (refused.remark or "")

        cc = ClientConfig(namesrv_addr=group.ns_addr, poll_namesrv_interval_s=0.2)
        sent: list[bytes] = []
        async with Producer("PG", client_config=cc, send_timeout_s=10.0) as producer:
            for i in range(40):
                body = b"m%03d" % i
                res = await producer.send(WireMessage(TOPIC, body), timeout=10.0)
                sent.append(body)
                # the offset msgId points into the DLedger data file: pos + 48
                _host, phys = decode_offset_msg_id(res.offset_msg_id)
                storage = leader.store.storage
                assert storage is not None
                idx = storage.index_at_or_after(phys - BODY_OFFSET)
                assert storage.entry_pos(idx) + BODY_OFFSET == phys
            # followers copy topics from the master, then serve the same queues
            for f in followers:
                await f.ctrl.slave_sync_once(leader.addr)  # type: ignore[union-attr]
            # view by offset msgId and query by key, on the leader and on a follower
            keyed = await producer.send(WireMessage(TOPIC, b"keyed", keys="k-1"), timeout=10.0)
            sent.append(b"keyed")
            _h, phys = decode_offset_msg_id(keyed.offset_msg_id)
            for m in (leader, followers[0]):
                view = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys})
                with trio.fail_after(WAIT_S):
                    while True:
                        got = await group.client.invoke(m.addr, view, 5.0)
                        if got.code == ResponseCode.SUCCESS:
                            break
                        await trio.sleep(POLL_S)  # the follower has not applied it yet
                assert [r.body for r in iter_records(bytes(got.body))] == [b"keyed"]
                query = RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
                    "topic": TOPIC, "key": "k-1", "maxNum": "32", "beginTimestamp": "0",
                    "endTimestamp": str(2**62),
                })
                found = await group.client.invoke(m.addr, query, 5.0)
                assert found.code == ResponseCode.SUCCESS, found.remark
                assert [r.body for r in iter_records(bytes(found.body))] == [b"keyed"]
            queues = await producer.queues_for(TOPIC)
            per_leader = {}
            for mq in queues:
                per_leader[mq.queue_id] = await pull_all(group, leader, mq.queue_id, 0)
            assert sorted(b for bs in per_leader.values() for b in bs) == sorted(sent)
            for f in followers:
                for qid, bodies in per_leader.items():
                    assert await pull_all(group, f, qid, len(bodies)) == bodies

            # lose the leader: the others elect a new one, routes follow, sends resume
            old = leader
            await group.stop(old)
            leader = await group.leader(exclude=old)
            for i in range(40, 60):
                body = b"m%03d" % i
                await producer.send(WireMessage(TOPIC, body), timeout=15.0)
                sent.append(body)
            # the old leader comes back as a follower and catches up
            await group.start(old)
            target = leader.store.applied_index
            assert old.store.node is not None
            with trio.fail_after(WAIT_S):
                await old.store.node.wait_for(
                    lambda n: n.role is Role.FOLLOWER and old.store.applied_index >= target
                )
            await old.ctrl.slave_sync_once(leader.addr)  # type: ignore[union-attr]
            for mq in queues:
                on_leader = await pull_all(group, leader, mq.queue_id, 0)
                assert await pull_all(group, old, mq.queue_id, len(on_leader)) == on_leader
                per_leader[mq.queue_id] = on_leader
            assert sorted(b for bs in per_leader.values() for b in bs) == sorted(sent)


async def test_isolated_leader_tail_is_truncated_and_never_dispatched(tmp_path: Path) -> None:
    """The leader is cut off (its DLedger messages dropped both ways) while it takes sends: those
    entries never commit (the sends fail with a retryable code) and never reach its
    ConsumeQueue; the others elect a new leader; once healed, the old leader truncates its
    divergent tail and serves exactly the new leader's messages."""
    async with dledger_group(tmp_path) as group:
        leader = await group.leader()
        node = leader.store.node
        assert node is not None
        ext = {"a": "PG", "b": TOPIC, "c": "TBW102", "d": "1", "e": "0", "f": "0",
               "g": "0", "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}

        async def send(m: Member, body: bytes) -> RemotingCommand:
            req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body)
            return await group.client.invoke(m.addr, req, 10.0)

        first = await send(leader, b"committed-0")
        assert first.code == ResponseCode.SUCCESS, first.remark
        transport = node.transport
        real_send, real_deliver = transport.send, node.deliver
        transport.send = lambda peer, data, code: None  # type: ignore[method-assign]
        node.deliver = lambda data: None  # type: ignore[method-assign]
        lost = await send(leader, b"lost-1")
        # never acknowledged: a retryable error (SYSTEM_ERROR from OS_PAGECACHE_BUSY, or
        # SERVICE_NOT_AVAILABLE / SYSTEM_ERROR once it stepped down)
        assert lost.code in (ResponseCode.SYSTEM_ERROR, ResponseCode.SERVICE_NOT_AVAILABLE)
        info = await group.client.invoke(
            leader.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 5.0
        )
        assert info.code == ResponseCode.SUCCESS, info.remark
        storage = leader.store.storage
        assert storage is not None
        divergent = storage.last_index()
        assert any(e.body.find(b"lost-1") >= 0 for e in storage.entries(0, divergent + 1))
        new = await group.leader(exclude=leader)
        for f in group.members:
            if f is not leader and f is not new:
                await f.ctrl.slave_sync_once(new.addr)  # type: ignore[union-attr]
        for i in range(5):
            ok = await send(new, b"new-%d" % i)
            assert ok.code == ResponseCode.SUCCESS, ok.remark
        transport.send = real_send  # type: ignore[method-assign]
        node.deliver = real_deliver  # type: ignore[method-assign]
        new_storage = new.store.storage
        assert new_storage is not None
        target = new.store.applied_index
        with trio.fail_after(WAIT_S):
            await node.wait_for(
                lambda n: n.role is Role.FOLLOWER and leader.store.applied_index >= target
            )
        # the log matches the new leader's entry for entry; "lost-1" is gone
        last = new_storage.last_index()
        assert storage.last_index() >= last
        mine = storage.entries(0, last + 1)
        theirs = new_storage.entries(0, last + 1)
        assert [(e.index, e.term, e.body) for e in mine] == [
            (e.index, e.term, e.body) for e in theirs
        ]
        assert not any(e.body.find(b"lost-1") >= 0 for e in mine)
        await leader.ctrl.slave_sync_once(new.addr)  # type: ignore[union-attr]
        expected = await pull_all(group, new, 0, 6)
        assert expected[0] == b"committed-0" and b"lost-1" not in expected
        assert await pull_all(group, leader, 0, len(expected)) == expected
