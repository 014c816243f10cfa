"""Broker benchmark: send and pull rates through a real broker process, beside the Trio
ping-pong baseline measured in the same run.

    python3 bench/produce.py [--seconds 3] [--body 1024] [--inflight 256] [--batch 32]
    python3 bench/produce.py --java-like-only [--java-inflight 32] [--seconds 20]
    python3 bench/produce.py --produce-consume [--pc-queues 1024] [--seconds 10]

The broker runs as ``mqbroker`` in a child process (ASYNC_FLUSH, a temp store, no
NameServer), so client and broker each get a core. Cases, all over one connection:
  * sync send, 1 in flight (SEND_MESSAGE_V2, ``--body`` bytes): rate, p50/p99;
  * pipelined send, ``--inflight`` in flight;
  * batch send: SEND_BATCH_MESSAGE of ``--batch`` x ``--body`` bytes, ``--batch-inflight``
    requests in flight;
  * pull: PULL_MESSAGE of 32 messages, one request per queue in flight, over the sent messages;
  * java-like send: ``--java-inflight`` (32) sync senders sharing one connection, each writing
    its next frame alone (one ``send`` per frame) as soon as its answer is read: the load of
    RocketMQ's benchmark Producer (``-w 32``) whose Netty client flushes every request;
    ``--java-like-only`` runs just this case (for profiling the broker: bench/README.md);
  * produce-consume (``--produce-consume``, run alone): the java-like send to a topic of
    ``--pc-queues`` queues while a consumer in a child process keeps up with long-polling
    PULL_MESSAGE frames (suspendTimeoutMillis 15 s, one pull in flight per queue, each sent
    in a ``send`` of its own as the Java consumer's Netty does): the load of RocketMQ's
    benchmark Producer + Consumer. Broker CPU per message (sent, each also consumed);
  * baseline: bench/remoting.py's plain Trio length-prefixed echo, ping-pong (1 in flight).
Prints one JSON object. Targets (issue 5): 1-in-flight send >= 0.6x ping-pong, batch >= 100 000
msgs/s, pipelined >= 40 000 msgs/s.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import _launch  # noqa: E402  (bench/_launch.py: the broker process)
import checkout  # noqa: E402, F401  (bench/checkout.py: this tree's rmq_cluster first)
import remoting as remoting_bench  # noqa: E402  (bench/remoting.py: the Trio baseline)

from rmq_cluster.cluster.logging import configure_logging  # noqa: E402
from rmq_cluster.cluster.protocol.message import encode_batch, encode_properties  # noqa: E402
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client  # noqa: E402
from rmq_cluster.cluster.remoting.codec import RemotingCommand, encode  # noqa: E402
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode  # noqa: E402

TOPIC = "BenchProduce"
BATCH_TOPIC = "BenchBatch"
QUEUES = 4
#: Raw lines added to the broker's properties.
EXTRA = os.environ.get("BENCH_BROKER_EXTRA", "")
PULL_BATCH = 32
_U32 = struct.Struct(">I")
#: STORETIMESTAMP in a stored record (IPv4 born host): after TOTALSIZE, MAGIC, BODYCRC, QUEUEID,
#: FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP, BORNHOST
_STORE_TS_AT = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8


def _send_ext(topic: str, queue_id: int, batch: bool = False) -> dict[str, str]:
    props = encode_properties({"TAGS": "TagA", "WAIT": "true"}).decode()
    return {
        "a": "BenchPG",
        "b": topic,
        "c": "TBW102",
        "d": str(QUEUES),
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": props,
        "j": "0",
        "k": "false",
        "m": "true" if batch else "false",
    }


async def _bench_broker(
    port: int, args: argparse.Namespace, broker_pid: int | None = None
) -> dict[str, Any]:
    body = os.urandom(args.body)
    out: dict[str, Any] = {}
    async with open_remoting_client(node="bench-client") as client:
        conn = await client.connection(f"127.0.0.1:{port}")
        queue_cycle = itertools.cycle(range(QUEUES))
        requests = [
            RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, _send_ext(TOPIC, q), body)
            for q in range(QUEUES)
        ]
        # create the topic (auto-create from TBW102) before measuring
        first = await conn.invoke(requests[0], timeout=10)
        if first.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"send failed: {first.code} {first.remark}")

        async def send() -> None:
            response = await conn.invoke(requests[next(queue_cycle)], timeout=30)
            if response.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"send failed: {response.code} {response.remark}")

        # raw frames: the broker's own rates
        frames = _frames(RequestCode.SEND_MESSAGE_V2, TOPIC, body)
        java = _java_like_case(port, requests, args.java_inflight, args.seconds,
                               0.5, broker_pid)
        out[f"send_{args.java_inflight}_java_like"] = java
        if args.java_like_only:
            return out
        one = await _raw_case(port, frames, 1, args.seconds, 0.3, broker_pid)
        many = await _raw_case(port, frames, args.inflight, args.seconds, 0.5, broker_pid)
        # the same through our Python client API (open_remoting_client + invoke)
        api_one = await remoting_bench._drive(send, 1, args.seconds, 0.3)
        api_many = await remoting_bench._drive(send, args.inflight, args.seconds, 0.5)
        for key, raw, api in (
            ("send_1_in_flight", one, api_one),
            (f"send_{args.inflight}_in_flight", many, api_many),
        ):
            out[key] = {
                "msgs_per_s": raw["req_per_s"],
                "p50_us": raw["p50_us"],
                "p99_us": raw["p99_us"],
                "broker_cpu_us_per_msg": raw["broker_cpu_us_per_req"],
                "via_client_api": {
                    "msgs_per_s": api["req_per_s"],
                    "p50_us": api["p50_us"],
                    "p99_us": api["p99_us"],
                },
            }

        items = [(0, body, {"UNIQ_KEY": f"{i:032X}", "TAGS": "TagA"}) for i in range(args.batch)]
        batch_body = encode_batch(items)
        batch_requests = [
            RemotingCommand.request(
                RequestCode.SEND_BATCH_MESSAGE, _send_ext(BATCH_TOPIC, q, batch=True), batch_body
            )
            for q in range(QUEUES)
        ]
        first = await conn.invoke(batch_requests[0], timeout=10)
        if first.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"batch send failed: {first.code} {first.remark}")

        batch_frames = [encode(r, 1 + i) for i, r in enumerate(batch_requests)]
        batch = await _raw_case(
            port, batch_frames, args.batch_inflight, args.seconds, 0.3, broker_pid
        )
        out["batch_send"] = {
            "messages_per_request": args.batch,
            "in_flight": args.batch_inflight,
            "requests_per_s": batch["req_per_s"],
            "msgs_per_s": batch["req_per_s"] * args.batch,
            "p50_us": batch["p50_us"],
            "p99_us": batch["p99_us"],
            "broker_cpu_us_per_msg": round(batch["broker_cpu_us_per_req"] / args.batch, 2),
        }

        # pull: one request per queue in flight, walking each queue from 0
        next_offset = dict.fromkeys(range(QUEUES), 0)
        pulled = 0
        pull_queues = itertools.cycle(range(QUEUES))

        async def pull() -> None:
            nonlocal pulled
            q = next(pull_queues)
            ext = {
                "consumerGroup": "BenchCG",
                "topic": TOPIC,
                "queueId": str(q),
                "queueOffset": str(next_offset[q]),
                "maxMsgNums": str(PULL_BATCH),
                "sysFlag": "4",
                "commitOffset": "0",
                "suspendTimeoutMillis": "0",
                "subscription": "*",
                "subVersion": "0",
            }
            response = await conn.invoke(
                RemotingCommand.request(RequestCode.PULL_MESSAGE, ext), timeout=30
            )
            if response.code == ResponseCode.SUCCESS:
                next_offset[q] = int(response.ext_fields["nextBeginOffset"])
                pulled += _count_records(response.body)
            else:
                next_offset[q] = 0  # walked off the end: start the queue again

        started = time.perf_counter()
        stats = await remoting_bench._drive(pull, QUEUES, args.seconds, 0.0)
        elapsed = time.perf_counter() - started
        out["pull"] = {
            "messages_per_request": PULL_BATCH,
            "in_flight": QUEUES,
            "requests_per_s": stats["req_per_s"],
            "msgs_per_s": round(pulled / elapsed),
            "p50_us": stats["p50_us"],
            "p99_us": stats["p99_us"],
        }
    return out


class _RawDriver:
    """A lean load generator: pre-encoded request frames written straight to a socket, responses
    matched in order (the broker answers inline requests of one connection in order), so the
    numbers measure the broker and not the Python client API."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = bytearray()

    async def read_responses(self, n: int) -> list[int]:
        """Read ``n`` response frames; their codes."""
        codes: list[int] = []
        while len(codes) < n:
            while len(self.buf) >= 8:
                (length,) = _U32.unpack_from(self.buf, 0)
                if len(self.buf) < 4 + length:
                    break
                header_len = _U32.unpack_from(self.buf, 4)[0] & 0xFFFFFF
                header = orjson.loads(bytes(self.buf[8 : 8 + header_len]))
                codes.append(header["code"])
                del self.buf[: 4 + length]
                if len(codes) == n:
                    return codes
            data = await self.stream.receive_some(256 * 1024)
            if not data:
                raise RuntimeError("broker closed the connection")
            self.buf += data
        return codes


