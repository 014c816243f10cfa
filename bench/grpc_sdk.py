"""Apache's RocketMQ 5 SDKs (Python and Java) through Apache's 5.3.1 Proxy + Broker and through
ours, and the proxy's added latency per send.

    python3 bench/grpc_sdk.py [--messages 2000] [--warmup 200] [--size 1024] [--threads 8]
                              [--repeats 1] [--clients python-sdk,java-sdk,...] [--quick-jvm]
                              [--workdir EMPTY_DIR] [--pcap]

For each repeat, the two stacks run one after the other (the order alternates between repeats),
each on free loopback ports in a temp dir, started and always stopped by tests/interop:

  * ``apache``: Apache RocketMQ 5.3.1's Broker beside our NameServer (Maven Central has no 5.x
    NameServer) and Apache's 5.3.1 Proxy in cluster mode in front of them, built from the
    release's sources (tests/interop/proxy_oracle.py);
  * ``ours``: our NameServer and Broker with ``mqproxy`` in front (plain text, as Apache's).

The same four clients drive both, one after the other (their order reversed on odd repeats),
each in a process of its own with a topic of its own (4 queues):

  * ``python-sdk``: ``rocketmq-python-client`` 5.1.2 from PyPI in a venv of its own (the one
    tests/compat builds, ``~/.cache/rmq-cluster-compat/pyclient-5.1.2``), bench/grpc_sdk_side.py;
  * ``java-sdk``: ``rocketmq-client-java`` 5.0.7 (the version tests/compat/java5grpc pins),
    bench/java/grpc_sdk/GrpcSdkBench.java, compiled against its pinned pom (cached);
  * ``python-remoting``: our Python client (Trio) straight to the broker over remoting;
  * ``java-remoting``: Apache's 4.9.7 remoting client (``DefaultMQProducer``) straight to the
    broker, in the same Java program.

Each sends ``--warmup`` messages untimed (connections, routes, the JVMs' JIT), then the phases:
``send_1``, ``--messages`` sends of ``--size`` bytes one in flight (each timed); the SDKs only:
``send_k``, as many with ``--threads`` in flight (Java: threads; Python: ``send_async``), and
``receive_ack``, a SimpleConsumer receiving batches of 32 and acking each message until all
are back. Per phase: msgs/s, latency p50/p99/max (ms) and the CPU per message (µs, utime +
stime of /proc/<pid>/stat over the phase) of the proxy and of the broker; per stack, the RssAnon
(MiB) of both at the end. ``medians`` are over the repeats; ``ratios_ours_over_apache`` divide
ours by Apache's (msgs/s above 1: we are faster; latency, CPU and RSS below 1: we are lighter);
``proxy_added_latency`` is, per stack and language, the SDK's ``send_1`` p50/p99 through the
proxy minus the remoting client's straight to the broker (a different client library on each
side of the subtraction, the same for both stacks), with the proxy's CPU per send. The JVMs
(nodes and clients) run oracle.JVM_BASE_OPTS (serial GC, 512 MiB heap, 2 CPUs) with the full
JIT unless ``--quick-jvm``. Everything shares the machine's cores: the figures compare the two
stacks under the same load (``load_avg_before``/``after`` say what it was). ``--pcap`` (tcpdump,
root) records each SDK's run on loopback and adds to its ``send_1`` row where a send's time
goes: ``wire_proxy_in``, ``wire_broker``, ``wire_proxy_out`` and ``wire_client`` (the SDK's
own share), p50/p90 (bench/grpc_sdk_wire.py). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs

TOPIC = "GrpcSdkBench"
PYTHON_CLIENT = "5.1.2"
JAVA_CLIENT = "5.0.7 (gRPC), 4.9.7 (remoting)"
CLIENT_TIMEOUT_S = 1800
#: each client's own topic (and the SDKs' consumer group: its topic + "G"), so a receive sees
#: only what its own client sent
CLIENTS = {"python-sdk": "PySdk", "java-sdk": "JavaSdk", "python-remoting": "PyDirect",
           "java-remoting": "JavaDirect"}


# --------------------------------------------------------------------------- the orchestrator

ROOT = Path(__file__).resolve().parents[1]
SIDE = ROOT / "bench" / "grpc_sdk_side.py"


def _setup_paths() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import checkout  # noqa: F401  (bench/checkout.py: this tree's rmq_cluster first)
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests" / "interop"))  # bench/vs_tools.py imports oracle


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


def _client_cmd(client: str, ends: Ends, args: argparse.Namespace, tools: Tools
                ) -> list[str]:
    """The command that runs ``client`` against one stack (``ends``)."""
    topic = TOPIC + CLIENTS[client]
    common = [str(args.messages), str(args.warmup), str(args.size)]
    pids = f"proxy={ends.proxy_pid},broker={ends.broker_pid}"
    if client == "python-sdk":
        return [str(tools.sdk_python), str(SIDE), "--sdk-side", ends.endpoint, topic, *common,
                str(args.threads), pids]
    if client == "python-remoting":
        return [sys.executable, str(SIDE), "--remoting-side", ends.namesrv, topic, *common, pids]
    from tests.interop import oracle

    java = [oracle._tool("java"), *oracle.JVM_BASE_OPTS,
            *(oracle.JVM_QUICK_OPTS if args.quick_jvm else ()), "-cp", tools.java_cp,
            "GrpcSdkBench"]
    if client == "java-sdk":
        return [*java, "sdk", ends.endpoint, topic, topic + "G", str(args.messages),
                str(args.warmup), str(args.size), str(args.threads), pids]
    return [*java, "remoting", ends.namesrv, topic, *common, pids]


def _drive(client: str, ends: Ends, home: Path, args: argparse.Namespace, tools: Tools
           ) -> dict[str, Any]:
    """Run one client side to its end; its parsed output line (with ``--pcap``, an SDK's
    under ``"wire"``: its sends' split, bench/grpc_sdk_wire.py)."""
    import grpc_sdk_figures as fig
    import grpc_sdk_wire as wire

    home.mkdir(parents=True, exist_ok=True)  # the SDKs log under $HOME/logs
    cmd = _client_cmd(client, ends, args, tools)
    if client.startswith("java"):
        cmd.insert(1, f"-Duser.home={home}")
    pcap = home / "sends.pcap" if args.pcap and client.endswith("-sdk") else None
    ports = (_port(ends.endpoint), _port(ends.broker))
    with wire.capture(pcap, ports) if pcap else contextlib.nullcontext():
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=CLIENT_TIMEOUT_S, env={**os.environ, "HOME": str(home)},
                              check=False)
    try:
        if done.returncode != 0:
            raise fig.FiguresError(f"exit {done.returncode}")
        out = fig.parse_client_output(done.stdout)
        fig.check_received(out, args.warmup + 2 * args.messages)
    except fig.FiguresError as exc:
        raise RuntimeError(f"{client} failed ({exc}):\n{done.stderr[-3000:]}") from None
    if pcap is not None:
        out["wire"] = wire.split_of_capture(pcap, *ports, skip=args.warmup,
                                            count=args.messages, min_request=args.size)
    return out


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _rss(pid: int) -> float:
    from vs_java import memory_mb  # bench/vs_java.py: /proc/<pid>/status readings

    return memory_mb(pid).get("RssAnon", 0.0)


