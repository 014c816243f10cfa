"""Apache RocketMQ's Java broker and ours, side by side, driven by RocketMQ's own benchmark tool.

    python3 bench/vs_java.py [--seconds 30] [--warmup 10] [--threads 32] [--size 1024]
                             [--repeats 1] [--modes single,sync,async,dledger,batch]
                             [--keep-logs DIR] [--no-consumer] [--busy N]
                             [--batch 32] [--batch-threads 8] [--no-kill-leader]
                             [--catch-up-s 120]

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
``benchmark_consumer`` plus a fresh suffix, CONSUME_FROM_LAST_OFFSET) is started once the
Producer printed its first line (the topic exists then) and consumes what the Producer sends.
A new group has no committed offset and the queues' first messages are still in memory, so
both brokers answer its offset queries with 0: it starts at the queues' beginnings, with the
backlog the Producer made before it (and during its rebalance) to work through. It too prints a
line every 10 s: TPS, failures, average and max RT from the message's birth on the producer
(B2C) and from its storing on the broker (S2C) to its consumption. The case is measured in two
windows:
  * **early** (the run's top-level figures, as before): the Producer's lines right after its
    warm-up ones, and the Consumer's lines read by then after its first (start-up, rebalance;
    the run waits for at least one more). The Consumer may still be adding queues or working
    through its backlog here;
  * **caught up** (``caught_up_window``, the same figures): the run then waits, up to
    ``--catch-up-s`` from the Consumer's start, for a Consumer line after its first whose
    average S2C RT is below ``vs_figures.CAUGHT_UP_S2C_MS`` and whose TPS is at least
    ``vs_figures.CAUGHT_UP_TPS_FRACTION`` of the Producer's over the same 9 s (each tool's
    line is stamped as the bench reads it; a line is judged once the Producer printed one at
    or after it), then measures the ``ceil(--seconds / 10)`` Producer lines after the next
    one, and the Consumer's lines with most of their 9 s in that window (at least one; the
    two tools print on their own phases): a broker with a consumer attached and keeping up.
    ``caught_up`` says whether it came; ``consumer_catch_up_s`` is the Consumer's start to
    the caught-up line being read (to 10 s: the line covers the 10 s before it; null when it
    did not catch up, and the window is measured anyway).
``consumer_rebalance`` reads the Consumer's client log (``-Drocketmq.client.logRoot``): the
queues of BenchmarkTest its rebalance added (4.9.7 adds them one at a time, each after a
synchronous QUERY_CONSUMER_OFFSET, and starts pulling only when all are added), the first and
the last addition (s after its start), the additions that failed (retried 20 s later) and
the time from one addition to the next (``add_gap_ms``: an offset query as the client saw it).

The probe (bench/java/BenchClient.java ``probe``, on the same 4.9.7 client, its route polled
every 100 ms) sends one 1 KiB message to BenchmarkTest every 10 ms beside the Producer in every
mode but ``batch``; it starts first, and the Producer starts at its first SEND_OK (routes
served, topic created, a DLedger leader elected: the tool's threads die on a route timeout).
Its sends started inside the measured window give ``probe``: avg, p99 and max RT (the Producer
tool prints only avg and max). Modes:
  * ``single``: one ASYNC_MASTER, ASYNC_FLUSH;
  * ``sync`` / ``async``: a SYNC_MASTER / ASYNC_MASTER and one SLAVE of the same kind; the run
    starts once the slave's HA connection to the master is ESTABLISHED (/proc/net/tcp).
  * ``dledger``: a 3-peer DLedger group (enableDLegerCommitLog; 4.9.7's DLedger 0.3.1.2 on the
    Java side, the version its broker depends on), started together. "broker" is peer n0,
    leader or not; ``all_brokers_cpu_ms_per_1000_msgs`` sums every broker process. After the
    measured window (unless ``--no-kill-leader``) the master the probe sends to is killed
    (SIGKILL) under the running load; ``leader_kill.first_send_ok_after_kill_ms`` is the time
    from the kill to the end of the first probe send answered SEND_OK after it (90 s at most).
  * ``batch``: one ASYNC_MASTER of each kind, and NATS JetStream (nats-server ``vs_tools.
    NATS_VERSION`` from the Go module proxy, a stream of one replica on file storage) as a third
    kind; the load is BenchClient's ``--batch-threads`` threads, each sending ``--batch`` x
    ``--size`` bytes as one batch (DefaultMQProducer.send of a list; to NATS: ``--batch`` async
    publishes, then their acks) and waiting for it. Its lines give msgs/s and the batch's avg,
    p99 and max RT per 10 s; ``ours_vs_nats`` compares ours with NATS.

``--busy N`` starts N CPU-bound neighbour processes (``while True: pass``, children of the
bench) before the first run and stops them after the last, failed or not: every broker, JVM
and ours, runs beside the same N.

Reported per run: every line the tool printed (TPS, max and average RT in ms, failures as it
prints them), the "steady" figures over the lines after the warm-up ones (those hold the JIT's
compiling and the topic's creation), each node's and the load tool's (``load_tool``) CPU
seconds over the steady window and the kernel's part of them (``sys_cpu``; from
/proc/<pid>/stat), ``sched_cores`` (per process, in cores: the time its threads ran, and were
runnable but waited for a CPU, over the window, from /proc/<pid>/task/*/schedstat: a broker
that "idles" under load shows here whether it slept or waited for a core; ``busiest_thread``:
the one thread that ran most, our event loop), CPU ms per 1000 messages (all, and the
kernel's), and its VmRSS / RssAnon / VmHWM at the end (from /proc/<pid>/status).
``ours_vs_java`` has, per mode and figure, ours and Java's (each the median over the repeats)
and ours/Java: TPS above 1 means we are faster, RT and CPU and RSS below 1 mean we are lighter.
With the Consumer: its lines (``consumer_lines``) and figures (``consumer_steady``) in each
window, and ``consumer_tps`` and its average B2C / S2C RT among the ratios; every figure of the
ratios then comes twice, named for its window (``early_tps``, ``caught_up_tps``,
``caught_up_consumer_avg_s2c_rt_ms``, ...), beside ``consumer_catch_up_s`` and the rebalance's
``consumer_rebalance_*`` (last addition, queues added, the p50 / p99 time from one addition to
the next). The CPU and memory figures then cover both loads at once.

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
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import attrs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import checkout  # noqa: E402,F401  (bench/checkout.py: this tree's rmq_cluster first)

# the checkout root too: oracle imports tests.cache_lock
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "interop"))
import oracle  # noqa: E402  (tests/interop/oracle.py: starts and stops both kinds of cluster)
import vs_busy  # noqa: E402  (bench/vs_busy.py: --busy N)
import vs_figures  # noqa: E402  (bench/vs_figures.py: the probe's and batch load's figures)
import vs_machine  # noqa: E402  (bench/vs_machine.py: what a CPU second buys here today)
import vs_tools  # noqa: E402  (bench/vs_tools.py: BenchClient, nats-server)

PRODUCER_MAIN: Final = "org.apache.rocketmq.example.benchmark.Producer"
CONSUMER_MAIN: Final = "org.apache.rocketmq.example.benchmark.Consumer"
TOPIC: Final = "BenchmarkTest"
CLIENT_JVM_OPTS: Final = (
    "-server", "-Xms256m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:ActiveProcessorCount=2",
)
#: The tool prints one line every 10 s; it starts after the client's first route lookup.
LINE_PERIOD_S: Final = vs_figures.LINE_PERIOD_S
FIRST_LINE_TIMEOUT_S: Final = 60.0
HA_CONNECT_TIMEOUT_S: Final = 60.0
TPS_LINE_RE: Final = vs_figures.PRODUCER_LINE_RE
CONSUMER_LINE_RE: Final = vs_figures.CONSUMER_LINE_RE
#: How long the Consumer gets, from its start, to catch up before the caught-up window is taken
#: anyway (``--catch-up-s``; the run then says ``caught_up: false``).
CATCH_UP_TIMEOUT_S: Final = 120.0
#: The Java Consumer's client log (its rebalance's queue additions) is read up to this size.
CLIENT_LOG_MAX_BYTES: Final = 64 * 1024 * 1024
MODES: Final = {
    "single": None,
    "sync": "SYNC_MASTER",
    "async": "ASYNC_MASTER",
    "dledger": None,
    "batch": None,
}
DLEDGER_PEERS: Final = 3
#: The batch case's topic (auto-created) and NATS subject; BenchClient's 10 s line.
BATCH_TOPIC: Final = "BatchBenchmarkTest"
#: The load tool's key among the measured processes: its CPU per 1000 messages is what each
#: broker costs the client (the two share this machine's cores)
LOAD_TOOL: Final = "load_tool"
BATCH_LINE_RE: Final = re.compile(r"BATCH msgs/s:")
#: The probe: one send every PROBE_PERIOD_MS beside the load (its RTs give p99 and max).
PROBE_PERIOD_MS: Final = 10
PROBE_LINE_RE: Final = re.compile(r"^P \d")
#: How long a DLedger group gets to serve a send again after its leader's kill -9.
RECOVERY_TIMEOUT_S: Final = 90.0


# --------------------------------------------------------------------------- /proc readings


def cpu_split(pid: int) -> tuple[float, float]:
    """(utime, stime) of ``pid`` (all its threads), in seconds: user code, and the kernel's
    work for it (page faults, system calls, writeback of what it flushes)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def sched_seconds(pid: int) -> tuple[float, float]:
    """Seconds ``pid``'s threads (all of them) spent on a CPU, and runnable but waiting for one
    (/proc/<pid>/task/*/schedstat: run time, run delay)."""
    run = wait = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError), open(task / "schedstat") as f:
            fields = f.read().split()
            run, wait = run + int(fields[0]), wait + int(fields[1])
    return run / 1e9, wait / 1e9


