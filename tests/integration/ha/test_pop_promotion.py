"""Issue 33: POP through RocketMQ 4.x's manual switch, as real processes. A SYNC_MASTER and its
slave; a consumer pops and acks on the master, and one message it let run out is revived on the
master and its revived copy acked; the slave has every record in its CommitLog but its copy of
the consumer offsets is stale (SlaveSynchronize copies them every 10 s: the test works between
two copies, so the group is not in it at all). The master is SIGKILLed and
``rmq-cluster promote`` restarts the slave as the group's master.

What must hold on the new master: no message whose ack was answered SUCCESS is handed out
again -- neither popped afresh from the topic (the pop offsets are moved again from the
checkpoints of the replicated revive log) nor revived a second time (the revive acked what it
revived in the revive log) -- and the one message popped but never acked comes back once,
through the pop retry topic. Apache's broker pops from the copied offsets and revives from the
copied revive offsets: it hands both acked messages out again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pytest
import trio

from rmq_cluster.client import Message, Producer
from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.frames import request
from rmq_cluster.client.instance import ClientInstance
from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol.message import StoredMessage, iter_records
from rmq_cluster.cluster.protocol.pop import POLLING_FULL, POLLING_TIMEOUT, ReceiptHandle
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.deploy.testing import RunningCluster, create_topics, rmq_cluster
from tests.integration.broker.pop_testlib import (
    ack_fields,
    pop_fields,
    receipt_handle,
    sigkill_node,
)

pytestmark = pytest.mark.slow  # a SYNC pair, a kill -9 and a promotion (a restart): ~15-25 s

TOPIC: Final = "PopPromoteT"
GROUP: Final = "PopPromoteG"
QUEUES: Final = 2
MESSAGES: Final = 24
#: The pops that are acked never run out during the test; the others run out at once.
LONG_INVISIBLE_MS: Final = 300_000
SHORT_INVISIBLE_MS: Final = 1_000
#: A consumer group whose offset marks when the slave last copied the master's offsets.
MARK_GROUP: Final = "PopPromoteMark"
CALL_TIMEOUT_S: Final = 10.0
#: The promoted slave's revive brings the unacked message back within this.
REDELIVERY_S: Final = 30.0
#: One master, its SYNC slave, one NameServer.
PROFILE: Final = """\
base = "2m-2s-sync"
namesrvs = 1
masters = 1
"""


def _handles(resp: Any) -> list[tuple[StoredMessage, ReceiptHandle]]:
    """Each popped message with its receipt handle, built as Apache's 5.x client builds it."""
    return [(m, receipt_handle(m, resp.ext_fields, "broker-a"))
            for m in iter_records(bytes(resp.body or b""))]


async def _pop(client: ClientInstance, addr: str, nums: int, invisible_ms: int,
               poll_ms: int = 0) -> list[tuple[StoredMessage, ReceiptHandle]]:
    ext = pop_fields(TOPIC, GROUP, max_nums=nums, invisible_ms=invisible_ms, poll_ms=poll_ms,
                     exp="*")
    resp = await client.invoke(addr, request(RC.POP_MESSAGE, ext),
                               CALL_TIMEOUT_S + poll_ms / 1000)
    if resp.code != 0:
        assert resp.code in (POLLING_FULL, POLLING_TIMEOUT), (resp.code, resp.remark)
        return []
    return _handles(resp)


async def _ack(client: ClientInstance, addr: str, h: ReceiptHandle) -> None:
    ext = ack_fields(TOPIC, GROUP, h)
    resp = await client.invoke(addr, request(RC.ACK_MESSAGE, ext), CALL_TIMEOUT_S)
    assert resp.code == 0, (resp.code, resp.remark)


async def _slave_knows(client: ClientInstance, slave_addr: str, group: str) -> bool:
    """Whether the slave's copy of the consumer offsets (SlaveSynchronize) has ``group``."""
    resp = await client.invoke(slave_addr, request(RC.GET_ALL_CONSUMER_OFFSET, {}),
                               CALL_TIMEOUT_S)
    assert resp.code == 0, resp.remark
    table = fastjson.loads(bytes(resp.body or b"{}")).get("offsetTable") or {}
    return f"{TOPIC}@{group}" in table


