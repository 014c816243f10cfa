"""The client defends itself (issue 31 item 5), through a real broker, with the client in a
process of its own (``bomb_child.py``) whose peak RSS (VmHWM) is measured:

* a compression bomb (about 1 MB of zlib inflating to 1 GiB, stored by a raw SEND_MESSAGE_V2
  whose sysFlag says COMPRESSED) between two normal messages: a PullConsumer and a PushConsumer
  log it, skip it, deliver the next message and commit past it, their RSS bounded;
* a stranger's SEND_REPLY carrying such a bomb, and a forged reply, both for a correlation id
  the requester never sent: dropped with a logged reason before the body is touched, RSS
  bounded, and the requester's real request-reply still works.
"""

from __future__ import annotations

import json
import struct
import sys
import uuid
import zlib
from functools import cache
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
import trio

from rmq_cluster.client import (
    ConsumeFromWhere,
    Message,
    MessageQueue,
    MQClientError,
    Producer,
    PullConsumer,
    PushConsumer,
    RequestTimeoutError,
    frames,
    reply_listener,
)
from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.instance import REFUSED_NOT_A_BROKER
from rmq_cluster.cluster.protocol.message import MessageConst as MC
from rmq_cluster.cluster.protocol.message import encode_properties
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.processors import ProcessorTable
from rmq_cluster.cluster.remoting.server import RemotingServer

from .conftest import WAIT_S, Cluster

#: What the bomb inflates to (1 GiB; about 1 MB compressed, under the broker's maxMessageSize).
BOMB_INFLATED_BYTES: Final = 1 << 30
#: How much the client process's peak RSS may grow while it meets the bomb.
RSS_GROWTH_BOUND_BYTES: Final = 200 * 1024 * 1024
#: COMPRESSED | ZLIB, as Java 4.9 marks a compressed body.
SYSFLAG_ZLIB_COMPRESSED: Final = 0x301
CHILD: Final = Path(__file__).with_name("bomb_child.py")
CHILD_TIMEOUT_S: Final = 60.0
_MIB: Final = 1 << 20
#: A PUSH_REPLY_MESSAGE_TO_CLIENT header as a 4.9 broker writes it.
REPLY_HEADER: Final = {
    "producerGroup": "RepPG", "topic": "TestCluster_REPLY_TOPIC", "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": str(SYSFLAG_ZLIB_COMPRESSED),
    "bornTimestamp": "1", "flag": "0", "properties": "MSG_TYPE\x01reply\x02CORRELATION_ID\x01c",
    "reconsumeTimes": "0", "unitMode": "false", "bornHost": "/127.0.0.1:1",
    "storeHost": "/127.0.0.1:2", "storeTimestamp": "2",
}


@cache
def zlib_bomb(inflated: int = BOMB_INFLATED_BYTES) -> bytes:
    """A valid zlib stream of ``inflated`` zero bytes, made in a blink: after a full flush,
    each MiB of zeros compresses to the same block, so the block is repeated and the Adler-32
    of n zeros ((n mod 65521) << 16 | 1) closes the stream."""
    zeros = bytes(_MIB)
    c = zlib.compressobj(9)
    head = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.flush()[:-4]
    adler = ((inflated % 65521) << 16) | 1
    return head + block * (inflated // _MIB - 1) + tail + struct.pack(">I", adler)


def test_zlib_bomb_is_what_it_says() -> None:
    small = zlib_bomb(8 * _MIB)
    assert zlib.decompress(small) == bytes(8 * _MIB)
    assert len(zlib_bomb()) < 2 * _MIB


async def _raw(addr: str, cmd: Any) -> Any:
    """One request from a stranger's connection (not a client instance)."""
    async with open_remoting_client(node="stranger") as stranger:
        return await stranger.invoke(addr, cmd, WAIT_S)


def _raw_send(topic: str, broker: str, queue_id: int, body: bytes, props: dict[str, str],
              code: int = RequestCode.SEND_MESSAGE_V2) -> Any:
    cmd = frames.send_message(
        group="StrangerPG", topic=topic, queue_id=queue_id, sys_flag=SYSFLAG_ZLIB_COMPRESSED,
        born_timestamp=1, flag=0, properties=encode_properties(props).decode(), body=body,
        broker_name=broker,
    )
    return attrs.evolve(cmd, code=int(code))


@attrs.define
class Handshake:
    """For a child that prints a first line and then waits for ``go`` on stdin."""

    first_line: dict[str, Any] | None = None
    first_line_ready: trio.Event = attrs.field(factory=trio.Event)
    go: trio.Event = attrs.field(factory=trio.Event)


async def _run_child(*args: str, handshake: Handshake | None = None
                     ) -> tuple[dict[str, Any], str]:
    """Run bomb_child.py; (its last JSON line, its stderr). Killed on timeout or failure."""
    out = bytearray()
    err = bytearray()

    async def read_err(stream: Any) -> None:
        async for chunk in stream:
            err.extend(chunk)

    async def read_out(stream: Any) -> None:
        async for chunk in stream:
            out.extend(chunk)
            if handshake is not None and handshake.first_line is None and b"\n" in out:
                handshake.first_line = json.loads(out.split(b"\n", 1)[0])
                handshake.first_line_ready.set()

    proc = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), *args], stdin=-1, stdout=-1, stderr=-1)
    try:
        async with trio.open_nursery() as n:
            n.start_soon(read_err, proc.stderr)
            n.start_soon(read_out, proc.stdout)
            with trio.fail_after(CHILD_TIMEOUT_S):
                if handshake is not None:
                    await handshake.go.wait()
                    assert proc.stdin is not None
                    await proc.stdin.send_all(b"go\n")
                await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    return json.loads(out.strip().splitlines()[-1]), text