@attrs.frozen
class Ends:
    """Where a stack's clients go: the proxy's gRPC endpoint, the NameServer; the broker's
    address and the two pids."""

    endpoint: str
    namesrv: str
    broker: str
    proxy_pid: int
    broker_pid: int


@attrs.frozen
class Tools:
    sdk_python: Path
    java_cp: str


def run_stack(kind: str, root: Path, rep: int, args: argparse.Namespace, tools: Tools,
              rows: list[dict[str, Any]]) -> None:
    """One stack up, every client against it (in the repeat's order), down; each client's rows
    appended to ``rows`` as it ends (a later failure keeps them)."""
    import grpc_sdk_figures as fig

    from tests.integration.proxy.proxy_testlib import live_proxy
    from tests.interop import oracle, proxy_oracle, scenario

    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(oracle.running_cluster(
            "java5" if kind == "apache" else "ours", root / "cluster",
            quick_jvm=args.quick_jvm))
        scenario.replay(cluster.namesrv_addr, cluster.broker_addr, _topic_steps(args.clients))
        if kind == "apache":
            px = stack.enter_context(proxy_oracle.running_apache_proxy(
                root / "proxy", cluster.namesrv_addr, str(cluster.conf["brokerClusterName"]),
                quick_jvm=args.quick_jvm))
            endpoint, proxy_pid = px.endpoint, px.node.pid
        else:
            (root / "proxy").mkdir(parents=True)
            ours = stack.enter_context(live_proxy(root / "proxy", cluster.namesrv_addr))
            endpoint, proxy_pid = f"127.0.0.1:{ours.port}", ours.proc.pid
        ends = Ends(endpoint, cluster.namesrv_addr, cluster.broker_addr, proxy_pid,
                    cluster.broker.pid)
        clk_tck = os.sysconf("SC_CLK_TCK")
        order = args.clients if rep % 2 == 0 else args.clients[::-1]
        for client in order:
            out = _drive(client, ends, root / f"home-{client}", args, tools)
            rows += [{**row, **out.get("wire", {})} if row["phase"] == "send_1" else row
                     for row in fig.client_rows(out, kind, rep, clk_tck)]
        rows.append({"stack": kind, "repeat": rep, "client": "processes", "phase": "end",
                     "proxy_rss_anon_mb": _rss(proxy_pid),
                     "broker_rss_anon_mb": _rss(cluster.broker.pid)})


