"""vs_java's Consumer case on our broker alone, with what the broker does per second in each window.

    python3 bench/consumer_window.py [--early 0,20] [--caught-up 45,60] [--pyspy DIR]

The load of ``bench/vs_java.py --modes single`` against ours only (its functions start
everything): the probe (one 1 KiB send every 10 ms), RocketMQ's benchmark Producer (``-w 32
-s 1024``, 1024 queues) and, once it printed its first line, the benchmark Consumer (a new
group, from the queues' beginnings). The broker runs under bench/consumer_window_broker.py
(requests by code, the time their processors ran inline, records per pull answer, read steps,
the event loop's busy fraction and batches). Beside the Java tools, a query probe (this
process, one QUERY_CONSUMER_OFFSET every 10 ms for a group with no offset, on a connection of
its own) gives the round trip another connection's offset query sees under the load.

Two windows, in seconds after the Consumer's start: ``--early`` (vs_java's early window: the
Consumer's rebalance and backlog) and ``--caught-up``. For each: sends, pulls and records per
pull per second, requests per second by code, inline µs per second and per request by code,
the broker's cores and CPU µs per message sent, the loop's busy fraction and batches, read
steps by size, the query probe's p50 / p90 / p99 / max, and the tools' lines read in it (with
``consumer``, the Consumer's lines summed up: its TPS and average store-to-consume RT, S2C).
``--pyspy DIR`` also records the broker with ``py-spy record --gil --nonblocking -r 200 -f
raw`` over each window (DIR/<window>.txt; py-spy beside this Python). The Java Consumer's
rebalance (``rebalance``, from its client log) and the query probe over its first 4 s too.
About 90 s. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "interop"))
import oracle  # noqa: E402  (tests/interop/oracle.py)
import vs_figures  # noqa: E402
import vs_java  # noqa: E402
import vs_tools  # noqa: E402

from rmq_cluster.cluster.remoting.codec import RemotingCommand, encode  # noqa: E402

QUERY_CONSUMER_OFFSET: Final = 14
SENDS: Final = ("310", "10")
PROBE_PERIOD_S: Final = 0.01
PROBE_GROUP: Final = "consumer_window_probe"


class QueryProbe:
    """One QUERY_CONSUMER_OFFSET at a time every 10 ms on a connection of its own: (when, RT)."""

    def __init__(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rts: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        with contextlib.suppress(OSError):
            while not self.stop.is_set():
                i += 1
                fields = {"consumerGroup": PROBE_GROUP, "topic": vs_java.TOPIC,
                          "queueId": str(i % 1024)}
                data = encode(RemotingCommand.request(QUERY_CONSUMER_OFFSET, fields), i)
                t = time.perf_counter()
                self.sock.sendall(data)
                buf = b""
                while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
                    chunk = self.sock.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                self.rts.append((time.monotonic(), (time.perf_counter() - t) * 1000))
                self.stop.wait(PROBE_PERIOD_S)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=15)
        self.sock.close()

    def stats(self, t0: float, t1: float) -> dict[str, Any] | None:
        rts = sorted(rt for at, rt in self.rts if t0 <= at <= t1)
        if not rts:
            return None
        at = {q: round(vs_figures.percentile(rts, q), 2) for q in (0.5, 0.9, 0.99)}
        return {"n": len(rts), "p50_ms": at[0.5], "p90_ms": at[0.9], "p99_ms": at[0.99],
                "max_ms": round(rts[-1], 2), "mean_ms": round(statistics.fmean(rts), 2)}


def _snapshots(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def window_figures(snaps: list[dict[str, Any]], t0: float, t1: float) -> dict[str, Any]:
    """What the broker did per second between the snapshots nearest ``t0`` and ``t1``."""
    a = min(snaps, key=lambda s: abs(s["t"] - t0))
    b = min(snaps, key=lambda s: abs(s["t"] - t1))
    dt = max(1e-9, b["t"] - a["t"])

    def delta(key: str) -> dict[str, float]:
        return {k: v - a[key].get(k, 0) for k, v in b[key].items()}

    req, ns, pull, loop = delta("requests"), delta("inline_ns"), delta("pull"), delta("loop")
    sends = sum(req.get(code, 0) for code in SENDS)
    steps = {k: (v[0] - a["steps"].get(k, [0, 0])[0], v[1] - a["steps"].get(k, [0, 0])[1])
             for k, v in b["steps"].items()}
    cpu = b["cpu"] - a["cpu"]
    return {
        "seconds": round(dt, 1),
        "sends_per_s": round(sends / dt), "pull_answers_per_s": round(pull["answers"] / dt),
        "records_per_pull": round(pull["records"] / max(1, pull["answers"]), 2),
        "consumed_per_s": round(pull["records"] / dt),
        "requests_per_s": {k: round(v / dt, 1) for k, v in req.items() if v},
        "inline_us_per_s": {k: round(v / 1e3 / dt) for k, v in ns.items() if v},
        "inline_us_per_request": {k: round(v / 1e3 / req[k], 1) for k, v in ns.items() if req[k]},
        "broker_cpu_cores": round(cpu / dt, 3),
        "cpu_us_per_sent_msg": round(cpu / max(1, sends) * 1e6, 1),
        "loop_busy_fraction": round(1 - loop["io_wait_s"] / dt, 3),
        "loop_batches_per_s": round(loop["batches"] / dt),
        "loop_batches_over_2ms_per_s": round(loop["long_batches"] / dt, 1),
        "read_steps": {f"<={k}": {"per_s": round(n / dt, 1), "us_each": round(t / 1e3 / n, 1)}
                       for k, (n, t) in steps.items() if n},
    }


def _start_broker(counts: Path) -> Any:
    """oracle.start_broker for ours, under bench/consumer_window_broker.py."""
    def start_broker(kind: str, root: Path, conf: Any, cp: Any = None, quick: bool = True) -> Any:
        path = oracle.write_properties(root / "conf" / "broker.conf", conf)
        cmd = [sys.executable, str(ROOT / "bench" / "consumer_window_broker.py"), str(counts),
               "-c", str(path)]
        return oracle.spawn(f"{kind}-broker", cmd, root, oracle.BROKER_BOOT_RE,
                            oracle._our_env(root))
    return start_broker


def _pyspy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "--gil", "--nonblocking",
           "-r", "200", "-d", str(max(1, int(seconds))), "-p", str(pid), "-f", "raw",
           "-o", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _windows(args: argparse.Namespace, consumer: Any, pid: int) -> dict[str, tuple[float, float]]:
    """Wait through each window (py-spy recording it with ``--pyspy``): name -> (t0, t1)."""
    spans = {}
    for name, (a, b) in (("early", args.early), ("caught_up", args.caught_up)):
        t0, t1 = consumer.started + a, consumer.started + b
        time.sleep(max(0.0, t0 - time.monotonic()))
        spy = _pyspy(pid, b - a, args.pyspy / f"{name}.txt") if args.pyspy else None
        time.sleep(max(0.0, t1 - time.monotonic()) + 1.5)  # (the broker's next snapshot)
        if spy is not None:
            spy.wait(timeout=60)
        spans[name] = (t0, t1)
    return spans


def run(args: argparse.Namespace) -> dict[str, Any]:
    cps = vs_java.Classpaths(tools=oracle.java_classpath(bench=True),
                             client=vs_tools.bench_client())
    load = argparse.Namespace(threads=32, size=1024)
    with tempfile.TemporaryDirectory(prefix="consumer-window-") as tmp, \
            contextlib.ExitStack() as stack:
        root, counts = Path(tmp), Path(tmp) / "counts.jsonl"
        stack.enter_context(_patched(oracle, "start_broker", _start_broker(counts)))
        nodes, addr = vs_java._start_nodes(stack, "ours", "single", root / "nodes", cps.tools)
        probe = vs_java._start_probe(root, addr, cps)
        stack.callback(probe.stop)
        vs_java._wait("the probe's first SEND_OK",
                      lambda: any(s.ok for s in vs_java._probe_log(probe).sends), 120,
                      [probe, *nodes.values()])
        tool, clock = vs_java._start_load("ours", "single", root, addr, cps, load)
        stack.callback(tool.stop)
        tool.wait_boot(90)
        consumer = vs_java._start_consumer(root, addr, cps)
        stack.callback(consumer.node.stop)
        query = QueryProbe(nodes["broker"].match.group(1))  # type: ignore[union-attr]
        query.thread.start()
        stack.callback(query.close)
        out: dict[str, Any] = {"load_before": os.getloadavg()}
        spans = _windows(args, consumer, nodes["broker"].pid)
        time.sleep(vs_figures.LINE_PERIOD_S + 1)  # the Consumer's line covering the end
        snaps = _snapshots(counts)
        for name, (t0, t1) in spans.items():
            w = out[name] = window_figures(snaps, t0, t1)
            w["query_probe"] = query.stats(t0, t1)
            w["consumer_lines"] = vs_figures.lines_mostly_in(consumer.clock.stamped(), t0, t1)
            w["consumer"] = vs_figures.summarize_consumer(w["consumer_lines"], 0)
            w["producer_lines"] = [s.figures for s in clock.stamped()
                                   if t0 < s.at - vs_figures.LINE_SPAN_S / 2 < t1]
        out["rebalance"] = vs_java._consumer_rebalance(consumer)
        out["rebalance_query_probe"] = query.stats(consumer.started, consumer.started + 4)
        out["load_after"] = os.getloadavg()
    return out


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Any:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _span(text: str) -> tuple[float, float]:
    a, b = (float(x) for x in text.split(","))
    if not 0 <= a < b <= 600:
        raise argparse.ArgumentTypeError("a window is A,B seconds, 0 <= A < B <= 600")
    return a, b


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--early", type=_span, default=(0.0, 20.0))
    p.add_argument("--caught-up", type=_span, default=(45.0, 60.0))
    p.add_argument("--pyspy", type=Path, default=None, metavar="DIR")
    args = p.parse_args()
    if args.early[1] > args.caught_up[0]:
        p.error("--early must end before --caught-up starts")
    if args.pyspy is not None:
        args.pyspy.mkdir(parents=True, exist_ok=True)
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
