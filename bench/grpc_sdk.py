"""Apache's RocketMQ 5 Python SDK through Apache's 5.3.1 Proxy + Broker and through ours.

    python3 bench/grpc_sdk.py [--messages 2000] [--warmup 200] [--size 1024] [--repeats 1]
                              [--quick-jvm]

For each repeat, the two stacks run one after the other (the order alternates between repeats),
each on free loopback ports in a temp dir, started and always stopped by tests/interop:

  * ``apache``: Apache RocketMQ 5.3.1's Broker beside our NameServer (Maven Central has no 5.x
    NameServer) and Apache's 5.3.1 Proxy in cluster mode in front of them, built from the
    release's sources (tests/interop/proxy_oracle.py);
  * ``ours``: our NameServer and Broker with ``mqproxy`` in front (plain text, as Apache's).

The same client drives both: ``rocketmq-python-client`` 5.1.2 from PyPI in a venv of its own
(the one tests/compat builds, ``~/.cache/rmq-cluster-compat/pyclient-5.1.2``), running this file
with ``--sdk-side``: a Producer sends ``--warmup`` messages untimed (connections, routes, the
JIT), then ``--messages`` messages of ``--size`` bytes one after the other (each send's latency
is timed), then a SimpleConsumer receives all of them (batches of 32) and acks each (timed).
Reported per run: send msgs/s, receive+ack msgs/s, send latency p50/p99/max (ms), and the
RssAnon (MiB, /proc/<pid>/status) of the proxy and the broker at the end; ``ratios`` is
ours/Apache (mean over repeats): msgs/s above 1 means we are faster, latency and RSS below 1
mean we are lighter. The JVMs run oracle.JVM_BASE_OPTS (serial GC, 512 MiB heap, 2 CPUs) with
the full JIT unless ``--quick-jvm``. Everything shares the machine's cores: the figures compare
the two stacks under the same load. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TOPIC = "GrpcSdkBench"
GROUP = "GrpcSdkBenchG"
PYTHON_CLIENT = "5.1.2"
RECEIVE_DEADLINE_S = 300.0


# --------------------------------------------------------------------------- the SDK's side


def sdk_side(endpoint: str, messages: int, size: int, warmup: int) -> None:
    """Runs in the SDK's venv: ``warmup`` sends untimed, ``messages`` timed, then receive and
    ack them all (timed); one JSON line on stdout."""
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Message,
        Producer,
        SimpleConsumer,
    )

    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, (TOPIC,))
    producer.startup()
    body = b"x" * size
    lat: list[float] = []
    try:
        for _ in range(warmup):  # connections, routes, the JVMs' JIT
            msg = Message()
            msg.topic, msg.body, msg.tag = TOPIC, body, "B"
            producer.send(msg)
    except BaseException:
        producer.shutdown()
        raise
    t0 = time.perf_counter()
    try:
        for _ in range(messages):
            msg = Message()
            msg.topic, msg.body, msg.tag = TOPIC, body, "B"
            s = time.perf_counter()
            producer.send(msg)
            lat.append((time.perf_counter() - s) * 1000)
    finally:
        send_s = time.perf_counter() - t0
        producer.shutdown()
    consumer = SimpleConsumer(config, GROUP, {TOPIC: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    got = 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + RECEIVE_DEADLINE_S
    try:
        while got < messages + warmup and time.monotonic() < deadline:
            try:
                batch = consumer.receive(32, 30)
            except Exception:  # MESSAGE_NOT_FOUND surfaces as an exception
                continue
            for m in batch:
                consumer.ack(m)
            got += len(batch)
    finally:
        receive_s = time.perf_counter() - t0
        consumer.shutdown()
    print(json.dumps({"send_s": send_s, "receive_s": receive_s, "received": got,
                      "latencies_ms": lat}), flush=True)


# --------------------------------------------------------------------------- the orchestrator

ROOT = Path(__file__).resolve().parents[1]


def _setup_paths() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import checkout  # noqa: F401  (bench/checkout.py: this tree's rmq_cluster first)
    sys.path.insert(0, str(ROOT))


def sdk_python() -> Path:
    """The pinned SDK's venv (tests/compat builds the same one; built here when missing)."""
    venv = Path.home() / ".cache" / "rmq-cluster-compat" / f"pyclient-{PYTHON_CLIENT}"
    python = venv / "bin" / "python"
    if not (venv / "installed").is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q",
                        f"rocketmq-python-client=={PYTHON_CLIENT}"], check=True)
        (venv / "installed").write_text(PYTHON_CLIENT)
    return python


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _drive(python: Path, endpoint: str, home: Path, args: argparse.Namespace
           ) -> dict[str, Any]:
    home.mkdir(parents=True, exist_ok=True)  # the SDK logs under $HOME/logs
    done = subprocess.run(
        [str(python), __file__, "--sdk-side", endpoint, str(args.messages), str(args.size),
         str(args.warmup)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800,
        env={**os.environ, "HOME": str(home)}, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the SDK side failed ({done.returncode}):\n{done.stderr[-3000:]}")
    raw = json.loads(lines[-1])
    lat = raw["latencies_ms"]
    return {
        "send_msgs_per_s": round(args.messages / raw["send_s"], 1),
        "receive_msgs_per_s": round(raw["received"] / raw["receive_s"], 1),
        "received": raw["received"],
        "send_p50_ms": round(_percentile(lat, 0.50), 2),
        "send_p99_ms": round(_percentile(lat, 0.99), 2),
        "send_max_ms": round(max(lat), 2),
    }


def _rss(pid: int) -> float:
    from vs_java import memory_mb  # bench/vs_java.py: /proc/<pid>/status readings

    return memory_mb(pid).get("RssAnon", 0.0)


def run_stack(kind: str, root: Path, args: argparse.Namespace, python: Path) -> dict[str, Any]:
    import contextlib

    from tests.integration.proxy.proxy_testlib import live_proxy
    from tests.interop import oracle, proxy_oracle, proxy_scenario, scenario

    setup = (scenario.Step("create_topic", "broker", proxy_scenario.SETUP[0].code,
                           {**proxy_scenario.SETUP[0].ext, "topic": TOPIC,  # type: ignore[dict-item]
                            "readQueueNums": "4", "writeQueueNums": "4"}),)
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(oracle.running_cluster(
            "java5" if kind == "apache" else "ours", root / "cluster",
            quick_jvm=args.quick_jvm))
        scenario.replay(cluster.namesrv_addr, cluster.broker_addr, setup)
        if kind == "apache":
            px = stack.enter_context(proxy_oracle.running_apache_proxy(
                root / "proxy", cluster.namesrv_addr, str(cluster.conf["brokerClusterName"]),
                quick_jvm=args.quick_jvm))
            endpoint, proxy_pid = px.endpoint, px.node.pid
        else:
            (root / "proxy").mkdir(parents=True)
            ours = stack.enter_context(live_proxy(root / "proxy", cluster.namesrv_addr))
            endpoint, proxy_pid = f"127.0.0.1:{ours.port}", ours.proc.pid
        figures = _drive(python, endpoint, root / "sdk-home", args)
        figures["proxy_rss_anon_mb"] = _rss(proxy_pid)
        figures["broker_rss_anon_mb"] = _rss(cluster.broker.pid)
        return figures


RATIO_KEYS = ("send_msgs_per_s", "receive_msgs_per_s", "send_p50_ms", "send_p99_ms",
              "send_max_ms", "proxy_rss_anon_mb", "broker_rss_anon_mb")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--sdk-side":
        sdk_side(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--warmup", type=int, default=200,
                        help="sends before the timed ones (received and acked with them)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quick-jvm", action="store_true", help="C1 only (faster boot)")
    args = parser.parse_args()
    _setup_paths()
    import tempfile

    python = sdk_python()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="grpc-sdk-bench-") as tmp:
        for rep in range(args.repeats):
            order = ("apache", "ours") if rep % 2 == 0 else ("ours", "apache")
            for kind in order:
                figures = run_stack(kind, Path(tmp) / f"{kind}-{rep}", args, python)
                runs.append({"kind": kind, "repeat": rep, **figures})
    ratios = {}
    for key in RATIO_KEYS:
        ours = statistics.mean(r[key] for r in runs if r["kind"] == "ours")
        apache = statistics.mean(r[key] for r in runs if r["kind"] == "apache")
        ratios[key] = round(ours / apache, 3) if apache else None
    print(json.dumps({"bench": "grpc_sdk", "sdk": f"rocketmq-python-client {PYTHON_CLIENT}",
                      "messages": args.messages, "warmup": args.warmup, "size": args.size,
                      "repeats": args.repeats, "quick_jvm": args.quick_jvm, "runs": runs,
                      "ratios_ours_over_apache": ratios}))


if __name__ == "__main__":
    main()
