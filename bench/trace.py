"""Message-trace cost on the send path: ``Producer.send`` with ``enable_msg_trace`` off and on,
interleaved, against the same broker in the same run.

    python3 bench/trace.py [--seconds 6] [--body 1024] [--inflight 256] [--rounds 3]

A NameServer and a broker run as child processes (bench/client.py's ``_start``). Cases, each
with trace off, on, and ``queued_only`` (records made and queued as with trace on, but the
shipping task throws them away: what the send path itself pays, without the trace messages'
own cost in this process and on the broker): sync send (1 in flight) and async send
(``--inflight`` tasks). Each
row gives msgs/s, latency percentiles and ``client_cpu_us_per_msg`` (this process's CPU time
over the measured window per message: the tracer's queueing and its shipping of trace
messages included). With trace on, also the records the tracer shipped, dropped (queue full)
and failed. Prints one JSON object; ``ratio`` = on / off.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import checkout  # noqa: E402, F401  (bench/checkout.py: this tree's rmq_cluster first)

#: bench/client.py (its processes and driver), loaded by path: its module name would shadow
#: the client package's
_spec = importlib.util.spec_from_file_location("bench_client", ROOT / "bench" / "client.py")
assert _spec is not None and _spec.loader is not None
client_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(client_bench)
from rmq_cluster.client import Admin, ClientConfig, Message, Producer  # noqa: E402
from rmq_cluster.client.trace import TraceDispatcher  # noqa: E402
from rmq_cluster.cluster.logging import configure_logging  # noqa: E402
from rmq_cluster.cluster.protocol.trace import DEFAULT_TRACE_TOPIC  # noqa: E402


class _Discard:
    """A trace sender that sends nothing."""

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def send(self, msg: Message) -> Any:
        return None


async def _case(p: Producer, msg: Message, inflight: int, seconds: float) -> dict[str, Any]:
    async def send_one() -> int:
        await p.send(msg)
        return 1

    cpu0 = time.process_time()
    row = await client_bench._drive_client(send_one, inflight, seconds, warmup=0.3)
    cpu = time.process_time() - cpu0
    sent = row["msgs_per_s"] * seconds
    row["client_cpu_us_per_msg"] = round(cpu / sent * 1e6, 1) if sent else 0.0
    return row


async def _bench(ns_addr: str, port: int, args: argparse.Namespace) -> dict[str, Any]:
    body = os.urandom(args.body)
    cc = ClientConfig(namesrv_addr=ns_addr, client_ip="127.0.0.1")
    async with Admin(client_config=cc) as admin:  # as a broker with traceTopicEnable has it
        await admin.update_topic(DEFAULT_TRACE_TOPIC, broker_addr=f"127.0.0.1:{port}",
                                 read_queue_nums=1, write_queue_nums=1)
    topic = "BenchTrace"
    seg = args.seconds / args.rounds
    msg = Message(topic, body, tags="TagA", keys="order-1")
    out: dict[str, Any] = {}
    async with Producer("BenchTraceOff", client_config=cc) as off, Producer(
        "BenchTraceOn", client_config=cc, enable_msg_trace=True
    ) as on, Producer("BenchTraceQueued", client_config=cc) as queued:
        queued.tracer = TraceDispatcher(queued.instance, _Discard())
        await queued.tracer.start()
        await off.send(msg)  # creates the topic, loads the route
        await on.send(msg)
        for name, inflight in (("sync_send", 1), ("async_send", args.inflight)):
            async def case_off(inflight: int = inflight) -> dict[str, Any]:
                return await _case(off, msg, inflight, seg)

            async def case_on(inflight: int = inflight) -> dict[str, Any]:
                return await _case(on, msg, inflight, seg)

            async def case_queued(inflight: int = inflight) -> dict[str, Any]:
                return await _case(queued, msg, inflight, seg)

            r_off, r_on, r_queued = await client_bench._rounds(args.rounds, case_off, case_on,
                                                               case_queued)
            out[name] = {"trace_off": r_off, "trace_on": r_on, "queued_only": r_queued,
                         "ratio": client_bench._ratio(r_on, r_off),
                         "ratio_queued_only": client_bench._ratio(r_queued, r_off)}
        tracer = on.tracer
        assert tracer is not None
        with trio.fail_after(30):  # let the queue drain before the counts are read
            while tracer.sent_records + tracer.dropped + tracer.failed < tracer.appended:  # noqa: ASYNC110
                await trio.sleep(0.05)
        out["tracer"] = {"appended": tracer.appended, "sent_records": tracer.sent_records,
                         "sent_messages": tracer.sent_messages, "dropped": tracer.dropped,
                         "failed": tracer.failed}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds per case (best round reported)")
    args = parser.parse_args()
    configure_logging("error")
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as store:
        procs: list[subprocess.Popen[bytes]] = []
        try:
            ns_addr, port = client_bench._start(store, procs)
            result = trio.run(_bench, ns_addr, port, args)
        finally:
            for proc in reversed(procs):  # the broker first: it unregisters from the NameServer
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
    print(json.dumps({"bench": "trace", "body_bytes": args.body, "seconds": args.seconds,
                      "rounds": args.rounds, "load_average": os.getloadavg(), **result},
                     indent=2))


if __name__ == "__main__":
    main()
