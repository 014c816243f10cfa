"""Apache RocketMQ's Java broker and ours, side by side, driven by RocketMQ's own benchmark tool.

    python3 bench/vs_java.py [--seconds 30] [--warmup 10] [--threads 32] [--size 1024]
                             [--repeats 1] [--modes single,sync,async] [--keep-logs DIR]
                             [--no-consumer]

For each repeat and mode, the Java cluster (Apache RocketMQ 4.9.7's NameServer + Broker) and ours
run one after the other (the order alternates between repeats), each from the same rendered
broker.conf on free loopback ports in a temp dir (tests/interop/oracle.py starts and always stops
them). ``org.apache.rocketmq.example.benchmark.Producer`` (rocketmq-example 4.7.0, the last one
published, on the 4.9.7 client: tests/interop/java/pom.xml ``-P bench``) sends ``--size``-byte
messages from ``--threads`` threads to topic BenchmarkTest (auto-created) until it has printed
``ceil(--warmup / 10)`` warm-up lines (at least one) and ``ceil(--seconds / 10)`` measured ones
(it prints one every 10 s). Both brokers give the auto-created topic the same 1024 queues (the
routes show it). Beside it (unless ``--no-consumer``), ``org.apache.rocketmq.example.benchmark.
Consumer`` (same jar, a push consumer with its default 20 consume threads, group
``benchmark_consumer`` plus a fresh suffix, so it starts at the queues' ends) is started once the
Producer printed its first line (the topic exists then) and consumes what the Producer sends;
it too prints a line every 10 s: TPS, failures, average and max RT from the message's birth on
the producer (B2C) and from its storing on the broker (S2C) to its consumption. Its first line
(start-up, rebalance) is left out of its figures; the run waits for at least one more. Modes:
  * ``single``: one ASYNC_MASTER, ASYNC_FLUSH;
  * ``sync`` / ``async``: a SYNC_MASTER / ASYNC_MASTER and one SLAVE of the same kind; the run
    starts once the slave's HA connection to the master is ESTABLISHED (/proc/net/tcp).
  * ``dledger``: a 3-peer DLedger group (enableDLegerCommitLog; 4.9.7's DLedger 0.3.1.2 on the
    Java side), started together; the leader is elected during the warm-up (sends that fail
    before it are counted by the tool as it prints them). "broker" is peer n0, leader or not;
    ``all_brokers_cpu_ms_per_1000_msgs`` sums every broker process.

Reported per run: every line the tool printed (TPS, max and average RT in ms, failures as it
prints them), the "steady" figures over the lines after the warm-up ones (those hold the JIT's
compiling and the topic's creation), each node's CPU seconds over the steady window (from
/proc/<pid>/stat), CPU ms per 1000 messages, and its VmRSS / RssAnon / VmHWM at the end (from
/proc/<pid>/status). ``ratios`` is ours/Java per mode (mean over repeats): TPS above 1 means we
are faster, RT and CPU and RSS below 1 mean we are lighter. With the Consumer: its lines
(``consumer_lines``) and figures (``consumer_steady``), and ``consumer_tps`` and its average
B2C / S2C RT among the ratios. The CPU and memory figures then cover both loads at once.

The JVM (brokers and NameServer: oracle.JVM_BASE_OPTS without the tests' C1-only flags, so the
full tiered C2 JIT runs): ``-server -Xms256m -Xmx512m -XX:+UseSerialGC
-XX:MaxDirectMemorySize=512m -XX:ActiveProcessorCount=2`` plus the java.nio --add-opens 4.9
needs on Java 9+. Why this is fair on 2 cores: RocketMQ's own runbroker.sh asks for an 8 GiB
heap and G1 with its concurrent threads, sized for a server; here the broker's hot data (the
CommitLog and ConsumeQueue) lives in mapped files, not on the heap, so 256-512 MiB holds its
working set with room to spare, and the serial collector keeps GC from racing the broker, the
NameServer and the load generator for the same 2 cores (short young pauses on a small young
generation). ActiveProcessorCount=2 makes the JVM size its pools (Netty event loops, send
thread pool, JIT compiler threads) for the 2 cores it really has. The Producer tool's JVM gets
``-Xms256m -Xmx256m -XX:+UseSerialGC -XX:ActiveProcessorCount=2``; the same client drives both
brokers, so its own cost falls on both alike. Our nodes run under this Python (``-m
rmq_cluster.broker``, ``-m rmq_cluster.namesrv``). Everything shares the machine's cores, so the
figures compare the two brokers under the same load, not their peak on dedicated hardware.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import checkout  # noqa: E402,F401  (bench/checkout.py: this tree's rmq_cluster first)

# the checkout root too: oracle imports tests.cache_lock
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "interop"))
import oracle  # noqa: E402  (tests/interop/oracle.py: starts and stops both kinds of cluster)

PRODUCER_MAIN: Final = "org.apache.rocketmq.example.benchmark.Producer"
CONSUMER_MAIN: Final = "org.apache.rocketmq.example.benchmark.Consumer"
TOPIC: Final = "BenchmarkTest"
CLIENT_JVM_OPTS: Final = (
    "-server", "-Xms256m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:ActiveProcessorCount=2",
)
#: The tool prints one line every 10 s; it starts after the client's first route lookup.
LINE_PERIOD_S: Final = 10.0
FIRST_LINE_TIMEOUT_S: Final = 60.0
HA_CONNECT_TIMEOUT_S: Final = 60.0
#: "Send TPS: 1234 Max RT(ms): 45 Average RT(ms):   3.210 Send Failed: 0 Response Failed: 0"
TPS_LINE_RE: Final = re.compile(r"Send TPS:\s*\d+")
_FIELD_RE: Final = re.compile(r"([A-Za-z][A-Za-z ]*?)\s*(?:\(ms\))?:\s*(-?\d+(?:\.\d+)?)")
_FIELD_NAMES: Final = {
    "Send TPS": "tps",
    "Max RT": "max_rt_ms",
    "Average RT": "avg_rt_ms",
    "Send Failed": "send_failed",
    "Response Failed": "response_failed",
}
#: "TPS: 1234 FAIL: 0 AVG(B2C) RT:   1.234 AVG(S2C) RT:   0.987 MAX(B2C) RT: 45 MAX(S2C) RT: 40"
#: (the Consumer tool of rocketmq-example 4.7.0); "Send TPS" lines are the Producer's.
CONSUMER_LINE_RE: Final = re.compile(
    r"(?<![A-Za-z] )\bTPS:\s*(\d+)\s+FAIL:\s*(\d+)\s+AVG\(B2C\) RT:\s*(-?[\d.]+)\s+"
    r"AVG\(S2C\) RT:\s*(-?[\d.]+)\s+MAX\(B2C\) RT:\s*(-?\d+)\s+MAX\(S2C\) RT:\s*(-?\d+)"
)
#: The Consumer's lines left out of its figures (the first one holds its start and rebalance).
CONSUMER_WARMUP_LINES: Final = 1
MODES: Final = {
    "single": None,
    "sync": "SYNC_MASTER",
    "async": "ASYNC_MASTER",
    "dledger": None,
}
DLEDGER_PEERS: Final = 3


# --------------------------------------------------------------------------- /proc readings


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon and VmHWM of ``pid`` in MiB."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "VmHWM"):
                out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def _established_ports() -> set[int]:
    """Local ports of ESTABLISHED IPv4/IPv6 TCP sockets on this machine."""
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f, None)
            for line in f:
                cols = line.split()
                if len(cols) > 3 and cols[3] == "01":
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


# --------------------------------------------------------------------------- the tool's output


def parse_line(line: str) -> dict[str, float] | None:
    """One of the Producer tool's ten-second lines as numbers; None for any other line."""
    if TPS_LINE_RE.search(line) is None:
        return None
    out: dict[str, float] = {}
    for name, value in _FIELD_RE.findall(line):
        key = _FIELD_NAMES.get(name.strip())
        if key is not None:
            out[key] = float(value) if "." in value else int(value)
    return out if "tps" in out else None


