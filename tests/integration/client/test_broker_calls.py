"""The broker's calls to the client, sent over the broker's own connection to it as a real
broker does: GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY, RESET_CONSUMER_CLIENT_OFFSET."""

from __future__ import annotations

import json

import trio

from rmq_cluster.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
)
from rmq_cluster.client.model import MessageQueue, ReceivedMessage
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.connection import Connection

from .conftest import WAIT_S, Cluster


async def test_broker_to_client_requests(cluster: Cluster) -> None:
    cc = cluster.client_config()
    seen: list[ReceivedMessage] = []
    arrived = trio.Event()

    def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        seen.extend(msgs)
        arrived.set()
        return ConsumeResult.SUCCESS

    async with Producer("PG", client_config=cc) as p:
        mq = MessageQueue("BC1", "broker-a", 0)
        sent = [await p.send(Message("BC1", b"m%d" % i), queue=mq) for i in range(5)]
        c = PushConsumer("BCG", client_config=cc, listener=listener,
                         consume_from=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe("BC1")
        async with c:
            with trio.fail_after(WAIT_S):
                while len({m.msg_id for m in seen}) < 5:
                    await arrived.wait()
                    arrived = trio.Event()
            conns = [ch for ch in cluster.broker.clients.consumer_channels("BCG")
                     if isinstance(ch, Connection)]
            assert conns
            conn = conns[0]
            cid = c.instance.client_id

            info = await conn.invoke(RemotingCommand.request(
                RequestCode.GET_CONSUMER_RUNNING_INFO,
                {"consumerGroup": "BCG", "clientId": cid, "jstackEnable": "false"}), WAIT_S)
            assert info.code == ResponseCode.SUCCESS
            text = bytes(info.body).decode()
            assert '"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"' in text
            assert '{"brokerName":"broker-a","queueId":0,"topic":"BC1"}:{' in text

            # CONSUME_MESSAGE_DIRECTLY: the broker ships the stored message
            from rmq_cluster.cluster.protocol.message import decode_offset_msg_id

            _host, offset = decode_offset_msg_id(sent[0].offset_msg_id)
            raw = await cluster_view(cluster, offset)
            before = len(seen)
            direct = await conn.invoke(RemotingCommand.request(
                RequestCode.CONSUME_MESSAGE_DIRECTLY,
                {"consumerGroup": "BCG", "clientId": cid, "msgId": sent[0].offset_msg_id,
                 "brokerName": "broker-a"}, raw), WAIT_S)
            assert direct.code == ResponseCode.SUCCESS
            result = json.loads(bytes(direct.body))
            assert result["consumeResult"] == "CR_SUCCESS" and result["autoCommit"] is True
            assert len(seen) == before + 1 and seen[-1].msg_id == sent[0].msg_id

            # RESET_CONSUMER_CLIENT_OFFSET (Java body, MessageQueue object keys): back to 2
            body = (b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"BC1"}:2}}')
            again = len(seen)
            await conn.invoke_oneway(RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                {"topic": "BC1", "group": "BCG", "timestamp": "0", "isForce": "true"}, body))
            with trio.fail_after(WAIT_S):
                while len(seen) < again + 3:
                    await arrived.wait()
                    arrived = trio.Event()
            assert sorted(m.queue_offset for m in seen[again:]) == [2, 3, 4]


async def cluster_view(cluster: Cluster, offset: int) -> bytes:
    """The stored record at ``offset`` as VIEW_MESSAGE_BY_ID returns it."""
    from rmq_cluster.cluster.remoting.client_pool import open_remoting_client

    async with open_remoting_client() as rc:
        resp = await rc.invoke(cluster.addr, RemotingCommand.request(
            RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}), WAIT_S)
    assert resp.code == ResponseCode.SUCCESS
    return bytes(resp.body)
