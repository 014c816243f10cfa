"""Request-reply (RocketMQ 4.6+) through an in-process cluster: Producer.request sends a request
with CORRELATION_ID / REPLY_TO_CLIENT / TTL, a push consumer answers with create_reply_message +
send_reply (SEND_REPLY_MESSAGE_V2), the broker pushes the reply to the requester's connection
(PUSH_REPLY_MESSAGE_TO_CLIENT) and stores it in <cluster>_REPLY_TOPIC."""

from __future__ import annotations

import attrs
import pytest
import trio

from rmq_cluster.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MQBrokerError,
    MQClientError,
    Producer,
    PushConsumer,
    ReceivedMessage,
    RequestTimeoutError,
    SendResult,
    create_reply_message,
    reply_listener,
)
from rmq_cluster.client.request_reply import (
    CREATE_REPLY_MESSAGE_EXCEPTION,
    REQUEST_TIMEOUT_EXCEPTION,
)
from rmq_cluster.client.sync import SyncProducer, SyncPushConsumer
from rmq_cluster.cluster.protocol.message import MessageConst as MC
from rmq_cluster.cluster.protocol.message import decode_offset_msg_id
from rmq_cluster.cluster.remoting.codes import ResponseCode

from .conftest import WAIT_S, Cluster

REPLY_TOPIC = "TestCluster_REPLY_TOPIC"


class Requests:
    """The replier's side: remembers each request and answers ``re:<body>``."""

    def __init__(self) -> None:
        self.seen: list[ReceivedMessage] = []
        self.warm = trio.Event()

    def __call__(self, msg: ReceivedMessage) -> bytes | None:
        self.seen.append(msg)
        if msg.body == b"warm-up":
            self.warm.set()
            return None
        return b"re:" + msg.body


async def _replier_ready(requester: Producer, topic: str, requests: Requests) -> None:
    """A plain message through the topic: once the replier saw it, it consumes the topic."""
    await requester.send(Message(topic, b"warm-up"))
    with trio.fail_after(WAIT_S):
        await requests.warm.wait()


class ExplicitReplier:
    """A listener answering each request with create_reply_message + send_reply, keeping the
    send results (the broker answers once the reply is pushed and stored)."""

    def __init__(self, replier: Producer) -> None:
        self.replier = replier
        self.requests: list[ReceivedMessage] = []
        self.results: list[SendResult] = []
        self.changed = trio.Event()

    async def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        for msg in msgs:
            self.requests.append(msg)
            if MC.PROPERTY_MESSAGE_REPLY_TO_CLIENT in msg.properties:
                reply = create_reply_message(msg, b"re:" + msg.body)
                self.results.append(await self.replier.send_reply(reply))
        self.changed.set()
        self.changed = trio.Event()
        return ConsumeResult.SUCCESS

    async def until(self, n: int) -> None:
        with trio.fail_after(WAIT_S):
            while len(self.results) < n:
                await self.changed.wait()


async def test_request_gets_the_consumers_reply(cluster: Cluster) -> None:
    cc = cluster.client_config()
    async with Producer("RRReqPG", client_config=cc) as requester, Producer(
        "RRRepPG", client_config=cc
    ) as replier:
        answers = ExplicitReplier(replier)
        consumer = PushConsumer("RRCG", client_config=cc, listener=answers,
                                consume_from=ConsumeFromWhere.FIRST_OFFSET)
        consumer.subscribe("RRTopic")
        async with consumer:
            reply = await requester.request(Message("RRTopic", b"hello"), timeout=WAIT_S)
            assert reply.body == b"re:hello"
            assert reply.topic == REPLY_TOPIC
            props = reply.properties
            assert props[MC.PROPERTY_MESSAGE_TYPE] == "reply"
            assert props[MC.PROPERTY_MESSAGE_REPLY_TO_CLIENT] == requester.instance.client_id
            assert int(props[MC.PROPERTY_PUSH_REPLY_TIME]) > 0
            assert int(props[MC.PROPERTY_REPLY_MESSAGE_ARRIVE_TIME]) > 0
            assert reply.store_host[1] == cluster.broker.store_host[1]
            # what the replier received: the request properties Java's request() sets
            request = answers.requests[0]
            rp = request.properties
            assert rp[MC.PROPERTY_CORRELATION_ID] == props[MC.PROPERTY_CORRELATION_ID]
            assert rp[MC.PROPERTY_MESSAGE_REPLY_TO_CLIENT] == requester.instance.client_id
            assert rp[MC.PROPERTY_MESSAGE_TTL] == str(int(WAIT_S * 1000))
            assert rp[MC.PROPERTY_CLUSTER] == "TestCluster"
            # the broker stored the reply too (storeReplyMessageEnable): the replier's send
            # result names the stored record
            await answers.until(1)
            sent = answers.results[0]
            assert sent.queue.topic == REPLY_TOPIC and sent.offset_msg_id != "0"
            _host, offset = decode_offset_msg_id(sent.offset_msg_id)
            stored = cluster.broker.store.lookup_message_by_offset(offset)
            assert stored is not None and stored.topic == REPLY_TOPIC
            assert stored.body == b"re:hello"