def thread_run_seconds(pid: int) -> dict[str, float]:
    """Seconds each of ``pid``'s threads spent on a CPU, by thread id (schedstat's run time)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError), open(task / "schedstat") as f:
            out[task.name] = int(f.read().split()[0]) / 1e9
    return out


def busiest_thread_cores(before: dict[str, float], after: dict[str, float], elapsed: float
                         ) -> float:
    """The largest share of the window one thread ran (1.0: a whole core): an event loop at
    1.0 is the process's limit, however idle the machine's other core is."""
    return round(max((after[t] - before.get(t, 0.0) for t in after), default=0.0) / elapsed, 3)


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


# --------------------------------------------------------------------------- the tools' output


class LineClock:
    """A tool's 10 s lines as its node's reader thread reads them, each stamped with the time it
    was read (``time.monotonic()``): the two tools' lines are matched in time by these stamps.
    One line per 10 s per tool: the run's length bounds the list."""

    def __init__(self, parse: Callable[[str], dict[str, float] | None]) -> None:
        self._parse = parse
        self._lines: list[vs_figures.Stamped] = []

    def __call__(self, text: str) -> None:  # the reader thread: one append, atomic
        figures = self._parse(text)
        if figures is not None:
            self._lines.append(vs_figures.Stamped(time.monotonic(), figures))

    def stamped(self) -> list[vs_figures.Stamped]:
        return list(self._lines)

    def lines(self) -> list[dict[str, float]]:
        return [dict(s.figures) for s in self._lines]

    def count(self) -> int:
        return len(self._lines)


