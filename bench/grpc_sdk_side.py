"""bench/grpc_sdk.py's client sides, each run in a process of its own: Apache's Python SDK
(``rocketmq-python-client``, in its own venv: this file and grpc_sdk_figures.py import the
standard library only, besides the SDK) and our Python client straight to the broker.

    <sdk venv>/bin/python bench/grpc_sdk_side.py --sdk-side ENDPOINT TOPIC MESSAGES WARMUP SIZE
                                                 THREADS PIDS
    python3 bench/grpc_sdk_side.py --remoting-side NAMESRV TOPIC MESSAGES WARMUP SIZE PIDS

PIDS: ``proxy=<pid>,broker=<pid>``. One JSON line on stdout (grpc_sdk_figures.py's format).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import grpc_sdk_figures as fig

RECEIVE_DEADLINE_S = 300.0
RECEIVE_BATCH = 32
#: as the Java side's (the SDK's default, 3 s, fails a first route on a loaded machine)
REQUEST_TIMEOUT_S = 10


# --------------------------------------------------------------------------- the SDK's side


def sdk_side(endpoint: str, topic: str, messages: int, warmup: int, size: int, threads: int,
             pids_spec: str) -> None:
    """Runs in the SDK's venv: ``warmup`` sends untimed, then the phases send_1 (one in
    flight), send_k (``threads`` in flight, ``send_async``) and receive_ack; one JSON line."""
    from rocketmq import ClientConfiguration, Credentials, Producer

    config = ClientConfiguration(endpoint, Credentials(), request_timeout=REQUEST_TIMEOUT_S)
    pids = fig.parse_pids(pids_spec)
    producer = Producer(config, (topic,))
    producer.startup()
    try:
        for _ in range(warmup):  # connections, routes, the JVMs' JIT
            producer.send(_sdk_message(topic, size))
        phases = [_sdk_sends(producer, topic, size, messages, 1, pids),
                  _sdk_sends(producer, topic, size, messages, threads, pids)]
    finally:
        producer.shutdown()
    phases.append(_sdk_receive(config, topic, warmup + 2 * messages, pids))
    print(json.dumps({"client": "python-sdk", "phases": phases}), flush=True)


def _sdk_message(topic: str, size: int) -> Any:
    from rocketmq import Message

    msg = Message()
    msg.topic, msg.body, msg.tag = topic, b"x" * size, "B"
    return msg


def _sdk_sends(producer: Any, topic: str, size: int, messages: int, in_flight: int,
               pids: dict[str, int]) -> dict[str, Any]:
    """``messages`` sends, ``in_flight`` at a time (``send`` when 1, else ``send_async``: a
    slot is taken before each send and given back by its callback, once its latency is in)."""
    import threading

    lat: list[float] = []
    errors: list[BaseException] = []
    before, t0 = fig.read_ticks(pids), time.perf_counter()
    if in_flight == 1:
        for _ in range(messages):
            s = time.perf_counter()
            producer.send(_sdk_message(topic, size))
            lat.append((time.perf_counter() - s) * 1000)
    else:
        slots = threading.Semaphore(in_flight)

        def done(f: Any, s: float) -> None:
            lat.append((time.perf_counter() - s) * 1000)
            if f.exception() is not None:
                errors.append(f.exception())
            slots.release()

        for _ in range(messages):
            slots.acquire()
            s = time.perf_counter()
            producer.send_async(_sdk_message(topic, size)).add_done_callback(
                lambda f, s=s: done(f, s))
        for _ in range(in_flight):  # every callback has run
            slots.acquire()
    if errors:
        raise RuntimeError(f"{len(errors)} sends failed: {errors[0]!r}")
    name = "send_1" if in_flight == 1 else "send_k"
    return fig.phase_record(name, messages, time.perf_counter() - t0, lat, before,
                            fig.read_ticks(pids))


def _sdk_receive(config: Any, topic: str, want: int, pids: dict[str, int]) -> dict[str, Any]:
    from rocketmq import FilterExpression, SimpleConsumer

    consumer = SimpleConsumer(config, topic + "G", {topic: FilterExpression("*")},
                              await_duration=2)
    consumer.startup()
    got = 0
    before, t0 = fig.read_ticks(pids), time.perf_counter()
    deadline = time.monotonic() + RECEIVE_DEADLINE_S
    try:
        while got < want and time.monotonic() < deadline:
            try:
                batch = consumer.receive(RECEIVE_BATCH, 30)
            except Exception:  # MESSAGE_NOT_FOUND surfaces as an exception
                continue
            for m in batch:
                consumer.ack(m)
            got += len(batch)
    finally:
        wall = time.perf_counter() - t0
        after = fig.read_ticks(pids)
        consumer.shutdown()
    return fig.phase_record("receive_ack", got, wall, [], before, after)


# --------------------------------------------------------------------------- our client's side


def remoting_side(namesrv: str, topic: str, messages: int, warmup: int, size: int,
                  pids_spec: str) -> None:
    """Our Python client (``rmq_cluster.client.Producer`` on Trio) straight to the broker over
    remoting: ``warmup`` sends untimed, then send_1 (one in flight); one JSON line."""
    import trio

    from rmq_cluster.client import Message, Producer

    pids = fig.parse_pids(pids_spec)

    async def go() -> dict[str, Any]:
        body = b"x" * size
        async with Producer("GrpcSdkBenchDirectPy", namesrv_addr=namesrv) as producer:
            for _ in range(warmup):
                await producer.send(Message(topic, body, tags="B"))
            lat: list[float] = []
            before, t0 = fig.read_ticks(pids), time.perf_counter()
            for _ in range(messages):
                s = time.perf_counter()
                await producer.send(Message(topic, body, tags="B"))
                lat.append((time.perf_counter() - s) * 1000)
            return fig.phase_record("send_1", messages, time.perf_counter() - t0, lat, before,
                                    fig.read_ticks(pids))

    phase = trio.run(go)
    print(json.dumps({"client": "python-remoting", "phases": [phase]}), flush=True)


def main() -> None:
    mode, argv = sys.argv[1], sys.argv[2:]
    if mode == "--sdk-side":
        endpoint, topic, messages, warmup, size, threads, pids = argv
        sdk_side(endpoint, topic, int(messages), int(warmup), int(size), int(threads), pids)
    elif mode == "--remoting-side":
        namesrv, topic, messages, warmup, size, pids = argv
        root = Path(__file__).resolve().parents[1]
        import checkout  # noqa: F401  (bench/checkout.py: this tree's rmq_cluster first)

        sys.path.insert(0, str(root))
        remoting_side(namesrv, topic, int(messages), int(warmup), int(size), pids)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