def parse_consumer_line(line: str) -> dict[str, float] | None:
    """One of the Consumer tool's ten-second lines as numbers; None for any other line."""
    m = CONSUMER_LINE_RE.search(line)
    if m is None:
        return None
    tps, failed, avg_b2c, avg_s2c, max_b2c, max_s2c = m.groups()
    return {
        "tps": int(tps), "consume_failed": int(failed),
        "avg_b2c_rt_ms": float(avg_b2c), "avg_s2c_rt_ms": float(avg_s2c),
        "max_b2c_rt_ms": int(max_b2c), "max_s2c_rt_ms": int(max_s2c),
    }


def tool_lines(node: oracle.Node, parse: Any = parse_line) -> list[dict[str, float]]:
    try:
        text = node.log.read_text(errors="replace")
    except OSError:
        return []
    return [p for p in map(parse, text.splitlines()) if p is not None]


def summarize_consumer(lines: list[dict[str, float]]) -> dict[str, Any]:
    """The Consumer's figures over its lines after the first: TPS and average RTs are each
    line's own 10 s, max RT the largest it printed."""
    steady = lines[CONSUMER_WARMUP_LINES:]
    if not steady:
        return {}
    return {
        "lines": len(steady),
        "tps": round(statistics.fmean(x["tps"] for x in steady)),
        "avg_b2c_rt_ms": round(statistics.fmean(x["avg_b2c_rt_ms"] for x in steady), 3),
        "avg_s2c_rt_ms": round(statistics.fmean(x["avg_s2c_rt_ms"] for x in steady), 3),
        "max_b2c_rt_ms": max(x["max_b2c_rt_ms"] for x in steady),
        "max_s2c_rt_ms": max(x["max_s2c_rt_ms"] for x in steady),
        "consume_failed": sum(x["consume_failed"] for x in steady),
    }


