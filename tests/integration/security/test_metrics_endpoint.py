"""/metrics on a live broker and NameServer: after a produce/consume round trip the counters
moved, and the text passes the strict exposition parser.

Scrapes are cheap for the broker (issue 31, item 8): on a real broker process holding 200
topics of 1024 queues, 32 scrapers scraping back to back (``metricsCacheSeconds=0``: every
wave builds) leave a send's latency close to an idle send's; concurrent scrapes share one
build and a cached text is served for ``metricsCacheSeconds``; connections are bounded; with
``metricsToken`` set a scrape needs ``Authorization: Bearer`` (401 before anything is built).
"""

from __future__ import annotations

import functools
import itertools
import statistics
import subprocess
import sys
import textwrap
import urllib.error
from pathlib import Path

import pytest
import trio

from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.broker.stats import RATE_SAMPLE_PERIOD_S, TPS_WINDOW_S
from rmq_cluster.client import (
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
)
from rmq_cluster.cluster.metrics import parse_exposition, sample_value
from rmq_cluster.cluster.metrics_server import MAX_SCRAPE_CONNECTIONS, fetch_metrics
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer
from tests.integration.broker.conftest import ok
from tests.integration.broker.conftest import running_cluster as raw_cluster
from tests.integration.broker.test_broker_process import _free_port, _stop
from tests.integration.broker.test_update_config_process import _boot
from tests.integration.client.conftest import WAIT_S, running_cluster

N = 20


async def scrape(port: int) -> dict:
    text = await trio.to_thread.run_sync(fetch_metrics, f"127.0.0.1:{port}")
    return parse_exposition(text)


async def test_broker_metrics_move_after_round_trip(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, metricsPort="0", metricsCacheSeconds="0") as cluster:
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

                def committed(ctrl: BrokerNode) -> bool:
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


# ------------------------------------------------------------------- cost of a scrape

TOPICS, QUEUES = 200, 1024
SCRAPERS = 32
#: Sends timed idle and while the scrapers run.
SENDS = 40


#: A separate process scraping with SCRAPERS threads until its stdin closes; prints "warm"
#: once every thread has scraped, and "done N" at the end (the test process keeps its own GIL
#: for the timed sends).
SCRAPER = textwrap.dedent(
    """
    import sys, threading
    from rmq_cluster.cluster.metrics_server import fetch_metrics
    addr, n = sys.argv[1], int(sys.argv[2])
    stop, lock, done, warm = threading.Event(), threading.Lock(), [0], threading.Event()

    def loop():
        while not stop.is_set():
            fetch_metrics(addr, 60.0)
            with lock:
                done[0] += 1
                if done[0] == n:
                    print("warm", flush=True)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    sys.stdin.read()
    stop.set()
    for t in threads:
        t.join(60)
    print("done", done[0], flush=True)
    """
)


async def _read_until(stream: trio.abc.ReceiveStream, word: bytes, seen: bytearray) -> None:
    """Read into ``seen`` until it holds ``word``."""
    while word not in seen:
        chunk = await stream.receive_some(4096)
        assert chunk, f"the scraper exited: {bytes(seen)!r}"
        seen += chunk


async def _timed_sends(client, addr: str, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for i in range(n):
        req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
            "a": "PG", "b": "LatencyTopic", "c": "TBW102", "d": "4", "e": "0", "f": "0",
            "g": "0", "h": "0"}, b"m%d" % i)
        t0 = trio.current_time()
        resp = await client.invoke(addr, req, 30.0)
        out.append(trio.current_time() - t0)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    return out