def _topic_steps(clients: list[str]) -> tuple[Any, ...]:
    """Create each client's topic (4 queues) and the proxy's heartbeat-syncer topic on the
    broker, as the interop scenarios do, then wait (deadline: the step's) until the NameServer
    routes each: a loaded Java broker registers a new topic a while after it answered, and an
    SDK gives up on a missing route."""
    from rmq_cluster.cluster.remoting.codes import RequestCode
    from tests.interop import proxy_scenario, scenario

    create = proxy_scenario.SETUP[0]
    # Apache's proxy exits at boot when its own creation of this topic loses to the broker's
    # registration (seen in a quiet run here): made first, as the interop proxy oracle does
    syncer = next(s for s in proxy_scenario.SETUP if s.name == "create_syncer_topic")
    topics = [TOPIC + CLIENTS[c] for c in clients]
    creates = [scenario.Step("create_topic", "broker", create.code,
                             {**create.ext, "topic": t,  # type: ignore[dict-item]
                              "readQueueNums": "4", "writeQueueNums": "4"})
               for t in topics]
    routes = [scenario.Step("route", "namesrv", RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": t},
                            body_kind="json", until=lambda view: view.get("code") == 0)
              for t in [*topics, proxy_scenario.HEARTBEAT_SYNCER_TOPIC]]
    return (syncer, *creates, *routes)


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="sends per timed phase")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--warmup", type=int, default=200,
                        help="sends before the timed ones (received and acked with them)")
    parser.add_argument("--threads", type=int, default=8,
                        help="sends in flight in the send_k phase (Java: threads)")
    parser.add_argument("--clients", default=",".join(CLIENTS),
                        help=f"a comma-separated subset of {','.join(CLIENTS)}")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quick-jvm", action="store_true", help="C1 only (faster boot)")
    parser.add_argument("--pcap", action="store_true",
                        help="capture each SDK's run on lo (tcpdump, root) and split its "
                             "one-in-flight sends into hops (wire_* keys of send_1)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the stacks' dirs (logs) in this empty dir "
                             "(default: a temp dir, removed)")
    args = parser.parse_args()
    args.clients = [c for c in args.clients.split(",") if c]
    unknown = set(args.clients) - set(CLIENTS)
    if unknown or not args.clients:
        parser.error(f"unknown clients {sorted(unknown)}; choose among {list(CLIENTS)}")
    if args.workdir is not None and args.workdir.exists() and any(args.workdir.iterdir()):
        parser.error(f"--workdir {args.workdir} is not empty")
    return args


def main() -> None:
    args = _parse_args()
    _setup_paths()
    import tempfile

    import grpc_sdk_figures as fig
    import vs_tools

    java = any(c.startswith("java") for c in args.clients)
    tools = Tools(sdk_python(), vs_tools.grpc_sdk_client() if java else "")
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        work = args.workdir or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="grpc-sdk-bench-")))
        for rep in range(args.repeats):
            order = ("apache", "ours") if rep % 2 == 0 else ("ours", "apache")
            for kind in order:
                try:
                    run_stack(kind, work / f"{kind}-{rep}", rep, args, tools, rows)
                except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                    # a failed stack is reported beside the others' figures, not hidden
                    errors.append({"stack": kind, "repeat": rep, "error": str(exc)[-3000:]})
    med = fig.medians(rows)
    print(json.dumps({
        "bench": "grpc_sdk", "sdks": {"python": f"rocketmq-python-client {PYTHON_CLIENT}",
                                      "java": f"rocketmq-client-java {JAVA_CLIENT}"},
        "messages": args.messages, "warmup": args.warmup, "size": args.size,
        "threads": args.threads, "repeats": args.repeats, "quick_jvm": args.quick_jvm,
        "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
        "medians": med, "ratios_ours_over_apache": fig.ratios(med),
        "proxy_added_latency": fig.added_latency(med), "errors": errors, "runs": rows}))
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
