"""DLedger's admin LEADERSHIP_TRANSFER on a 3-node group of real brokers (one Trio loop, real
sockets): hostile requests are refused with a code and a remark and change nothing; a transfer
under a producer's load loses no acknowledged message and the new leader serves."""

from __future__ import annotations

from pathlib import Path

import orjson
import trio

from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.model import Message as WireMessage
from rmq_cluster.client.producer import Producer
from rmq_cluster.cluster.protocol.message import iter_records
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode
from rmq_cluster.cluster.remoting.codes import ResponseCode as RemotingCode
from rmq_cluster.deploy.dledger_cli import transfer
from rmq_cluster.dledger.admin import TransferAnswer, transfer_request_json
from rmq_cluster.dledger.messages import ResponseCode
from rmq_cluster.dledger.node import DLedgerRequestCode
from tests.integration.dledger.dledger_testlib import GROUP, WAIT_S, Group, Member, dledger_group
from tests.integration.dledger.test_dledger_group import TOPIC

IN_FLIGHT = 16
AFTER_TRANSFER = 200


async def read_queue(group: Group, addr: str, queue_id: int, offset: int = 0) -> list[bytes]:
    """Every body of one queue from ``offset`` on (page by page, nextBeginOffset)."""
    out: list[bytes] = []
    while True:
        ext = {
            "consumerGroup": "CG", "topic": TOPIC, "queueId": str(queue_id),
            "queueOffset": str(offset), "maxMsgNums": "1000", "sysFlag": "4",
            "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
            "subVersion": "0",
        }
        req = RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)
        resp = await group.client.invoke(addr, req, 5.0)
        if resp.code != RemotingCode.SUCCESS:
            return out
        out += [r.body for r in iter_records(bytes(resp.body))]
        offset = int(resp.ext_fields["nextBeginOffset"])


def _peer_addrs(m: Member) -> dict[str, str]:
    out = {}
    for part in m.peers.split(";"):
        pid, _sep, addr = part.partition("-")
        out[pid] = addr
    return out


async def _admin(group: Group, addr: str, body: bytes) -> tuple[RemotingCommand, TransferAnswer]:
    req = RemotingCommand.request(int(DLedgerRequestCode.LEADERSHIP_TRANSFER), {}, body)
    resp = await group.client.invoke(addr, req, 15.0)
    assert resp.code == 200
    return resp, TransferAnswer.from_json(resp.body)


async def test_admin_transfer_refuses_hostile_requests(tmp_path: Path) -> None:
    async with dledger_group(tmp_path) as group:
        leader = await group.leader()
        peers = _peer_addrs(leader)
        follower = next(m for m in group.members if m is not leader)
        term = leader.store.node.term  # type: ignore[union-attr]
        cases = [
            (b"", ResponseCode.UNEXPECTED_ARGUMENT),
            (b"{not json", ResponseCode.UNEXPECTED_ARGUMENT),
            (b"[1, 2]", ResponseCode.UNEXPECTED_ARGUMENT),
            (orjson.dumps({"group": GROUP}), ResponseCode.UNEXPECTED_ARGUMENT),
            (orjson.dumps({"group": GROUP, "transfereeId": 7}), ResponseCode.UNEXPECTED_ARGUMENT),
            (orjson.dumps({"group": GROUP, "transfereeId": "n1", "term": "x"}),
             ResponseCode.UNEXPECTED_ARGUMENT),
            (b"{" + b" " * 5000 + b"}", ResponseCode.UNEXPECTED_ARGUMENT),
            (transfer_request_json("other-group", "n1"), ResponseCode.UNKNOWN_GROUP),
            (transfer_request_json(GROUP, "n9"), ResponseCode.UNKNOWN_MEMBER),
        ]
        for body, code in cases:
            resp, answer = await _admin(group, peers[leader.self_id], body)
            assert answer.code is code, (body[:40], answer)
            assert resp.remark, body[:40]
        # a follower names the leader instead of acting
        _resp, answer = await _admin(
            group, peers[follower.self_id], transfer_request_json(GROUP, follower.self_id)
        )
        assert answer.code is ResponseCode.NOT_LEADER
        assert answer.leader_id == leader.self_id
        # nothing changed: same leader, same term, writes still accepted
        assert leader.store.node.term == term  # type: ignore[union-attr]
        assert await group.leader() is leader


