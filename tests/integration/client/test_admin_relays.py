"""Admin calls the broker relays to a consumer's connection (RocketMQ AdminBrokerProcessor
callConsumer): GET_CONSUMER_RUNNING_INFO (mqadmin consumerStatus) and CONSUME_MESSAGE_DIRECTLY
(mqadmin queryMsgById -g -d); and QUERY_CONSUME_TIME_SPAN."""

from __future__ import annotations

import pytest
import trio

import rmq_cluster.broker.processors.relay as relay
from rmq_cluster.client import (
    Admin,
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MQBrokerError,
    Producer,
    PushConsumer,
    ReceivedMessage,
)
from rmq_cluster.cluster.remoting.codes import ResponseCode

from .conftest import WAIT_S, Cluster
from .test_cli_sync import run_cli


class Seen:
    def __init__(self) -> None:
        self.msgs: list[ReceivedMessage] = []
        self.changed = trio.Event()
        self.block: trio.Event | None = None

    async def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        if self.block is not None:
            await self.block.wait()
        self.msgs.extend(msgs)
        self.changed.set()
        self.changed = trio.Event()
        return ConsumeResult.SUCCESS

    async def until(self, n: int) -> None:
        with trio.fail_after(WAIT_S):
            while len(self.msgs) < n:
                await self.changed.wait()


async def test_consumer_status_and_consume_directly(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cc = cluster.client_config()
    ns = cluster.ns_addr
    seen = Seen()
    consumer = PushConsumer("RelayCG", client_config=cc, listener=seen,
                            consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("RelayT", "A || B")
    async with consumer, Producer("RelayPG", client_config=cc) as p, Admin(
        client_config=cc
    ) as admin:
        sent = [await p.send(Message("RelayT", f"m{i}".encode(), tags="A")) for i in range(4)]
        await seen.until(4)
        cid = consumer.instance.client_id

        # GET_CONSUMER_RUNNING_INFO, through the broker to the client and back
        status = await admin.consumer_status("RelayCG")
        assert [s["clientId"] for s in status] == [cid]
        info = status[0]["runningInfo"]
        assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        assert {s["topic"]: s["subString"] for s in info["subscriptionSet"]}["RelayT"] == "A || B"
        rows = [r for r in info["mqTable"] if r["topic"] == "RelayT"]
        assert sorted(r["queueId"] for r in rows) == [0, 1, 2, 3]
        assert all(r["brokerName"] == "broker-a" for r in rows)
        code, out = await run_cli(capsys, "consumerStatus", "-n", ns, "-g", "RelayCG",
                                  "-i", cid, "--json")
        assert code == 0 and out[0]["clients"][0]["clientId"] == cid
        assert out[0]["clients"][0]["runningInfo"]["subscriptionSet"]
        with pytest.raises(MQBrokerError) as err:
            await admin.consumer_running_info("RelayCG", "10.0.0.1@nobody")
        assert err.value.code == ResponseCode.SYSTEM_ERROR
        assert err.value.remark == "The Consumer <RelayCG> <10.0.0.1@nobody> not online"

        # CONSUME_MESSAGE_DIRECTLY: the broker reads the message and hands it to the client
        result = await admin.consume_message_directly("RelayCG", cid, sent[1].offset_msg_id)
        assert result["consumeResult"] == "CR_SUCCESS"
        await seen.until(5)
        assert seen.msgs[-1].body == b"m1"
        assert seen.msgs[-1].queue.broker_name == "broker-a"  # the broker added brokerName
        # by the client's id with the topic, from the CLI (mqadmin queryMsgById -g -d)
        code, out = await run_cli(capsys, "queryMsgById", "-n", ns, "-i", sent[2].msg_id,
                                  "-t", "RelayT", "-g", "RelayCG", "-d", cid, "--json")
        assert code == 0 and out[0]["consumeResult"] == "CR_SUCCESS"
        await seen.until(6)
        assert seen.msgs[-1].body == b"m2"

        # QUERY_CONSUME_TIME_SPAN: every queue, consumed up to the end
        with trio.fail_after(WAIT_S):  # the consumer commits its offsets every 0.5 s
            while True:
                spans = await admin.query_consume_time_span("RelayT", "RelayCG")
                if all(s["delayTime"] == 0 for s in spans):
                    break
                await consumer.persist_offsets()
        assert sorted(s["messageQueue"]["queueId"] for s in spans) == [0, 1, 2, 3]
        busy = [s for s in spans if s["maxTimeStamp"] > 0]
        assert busy and all(s["minTimeStamp"] <= s["consumeTimeStamp"] <= s["maxTimeStamp"]
                            for s in busy)
        with pytest.raises(MQBrokerError) as err:
            await cluster_call_time_span(admin, cluster, "RelayNoSuchTopic")
        assert err.value.code == ResponseCode.TOPIC_NOT_EXIST


async def cluster_call_time_span(admin: Admin, cluster: Cluster, topic: str) -> bytes:
    from rmq_cluster.cluster.remoting.codes import RequestCode

    return await admin._broker(cluster.addr, RequestCode.QUERY_CONSUME_TIME_SPAN,
                               {"topic": topic, "group": "G"})


async def test_consume_directly_times_out_when_the_client_does_not_answer(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay, "CALL_CLIENT_TIMEOUT_S", 0.3)
    cc = cluster.client_config()
    seen = Seen()
    consumer = PushConsumer("RelaySlowCG", client_config=cc, listener=seen,
                            consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("RelaySlowT")
    async with consumer, Producer("RelaySlowPG", client_config=cc) as p, Admin(
        client_config=cc
    ) as admin:
        sent = await p.send(Message("RelaySlowT", b"slow"))
        await seen.until(1)
        seen.block = trio.Event()  # the listener now hangs
        try:
            with pytest.raises(MQBrokerError) as err:
                await admin.consume_message_directly(
                    "RelaySlowCG", consumer.instance.client_id, sent.offset_msg_id)
            assert err.value.code == ResponseCode.CONSUME_MSG_TIMEOUT
            assert err.value.remark is not None
            assert err.value.remark.startswith(
                f"consumer <RelaySlowCG> <{consumer.instance.client_id}> Timeout")
        finally:
            seen.block.set()