async def test_concurrent_requests_each_get_their_reply(cluster: Cluster) -> None:
    cc = cluster.client_config()
    requests = Requests()
    async with Producer("RRManyReqPG", client_config=cc) as requester, Producer(
        "RRManyRepPG", client_config=cc
    ) as replier:
        consumer = PushConsumer("RRManyCG", client_config=cc,
                                listener=reply_listener(replier, requests),
                                consume_from=ConsumeFromWhere.FIRST_OFFSET)
        consumer.subscribe("RRManyTopic")
        async with consumer:
            await _replier_ready(requester, "RRManyTopic", requests)
            # correlation ids keep them apart; the large one travels compressed
            bodies = [f"q{i}".encode() for i in range(8)] + [b"z" * 10_000]
            replies: dict[bytes, bytes] = {}

            async def one(body: bytes) -> None:
                r = await requester.request(Message("RRManyTopic", body), timeout=WAIT_S)
                replies[body] = r.body

            async with trio.open_nursery() as n:
                for body in bodies:
                    n.start_soon(one, body)
            assert replies == {b: b"re:" + b for b in bodies}
            assert len(requester.instance.request_futures) == 0


async def test_request_without_reply_times_out(cluster: Cluster) -> None:
    async with Producer("RRLonelyPG", client_config=cluster.client_config()) as p:
        with trio.fail_after(WAIT_S):
            with pytest.raises(RequestTimeoutError) as info:
                await p.request(Message("RRNobodyListens", b"anyone?"), timeout=0.5)
        assert info.value.code == REQUEST_TIMEOUT_EXCEPTION
        assert "wait reply message timeout, 500 ms" in str(info.value)
        assert len(p.instance.request_futures) == 0


async def test_reply_to_a_gone_requester_is_refused(cluster: Cluster) -> None:
    cc = cluster.client_config()
    async with Producer("RRLatePG", client_config=cc,
                        retry_times_when_send_failed=0) as p:
        gone = Message(REPLY_TOPIC, b"late", properties={
            MC.PROPERTY_MESSAGE_TYPE: "reply",
            MC.PROPERTY_CORRELATION_ID: "c-1",
            MC.PROPERTY_MESSAGE_REPLY_TO_CLIENT: "127.0.0.9@gone",
        })
        with pytest.raises(MQBrokerError) as info:
            await p.send_reply(gone)
        assert info.value.code == ResponseCode.SYSTEM_ERROR
        assert info.value.remark == (
            "push reply message fail, channel of <127.0.0.9@gone> not found.")
        anonymous = Message(REPLY_TOPIC, b"who", properties={MC.PROPERTY_MESSAGE_TYPE: "reply"})
        with pytest.raises(MQBrokerError) as info:
            await p.send_reply(anonymous)
        assert info.value.remark == "reply message properties[REPLY_TO_CLIENT] is null"
        with pytest.raises(MQClientError, match="not a reply"):
            await p.send_reply(Message(REPLY_TOPIC, b"plain"))


