"""Message traces written by our client (``enable_msg_trace``) into a broker with
``traceTopicEnable``, read back by key and by ``rmq-cluster queryMsgTraceById`` (in-process
cluster; the CLI in a worker thread of the test's loop)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import trio

from rmq_cluster.cli.main import main
from rmq_cluster.client import (
    Admin,
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    SendResult,
)
from rmq_cluster.client.errors import NoRouteError
from rmq_cluster.client.instance import ClientInstance
from rmq_cluster.client.trace import TraceDispatcher
from rmq_cluster.cluster.protocol.trace import (
    DEFAULT_TRACE_TOPIC,
    PubRecord,
    TraceType,
    TraceView,
    decode,
)

from .conftest import WAIT_S, Cluster, running_cluster

TOPIC = "TraceT"


async def views_until(admin: Admin, msg_id: str, kinds: set[TraceType],
                      topic: str = DEFAULT_TRACE_TOPIC) -> list[TraceView]:
    """The trace of ``msg_id`` once it holds every kind in ``kinds`` (polled: the records are
    shipped asynchronously and indexed a moment after they are stored)."""
    with trio.fail_after(WAIT_S):
        while True:
            views = await admin.query_msg_trace(msg_id, topic)
            if kinds <= {v.kind for v in views}:
                return views
            await trio.sleep(0.05)


async def cli_out(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    with trio.fail_after(WAIT_S * 2):
        code = await trio.to_thread.run_sync(main, list(argv))
    # the in-process nodes log to stdout too: keep the CLI's own lines
    out = capsys.readouterr().out
    return code, "\n".join(line for line in out.splitlines() if '"event"' not in line)


async def test_producer_and_push_consumer_traces_read_back(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_cluster(tmp_path, traceTopicEnable="true") as cluster:
        cc = cluster.client_config()
        got: list[ReceivedMessage] = []
        all_in = trio.Event()

        async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(msgs)
            if len(got) >= 3:
                all_in.set()
            return ConsumeResult.SUCCESS

        consumer = PushConsumer("TraceCG", client_config=cc, listener=listener,
                                consume_from=ConsumeFromWhere.FIRST_OFFSET,
                                enable_msg_trace=True)
        consumer.subscribe(TOPIC, "*")
        async with Admin(client_config=cc) as admin:
            # the broker made the trace topic at start (traceTopicEnable)
            route = await admin.topic_route(DEFAULT_TRACE_TOPIC)
            assert [b.broker_name for b in route.broker_datas] == ["broker-a"]
            await admin.update_topic(TOPIC, broker_addr=cluster.addr, read_queue_nums=4,
                                     write_queue_nums=4)
            async with Producer("TracePG", client_config=cc, enable_msg_trace=True) as p:
                sent = [await p.send(Message(TOPIC, f"m{i}".encode(), tags="TagA",
                                             keys=f"order-{i}")) for i in range(3)]
            async with consumer:
                with trio.fail_after(WAIT_S):
                    await all_in.wait()
            await check_trace(admin, cluster, sent[1], capsys)


async def check_trace(admin: Admin, cluster: Cluster, sent: SendResult,
                      capsys: pytest.CaptureFixture[str]) -> None:
    views = await views_until(admin, sent.msg_id, {TraceType.PUB, TraceType.SUB_BEFORE,
                                                   TraceType.SUB_AFTER})
    (pub,) = [v for v in views if v.kind is TraceType.PUB]
    assert (pub.group, pub.topic, pub.tags, pub.keys) == ("TracePG", TOPIC, "TagA", "order-1")
    assert pub.store_host == cluster.addr and pub.offset_msg_id == sent.offset_msg_id
    assert pub.status == "success" and pub.client_host == "127.0.0.1"
    (after,) = [v for v in views if v.kind is TraceType.SUB_AFTER]
    assert after.group == "TraceCG" and after.status == "success" and after.keys == "order-1"
    # the trace message is keyed by the message's keys too (a key query finds it)
    by_key = await admin.query_msg_by_key(DEFAULT_TRACE_TOPIC, "order-1")
    assert by_key and all(any(r.msg_id == sent.msg_id for r in decode(m.body).records)
                          for m in by_key)

    ns = cluster.ns_addr
    code, text = await cli_out(capsys, "queryMsgTraceById", "-n", ns, "-i", sent.msg_id)
    assert code == 0, text
    rows = [re.split(r"\s+", line.strip()) for line in text.splitlines() if line.strip()]
    assert rows[0] == ["#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes",
                       "#Status"]
    assert rows[1][:3] == ["Pub", "TracePG", "127.0.0.1"] and rows[1][-1] == "success"
    assert rows[2][:2] == ["#Type", "#ConsumerGroup"]
    assert rows[3][:3] == ["Sub", "TraceCG", "127.0.0.1"] and rows[3][-1] == "success"
    assert re.fullmatch(r"\d+ms", rows[3][-2])
    code, text = await cli_out(capsys, "queryMsgTraceById", "-n", ns, "-i", sent.msg_id,
                               "--json")
    assert code == 0, text
    lines = [json.loads(line) for line in text.splitlines()]
    assert {d["type"] for d in lines} == {"Pub", "SubBefore", "SubAfter"}
    assert all(d["msgId"] == sent.msg_id for d in lines)


async def test_pull_consumer_traces_into_a_custom_topic(cluster: Cluster) -> None:
    cc = cluster.client_config()
    async with Admin(client_config=cc) as admin:
        await admin.update_topic("MyTraces", broker_addr=cluster.addr)
        await admin.update_topic(TOPIC, broker_addr=cluster.addr)
        async with Producer("TracePG2", client_config=cc, enable_msg_trace=True,
                            trace_topic="MyTraces") as p:
            sent = await p.send(Message(TOPIC, b"x", keys="k9"))
        async with PullConsumer("TracePull", client_config=cc, enable_msg_trace=True,
                                trace_topic="MyTraces") as pc:
            await pc.assign(await pc.fetch_queues(TOPIC))
            for mq in pc.assigned:
                await pc.seek_to_begin(mq)
            with trio.fail_after(WAIT_S):
                while not (msgs := await pc.poll(1.0)):
                    pass
            assert [m.msg_id for m in msgs] == [sent.msg_id]
        views = await views_until(admin, sent.msg_id, {TraceType.PUB, TraceType.SUB_AFTER},
                                  "MyTraces")
        assert {v.group for v in views} == {"TracePG2", "TracePull"}
        with pytest.raises(NoRouteError):  # no traceTopicEnable: no default trace topic
            await admin.query_msg_trace(sent.msg_id)


class _Held:
    """A trace sender that holds every send until released."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.bodies: list[bytes] = []

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def send(self, msg: Message) -> Any:
        await self.release.wait()
        self.bodies.append(msg.body)


def _pub(i: int) -> PubRecord:
    return PubRecord(timestamp=1, region="DefaultRegion", group="G", topic="T", msg_id=f"id{i}",
                     tags="null", keys="null", store_host="127.0.0.1:1", body_length=1,
                     cost_ms=0, msg_type=0, offset_msg_id="x", success=True)


async def test_a_full_trace_queue_drops_and_counts_never_blocks(cluster: Cluster) -> None:
    async with ClientInstance(cluster.client_config()) as instance:
        sender = _Held()
        tracer = TraceDispatcher(instance, sender, queue_size=2)
        await tracer.start()
        for i in range(10):  # no checkpoint between: the queue holds 2, the rest are dropped
            tracer.append(_pub(i))
        assert tracer.dropped == 8
        sender.release.set()
        await tracer.close()
        assert tracer.sent_records == 2 and tracer.dropped == 8
        assert [r.msg_id for b in sender.bodies for r in decode(b).records] == ["id0", "id1"]