async def _raw_case(
    port: int,
    frames: list[bytes],
    inflight: int,
    seconds: float,
    warmup: float,
    broker_pid: int | None = None,
) -> dict[str, float]:
    """Keep ``inflight`` requests outstanding for ``seconds``; rate and latency percentiles,
    and the broker's CPU time per request over the measured window (``broker_pid`` given):
    far less noisy than the rate on a shared machine."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    driver = _RawDriver(stream)
    sent_at: list[float] = []
    latencies: list[float] = []
    done = 0
    cpu_start = remoting_bench.cpu_seconds(broker_pid)
    cycle = itertools.cycle(frames)
    clock = time.perf_counter
    try:
        start = clock()
        measure_from = start + warmup
        stop_at = measure_from + seconds
        first = [next(cycle) for _ in range(inflight)]
        sent_at.extend([clock()] * inflight)
        await stream.send_all(b"".join(first))
        head = 0
        measured_start = None
        while True:
            now = clock()
            codes = await driver.read_responses(1)
            if codes[0] != ResponseCode.SUCCESS:
                raise RuntimeError(f"request failed with code {codes[0]}")
            now = clock()
            if now >= measure_from:
                if measured_start is None:
                    measured_start = now
                    cpu_start = remoting_bench.cpu_seconds(broker_pid)
                latencies.append(now - sent_at[head])
                done += 1
            head += 1
            if now >= stop_at:
                break
            # top up: everything answered so far is replaced in one write
            ready = len(driver.buf) >= 4
            if not ready or inflight == 1:
                batch = (len(sent_at) - head) < inflight
                if batch:
                    n = inflight - (len(sent_at) - head)
                    sent_at.extend([clock()] * n)
                    await stream.send_all(b"".join(next(cycle) for _ in range(n)))
        elapsed = clock() - (measured_start or start)
        cpu = remoting_bench.cpu_seconds(broker_pid) - cpu_start
    finally:
        await stream.aclose()
    lat = sorted(latencies)

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1e6, 1) if lat else 0.0

    return {
        "requests": done,
        "req_per_s": round(done / elapsed),
        "p50_us": pct(0.5),
        "p99_us": pct(0.99),
        "broker_cpu_us_per_req": round(cpu / max(1, done) * 1e6, 2),
    }


def _java_like_case(
    port: int,
    requests: list[RemotingCommand],
    threads: int,
    seconds: float,
    warmup: float,
    broker_pid: int | None = None,
) -> dict[str, float]:
    """The benchmark Producer's load without the JVM: ``threads`` threads share one blocking
    socket, each sending a request (encoded with a fresh opaque, written under a lock in a
    ``send`` of its own, as Netty's flush per request) and parking until a reader thread hands
    it its answer. Threads wake one by one, so requests reach the broker spread out as they do
    from a real client, not in bursts. Rate, latency percentiles, the broker's CPU time per
    request (measured window)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    write_lock = threading.Lock()
    waiters: dict[int, list[Any]] = {}  # opaque -> [event, response code]
    opaques = itertools.count(1)
    clock = time.perf_counter
    start = clock()
    measure_from = start + warmup
    stop_at = measure_from + seconds
    latencies: list[list[float]] = [[] for _ in range(threads)]
    failure: list[BaseException] = []
    cpu_marks: list[float] = []

    def sender(i: int) -> None:
        mine = latencies[i]
        n = i
        try:
            while not failure:
                t0 = clock()
                if t0 >= stop_at:
                    return
                opaque = next(opaques)
                slot: list[Any] = [threading.Event(), None]
                waiters[opaque] = slot
                frame = encode(requests[n % len(requests)], opaque)
                n += 1
                with write_lock:
                    sock.sendall(frame)
                if not slot[0].wait(30):
                    raise RuntimeError("no answer in 30 s")
                if slot[1] != ResponseCode.SUCCESS:
                    raise RuntimeError(f"request failed with code {slot[1]}")
                t1 = clock()
                if t0 >= measure_from:
                    mine.append(t1 - t0)
        except BaseException as exc:  # (reported by the caller)
            failure.append(exc)

    def reader() -> None:
        buf = bytearray()
        try:
            while not failure:
                data = sock.recv(256 * 1024)
                if not data:
                    return
                buf += data
                frames, used = _split_frames(buf)
                for header, _start, _end in frames:
                    slot = waiters.pop(header["opaque"], None)
                    if slot is not None:
                        slot[1] = header["code"]
                        slot[0].set()
                del buf[:used]
        except OSError:
            return

    read_thread = threading.Thread(target=reader, daemon=True)
    read_thread.start()
    workers = [threading.Thread(target=sender, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    try:
        time.sleep(max(0.0, measure_from - clock()))  # (a fixed warmup, not a condition)
        cpu_marks.append(remoting_bench.cpu_seconds(broker_pid))
        measured_start = clock()
        for w in workers:
            w.join(seconds + 60)
        elapsed = clock() - measured_start
        cpu_marks.append(remoting_bench.cpu_seconds(broker_pid))
    finally:
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        read_thread.join(5)
    if failure:
        raise RuntimeError(f"java-like sender failed: {failure[0]!r}")
    lat = sorted(x for mine in latencies for x in mine)
    done = len(lat)

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1e6, 1) if lat else 0.0

    return {
        "requests": done,
        "req_per_s": round(done / elapsed),
        "p50_us": pct(0.5),
        "p99_us": pct(0.99),
        "avg_rt_us": round(sum(lat) / max(1, done) * 1e6, 1),
        "broker_cpu_us_per_req": round((cpu_marks[1] - cpu_marks[0]) / max(1, done) * 1e6, 2),
    }


PC_TOPIC = "BenchPC"
PC_GROUP = "BenchPCG"
#: The Java consumer's long-polling suspend (DefaultMQPushConsumer: 15 s).
PC_SUSPEND_MS = 15_000
#: How long the consumer process may take to start (a loaded machine: seconds).
CONSUMER_START_TIMEOUT_S = 120.0


def _split_frames(buf: bytearray) -> tuple[list[tuple[dict[str, Any], int, int]], int]:
    """The whole remoting frames at the start of ``buf``: (JSON header, body start, body end)
    each, and how many bytes they take (the bench's readers parse answers without our codec)."""
    frames = []
    pos = 0
    while len(buf) - pos >= 8:
        (length,) = _U32.unpack_from(buf, pos)
        if len(buf) - pos < 4 + length:
            break
        header_len = _U32.unpack_from(buf, pos + 4)[0] & 0xFFFFFF
        header = orjson.loads(bytes(buf[pos + 8 : pos + 8 + header_len]))
        frames.append((header, pos + 8 + header_len, pos + 4 + length))
        pos += 4 + length
    return frames, pos


def _pull_frame(queue_id: int, offset: int, opaque: int) -> bytes:
    ext = {
        "consumerGroup": PC_GROUP,
        "topic": PC_TOPIC,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(PULL_BATCH),
        "sysFlag": str(0x2 | 0x4),  # suspend + subscription (no commit: no group state)
        "commitOffset": "0",
        "suspendTimeoutMillis": str(PC_SUSPEND_MS),
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
    }
    return encode(RemotingCommand.request(RequestCode.PULL_MESSAGE, ext), opaque)


def _consumer_child(
    port: int, queues: int, measure_from: float, stop_at: float, out: Any
) -> None:
    """The consumer (a process of its own, as the benchmark Consumer's JVM): one long-polling
    pull in flight per queue over one connection; counts the messages it receives between the
    wall-clock marks ``measure_from`` and ``stop_at``; sends (counted, pulls answered, pulls
    answered with messages) on ``out``."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(1.0)
    offsets = [0] * queues
    for q in range(queues):
        sock.sendall(_pull_frame(q, 0, q + 1))  # opaque - 1 = queue
    buf = bytearray()
    counted = answers = found = 0
    lags: list[float] = []  # ms from the store's timestamp of an answer's first record to its read
    try:
        while time.time() < stop_at:
            try:
                data = sock.recv(256 * 1024)
            except TimeoutError:
                continue
            if not data:
                raise RuntimeError("broker closed the consumer's connection")
            buf += data
            frames, used = _split_frames(buf)
            for header, start, end in frames:
                body = memoryview(buf)[start:end]
                q = (header["opaque"] - 1) % queues
                code = header["code"]
                ext = header.get("extFields") or {}
                if code == ResponseCode.SUCCESS:
                    n = _count_records(body)
                    found += 1
                    now = time.time()
                    if measure_from <= now < stop_at:
                        counted += n
                        if len(body) >= _STORE_TS_AT + 8:
                            stored_ms = int.from_bytes(body[_STORE_TS_AT : _STORE_TS_AT + 8], "big")
                            lags.append(now * 1000 - stored_ms)
                elif code not in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                                  ResponseCode.PULL_OFFSET_MOVED):
                    raise RuntimeError(f"pull failed: {code} {header.get('remark')}")
                body.release()
                answers += 1
                offsets[q] = int(ext.get("nextBeginOffset", offsets[q]))
                sock.sendall(_pull_frame(q, offsets[q], q + 1 + queues * (answers % 1000)))
            del buf[:used]
    finally:
        sock.close()
        lags.sort()
        out.send((counted, answers, found, [
            round(lags[min(len(lags) - 1, int(len(lags) * f))], 2) if lags else 0.0
            for f in (0.5, 0.99, 1.0)
        ]))
        out.close()


def _consumer_child_at(port: int, queues: int, warmup: float, seconds: float, out: Any) -> None:
    """``_consumer_child`` with its window counted from its own start (sent on ``out`` first:
    the parent starts the producer then)."""
    measure_from = time.time() + warmup
    stop_at = measure_from + seconds
    out.send((measure_from, stop_at))
    _consumer_child(port, queues, measure_from, stop_at, out)


def pc_requests(queues: int, body: bytes) -> list[RemotingCommand]:
    """The produce-consume case's sends: SEND_MESSAGE_V2 of ``body`` to each queue of the
    ``queues``-queue topic (bench/send_counts.py's ``--case pc`` sends the same)."""
    requests = []
    for q in range(queues):
        ext = _send_ext(PC_TOPIC, q)
        ext["d"] = str(queues)
        requests.append(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body))
    return requests


def prime_pc_topic(port: int, requests: list[RemotingCommand]) -> None:
    """Create the topic, then store one message per queue (every ConsumeQueue file exists
    before a measured window)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for batch in ([requests[0]], requests):
            sock.sendall(b"".join(encode(r, i + 1) for i, r in enumerate(batch)))
            buf = bytearray()
            for _ in batch:
                while len(buf) < 8 or len(buf) < 4 + _U32.unpack_from(buf, 0)[0]:
                    data = sock.recv(256 * 1024)
                    if not data:
                        raise RuntimeError("broker closed the connection")
                    buf += data
                header_len = _U32.unpack_from(buf, 4)[0] & 0xFFFFFF
                code = orjson.loads(bytes(buf[8 : 8 + header_len]))["code"]
                if code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"priming send failed: {code}")
                del buf[: 4 + _U32.unpack_from(buf, 0)[0]]


def _produce_consume_case(port: int, args: argparse.Namespace, broker_pid: int) -> dict[str, Any]:
    """The java-like send (``--java-inflight`` senders, 1 KiB) to a ``--pc-queues`` topic while
    a consumer process keeps up with long-polling pulls; the broker's CPU per message."""
    import multiprocessing

    queues = args.pc_queues
    requests = pc_requests(queues, os.urandom(args.body))
    prime_pc_topic(port, requests)
    warmup = args.pc_warmup
    ctx = multiprocessing.get_context("spawn")
    recv_end, send_end = ctx.Pipe(duplex=False)
    consumer = ctx.Process(target=_consumer_child_at,
                           args=(port, queues, warmup, args.seconds, send_end), daemon=True)
    consumer.start()
    send_end.close()
    try:
        # the consumer's pulls are out before the producer starts (on a loaded machine the
        # child's start alone may take seconds: wait for it, not for a fixed time)
        if not recv_end.poll(CONSUMER_START_TIMEOUT_S):
            raise RuntimeError("the consumer did not start")
        measure_from, stop_at = recv_end.recv()
        # (for a profiler: the measured window, wall clock)
        print(f"window {measure_from:.3f} {stop_at:.3f}", file=sys.stderr, flush=True)
        sent = _java_like_case(port, requests, args.java_inflight, args.seconds,
                               max(0.0, measure_from - time.time()), broker_pid)
        if not recv_end.poll(30):
            raise RuntimeError("the consumer did not report")
        consumed, answers, found, lag = recv_end.recv()
    finally:
        consumer.join(10)
        if consumer.is_alive():
            consumer.kill()
            consumer.join()
    return {
        "queues": queues,
        "senders": args.java_inflight,
        "sent_per_s": sent["req_per_s"],
        "consumed_per_s": round(consumed / args.seconds),
        "avg_send_rt_us": sent["avg_rt_us"],
        "p99_send_us": sent["p99_us"],
        "pull_answers": answers,
        "pull_answers_with_messages": found,
        "msgs_per_found_pull": round(consumed / max(1, found), 2) if found else 0,
        # the consumer's lag: store time of a found pull's first record -> the answer read
        "consumer_lag_ms_p50": lag[0],
        "consumer_lag_ms_p99": lag[1],
        "consumer_lag_ms_max": lag[2],
        "broker_cpu_us_per_msg": sent["broker_cpu_us_per_req"],
    }


def _frames(code: int, topic: str, body: bytes, batch: bool = False) -> list[bytes]:
    return [
        encode(RemotingCommand.request(code, _send_ext(topic, q, batch), body), 1 + q)
        for q in range(QUEUES)
    ]


def _count_records(body: bytes | bytearray | memoryview) -> int:
    view = memoryview(body)
    n = pos = 0
    while pos + 4 <= len(view):
        pos += int.from_bytes(view[pos : pos + 4], "big")
        n += 1
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batch-inflight", type=int, default=8)
    parser.add_argument("--java-inflight", type=int, default=32)
    parser.add_argument("--java-like-only", action="store_true",
                        help="only the java-like send case (no baseline, no other cases)")
    parser.add_argument("--produce-consume", action="store_true",
                        help="only the produce-consume case (java-like send + long-polling pulls)")
    parser.add_argument("--pc-queues", type=int, default=1024)
    parser.add_argument("--pc-warmup", type=float, default=3.0)
    args = parser.parse_args()
    configure_logging("warning")
    if args.produce_consume:
        with tempfile.TemporaryDirectory(prefix="bench-produce-") as store:
            broker, bport = _launch.start_broker(store, queues=args.pc_queues, extra=EXTRA)
            try:
                print(f"broker pid {broker.pid}", file=sys.stderr, flush=True)
                results = _produce_consume_case(bport, args, broker.pid)
            finally:
                _launch.stop(broker)
        print(json.dumps({"benchmark": "broker produce-consume", "body_bytes": args.body,
                          "seconds": args.seconds, **results}, indent=2))
        return
    if args.java_like_only:
        with tempfile.TemporaryDirectory(prefix="bench-produce-") as store:
            broker, bport = _launch.start_broker(store, queues=QUEUES, extra=EXTRA)
            try:
                print(f"broker pid {broker.pid}", file=sys.stderr, flush=True)
                results = trio.run(_bench_broker, bport, args, broker.pid)
            finally:
                _launch.stop(broker)
        print(json.dumps({"benchmark": "broker java-like send", "body_bytes": args.body,
                          "seconds": args.seconds, **results}, indent=2))
        return

    proc, port = remoting_bench._start_server("baseline")
    try:
        body = os.urandom(args.body)
        baseline = trio.run(remoting_bench._bench_baseline, port, body, 1, args.seconds)
    finally:
        remoting_bench._stop(proc)
    ping_pong: dict[str, float] = baseline["one_in_flight"]

    with tempfile.TemporaryDirectory(prefix="bench-produce-") as store:
        broker, bport = _launch.start_broker(store, queues=QUEUES, extra=EXTRA)
        try:
            results = trio.run(_bench_broker, bport, args, broker.pid)
        finally:
            _launch.stop(broker)

    one = results["send_1_in_flight"]["msgs_per_s"]
    many = results[f"send_{args.inflight}_in_flight"]["msgs_per_s"]
    batch = results["batch_send"]["msgs_per_s"]
    report = {
        "benchmark": "broker produce/pull",
        "body_bytes": args.body,
        "seconds_per_case": args.seconds,
        "python": sys.version.split()[0],
        "trio": trio.__version__,
        "cpus": os.cpu_count(),
        "baseline_ping_pong": ping_pong,
        **results,
        "ratios": {"send_1_in_flight_vs_ping_pong": round(one / max(1, ping_pong["req_per_s"]), 3)},
        "targets": {
            "send_1_in_flight_ge_0.6x_ping_pong": one >= 0.6 * ping_pong["req_per_s"],
            "batch_ge_100000_msgs_per_s": batch >= 100_000,
            "pipelined_ge_40000_msgs_per_s": many >= 40_000,
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
