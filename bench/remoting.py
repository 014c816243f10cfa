"""Remoting benchmark: echo requests/s and latency, beside a plain Trio baseline in the same run.

    python3 bench/remoting.py [--seconds 3] [--body 1024] [--inflight 256]

Servers run in a child process (so client and server each get a core, as in a real deployment):
  * ours: ``RemotingServer`` with an echo processor, driven by ``open_remoting_client``, once with
    a plain ``def`` processor (inline in the reader) and once with an ``async def`` one (a task per
    request);
  * baseline: a plain Trio length-prefixed echo (read big, answer every frame in one send).
Both are measured (a) with one request in flight and (b) with N in flight on one connection.
Each case also reports the server's CPU time per request (``server_cpu_us_per_req``, from
/proc/<pid>/stat over the measured window). Prints one JSON object. Targets (issue
"Foundation"): (a) >= 0.7x the baseline, (b) >= 40 000 req/s.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkout  # (bench/checkout.py: this tree's rmq_cluster first)

from rmq_cluster.cluster.logging import configure_logging
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.connection import Connection
from rmq_cluster.cluster.remoting.processors import ProcessorTable
from rmq_cluster.cluster.remoting.server import RemotingServer

ECHO_CODE = 1
_LEN = struct.Struct(">I")


# ----------------------------------------------------------------------------- servers


def _echo(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    """A plain ``def`` processor: runs inline in the connection's reader."""
    return request.response(0, body=request.body)


async def _echo_task(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    """An ``async def`` processor: a task per request (what long polling needs)."""
    return request.response(0, body=request.body)


async def _serve_ours(processor: str) -> None:
    echo = _echo if processor == "sync" else _echo_task
    server = RemotingServer(ProcessorTable({ECHO_CODE: echo}), node="bench")
    async with trio.open_nursery() as nursery:
        _host, port = await nursery.start(server.serve, "127.0.0.1", 0)
        print(port, flush=True)


async def _baseline_conn(stream: trio.SocketStream) -> None:
    buf = bytearray()
    while True:
        data = await stream.receive_some(256 * 1024)
        if not data:
            return
        buf += data
        out = bytearray()
        pos = 0
        while len(buf) - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if len(buf) - pos - 4 < n:
                break
            out += buf[pos : pos + 4 + n]
            pos += 4 + n
        del buf[:pos]
        if out:
            await stream.send_all(out)


async def _serve_baseline() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    print(listeners[0].socket.getsockname()[1], flush=True)
    await trio.serve_listeners(_baseline_conn, listeners)


# ----------------------------------------------------------------------------- clients


class _Stats:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.count = 0

    def summary(self, seconds: float) -> dict[str, float]:
        lat = sorted(self.latencies)

        def pct(p: float) -> float:
            return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1e6, 1) if lat else 0.0

        return {
            "requests": self.count,
            "req_per_s": round(self.count / seconds),
            "p50_us": pct(0.50),
            "p99_us": pct(0.99),
        }