async def test_scrapes_of_a_large_broker_do_not_stall_its_sends(tmp_path: Path) -> None:
    metrics_port = _free_port()
    conf = tmp_path / "broker-m.properties"
    conf.write_text(
        "brokerClusterName=MCluster\nbrokerName=broker-m\nlistenPort=0\nhaListenPort=0\n"
        "bindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n"
        f"storePathRootDir={tmp_path}/store\nmappedFileSizeCommitLog=16777216\n"
        f"metricsPort={metrics_port}\nmetricsCacheSeconds=0\n"
    )
    proc = None
    try:
        proc, addr = await _boot(conf, tmp_path / "broker.log")
        async with open_remoting_client() as client:
            for i in range(TOPICS):
                ok(await client.invoke(addr, RemotingCommand.request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    {"topic": f"Big{i}", "defaultTopic": "TBW102", "readQueueNums": str(QUEUES),
                     "writeQueueNums": str(QUEUES), "perm": "6",
                     "topicFilterType": "SINGLE_TAG"}), 30.0))
            await _timed_sends(client, addr, 5)  # (the topic and connections exist)
            idle = await _timed_sends(client, addr, SENDS)
            maddr = f"127.0.0.1:{metrics_port}"
            scraper = await trio.lowlevel.open_process(
                [sys.executable, "-c", SCRAPER, maddr, str(SCRAPERS)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            assert scraper.stdin is not None and scraper.stdout is not None
            seen = bytearray()
            try:
                with trio.fail_after(120):
                    await _read_until(scraper.stdout, b"warm\n", seen)
                loaded = await _timed_sends(client, addr, SENDS)
                await scraper.stdin.aclose()  # the scrapers stop
                with trio.fail_after(120):
                    await _read_until(scraper.stdout, b"done", seen)
                    await _read_until(scraper.stdout, b"\n", after := bytearray(
                        seen.partition(b"done")[2]))
                    assert await scraper.wait() == 0
            finally:
                if scraper.returncode is None:
                    scraper.kill()
                    await scraper.wait()
            scrapes = int(bytes(after).strip())
            fams = parse_exposition(await trio.to_thread.run_sync(fetch_metrics, maddr))
    finally:
        await _stop(proc)
    idle_ms, loaded_ms = statistics.median(idle) * 1000, statistics.median(loaded) * 1000
    build_s = sample_value(fams, "rmq_broker_metrics_build_seconds") or 0.0
    print(f"\nsend median idle {idle_ms:.1f} ms, max {max(idle) * 1000:.1f} ms; "
          f"with {SCRAPERS} scrapers median {loaded_ms:.1f} ms, max {max(loaded) * 1000:.1f} ms; "
          f"{scrapes} scrapes, builds "
          f"{sample_value(fams, 'rmq_broker_metrics_builds')}, last build {build_s:.2f} s")
    assert sample_value(fams, "rocketmq_producer_offset", topic="LatencyTopic") == 5 + 2 * SENDS
    assert scrapes >= SCRAPERS
    # close to idle: a build slice (2 ms) and the scrapers' CPU on a shared machine, not whole
    # builds (main: median 959 ms, max 2.3 s, with a 6 ms idle median)
    assert loaded_ms < idle_ms + 200, (idle_ms, loaded_ms)
    assert max(loaded) < 1.0, max(loaded)


async def test_concurrent_scrapes_share_one_cached_build(tmp_path: Path) -> None:
    async with raw_cluster(tmp_path, metricsPort="0", metricsCacheSeconds="60") as cluster:
        broker = cluster.broker
        assert broker.metrics is not None and broker.metrics_address is not None
        maddr = f"127.0.0.1:{broker.metrics_address[1]}"
        texts: list[str] = []

        async def one() -> None:
            texts.append(await trio.to_thread.run_sync(fetch_metrics, maddr))

        async with trio.open_nursery() as nursery:
            for _ in range(MAX_SCRAPE_CONNECTIONS):
                nursery.start_soon(one)
        assert broker.metrics.builds == 1
        assert len(set(texts)) == 1 and len(texts) == MAX_SCRAPE_CONNECTIONS
        ok(await cluster.send("CachedTopic", b"x"))
        again = parse_exposition(await trio.to_thread.run_sync(fetch_metrics, maddr))
        assert sample_value(again, "rmq_broker_put_messages") == 0  # still the cached text
        assert broker.metrics.builds == 1
        # metricsCacheSeconds is a live key: 0 builds again at the next scrape
        ok(await cluster.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"metricsCacheSeconds=0\n"))
        fresh = parse_exposition(await trio.to_thread.run_sync(fetch_metrics, maddr))
        assert sample_value(fresh, "rmq_broker_put_messages") == 1
        assert broker.metrics.builds == 2


async def _http(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    reply = b""
    try:
        await stream.send_all(request)
        with trio.fail_after(WAIT_S):
            while chunk := await stream.receive_some(65536):
                reply += chunk
    finally:
        await stream.aclose()
    return reply


async def test_scrape_connections_are_bounded_and_a_token_is_required(tmp_path: Path) -> None:
    token = "s3cret-token"
    async with raw_cluster(tmp_path, metricsPort="0", metricsToken=token) as cluster:
        broker = cluster.broker
        assert broker.metrics_address is not None
        port = broker.metrics_address[1]
        get = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
        assert (await _http(port, get + b"\r\n")).startswith(b"HTTP/1.1 401")
        wrong = await _http(port, get + b"Authorization: Bearer nope\r\n\r\n")
        assert wrong.startswith(b"HTTP/1.1 401") and b"WWW-Authenticate: Bearer" in wrong
        with pytest.raises(urllib.error.HTTPError, match="401"):
            await trio.to_thread.run_sync(fetch_metrics, f"127.0.0.1:{port}")
        assert broker.metrics is not None and broker.metrics.builds == 0  # nothing built
        text = await trio.to_thread.run_sync(
            functools.partial(fetch_metrics, f"127.0.0.1:{port}", token=token))
        assert sample_value(parse_exposition(text), "rmq_broker_put_messages") == 0
        # the token is a secret: masked in the config answer
        conf = ok(await cluster.call(RequestCode.GET_BROKER_CONFIG))
        assert token.encode() not in bytes(conf.body) and b"metricsToken=******" in bytes(
            conf.body)
        # idle connections hold every slot: one more is closed at once, unanswered
        held = [await trio.open_tcp_stream("127.0.0.1", port)
                for _ in range(MAX_SCRAPE_CONNECTIONS)]
        try:
            with trio.fail_after(WAIT_S):
                while True:  # (accepted in order: until the listener counted them all)
                    try:
                        reply = await _http(port, get + b"\r\n")
                    except trio.BrokenResourceError:
                        break  # reset: closed with the request unread
                    if not reply:
                        break
                    assert reply.startswith(b"HTTP/1.1 401"), reply
        finally:
            for stream in held:
                await stream.aclose()
        with trio.fail_after(WAIT_S):  # slots come back when their connections close
            authorized = get + f"Authorization: Bearer {token}\r\n\r\n".encode()
            while not (await _http(port, authorized)).startswith(b"HTTP/1.1 200"):
                pass


async def test_namesrv_metrics_token(tmp_path: Path) -> None:
    cfg = NamesrvConfig(
        kv_config_path=str(tmp_path / "kv.json"), config_store_path=str(tmp_path / "ns.props"),
        bind_address="127.0.0.1", listen_port=0, metrics_port=0, metrics_token="ns-token",
    )
    async with trio.open_nursery() as nursery:
        ns = NamesrvServer(cfg)
        await nursery.start(ns.serve)
        assert ns.metrics_address is not None
        addr = f"127.0.0.1:{ns.metrics_address[1]}"
        with pytest.raises(urllib.error.HTTPError, match="401"):
            await trio.to_thread.run_sync(fetch_metrics, addr)
        text = await trio.to_thread.run_sync(
            functools.partial(fetch_metrics, addr, token="ns-token"))
        assert sample_value(parse_exposition(text), "rmq_namesrv_live_brokers") == 0
        nursery.cancel_scope.cancel()


# ------------------------------------------------------------------- rates over a window

#: Messages per second the steady load sends, and how far a rate may stray from the rate the
#: producer achieved over the same 10 s (TPS_WINDOW_S).
RATE, RATE_TOLERANCE = 100, 0.2
SCRAPES, SCRAPE_EVERY_S = 4, 2.0


async def test_rates_under_a_steady_load_are_the_send_rate(tmp_path: Path) -> None:
    """Issue 38, item 8: under a steady load, four scrapes a few seconds apart give broker,
    producer, consumer and pull rates within RATE_TOLERANCE of the rate the producer achieved
    over the stated window (the last 10 s), and no series repeats one value (stuck)."""
    async with running_cluster(tmp_path, metricsPort="0", metricsCacheSeconds="1") as cluster:
        broker = cluster.broker
        assert broker.metrics_address is not None
        port = broker.metrics_address[1]
        cc = cluster.client_config()
        acked: list[float] = []
        progress = trio.Event()

        def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            return ConsumeResult.SUCCESS

        async def steady_load(producer: Producer) -> None:
            nonlocal progress
            start = trio.current_time()
            for i in itertools.count():
                await trio.sleep_until(start + i / RATE)  # the load's pace
                await producer.send(Message("RateTopic", b"r%d" % i))
                acked.append(trio.current_time())
                progress.set()
                progress = trio.Event()

        async def until_acked(count: int) -> None:
            with trio.fail_after(3 * count / RATE):
                while len(acked) < count:
                    await progress.wait()

        seen: dict[str, list[float]] = {}
        async with Producer("RatePG", client_config=cc) as producer, trio.open_nursery() as n:
            consumer = PushConsumer("RateGroup", listener=listener, client_config=cc)
            consumer.subscribe("RateTopic")
            async with consumer:
                n.start_soon(steady_load, producer)
                goal = int(RATE * (TPS_WINDOW_S + 2 * RATE_SAMPLE_PERIOD_S))
                await until_acked(goal)  # a full window of load (and a sample more)
                for _ in range(SCRAPES):
                    fams = await scrape(port)
                    now = trio.current_time()
                    achieved = sum(1 for t in acked if t > now - TPS_WINDOW_S) / TPS_WINDOW_S
                    assert achieved > RATE * (1 - RATE_TOLERANCE), "the load fell behind its pace"
                    for name, labels in (
                        ("rocketmq_broker_tps", {}),
                        ("rocketmq_producer_tps", {"topic": "RateTopic"}),
                        ("rocketmq_consumer_tps", {"topic": "RateTopic", "group": "RateGroup"}),
                        ("rocketmq_broker_qps", {}),
                    ):
                        value = sample_value(fams, name, **labels)
                        assert value is not None, name
                        assert abs(value - achieved) <= RATE_TOLERANCE * achieved, (
                            name, value, achieved)
                        seen.setdefault(name, []).append(value)
                    goal += int(RATE * SCRAPE_EVERY_S)
                    await until_acked(goal)  # the next scrape a few seconds later
                n.cancel_scope.cancel()
        for name, values in seen.items():
            assert len(set(values)) > 1, f"{name} stuck at {values}"