# --------------------------------------------------------------------------- one run


def _wait_until(what: str, cond: Any, timeout: float, watch: list[oracle.Node]) -> bool:
    """Wait for ``cond()`` with a deadline (False: it passed); fail at once when a watched
    process exits."""
    deadline = time.monotonic() + timeout
    while not cond():
        for node in watch:
            if not node.alive():
                raise oracle.OracleError(f"{node.name} exited while waiting for {what}:\n"
                                         f"{node.tail()}")
        if time.monotonic() >= deadline:
            return False
        with contextlib.suppress(Exception):
            watch[0].proc.wait(0.2)  # a bounded tick that also notices an exit at once
    return True


def _wait(what: str, cond: Any, timeout: float, watch: list[oracle.Node]) -> None:
    """Wait for ``cond()`` with a deadline; fail early when a watched process exits."""
    if not _wait_until(what, cond, timeout, watch):
        raise oracle.OracleError(f"no {what} within {timeout:g}s")


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
    kind: str, root: Path, cluster: oracle.Cluster, cp: str | None, extra: dict[str, object],
    port: int,
) -> Iterator[oracle.Node]:
    conf = oracle.broker_conf(root, port, cluster.namesrv_addr, extra)
    node = oracle.start_broker(kind, root, conf, cp, False)
    try:
        node.wait_boot()
        yield node
    finally:
        node.stop()


@attrs.frozen
class Classpaths:
    """RocketMQ's benchmark tools (tests/interop/java/pom.xml -P bench) and BenchClient's."""

    tools: str
    client: str


def _java(root: Path, cp: str, main: str, *args: str, opts: tuple[str, ...] = ()) -> list[str]:
    return [oracle._tool("java"), *CLIENT_JVM_OPTS, *opts, f"-Duser.home={root}", "-cp", cp, main,
            *args]


def _start_nodes(
    stack: contextlib.ExitStack, kind: str, mode: str, root: Path, cp: str
) -> tuple[dict[str, oracle.Node], str]:
    """The run's servers (``stack`` stops them) by role, and the address a client is given (the
    NameServer's; NATS: its URL)."""
    if kind == "nats":
        node, url = stack.enter_context(vs_tools.running_nats(root))
        return {"broker": node}, url
    # every port the run's brokers bind, picked at once: a peer's fast port (-2) or HA port
    # (+1) must not land on a DLedger port picked before it, nor the other way round
    taken: set[int] = set()
    port = oracle.free_broker_port(taken)
    peer_ports = [oracle.free_broker_port(taken) for _ in range(1, DLEDGER_PEERS)]
    # the master's HA port pinned on both kinds, so the slave's connection can be watched
    extra: dict[str, object] = {
        "brokerRole": MODES[mode] or "ASYNC_MASTER", "defaultTopicQueueNums": 8,
        "listenPort": port, "haListenPort": port + 1,
    }
    dledger_ports = []
    while len(dledger_ports) < DLEDGER_PEERS:
        candidate = oracle.free_port()
        if candidate not in taken:
            taken.add(candidate)
            dledger_ports.append(candidate)
    if mode == "dledger":
        extra.update(_dledger_extra(dledger_ports, 0))
    cluster = stack.enter_context(oracle.running_cluster(
        kind, root / "master", cp=cp if kind == "java" else None,
        broker_extra=extra, quick_jvm=False,
    ))
    nodes: dict[str, oracle.Node] = {"broker": cluster.broker, "namesrv": cluster.namesrv}
    if mode == "dledger":  # the leader is elected while the tool warms up
        for i in range(1, DLEDGER_PEERS):
            nodes[f"peer{i}"] = stack.enter_context(_peer(
                kind, root / f"n{i}", cluster, cp, _dledger_extra(dledger_ports, i),
                peer_ports[i - 1]))
    elif mode in ("sync", "async"):
        nodes["slave"] = stack.enter_context(_slave(kind, root / "slave", cluster, cp))
    return nodes, cluster.namesrv_addr