def cpu_seconds(pid: int | None) -> float:
    """utime + stime of process ``pid`` (0.0 when unknown or not on Linux)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _drive(
    call: Callable[[], Awaitable[None]], inflight: int, seconds: float, warmup: float,
    server_pid: int | None = None,
) -> dict[str, float]:
    """Keep ``inflight`` calls going; rate and latency over the measured window, and (with
    ``server_pid``) the server process's CPU time per request: barely moved by other load
    on the machine, unlike the rate."""
    stats = _Stats()
    cpu: list[float] = []
    measuring = False
    stop_at = trio.current_time() + warmup + seconds

    async def worker() -> None:
        clock = time.perf_counter
        while trio.current_time() < stop_at:
            t0 = clock()
            await call()
            if measuring:
                stats.latencies.append(clock() - t0)
                stats.count += 1

    async with trio.open_nursery() as nursery:
        for _ in range(inflight):
            nursery.start_soon(worker)
        await trio.sleep(warmup)  # fixed warm-up period of the benchmark, not a wait on a condition
        measuring = True
        started = time.perf_counter()
        cpu.append(cpu_seconds(server_pid))
    elapsed = time.perf_counter() - started
    summary = stats.summary(elapsed)
    if server_pid is not None:
        used = cpu_seconds(server_pid) - cpu[0]
        summary["server_cpu_us_per_req"] = round(used / max(1, stats.count) * 1e6, 2)
    return summary


async def _bench_ours(
    port: int, body: bytes, inflight: int, seconds: float, server_pid: int | None = None
) -> dict[str, dict[str, float]]:
    async with open_remoting_client(node="bench-client") as client:
        conn = await client.connection(f"127.0.0.1:{port}")
        request = RemotingCommand.request(ECHO_CODE, {"topic": "BenchTopic", "queueId": "0"}, body)

        async def call() -> None:
            response = await conn.invoke(request, timeout=30)
            if len(response.body) != len(body):
                raise RuntimeError("echo mismatch")

        one = await _drive(call, 1, seconds, 0.3, server_pid)
        many = await _drive(call, inflight, seconds, 0.5, server_pid)
    return {"one_in_flight": one, f"{inflight}_in_flight": many}


async def _bench_baseline(
    port: int, body: bytes, inflight: int, seconds: float, server_pid: int | None = None
) -> dict[str, dict[str, float]]:
    """Plain Trio length-prefixed echo: (a) ping-pong in one task; (b) a pipeline that keeps
    ``inflight`` frames outstanding, a reader task waking one waiter per answered frame."""
    frame = _LEN.pack(len(body)) + body

    # (a) ping-pong: send a frame, read its echo, repeat
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    pending = bytearray()

    async def ping() -> None:
        await stream.send_all(frame)
        while True:
            if len(pending) >= 4:
                (n,) = _LEN.unpack_from(pending, 0)
                if len(pending) >= 4 + n:
                    del pending[: 4 + n]
                    return
            data = await stream.receive_some(256 * 1024)
            if not data:
                raise RuntimeError("baseline server closed")
            pending.extend(data)

    one = await _drive(ping, 1, seconds, 0.3, server_pid)
    await stream.aclose()

    # (b) pipeline
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    waiters: list[trio.Event] = []
    out = bytearray()
    sending = False

    async def reader() -> None:
        buf = bytearray()
        while True:
            data = await stream.receive_some(256 * 1024)
            if not data:
                return
            buf += data
            pos = 0
            while len(buf) - pos >= 4:
                (n,) = _LEN.unpack_from(buf, pos)
                if len(buf) - pos - 4 < n:
                    break
                pos += 4 + n
                waiters.pop(0).set()
            del buf[:pos]

    async def call() -> None:
        nonlocal out, sending
        done = trio.Event()
        waiters.append(done)
        out += frame
        if not sending:
            sending = True
            try:
                while out:
                    chunk, out = out, bytearray()
                    await stream.send_all(chunk)
            finally:
                sending = False
        await done.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        many = await _drive(call, inflight, seconds, 0.5, server_pid)
        nursery.cancel_scope.cancel()
    await stream.aclose()
    return {"one_in_flight": one, f"{inflight}_in_flight": many}


# ----------------------------------------------------------------------------- main


def _start_server(mode: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=checkout.child_env(Path(__file__).resolve().parents[1]),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        raise RuntimeError(f"{mode} server did not start: {line!r}")
    return proc, int(line)


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--body", type=int, default=1024, help="body bytes per request")
    parser.add_argument("--inflight", type=int, default=256)
    parser.add_argument(
        "--serve", choices=["ours-sync", "ours-async", "baseline"], help=argparse.SUPPRESS
    )
    args = parser.parse_args()

    configure_logging("warning")
    if args.serve in ("ours-sync", "ours-async"):
        trio.run(_serve_ours, args.serve.removeprefix("ours-"))
        return
    if args.serve == "baseline":
        trio.run(_serve_baseline)
        return

    body = os.urandom(args.body)
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name, bench in (
        ("baseline", _bench_baseline),
        ("ours-sync", _bench_ours),
        ("ours-async", _bench_ours),
    ):
        proc, port = _start_server(name)
        try:
            results[name] = trio.run(bench, port, body, args.inflight, args.seconds, proc.pid)
        finally:
            _stop(proc)

    many = f"{args.inflight}_in_flight"
    base = results["baseline"]

    def ratios(ours: dict[str, dict[str, float]]) -> dict[str, float]:
        return {
            case: round(ours[case]["req_per_s"] / max(1, base[case]["req_per_s"]), 3)
            for case in ("one_in_flight", many)
        }

    sync, task = results["ours-sync"], results["ours-async"]
    report = {
        "benchmark": "remoting echo",
        "body_bytes": args.body,
        "seconds_per_case": args.seconds,
        "python": sys.version.split()[0],
        "trio": trio.__version__,
        "cpus": os.cpu_count(),
        "baseline_plain_trio": base,
        "ours_sync_processor": sync,
        "ours_async_processor": task,
        "ratio_vs_baseline": {"sync_processor": ratios(sync), "async_processor": ratios(task)},
        "targets": {"one_in_flight_ratio_min": 0.7, f"{many}_req_per_s_min": 40_000},
        "meets_targets": {
            kind: {
                "one_in_flight": ratios(r)["one_in_flight"] >= 0.7,
                many: r[many]["req_per_s"] >= 40_000,
            }
            for kind, r in (("sync_processor", sync), ("async_processor", task))
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