async def test_transfer_under_load_loses_no_acked_message(tmp_path: Path) -> None:
    async with dledger_group(tmp_path) as group:
        leader = await group.leader()
        target = next(m for m in group.members if m is not leader)
        peers = _peer_addrs(leader)
        cc = ClientConfig(namesrv_addr=group.ns_addr, poll_namesrv_interval_s=0.2)
        acked: list[bytes] = []
        errors: list[str] = []
        stop = trio.Event()
        counter = iter(range(10**9))
        goal = [100, trio.Event()]  # set once len(acked) reaches goal[0]

        async def acked_reach(n: int) -> None:
            goal[0], goal[1] = n, trio.Event()
            if len(acked) < n:
                with trio.fail_after(WAIT_S):
                    await goal[1].wait()  # type: ignore[union-attr]

        async def worker(producer: Producer) -> None:
            for i in counter:
                if stop.is_set():
                    return
                body = b"t-%06d" % i
                try:
                    await producer.send(WireMessage(TOPIC, body), timeout=15.0)
                except Exception as exc:  # unacked: allowed, recorded
                    errors.append(repr(exc))
                    continue
                acked.append(body)
                if len(acked) >= goal[0]:  # type: ignore[operator]
                    goal[1].set()  # type: ignore[union-attr]

        async with Producer("PG", client_config=cc, send_timeout_s=15.0) as producer:
            await producer.send(WireMessage(TOPIC, b"first"), timeout=15.0)
            acked.append(b"first")
            async with trio.open_nursery() as nursery:
                for _ in range(IN_FLIGHT):
                    nursery.start_soon(worker, producer)
                await acked_reach(100)
                # by the follower's id, asked first at a follower (NOT_LEADER -> redirect)
                order = {target.self_id: peers[target.self_id], **peers}
                out = await transfer(order, GROUP, target.self_id)
                assert out.ok, out
                assert out.answer is not None and out.answer.leader_id == target.self_id
                new = await group.leader(exclude=leader)
                assert new is target
                await acked_reach(len(acked) + AFTER_TRANSFER)
                stop.set()
            # every acked message is readable from the new leader
            queues = await producer.queues_for(TOPIC)
            bodies: list[bytes] = []
            for mq in queues:
                bodies += await read_queue(group, new.addr, mq.queue_id)
            missing = set(acked) - set(bodies)
            assert not missing, (len(missing), sorted(missing)[:5])
            print(f"acked={len(acked)} errors={len(errors)}")


async def test_gated_group_transfers_only_for_an_admin_with_the_secret(tmp_path: Path) -> None:
    """With clusterSecret the members replicate and elect over authenticated connections; the
    admin transfer (``rmq-cluster dledger transfer``) works with the secret and is refused
    without it (the gate closes the connection: no answer, nothing changes)."""
    secret = "s3cret-" + "x" * 24
    async with dledger_group(tmp_path, clusterSecret=secret) as group:
        leader = await group.leader()
        peers = _peer_addrs(leader)
        target = next(m for m in group.members if m is not leader)
        refused = await transfer(peers, GROUP, target.self_id, timeout_s=5.0)
        assert not refused.ok and refused.answer is None, refused
        assert leader.store.leader_ready  # nothing moved
        node = leader.store.node
        assert node is not None and node.peer_gate is not None and node.peer_gate.refused >= 1
        done = await transfer(peers, GROUP, target.self_id, secret=secret)
        assert done.ok, done
        assert (await group.leader()) is target