def summarize(lines: list[dict[str, float]], warmup: int = 1) -> dict[str, Any]:
    steady = lines[warmup:]
    if not steady:
        return {}
    return {
        "lines": len(steady),
        "tps": round(statistics.fmean(x["tps"] for x in steady)),
        "avg_rt_ms": round(statistics.fmean(x.get("avg_rt_ms", 0.0) for x in steady), 3),
        # the tool prints its run-so-far maximum RT and failure counts (warm-up included)
        "max_rt_ms": steady[-1].get("max_rt_ms"),
        "send_failed": steady[-1].get("send_failed"),
        "response_failed": steady[-1].get("response_failed"),
    }


# --------------------------------------------------------------------------- one run


def _wait(what: str, cond: Any, timeout: float, watch: list[oracle.Node]) -> None:
    """Wait for ``cond()`` with a deadline; fail early when a watched process exits."""
    deadline = time.monotonic() + timeout
    while not cond():
        for node in watch:
            if not node.alive():
                raise oracle.OracleError(f"{node.name} exited while waiting for {what}:\n"
                                         f"{node.tail()}")
        if time.monotonic() >= deadline:
            raise oracle.OracleError(f"no {what} within {timeout:g}s")
        with contextlib.suppress(Exception):
            watch[0].proc.wait(0.2)  # a bounded tick that also notices an exit at once


@contextlib.contextmanager
def _slave(
    kind: str, root: Path, cluster: oracle.Cluster, cp: str | None
) -> Iterator[oracle.Node]:
    port = oracle.free_broker_port()
    conf = oracle.broker_conf(root, port, cluster.namesrv_addr, {
        "brokerId": 1, "brokerRole": "SLAVE", "haListenPort": port + 1,
    })
    node = oracle.start_broker(kind, root, conf, cp, False)
    try:
        node.wait_boot()
        ha_port = int(str(cluster.conf["haListenPort"]))
        _wait("HA connection to the master", lambda: ha_port in _established_ports(),
              HA_CONNECT_TIMEOUT_S, [node, cluster.broker])
        yield node
    finally:
        node.stop()


def _dledger_extra(ports: list[int], index: int) -> dict[str, object]:
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    return {
        "enableDLegerCommitLog": "true", "dLegerGroup": "broker-a", "dLegerPeers": peers,
        "dLegerSelfId": f"n{index}",
    }


@contextlib.contextmanager
def _peer(
    kind: str, root: Path, cluster: oracle.Cluster, cp: str | None, extra: dict[str, object]
) -> Iterator[oracle.Node]:
    conf = oracle.broker_conf(root, oracle.free_broker_port(), cluster.namesrv_addr, extra)
    node = oracle.start_broker(kind, root, conf, cp, False)
    try:
        node.wait_boot()
        yield node
    finally:
        node.stop()