async def _bomb_between_two(cluster: Cluster, topic: str, *, after: bool = True
                            ) -> tuple[str, int]:
    """``before``, the bomb, ``after`` (unless not ``after``) in queue 0 of ``topic``; (broker
    name, bomb offset)."""
    cc = cluster.client_config()
    async with Producer("BombPG", client_config=cc) as p:
        first = await p.send(Message(topic, b"before"), queue=MessageQueue(topic, "broker-a", 0))
        resp = await _raw(cluster.addr, _raw_send(topic, "broker-a", 0, zlib_bomb(),
                                                  {MC.PROPERTY_KEYS: "bomb"}))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        if after:
            await p.send(Message(topic, b"after"), queue=first.queue)
    return first.queue.broker_name, first.queue_offset + 1


def _assert_skipped(result: dict[str, Any], log: str, bomb_offset: int) -> None:
    print("client process:", result)  # the RSS figure, shown with -s
    assert result["bodies"] == ["before", "after"], result["bodies"]
    assert result["skipped"] == 1
    assert result["hwm_growth"] < RSS_GROWTH_BOUND_BYTES, result["hwm_growth"]
    skipped = [json.loads(line) for line in log.splitlines()
               if "message skipped" in line and line.startswith("{")]
    assert len(skipped) == 1, log[-4000:]
    assert skipped[0]["queue_offset"] == bomb_offset and skipped[0]["queue_id"] == 0
    assert "inflates past" in skipped[0]["reason"] and skipped[0]["msg_id"]


async def test_pull_consumer_skips_a_compression_bomb(cluster: Cluster) -> None:
    broker, bomb_offset = await _bomb_between_two(cluster, "BombPullT")
    result, log = await _run_child("pull", cluster.ns_addr, "BombPullT", "BombPullCG", "after")
    _assert_skipped(result, log, bomb_offset)
    async with PullConsumer("BombPullCG", client_config=cluster.client_config()) as pc:
        assert await pc.committed(MessageQueue("BombPullT", broker, 0)) == bomb_offset + 2


async def test_pull_consumer_commits_past_a_bomb_at_the_end_of_its_queue(
    cluster: Cluster,
) -> None:
    broker, bomb_offset = await _bomb_between_two(cluster, "BombTailT", after=False)
    result, _log = await _run_child("pull", cluster.ns_addr, "BombTailT", "BombTailCG", "before")
    assert result["bodies"] == ["before"] and result["skipped"] == 1
    assert result["hwm_growth"] < RSS_GROWTH_BOUND_BYTES, result["hwm_growth"]
    async with PullConsumer("BombTailCG", client_config=cluster.client_config()) as pc:
        assert await pc.committed(MessageQueue("BombTailT", broker, 0)) == bomb_offset + 1


async def test_push_consumer_skips_a_compression_bomb(cluster: Cluster) -> None:
    broker, bomb_offset = await _bomb_between_two(cluster, "BombPushT")
    result, log = await _run_child("push", cluster.ns_addr, "BombPushT", "BombPushCG", "after")
    _assert_skipped(result, log, bomb_offset)
    async with PullConsumer("BombPushCG", client_config=cluster.client_config()) as pc:
        assert await pc.committed(MessageQueue("BombPushT", broker, 0)) == bomb_offset + 2


