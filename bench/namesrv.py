"""NameServer benchmark: route lookups/s and registrations/s over real sockets, JSON output.

    python3 bench/namesrv.py [--seconds 3] [--inflight 64] [--brokers 4] [--topics 100]

The NameServer runs in a child process (``namesrv.server.serve`` on an ephemeral loopback port),
so server and client each get a core. The bench registers ``--brokers`` broker groups (master and
slave) with ``--topics`` topics each, then measures:

* ``lookup``: GET_ROUTEINFO_BY_TOPIC for random topics, Java client version (quoted ids) and C++
  version (unquoted ids), one request in flight and ``--inflight`` in flight on one connection;
* ``register``: REGISTER_BROKER from masters whose DataVersion changes every time (the full
  topic-table path), ``--inflight`` in flight over one connection per broker;
* ``baseline`` (same run, in-process, no sockets): the raw RouteInfoManager rates: route
  assembly + encoding, the cached route answer, and ``register_broker``.

Target (issue 4): >= 10 000 lookups/s over sockets.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkout  # noqa: F401  (bench/checkout.py: this tree's rmq_cluster first)

from rmq_cluster.cluster.logging import configure_logging
from rmq_cluster.cluster.protocol.route import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.route_info import RouteInfoManager
from rmq_cluster.namesrv.server import serve

TARGET_LOOKUPS_PER_S = 10_000
CALL_TIMEOUT_S = 30.0
WARMUP_S = 0.3


def _topics(n: int) -> list[str]:
    return [f"BenchTopic-{i}" for i in range(n)]


def _wrapper(topics: list[str], counter: int) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        {t: TopicConfig(t, 8, 8) for t in topics}, DataVersion(1_700_000_000_000, counter)
    )


def _broker(i: int, broker_id: int) -> tuple[str, str]:
    return f"broker-{i}", f"10.1.{i}.{broker_id + 1}:10911"


def _register_request(
    i: int, broker_id: int, topics: list[str], counter: int
) -> RemotingCommand:
    name, addr = _broker(i, broker_id)
    header = {
        "brokerName": name,
        "brokerAddr": addr,
        "clusterName": "BenchCluster",
        "haServerAddr": addr.replace("10911", "10912"),
        "brokerId": str(broker_id),
    }
    body = RegisterBrokerBody(_wrapper(topics, counter)).encode()
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body)


# ----------------------------------------------------------------------------- measuring


async def _drive(
    call: Callable[[], Awaitable[None]], inflight: int, seconds: float
) -> dict[str, float]:
    latencies: list[float] = []
    measuring = False
    stop_at = trio.current_time() + WARMUP_S + seconds

    async def worker() -> None:
        clock = time.perf_counter
        while trio.current_time() < stop_at:
            t0 = clock()
            await call()
            if measuring:
                latencies.append(clock() - t0)

    async with trio.open_nursery() as nursery:
        for _ in range(inflight):
            nursery.start_soon(worker)
        await trio.sleep(WARMUP_S)  # fixed warm-up period of the benchmark, not a wait
        measuring = True
        started = time.perf_counter()
    elapsed = time.perf_counter() - started
    lat = sorted(latencies)

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1e6, 1) if lat else 0.0

    return {
        "requests": len(lat),
        "per_s": round(len(lat) / elapsed),
        "p50_us": pct(0.50),
        "p99_us": pct(0.99),
    }


async def _bench_sockets(
    port: int, brokers: int, topics: list[str], inflight: int, seconds: float
) -> dict[str, object]:
    addr = f"127.0.0.1:{port}"
    result: dict[str, object] = {}
    async with open_remoting_client(node="bench-client") as client:
        for i in range(brokers):
            for broker_id in (0, 1):
                resp = await client.invoke(addr, _register_request(i, broker_id, topics, 1))
                assert resp.code == 0, resp.remark
        conn = await client.connection(addr)
        rng = random.Random(7)
        for label, version in (("java_407", 407), ("cpp_333", 333)):
            requests = [
                RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": t}, version=version
                )
                for t in topics
            ]

            async def lookup(requests: list[RemotingCommand] = requests) -> None:
                resp = await conn.invoke(rng.choice(requests), CALL_TIMEOUT_S)
                if resp.code != 0:
                    raise RuntimeError(f"lookup failed: {resp.code} {resp.remark}")

            result[f"lookup_{label}"] = {
                "one_in_flight": await _drive(lookup, 1, seconds),
                f"{inflight}_in_flight": await _drive(lookup, inflight, seconds),
            }

    counters = [1] * brokers
    async with trio.open_nursery() as nursery:
        clients = []
        for _ in range(brokers):
            clients.append(
                await nursery.start(_client_task)  # one connection per broker, like real brokers
            )
        pick = iter(range(1 << 62))

        async def register() -> None:
            i = next(pick) % brokers
            counters[i] += 1
            resp = await clients[i].invoke(
                addr, _register_request(i, 0, topics, counters[i]), CALL_TIMEOUT_S
            )
            if resp.code != 0:
                raise RuntimeError(f"register failed: {resp.code} {resp.remark}")

        result["register"] = await _drive(register, inflight, seconds)
        nursery.cancel_scope.cancel()
    return result


async def _client_task(task_status: trio.TaskStatus[object] = trio.TASK_STATUS_IGNORED) -> None:
    async with open_remoting_client(node="bench-broker") as client:
        task_status.started(client)
        await trio.sleep_forever()


def _rate(fn: Callable[[], object], seconds: float) -> int:
    count = 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        for _ in range(100):
            fn()
        count += 100
    return round(count / (time.perf_counter() - started))


def _baseline(brokers: int, topics: list[str], seconds: float) -> dict[str, int]:
    routes = RouteInfoManager()
    for i in range(brokers):
        for broker_id in (0, 1):
            name, addr = _broker(i, broker_id)
            routes.register_broker(
                "BenchCluster", addr, name, broker_id, addr, _wrapper(topics, 1), [], 1, 0.0
            )
    rng = random.Random(7)

    def assemble() -> object:
        route = routes.pickup_topic_route_data(rng.choice(topics))
        assert route is not None
        return route.encode(standard=True)

    def cached() -> object:
        return routes.topic_route_json(rng.choice(topics), standard=True)

    counter = iter(range(2, 1 << 62))
    wrappers = [_wrapper(topics, c) for c in range(2, 4)]

    bodies = [RegisterBrokerBody(w).encode() for w in wrappers]

    def register() -> object:
        # every call carries a new DataVersion for its broker: the full topic-table path
        n = next(counter)
        i = n % brokers
        name, addr = _broker(i, 0)
        wrapper = wrappers[(n // brokers) % 2]
        return routes.register_broker("BenchCluster", addr, name, 0, addr, wrapper, [], 1, 0.0)

    def decode_and_register() -> object:
        n = next(counter)
        i = n % brokers
        name, addr = _broker(i, 0)
        body = RegisterBrokerBody.decode(bodies[(n // brokers) % 2])
        return routes.register_broker(
            "BenchCluster", addr, name, 0, addr, body.topic_config_serialize_wrapper, [], 1, 0.0
        )

    return {
        "route_assemble_and_encode_per_s": _rate(assemble, seconds),
        "route_cached_per_s": _rate(cached, seconds),
        "register_broker_per_s": _rate(register, seconds),
        "register_decode_body_and_register_per_s": _rate(decode_and_register, seconds),
    }


# ----------------------------------------------------------------------------- main


async def _serve_child() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = NamesrvConfig(
            kv_config_path=os.path.join(tmp, "kvConfig.json"),
            config_store_path=os.path.join(tmp, "namesrv.properties"),
            bind_address="127.0.0.1",
            listen_port=0,
        )
        async with trio.open_nursery() as nursery:
            _host, port = await nursery.start(serve, config)
            print(port, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    configure_logging("warning")
    if args.serve:
        trio.run(_serve_child)
        return
    topics = _topics(args.topics)
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        over_sockets = trio.run(
            _bench_sockets, port, args.brokers, topics, args.inflight, args.seconds
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    baseline = _baseline(args.brokers, topics, args.seconds)
    best = max(
        int(v[f"{args.inflight}_in_flight"]["per_s"])  # type: ignore[index]
        for k, v in over_sockets.items()
        if k.startswith("lookup_")
    )
    java = over_sockets["lookup_java_407"][f"{args.inflight}_in_flight"]["per_s"]  # type: ignore[index]
    out = {
        "bench": "namesrv",
        "config": {
            "seconds": args.seconds,
            "inflight": args.inflight,
            "broker_groups": args.brokers,
            "topics_per_broker": args.topics,
            "cpus": os.cpu_count(),
        },
        "over_sockets": over_sockets,
        "baseline_in_process": baseline,
        "target_lookups_per_s": TARGET_LOOKUPS_PER_S,
        "lookups_per_s": java,
        "best_lookups_per_s": best,
        "meets_target": java >= TARGET_LOOKUPS_PER_S,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