def test_create_reply_message_needs_the_cluster_property() -> None:
    from rmq_cluster.client.model import MessageQueue

    req = ReceivedMessage(
        topic="T", body=b"x", properties={MC.PROPERTY_CORRELATION_ID: "c"},
        queue=MessageQueue("T", "b", 0), queue_offset=0, commitlog_offset=0, msg_id="m",
        reconsume_times=0, born_timestamp=0, store_timestamp=0, sys_flag=0, flag=0,
        born_host=("127.0.0.1", 1), store_host=("127.0.0.1", 2), body_crc=0,
    )
    with pytest.raises(MQClientError) as info:
        create_reply_message(req, b"y")
    assert info.value.code == CREATE_REPLY_MESSAGE_EXCEPTION
    ok = create_reply_message(
        attrs.evolve(req, properties={
            MC.PROPERTY_CORRELATION_ID: "c", MC.PROPERTY_CLUSTER: "C",
            MC.PROPERTY_MESSAGE_REPLY_TO_CLIENT: "id", MC.PROPERTY_MESSAGE_TTL: "3000"}),
        b"y",
    )
    assert ok.topic == "C_REPLY_TOPIC"
    assert dict(ok.properties) == {"MSG_TYPE": "reply", "CORRELATION_ID": "c",
                                   "REPLY_TO_CLIENT": "id", "TTL": "3000"}


async def test_sync_facade_request_and_reply(cluster: Cluster) -> None:
    cc = cluster.client_config()

    def blocking() -> bytes:
        with SyncProducer("RRSyncRepPG", client_config=cc) as replier:
            def answer(msgs: list[ReceivedMessage]) -> object:
                for m in msgs:
                    if MC.PROPERTY_MESSAGE_REPLY_TO_CLIENT in m.properties:
                        replier.send_reply(create_reply_message(m, m.body.upper()))
                return None

            with SyncPushConsumer("RRSyncCG", answer, {"RRSyncT": "*"}, client_config=cc,
                                  consume_from=ConsumeFromWhere.FIRST_OFFSET), SyncProducer(
                    "RRSyncReqPG", client_config=cc) as requester:
                # the first request may go out before the consumer has its queues: it is
                # consumed from the first offset once it has, and answered then
                return requester.request(Message("RRSyncT", b"ping"), timeout=WAIT_S).body

    assert await trio.to_thread.run_sync(blocking) == b"PING"


def test_reply_pushed_by_a_java_broker_is_read() -> None:
    """The extFields RocketMQ 4.9's ReplyMessageProcessor sends (ReplyMessageRequestHeader,
    every value a string, hosts as InetSocketAddress.toString()), with a compressed body."""
    import zlib

    from rmq_cluster.client.request_reply import reply_from_push
    from rmq_cluster.cluster.remoting.headers import ReplyMessageRequestHeader

    ext = {
        "producerGroup": "RepPG", "topic": "DefaultCluster_REPLY_TOPIC",
        "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "queueId": "0",
        "sysFlag": str(0x1 | 0x300), "bornTimestamp": "1700000000000", "flag": "0",
        "properties": "MSG_TYPE\x01reply\x02CORRELATION_ID\x01c-9\x02REPLY_TO_CLIENT\x01"
                      "10.0.0.5@1#2\x02TTL\x013000\x02UNIQ_KEY\x01AB\x02PUSH_REPLY_TIME\x01"
                      "1700000000005",
        "reconsumeTimes": "0", "unitMode": "false", "bornHost": "/10.0.0.7:53000",
        "storeHost": "/10.0.0.1:10911", "storeTimestamp": "1700000000004",
    }
    header = ReplyMessageRequestHeader.from_ext_fields(ext)
    reply = reply_from_push(header, zlib.compress(b"answer" * 100), 1700000000006)
    assert reply.body == b"answer" * 100
    assert reply.born_host == ("10.0.0.7", 53000) and reply.store_host == ("10.0.0.1", 10911)
    assert reply.properties["CORRELATION_ID"] == "c-9"
    assert reply.properties["ARRIVE_TIME"] == "1700000000006"
    assert reply.msg_id == "AB" and reply.store_timestamp == 1700000000004
    # and what our broker sends is that header, field for field
    assert set(header.to_ext_fields()) == set(ext)