async def _after_a_slave_sync(client: ClientInstance, master: str, slave: str) -> None:
    """Return right after the slave copied the master's offsets: the next copy is ~10 s off."""
    ext = {"consumerGroup": MARK_GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": "0"}
    resp = await client.invoke(master, request(RC.UPDATE_CONSUMER_OFFSET, ext), CALL_TIMEOUT_S)
    assert resp.code == 0, resp.remark
    with trio.fail_after(30.0):
        while True:
            if await _slave_knows(client, slave, MARK_GROUP):
                return
            await trio.sleep(0.1)  # SlaveSynchronize runs every 10 s: poll for its copy


async def _ack_revived(client: ClientInstance, master: str, body: bytes) -> None:
    """Pop until the revived copy of ``body`` comes (the first one revived) and ack it."""
    with trio.fail_after(CALL_TIMEOUT_S * 3):
        while True:
            got = await _pop(client, master, 1, LONG_INVISIBLE_MS, poll_ms=1_000)
            if got:
                break
    ((m, h),) = got
    assert m.body == body and h.flag == "1", (m.body, h)
    await _ack(client, master, h)


async def _consume_on_master(producer: Producer, master: str, slave: str) -> tuple[
        set[bytes], bytes]:
    """Send and pop everything; ack all but two, then the revived copy of one of those two;
    -> (acked bodies, the body never acked)."""
    client = producer.instance
    for i in range(MESSAGES):
        result = await producer.send(Message(TOPIC, b"m-%d" % i))
        assert result.status.name == "SEND_OK", result
    await _after_a_slave_sync(client, master, slave)
    got: list[tuple[StoredMessage, ReceiptHandle]] = []
    with trio.fail_after(CALL_TIMEOUT_S * 3):
        while len(got) < MESSAGES - 2:
            got += await _pop(client, master, MESSAGES - 2 - len(got), LONG_INVISIBLE_MS)
    ((revived, _h),) = await _pop(client, master, 1, SHORT_INVISIBLE_MS)
    ((never, _h),) = await _pop(client, master, 1, SHORT_INVISIBLE_MS)
    for _m, h in got:
        await _ack(client, master, h)
    await _ack_revived(client, master, bytes(revived.body))
    # the acks are answered once the slave has them (SYNC_MASTER); its offsets are older
    assert not await _slave_knows(client, slave, GROUP), (
        "the slave copied the offsets meanwhile: the steps took over 10 s")
    return {bytes(m.body) for m, _h in got} | {bytes(revived.body)}, bytes(never.body)


async def _new_master(producer: Producer, old: str) -> str:
    with trio.fail_after(30.0):
        while True:
            route = await producer.instance.fetch_route(TOPIC)
            addr = route.broker_datas[0].broker_addrs.get(0)
            if addr is not None and addr != old:
                return str(addr)
            await trio.sleep(0.1)  # the promoted node registers: poll the route


async def _scenario(cluster: RunningCluster) -> dict[str, Any]:
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, client_ip="127.0.0.1")
    brokers = [n for n in cluster.nodes if n["kind"] == "broker"]
    (master,) = [str(n["addr"]) for n in brokers if n["role"] != "SLAVE"]
    (slave,) = [n for n in brokers if n["role"] == "SLAVE"]
    async with Producer("PopPromoteP", client_config=cfg) as producer:
        acked, unacked = await _consume_on_master(producer, master, str(slave["addr"]))
        await trio.to_thread.run_sync(sigkill_node, cluster, master)
        done = await trio.to_thread.run_sync(cluster.cli, "promote", str(slave["name"]))
        assert done.returncode == 0, done.stderr
        new = await _new_master(producer, master)
        again: list[tuple[StoredMessage, ReceiptHandle]] = []
        with trio.move_on_after(REDELIVERY_S):
            while not any(m.body == unacked for m, _h in again):
                again += await _pop(producer.instance, new, 32, LONG_INVISIBLE_MS, 1_000)
        # a last look: nothing else is left to pop
        again += await _pop(producer.instance, new, 32, LONG_INVISIBLE_MS, 1_000)
    return {"acked": acked, "unacked": unacked,
            "again": [(bytes(m.body), h.flag) for m, h in again]}


def test_promoted_slave_does_not_pop_acked_messages_again(tmp_path: Path) -> None:
    profile = tmp_path / "1m-1s-sync.toml"
    profile.write_text(PROFILE)
    with rmq_cluster(str(profile), directory=tmp_path / "cluster") as cluster:
        create_topics(cluster.namesrv_addr, [TOPIC], queues=QUEUES)
        seen = trio.run(_scenario, cluster)
    again_bodies = [body for body, _flag in seen["again"]]
    assert not set(again_bodies) & seen["acked"], f"acked messages popped again: {seen}"
    # the unacked one, once, revived through the retry topic (flag 1), not from the topic
    assert seen["again"] == [(seen["unacked"], "1")], seen