def _start_load(
    kind: str, mode: str, root: Path, addr: str, cps: Classpaths, args: argparse.Namespace
) -> tuple[oracle.Node, LineClock]:
    """The load generator's process and its 10 s lines."""
    if mode == "batch":
        sub = "nats-batch" if kind == "nats" else "rocketmq-batch"
        cmd = _java(root, cps.client, "BenchClient", sub, addr, BATCH_TOPIC,
                    str(args.batch_threads), str(args.batch), str(args.size))
        clock = LineClock(vs_figures.parse_batch_line)
        env = oracle._java_env(root / "tool")
        return oracle.spawn("batch", cmd, root, BATCH_LINE_RE, env, clock), clock
    cmd = _java(root, cps.tools, PRODUCER_MAIN, "-n", addr, "-w", str(args.threads),
                "-s", str(args.size), "-t", TOPIC)
    clock = LineClock(vs_figures.parse_producer_line)
    env = oracle._java_env(root / "tool")
    return oracle.spawn("producer", cmd, root, TPS_LINE_RE, env, clock), clock


@attrs.frozen
class ConsumerTool:
    """The benchmark Consumer's process, its lines, when it started (monotonic and epoch s),
    and where its client writes its log (``rocketmq.client.logRoot``)."""

    node: oracle.Node
    clock: LineClock
    started: float
    started_epoch: float
    log_root: Path


def _start_consumer(root: Path, addr: str, cps: Classpaths) -> ConsumerTool:
    log_root = root / "consumer-client" / "logs"
    clock = LineClock(vs_figures.parse_consumer_line)
    cmd = _java(root, cps.tools, CONSUMER_MAIN, "-n", addr, "-t", TOPIC,
                opts=(f"-Drocketmq.client.logRoot={log_root}",))
    started, started_epoch = time.monotonic(), time.time()
    node = oracle.spawn("consumer", cmd, root, CONSUMER_LINE_RE,
                        oracle._java_env(root / "consumer-tool"), clock)
    return ConsumerTool(node, clock, started, started_epoch, log_root)