async def test_forged_and_bomb_replies_are_dropped_and_request_reply_works(
    cluster: Cluster,
) -> None:
    cc = cluster.client_config()
    topic = "BombRequestT"
    reply_topic = "TestCluster_REPLY_TOPIC"
    handshake = Handshake()
    async with Producer("BombReplierPG", client_config=cc) as replier:
        await replier.send(Message(topic, b"create"))
        consumer = PushConsumer("BombReplierCG", client_config=cc,
                                listener=reply_listener(replier, lambda m: b"re:" + m.body),
                                consume_from=ConsumeFromWhere.FIRST_OFFSET)
        consumer.subscribe(topic)
        async with consumer, trio.open_nursery() as n:
            results: list[tuple[dict[str, Any], str]] = []

            async def child() -> None:
                results.append(await _run_child(
                    "request", cluster.ns_addr, topic, "BombRequesterPG", "ping",
                    handshake=handshake))

            n.start_soon(child)
            with trio.fail_after(CHILD_TIMEOUT_S):
                await handshake.first_line_ready.wait()
            assert handshake.first_line is not None
            client_id = handshake.first_line["client_id"]
            for body in (zlib_bomb(), zlib.compress(b"forged")):
                props = {MC.PROPERTY_MESSAGE_TYPE: "reply",
                         MC.PROPERTY_MESSAGE_REPLY_TO_CLIENT: client_id,
                         MC.PROPERTY_CORRELATION_ID: str(uuid.uuid4())}
                resp = await _raw(cluster.addr, _raw_send(
                    reply_topic, "broker-a", 0, body, props, RequestCode.SEND_REPLY_MESSAGE_V2))
                # the broker answers once the requester answered its push
                assert resp.code == ResponseCode.SUCCESS, resp.remark
            handshake.go.set()
    (result, log), = results
    print("client process:", result)  # the RSS figure, shown with -s
    assert result["reply"] == "re:ping" and result["waiting"] == 0
    assert result["hwm_growth"] < RSS_GROWTH_BOUND_BYTES, result["hwm_growth"]
    dropped = [json.loads(line) for line in log.splitlines()
               if "reply dropped: no request waits for it" in line and line.startswith("{")]
    assert len(dropped) == 2, log[-4000:]


async def test_broker_to_client_requests_refused_on_a_connection_that_is_not_a_broker(
    nursery: trio.Nursery,
) -> None:
    """A NameServer (or any address the client dialed that is not a broker of its routes)
    that calls the client back gets nothing: not a consumer's running info, not a listener run
    on its message, not a reply read."""
    answers: dict[int, Any] = {}

    async def on_route(conn: Any, req: Any) -> Any:
        calls = {
            RequestCode.GET_CONSUMER_RUNNING_INFO: frames.request(
                RequestCode.GET_CONSUMER_RUNNING_INFO,
                {"consumerGroup": "GateCG", "clientId": "x"}),
            RequestCode.CONSUME_MESSAGE_DIRECTLY: frames.request(
                RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "GateCG"}),
            RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT: frames.request(
                RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, REPLY_HEADER, zlib.compress(b"x")),
        }
        for code, cmd in calls.items():
            answers[code] = await conn.invoke(cmd, WAIT_S)
        return req.response(ResponseCode.TOPIC_NOT_EXIST, "no route")

    hostile = RemotingServer(ProcessorTable({RequestCode.GET_ROUTEINFO_BY_TOPIC: on_route}),
                             node="hostile-namesrv")
    host, port = await nursery.start(hostile.serve, "127.0.0.1", 0)
    seen: list[Any] = []
    consumer = PushConsumer("GateCG", namesrv_addr=f"{host}:{port}",
                            client_config=ClientConfig(client_ip="127.0.0.1"),
                            listener=seen.append)
    consumer.subscribe("GateT")
    with trio.fail_after(WAIT_S):
        async with consumer:
            pass
    assert set(answers) == {RequestCode.GET_CONSUMER_RUNNING_INFO,
                            RequestCode.CONSUME_MESSAGE_DIRECTLY,
                            RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT}
    for resp in answers.values():
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == REFUSED_NOT_A_BROKER
        assert not resp.body
    assert not seen


async def test_reply_over_the_requesters_bound_fails_the_request_at_once(
    cluster: Cluster,
) -> None:
    """A reply for a request that does wait, but inflating past the requester's
    max_message_bytes: refused (not inflated past the bound), and the request fails with that
    reason instead of waiting for its timeout."""
    cc = cluster.client_config()
    topic = "BoundedReplyT"
    async with Producer("BoundedReqPG", client_config=cc, max_message_bytes=16 * 1024
                        ) as requester, Producer("BoundedRepPG", client_config=cc) as replier:
        await replier.send(Message(topic, b"create"))
        consumer = PushConsumer("BoundedRepCG", client_config=cc,
                                listener=reply_listener(replier, lambda m: b"z" * 65536),
                                consume_from=ConsumeFromWhere.FIRST_OFFSET)
        consumer.subscribe(topic)
        async with consumer:
            with trio.fail_after(WAIT_S), pytest.raises(MQClientError) as caught:
                await requester.request(Message(topic, b"big?"), timeout=2 * WAIT_S)
    assert not isinstance(caught.value, RequestTimeoutError)
    assert "reply was refused" in str(caught.value) and "16384" in str(caught.value)
    assert len(requester.instance.request_futures) == 0
