"""/metrics on a live broker and NameServer: after a produce/consume round trip the counters
moved, and the text passes the strict exposition parser."""

from __future__ import annotations

from pathlib import Path

import trio

from rmq_cluster.broker.controller import BrokerController
from rmq_cluster.client import (
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
)
from rmq_cluster.cluster.metrics import parse_exposition, sample_value
from rmq_cluster.cluster.metrics_server import fetch_metrics
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer
from tests.integration.client.conftest import WAIT_S, running_cluster

N = 20


async def scrape(port: int) -> dict:
    text = await trio.to_thread.run_sync(fetch_metrics, f"127.0.0.1:{port}")
    return parse_exposition(text)


async def test_broker_metrics_move_after_round_trip(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, metricsPort="0") as cluster:
        broker = cluster.broker
        assert broker.metrics_address is not None
        port = broker.metrics_address[1]
        before = await scrape(port)
        assert sample_value(before, "rmq_broker_put_messages") == 0
        assert sample_value(before, "rmq_broker_send_latency_seconds_count") == 0
        cc = cluster.client_config()
        got: set[bytes] = set()
        done = trio.Event()

        def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.update(m.body for m in msgs)
            if len(got) >= N:
                done.set()
            return ConsumeResult.SUCCESS

        async with Producer("MPG", client_config=cc) as producer:
            for i in range(N):
                await producer.send(Message("MetricsTopic", b"m%d" % i))
            consumer = PushConsumer("MGroup", listener=listener, client_config=cc)
            consumer.subscribe("MetricsTopic")
            async with consumer:
                with trio.fail_after(WAIT_S):
                    await done.wait()

                def committed(ctrl: BrokerController) -> bool:
                    return sum(ctrl.offsets.table.get("MetricsTopic@MGroup", {}).values()) >= N

                with trio.fail_after(WAIT_S):  # re-checked as pulls (carrying commits) park
                    await broker.wait_until(committed)
                after = await scrape(port)
        assert sample_value(after, "rmq_broker_put_messages") == N
        assert (sample_value(after, "rmq_broker_get_messages") or 0) >= N
        assert sample_value(after, "rmq_broker_send_latency_seconds_count") == N
        assert sample_value(after, "rmq_broker_send_latency_seconds_bucket", le="+Inf") == N
        assert sample_value(after, "rocketmq_producer_offset", topic="MetricsTopic") == N
        assert sample_value(after, "rocketmq_consumer_offset", topic="MetricsTopic",
                            group="MGroup") == N
        assert sample_value(after, "rocketmq_group_diff", topic="MetricsTopic",
                            group="MGroup") == 0
        assert (sample_value(after, "rocketmq_brokeruntime_commitlog_maxoffset") or 0) > 0
        assert sample_value(after, "rocketmq_broker_tps") is not None
        assert sample_value(after, "rocketmq_producer_tps", topic="MetricsTopic") is not None
        assert sample_value(after, "rmq_broker_long_poll_holds") is not None
        assert sample_value(after, "rmq_acl_denials") == 0


async def test_namesrv_metrics_and_http_errors(tmp_path: Path) -> None:
    cfg = NamesrvConfig(
        kv_config_path=str(tmp_path / "kv.json"), config_store_path=str(tmp_path / "ns.props"),
        bind_address="127.0.0.1", listen_port=0, metrics_port=0,
    )
    async with trio.open_nursery() as nursery:
        ns = NamesrvServer(cfg)
        await nursery.start(ns.serve)
        assert ns.metrics_address is not None
        port = ns.metrics_address[1]
        fams = await scrape(port)
        assert sample_value(fams, "rmq_namesrv_live_brokers") == 0
        assert sample_value(fams, "rmq_namesrv_connections") == 0
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        with trio.fail_after(WAIT_S):
            while chunk := await stream.receive_some(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 404")
        await stream.aclose()
        nursery.cancel_scope.cancel()