def _consumer_rebalance(consumer: ConsumerTool) -> dict[str, Any]:
    """The queues of TOPIC the Consumer's rebalance took, and when (its client log)."""
    try:
        with open(consumer.log_root / "rocketmq_client.log", "rb") as f:
            text = f.read(CLIENT_LOG_MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return {}
    return vs_figures.rebalance_adds(text, TOPIC, consumer.started_epoch)


def _start_probe(root: Path, addr: str, cps: Classpaths) -> oracle.Node:
    cmd = _java(root, cps.client, "BenchClient", "probe", addr, TOPIC, str(PROBE_PERIOD_MS))
    return oracle.spawn("probe", cmd, root, PROBE_LINE_RE, oracle._java_env(root / "probe"))


def _probe_log(probe: oracle.Node) -> vs_figures.ProbeLog:
    try:
        return vs_figures.parse_probe(probe.log.read_text(errors="replace"))
    except OSError:
        return vs_figures.ProbeLog((), ())


def _kill_leader(nodes: dict[str, oracle.Node], probe: oracle.Node) -> dict[str, Any]:
    """kill -9 the master the probe last sent to, then wait for its first SEND_OK after it."""
    masters = _probe_log(probe).masters
    leader = masters[-1][1] if masters else None
    victim = next((k for k, n in nodes.items()
                   if n.match is not None and n.match.groups() and n.match.group(1) == leader),
                  None)
    if victim is None:
        return {"error": f"no node serves the probe's master {leader!r}"}
    kill_ms = time.time() * 1000
    nodes[victim].kill9()
    alive = [probe, *(n for k, n in nodes.items() if k != victim)]
    with contextlib.suppress(oracle.OracleError):  # not recovered: said in the result
        _wait("a SEND_OK after the leader's kill",
              lambda: vs_figures.recovery(_probe_log(probe), kill_ms)["recovered"],
              RECOVERY_TIMEOUT_S, alive)
    return {"killed": victim, **vs_figures.recovery(_probe_log(probe), kill_ms)}


def _measure(
    clock: LineClock, nodes: dict[str, oracle.Node], watch: list[oracle.Node], warmup: int,
    windows: int,
) -> dict[str, Any]:
    """Wait for the load's first ``warmup`` lines, then read CPU, wall and epoch times across
    the lines up to ``windows``."""
    _wait(f"{warmup} lines from the load", lambda: clock.count() >= warmup,
          (max(0, warmup - clock.count()) + 2) * LINE_PERIOD_S + FIRST_LINE_TIMEOUT_S, watch)
    cpu0 = {k: cpu_split(n.pid) for k, n in nodes.items()}
    sched0 = {k: sched_seconds(n.pid) for k, n in nodes.items()}
    threads0 = {k: thread_run_seconds(n.pid) for k, n in nodes.items()}
    t0, epoch0 = time.monotonic(), time.time()
    _wait(f"{windows} lines from the load", lambda: clock.count() >= windows,
          (windows - warmup + 2) * LINE_PERIOD_S, watch)
    t1 = time.monotonic()
    elapsed = t1 - t0
    sched = {k: sched_seconds(n.pid) for k, n in nodes.items()}
    threads = {k: thread_run_seconds(n.pid) for k, n in nodes.items()}
    cpu1 = {k: cpu_split(n.pid) for k, n in nodes.items()}
    return {
        "elapsed": elapsed,
        "mono": (t0, t1),
        # cores' worth of the window each node ran, and was runnable but waited for a CPU
        "sched_cores": {k: {"on_cpu": round((sched[k][0] - sched0[k][0]) / elapsed, 3),
                            "runnable_waiting": round((sched[k][1] - sched0[k][1]) / elapsed, 3),
                            "busiest_thread": busiest_thread_cores(threads0[k], threads[k],
                                                                   elapsed)}
                        for k in nodes},
        "epoch_ms": (epoch0 * 1000, time.time() * 1000),
        "cpu": {k: round(sum(cpu1[k]) - sum(cpu0[k]), 2) for k in nodes},
        "sys_cpu": {k: round(cpu1[k][1] - cpu0[k][1], 2) for k in nodes},
        "mem": {k: memory_mb(n.pid) for k, n in nodes.items()},
    }


def _line_counts(args: argparse.Namespace) -> tuple[int, int]:
    """ceil(warmup / 10) warm-up lines (at least 1), and those plus ceil(seconds / 10)."""
    warmup = max(1, -(-int(args.warmup) // int(LINE_PERIOD_S)))
    return warmup, warmup + max(1, -(-int(args.seconds) // int(LINE_PERIOD_S)))


def _early_consumer_lines(consumer: ConsumerTool, watch: list[oracle.Node]) -> list[Any]:
    """The Consumer's lines once it printed one after its first (the Producer still on)."""
    want = vs_figures.CONSUMER_WARMUP_LINES + 1
    _wait(f"{want} lines from the Consumer tool", lambda: consumer.clock.count() >= want,
          (want + 2) * LINE_PERIOD_S + FIRST_LINE_TIMEOUT_S, [consumer.node, *watch])
    return consumer.clock.lines()


def _caught_up_window(
    consumer: ConsumerTool, producer: LineClock, nodes: dict[str, oracle.Node],
    watch: list[oracle.Node], args: argparse.Namespace,
) -> dict[str, Any]:
    """Wait, up to ``--catch-up-s`` from the Consumer's start, for a Consumer line that shows it
    caught up (vs_figures.caught_up_line); then measure the ``--seconds`` of Producer lines
    after the next one (caught up or not: the result says which), and the Consumer's lines
    with most of their 9 s in that window (at least one)."""
    watch = [consumer.node, *watch]

    def found() -> int | None:
        return vs_figures.caught_up_line(consumer.clock.stamped(), producer.stamped())

    left = consumer.started + args.catch_up_s - time.monotonic()
    _wait_until("the Consumer to catch up", lambda: found() is not None, max(0.0, left), watch)
    at = found()
    warmup, windows = _line_counts(args)
    start = producer.count() + 1  # a line boundary: the CPU readings cover whole lines
    m = _measure(producer, nodes, watch, start, start + windows - warmup)
    m["lines"] = producer.lines()[start:start + windows - warmup]
    t0, t1 = m["mono"]
    half = vs_figures.LINE_SPAN_S / 2  # its lines with most of their span in the window
    _wait("the Consumer's lines of the caught-up window",
          lambda: time.monotonic() >= t1 + half
          and any(s.at > t0 + half for s in consumer.clock.stamped()), 2 * LINE_PERIOD_S, watch)
    stamped = consumer.clock.stamped()
    m["consumer_lines"] = vs_figures.lines_mostly_in(stamped, t0, t1)
    return {
        "caught_up": at is not None,
        "consumer_catch_up_s": None if at is None else round(stamped[at].at - consumer.started, 1),
        "caught_up_window": m,
    }


def _run_load(
    kind: str, mode: str, root: Path, cps: Classpaths, args: argparse.Namespace,
    stack: contextlib.ExitStack,
) -> dict[str, Any]:
    """Start the servers, the load, the probe (and the Consumer), measure; the raw results."""
    nodes, addr = _start_nodes(stack, kind, mode, root, cps.tools)
    warmup, windows = _line_counts(args)
    probe = None if mode == "batch" else _start_probe(root, addr, cps)
    if probe is not None:  # its first SEND_OK: routes served, topic made, DLedger leader elected
        stack.callback(probe.stop)
        _wait("the probe's first SEND_OK", lambda: any(s.ok for s in _probe_log(probe).sends),
              FIRST_LINE_TIMEOUT_S + RECOVERY_TIMEOUT_S, [probe, *nodes.values()])
    tool, clock = _start_load(kind, mode, root, addr, cps, args)
    stack.callback(tool.stop)
    consumer: ConsumerTool | None = None
    tool.wait_boot(FIRST_LINE_TIMEOUT_S + (warmup + 1) * LINE_PERIOD_S)
    if args.consumer and mode != "batch":  # the topic exists once the Producer printed a line
        consumer = _start_consumer(root, addr, cps)
        stack.callback(consumer.node.stop)
    watch = [tool, *nodes.values()]
    measured = {**nodes, LOAD_TOOL: tool}  # the load tool's CPU too: what a broker costs a client
    m = _measure(clock, measured, watch, warmup, windows)
    m["lines"] = clock.lines()[:windows]  # the warm-up lines too (the figures skip them)
    if consumer is not None:
        m["consumer_lines"] = _early_consumer_lines(consumer, watch)
        m.update(_caught_up_window(consumer, clock, measured, watch, args))
        m["consumer_rebalance"] = _consumer_rebalance(consumer)
    if probe is not None:
        for window in (m, m.get("caught_up_window") or {}):
            if window:
                window["probe"] = vs_figures.probe_rt(_probe_log(probe), *window["epoch_ms"])
        if mode == "dledger" and args.kill_leader:
            m["leader_kill"] = _kill_leader(nodes, probe)
    return m


def _window_figures(
    m: dict[str, Any], mode: str, warmup: int, consumer_skip: int
) -> dict[str, Any]:
    """One measured window's figures: the load's lines (the first ``warmup`` before the window)
    and summary, the probe's RTs, each node's CPU (per 1000 messages too), scheduling and
    memory; the Consumer's lines and summary (its first ``consumer_skip`` left out)."""
    lines = m["lines"]
    steady = (vs_figures.summarize_batch(lines, warmup) if mode == "batch"
              else vs_figures.summarize_producer(lines, warmup))
    msgs = max(1.0, steady.get("tps", 0) * m["elapsed"])
    cpu = m["cpu"]
    return {
        "tool_lines": lines,
        "steady": steady,
        "probe": m.get("probe"),
        "window_s": round(m["elapsed"], 1),
        "cpu_s": cpu,
        "sched_cores": m["sched_cores"],
        "cpu_ms_per_1000_msgs": {k: round(v / msgs * 1e6, 1) for k, v in cpu.items()},
        "sys_cpu_ms_per_1000_msgs": {k: round(v / msgs * 1e6, 1)
                                     for k, v in m.get("sys_cpu", {}).items()},
        "all_brokers_cpu_ms_per_1000_msgs": round(
            sum(v for k, v in cpu.items() if k not in ("namesrv", LOAD_TOOL)) / msgs * 1e6, 1),
        "memory_mb": m["mem"],
        **({} if "consumer_lines" not in m else {
            "consumer_lines": m["consumer_lines"],
            "consumer_steady": vs_figures.summarize_consumer(m["consumer_lines"], consumer_skip),
        }),
    }


def run_once(
    kind: str, mode: str, cps: Classpaths, args: argparse.Namespace, rep: int = 0
) -> dict[str, Any]:
    warmup, _ = _line_counts(args)
    with tempfile.TemporaryDirectory(prefix=f"vs-java-{kind}-{mode}-") as tmp:
        root = Path(tmp)
        try:
            with contextlib.ExitStack() as stack:
                m = _run_load(kind, mode, root, cps, args, stack)
        finally:
            if args.keep_logs is not None:
                _keep_logs(root, args.keep_logs / f"{kind}-{mode}-{rep}")
    out = {"kind": kind, "mode": mode, "leader_kill": m.get("leader_kill"),
           **_window_figures(m, mode, warmup, vs_figures.CONSUMER_WARMUP_LINES)}
    if "caught_up_window" in m:
        out.update({
            "caught_up": m["caught_up"],
            "consumer_catch_up_s": m["consumer_catch_up_s"],
            "consumer_rebalance": m["consumer_rebalance"],
            "caught_up_window": _window_figures(m["caught_up_window"], mode, 0, 0),
        })
    return out


def _keep_logs(root: Path, dest: Path) -> None:
    """Copy the run's logs (node stdout, RocketMQ's log files; no store) to ``dest``."""
    for log_dir in root.rglob("logs"):
        if log_dir.is_dir():
            shutil.copytree(log_dir, dest / log_dir.relative_to(root), dirs_exist_ok=True)


# --------------------------------------------------------------------------- the report


#: The figures compared per mode: name -> how a run gives it (medians over the repeats).
FIGURES: Final[dict[str, Any]] = {
    "tps": lambda r: r["steady"]["tps"],
    "avg_rt_ms": lambda r: r["steady"]["avg_rt_ms"],
    "max_rt_ms": lambda r: r["steady"]["max_rt_ms"],
    "batch_p99_rt_ms": lambda r: r["steady"]["p99_rt_ms"],
    "probe_avg_rt_ms": lambda r: r["probe"]["avg_rt_ms"],
    "probe_p99_rt_ms": lambda r: r["probe"]["p99_rt_ms"],
    "probe_max_rt_ms": lambda r: r["probe"]["max_rt_ms"],
    "leader_kill_first_send_ok_ms": lambda r: r["leader_kill"]["first_send_ok_after_kill_ms"],
    "broker_cpu_ms_per_1000_msgs": lambda r: r["cpu_ms_per_1000_msgs"]["broker"],
    "broker_sys_cpu_ms_per_1000_msgs": lambda r: r["sys_cpu_ms_per_1000_msgs"]["broker"],
    "broker_on_cpu_cores": lambda r: r["sched_cores"]["broker"]["on_cpu"],
    "broker_runnable_waiting_cores": lambda r: r["sched_cores"]["broker"]["runnable_waiting"],
    "broker_busiest_thread_cores": lambda r: r["sched_cores"]["broker"]["busiest_thread"],
    "all_brokers_cpu_ms_per_1000_msgs": lambda r: r["all_brokers_cpu_ms_per_1000_msgs"],
    "load_tool_cpu_ms_per_1000_msgs": lambda r: r["cpu_ms_per_1000_msgs"][LOAD_TOOL],
    "broker_rss_anon_mb": lambda r: r["memory_mb"]["broker"]["RssAnon"],
    "broker_vm_rss_mb": lambda r: r["memory_mb"]["broker"]["VmRSS"],
    "consumer_tps": lambda r: r["consumer_steady"]["tps"],
    "consumer_avg_b2c_rt_ms": lambda r: r["consumer_steady"]["avg_b2c_rt_ms"],
    "consumer_avg_s2c_rt_ms": lambda r: r["consumer_steady"]["avg_s2c_rt_ms"],
}


#: With the Consumer, besides each window's FIGURES (``early_*``, ``caught_up_*``).
CONSUMER_FIGURES: Final[dict[str, Any]] = {
    "consumer_catch_up_s": lambda r: r["consumer_catch_up_s"],
    "consumer_rebalance_last_add_s": lambda r: r["consumer_rebalance"]["last_add_s"],
    "consumer_rebalance_queues_added": lambda r: r["consumer_rebalance"]["queues_added"],
    "consumer_rebalance_add_gap_p50_ms": lambda r: r["consumer_rebalance"]["add_gap_ms"]["p50"],
    "consumer_rebalance_add_gap_p99_ms": lambda r: r["consumer_rebalance"]["add_gap_ms"]["p99"],
}


def figures_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures a mode's runs are compared by: FIGURES; with the Consumer, FIGURES of each
    window under a prefix that names it (``early_``: the window right after the warm-up;
    ``caught_up_``: the one after the Consumer caught up) and CONSUMER_FIGURES."""
    if not any("caught_up_window" in r for r in runs):
        return FIGURES
    return {
        **vs_figures.window_getters(FIGURES, "early_", None),
        **vs_figures.window_getters(FIGURES, "caught_up_", "caught_up_window"),
        **CONSUMER_FIGURES,
    }


def comparison(runs: list[dict[str, Any]], mode: str, base: str = "java") -> dict[str, Any]:
    """Per figure the run has: ours, ``base``'s (each the median over its repeats), ours/base."""
    of_mode = [r for r in runs if r["mode"] == mode]
    table = vs_figures.median_ratios(of_mode, figures_of(of_mode), base=base)
    return {k: v for k, v in table.items() if v["ours"] is not None or v[base] is not None}


def kinds_of(mode: str, rep: int) -> tuple[str, ...]:
    """The kinds a mode compares, in the order of repeat ``rep`` (alternating)."""
    kinds = ("java", "ours", "nats") if mode == "batch" else ("java", "ours")
    return kinds if rep % 2 == 0 else kinds[::-1]


def _parse_args() -> argparse.Namespace:
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
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="N CPU-bound neighbour processes for the whole run (both brokers)")
    parser.add_argument("--batch", type=int, default=32, help="messages per batch (batch mode)")
    parser.add_argument("--batch-threads", type=int, default=8,
                        help="threads each sending a batch and waiting for it (batch mode)")
    parser.add_argument("--no-kill-leader", dest="kill_leader", action="store_false",
                        help="dledger: skip the leader kill -9 after the measured window")
    parser.add_argument("--catch-up-s", type=float, default=CATCH_UP_TIMEOUT_S,
                        help="with the Consumer: how long it gets from its start to catch up "
                             "before the caught-up window is measured anyway")
    args = parser.parse_args()
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.mode_list if m not in MODES]
    if bad or not args.mode_list:
        parser.error(f"unknown mode(s) {bad}; choose from {list(MODES)}")
    if not (1 <= args.threads <= 1024 and 1 <= args.size <= 4 * 1024 * 1024
            and 1 <= args.repeats <= 100 and 0 < args.seconds <= 3600 and 0 <= args.warmup <= 3600
            and 0 <= args.busy <= 64 and 1 <= args.batch <= 1024 and 0 <= args.catch_up_s <= 3600
            and 1 <= args.batch_threads <= 1024 and args.batch * args.size <= 4 * 1024 * 1024):
        parser.error("--threads 1..1024, --size 1..4194304, --repeats 1..100, --seconds 0..3600,"
                     " --busy 0..64, --batch 1..1024 (batch x size <= 4 MiB), --batch-threads"
                     " 1..1024, --catch-up-s 0..3600")
    return args


def _run_all(args: argparse.Namespace, cps: Classpaths) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        for mode in args.mode_list:
            for kind in kinds_of(mode, rep):
                try:
                    result = run_once(kind, mode, cps, args, rep)
                except oracle.OracleError as exc:
                    result = {"kind": kind, "mode": mode, "error": str(exc)[-2000:]}
                runs.append({"repeat": rep, **result})
                print(json.dumps({k: runs[-1].get(k) for k in (
                    "repeat", "kind", "mode", "steady", "probe", "leader_kill",
                    "consumer_steady", "caught_up", "consumer_catch_up_s", "consumer_rebalance",
                    "error")}), file=sys.stderr, flush=True)
    return runs


def main() -> None:
    args = _parse_args()
    cps = Classpaths(tools=oracle.java_classpath(bench=True), client=vs_tools.bench_client())
    if "batch" in args.mode_list:
        vs_tools.nats_server()  # built before the runs, not inside one
    spin = _java(Path(tempfile.gettempdir()), cps.client, "BenchClient", "spin")
    with vs_busy.busy_neighbours(args.busy):
        machine = {"before": vs_machine.machine_state(spin)}
        runs = _run_all(args, cps)
        machine["after"] = vs_machine.machine_state(spin)
    modes = args.mode_list
    report = {
        "benchmark": "RocketMQ benchmark Producer"
                     + (" and Consumer" if args.consumer else "")
                     + ": Apache RocketMQ 4.9.7 (Java) vs ours",
        "tool": f"{PRODUCER_MAIN} (rocketmq-example 4.7.0 on rocketmq-client 4.9.7)",
        "consumer_tool": (f"{CONSUMER_MAIN} (rocketmq-example 4.7.0 on rocketmq-client 4.9.7)"
                          if args.consumer else None),
        "probe": f"bench/java/BenchClient.java probe: one 1 KiB send every {PROBE_PERIOD_MS} ms",
        "batch_tool": (f"bench/java/BenchClient.java: {args.batch_threads} threads x batches of "
                       f"{args.batch} x {args.size} B; NATS {vs_tools.NATS_VERSION} JetStream R1"
                       if "batch" in modes else None),
        "threads": args.threads,
        "message_bytes": args.size,
        "seconds": args.seconds,
        "warmup_seconds": args.warmup,
        "repeats": args.repeats,
        "busy_neighbours": args.busy,
        "catch_up": ({"timeout_s": args.catch_up_s, "max_s2c_ms": vs_figures.CAUGHT_UP_S2C_MS,
                      "min_tps_fraction": vs_figures.CAUGHT_UP_TPS_FRACTION}
                     if args.consumer else None),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "machine": machine,
        "broker_jvm_opts": [o for o in oracle.JVM_BASE_OPTS if not o.startswith("--add-opens")],
        "client_jvm_opts": list(CLIENT_JVM_OPTS),
        "runs": runs,
        "ours_vs_java": {m: comparison(runs, m) for m in modes},
        **({"ours_vs_nats": {"batch": comparison(runs, "batch", base="nats")}}
           if "batch" in modes else {}),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