def run_once(
    kind: str, mode: str, cp: str, args: argparse.Namespace, rep: int = 0
) -> dict[str, Any]:
    role = MODES[mode] or "ASYNC_MASTER"
    # ceil(warmup / 10) warm-up lines (at least 1) plus ceil(seconds / 10) measured ones
    warmup = max(1, -(-int(args.warmup) // int(LINE_PERIOD_S)))
    windows = warmup + max(1, -(-int(args.seconds) // int(LINE_PERIOD_S)))
    with tempfile.TemporaryDirectory(prefix=f"vs-java-{kind}-{mode}-") as tmp:
        root = Path(tmp)
        port = oracle.free_broker_port()
        # the master's HA port pinned on both kinds, so the slave's connection can be watched
        extra: dict[str, object] = {
            "brokerRole": role, "defaultTopicQueueNums": 8,
            "listenPort": port, "haListenPort": port + 1,
        }
        dledger_ports = [oracle.free_port() for _ in range(DLEDGER_PEERS)]
        if mode == "dledger":
            extra.update(_dledger_extra(dledger_ports, 0))
        with contextlib.ExitStack() as stack:
            cluster = stack.enter_context(oracle.running_cluster(
                kind, root / "master", cp=cp if kind == "java" else None,
                broker_extra=extra, quick_jvm=False,
            ))
            nodes: dict[str, oracle.Node] = {"broker": cluster.broker, "namesrv": cluster.namesrv}
            if mode == "dledger":  # the leader is elected while the tool warms up
                for i in range(1, DLEDGER_PEERS):
                    nodes[f"peer{i}"] = stack.enter_context(_peer(
                        kind, root / f"n{i}", cluster, cp, _dledger_extra(dledger_ports, i)))
            elif mode != "single":
                nodes["slave"] = stack.enter_context(_slave(kind, root / "slave", cluster, cp))
            cmd = [
                oracle._tool("java"), *CLIENT_JVM_OPTS, f"-Duser.home={root}", "-cp", cp,
                PRODUCER_MAIN, "-n", cluster.namesrv_addr, "-w", str(args.threads),
                "-s", str(args.size), "-t", TOPIC,
            ]
            tool = oracle.spawn("producer", cmd, root, TPS_LINE_RE, oracle._java_env(root / "tool"))
            consumer: oracle.Node | None = None
            try:
                tool.wait_boot(FIRST_LINE_TIMEOUT_S)
                if args.consumer:  # the topic exists once the Producer printed a line
                    ccmd = [
                        oracle._tool("java"), *CLIENT_JVM_OPTS, f"-Duser.home={root}", "-cp", cp,
                        CONSUMER_MAIN, "-n", cluster.namesrv_addr, "-t", TOPIC,
                    ]
                    consumer = oracle.spawn("consumer", ccmd, root, CONSUMER_LINE_RE,
                                            oracle._java_env(root / "consumer-tool"))
                _wait(f"{warmup} warm-up lines", lambda: len(tool_lines(tool)) >= warmup,
                      (warmup + 2) * LINE_PERIOD_S, [tool, *nodes.values()])
                cpu0 = {k: cpu_seconds(n.pid) for k, n in nodes.items()}
                t0 = time.monotonic()
                _wait(f"{windows} lines from the Producer tool",
                      lambda: len(tool_lines(tool)) >= windows,
                      (windows + 2) * LINE_PERIOD_S, [tool, *nodes.values()])
                elapsed = time.monotonic() - t0
                cpu = {k: round(cpu_seconds(n.pid) - cpu0[k], 2) for k, n in nodes.items()}
                mem = {k: memory_mb(n.pid) for k, n in nodes.items()}
                if consumer is not None:  # at least one line after its first, Producer still on
                    want = CONSUMER_WARMUP_LINES + 1
                    _wait(f"{want} lines from the Consumer tool",
                          lambda: len(tool_lines(consumer, parse_consumer_line)) >= want,
                          (want + 2) * LINE_PERIOD_S, [consumer, tool, *nodes.values()])
            finally:
                if consumer is not None:
                    consumer.stop()
                tool.stop()
            lines = tool_lines(tool)
            consumer_lines = (
                tool_lines(consumer, parse_consumer_line) if consumer is not None else None
            )
            if args.keep_logs is not None:
                _keep_logs(root, args.keep_logs / f"{kind}-{mode}-{rep}")
    steady = summarize(lines, warmup)
    msgs = max(1.0, steady.get("tps", 0) * elapsed)
    return {
        "kind": kind,
        "mode": mode,
        "tool_lines": lines,
        "steady": steady,
        "window_s": round(elapsed, 1),
        "cpu_s": cpu,
        "cpu_ms_per_1000_msgs": {k: round(v / msgs * 1e6, 1) for k, v in cpu.items()},
        "all_brokers_cpu_ms_per_1000_msgs": round(
            sum(v for k, v in cpu.items() if k != "namesrv") / msgs * 1e6, 1),
        "memory_mb": mem,
        **({} if consumer_lines is None else {
            "consumer_lines": consumer_lines,
            "consumer_steady": summarize_consumer(consumer_lines),
        }),
    }


def _keep_logs(root: Path, dest: Path) -> None:
    """Copy the run's logs (node stdout, RocketMQ's log files; no store) to ``dest``."""
    for log_dir in root.rglob("logs"):
        if log_dir.is_dir():
            shutil.copytree(log_dir, dest / log_dir.relative_to(root), dirs_exist_ok=True)


# --------------------------------------------------------------------------- the report


def _mean(runs: list[dict[str, Any]], get: Any) -> float | None:
    values = [get(r) for r in runs]
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def ratios(runs: list[dict[str, Any]], mode: str) -> dict[str, float | None]:
    by_kind = {k: [r for r in runs if r["kind"] == k and r["mode"] == mode and "steady" in r]
               for k in ("java", "ours")}
    getters = {
        "tps": lambda r: r["steady"].get("tps"),
        "avg_rt_ms": lambda r: r["steady"].get("avg_rt_ms"),
        "max_rt_ms": lambda r: r["steady"].get("max_rt_ms"),
        "broker_cpu_ms_per_1000_msgs": lambda r: r["cpu_ms_per_1000_msgs"]["broker"],
        "all_brokers_cpu_ms_per_1000_msgs": lambda r: r["all_brokers_cpu_ms_per_1000_msgs"],
        "broker_rss_anon_mb": lambda r: r["memory_mb"]["broker"].get("RssAnon"),
        "broker_vm_rss_mb": lambda r: r["memory_mb"]["broker"].get("VmRSS"),
        "consumer_tps": lambda r: r.get("consumer_steady", {}).get("tps"),
        "consumer_avg_b2c_rt_ms": lambda r: r.get("consumer_steady", {}).get("avg_b2c_rt_ms"),
        "consumer_avg_s2c_rt_ms": lambda r: r.get("consumer_steady", {}).get("avg_s2c_rt_ms"),
    }
    out: dict[str, float | None] = {}
    for name, get in getters.items():
        java, ours = _mean(by_kind["java"], get), _mean(by_kind["ours"], get)
        out[name] = round(ours / java, 3) if java and ours is not None else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="measured length after the warm-up (the tool prints every 10 s)")
    parser.add_argument("--warmup", type=float, default=10.0,
                        help="seconds of tool lines left out of the figures (JIT, topic creation)")
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                        help="copy every run's logs under DIR/<kind>-<mode>-<repeat>/")
    parser.add_argument("--no-consumer", dest="consumer", action="store_false",
                        help="the Producer tool alone (no benchmark Consumer beside it)")
    parser.add_argument("--modes", default="single",
                        help="comma-separated of: " + ", ".join(MODES))
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        parser.error(f"unknown mode(s) {bad}; choose from {list(MODES)}")
    if not (1 <= args.threads <= 1024 and 1 <= args.size <= 4 * 1024 * 1024
            and 1 <= args.repeats <= 100 and 0 < args.seconds <= 3600 and 0 <= args.warmup <= 3600):
        parser.error("--threads 1..1024, --size 1..4194304, --repeats 1..100, --seconds 0..3600")

    cp = oracle.java_classpath(bench=True)
    runs: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        for mode in modes:
            order = ("java", "ours") if rep % 2 == 0 else ("ours", "java")
            for kind in order:
                try:
                    result = run_once(kind, mode, cp, args, rep)
                except oracle.OracleError as exc:
                    result = {"kind": kind, "mode": mode, "error": str(exc)[-2000:]}
                runs.append({"repeat": rep, **result})
                print(json.dumps({k: runs[-1].get(k) for k in ("repeat", "kind", "mode",
                                                               "steady", "consumer_steady",
                                                               "error")}),
                      file=sys.stderr, flush=True)
    report = {
        "benchmark": "RocketMQ benchmark Producer"
                     + (" and Consumer" if args.consumer else "")
                     + ": Apache RocketMQ 4.9.7 (Java) vs ours",
        "tool": f"{PRODUCER_MAIN} (rocketmq-example 4.7.0 on rocketmq-client 4.9.7)",
        "consumer_tool": (f"{CONSUMER_MAIN} (rocketmq-example 4.7.0 on rocketmq-client 4.9.7)"
                          if args.consumer else None),
        "threads": args.threads,
        "message_bytes": args.size,
        "seconds": args.seconds,
        "warmup_seconds": args.warmup,
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "broker_jvm_opts": [o for o in oracle.JVM_BASE_OPTS if not o.startswith("--add-opens")],
        "client_jvm_opts": list(CLIENT_JVM_OPTS),
        "runs": runs,
        "ratios_ours_over_java": {m: ratios(runs, m) for m in modes},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
