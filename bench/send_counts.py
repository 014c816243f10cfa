"""Load-independent cost of sends: Python opcodes and calls per message in a real broker.

    python3 bench/send_counts.py [--requests 1000] [--batch 32] [--body 1024] [--tree DIR]
    python3 bench/send_counts.py --case single [--requests 10000] [--in-flight 32] ...
    python3 bench/send_counts.py --case pc [--requests 4096] [--queues 1024] ...
    python3 bench/send_counts.py [--case single] --syscalls      (strace: syscalls per message)
    python3 bench/send_counts.py --case pc --cpu                 (timed: CPU µs per message)

Starts ``mqbroker`` (ASYNC_FLUSH, a temp store, no NameServer; the code of ``--tree``, default
this checkout: run it with that tree's venv python) with a counter that ``SIGUSR1`` starts and
``SIGUSR2`` stops, sends ``--warm`` requests, then counts exactly ``--requests`` more: every
opcode and call the broker's main thread (the event loop: every request's work) runs, by
function and by the trio task that ran them. The requests: ``--case batch`` (the default),
SEND_BATCH_MESSAGE of ``--batch`` x ``--body`` bytes, 8 in flight (the load of
bench/produce.py's batch case); ``--case single``, SEND_MESSAGE_V2 of ``--body`` bytes, 32 in
flight (bench/ha.py's and dledger.py's single-message sends, pipelined); ``--case pc``, the
send and a consumer that keeps up (bench/produce.py --produce-consume's cycle: SEND_MESSAGE_V2
of ``--body`` bytes, 32 in flight, to one queue after another of a ``--queues``-queue topic,
while a consumer keeps one long-polling PULL_MESSAGE in flight per queue; each message parks
its queue's pull again, wakes it and is read by it): the window ends once its sends are
answered and their messages consumed, and the report adds the consumer's pulls per message.
``--in-flight`` overrides each. ``--syscalls`` counts instead, in an untraced broker, the
system calls of its every thread over the window (per message, by syscall and by thread name:
a worker thread started per message shows there): by default with ``perf stat`` on the
kernel's syscall tracepoints (full speed), or ``--syscalls strace`` (``strace -f``: every
syscall slowed, so the broker reads more requests per ``recv`` than at full speed).

``--cpu`` times the same window instead, untraced: the broker's CPU per message (for an
interleaved A/B of exactly the counted load; the pc case's cycle is then one pull per message
whatever the broker's speed, where bench/produce.py's consumer lags more on a slower broker).

Unlike CPU time these counts do not move with the machine's load, so two trees compare on a
busy machine (with bench/ab.py: ``--base X --new Y -- python3 /path/to/bench/send_counts.py
--tree .``). Work that runs by the clock (the samplers, the POP revive scan, the flush
services) is counted too, and weighs more than at full speed (the tracer slows the broker
~20x): compare the tasks that do the sends' work, the connection's
(``RemotingServer._handle_socket``) and the dispatch's (``reput_service``), in
``opcodes_per_msg_by_task``, or ``every_request``: the functions called at least once a
request (``EVERY_REQUEST_CALLS``), summed per message (the figure issue 32's tables compare).
Prints one JSON object: opcodes and calls per message, opcodes per message by task,
``every_request``, and the functions whose opcodes per request are largest (``--syscalls``:
system calls per message, by call and by thread).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# ------------------------------------------------------------------ the broker side


def _child(out: str, argv: list[str]) -> None:
    """In the broker process: count opcodes and calls per function between SIGUSR1 and
    SIGUSR2 (then ``out`` holds them as JSON; ``out.on`` marks the counter started)."""
    import runpy

    import trio

    ops: dict[str, int] = {}
    calls: dict[str, int] = {}
    tasks: dict[str, int] = {}  # opcodes by the trio task that ran them
    where = ["(run loop)"]

    def tracer(frame: Any, event: str, _arg: Any) -> Any:
        code = frame.f_code
        key = f"{code.co_filename}:{code.co_firstlineno}:{code.co_qualname}"
        if event == "call":
            calls[key] = calls.get(key, 0) + 1
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
            try:
                where[0] = trio.lowlevel.current_task().name
            except RuntimeError:  # (the run loop itself, outside any task)
                where[0] = "(run loop)"
        elif event == "opcode":
            ops[key] = ops.get(key, 0) + 1
            tasks[where[0]] = tasks.get(where[0], 0) + 1
        return tracer

    def start(*_: Any) -> None:
        sys.settrace(tracer)
        Path(out + ".on").touch()

    def stop(*_: Any) -> None:
        sys.settrace(None)
        tmp = out + ".tmp"
        Path(tmp).write_text(json.dumps({"ops": ops, "calls": calls, "tasks": tasks}))
        os.replace(tmp, out)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = ["mqbroker", *argv]
    runpy.run_module("rmq_cluster.broker", run_name="__main__")


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "--child":
    # (before the imports below: the broker must import its tree's rmq_cluster, not ours)
    _child(sys.argv[2], sys.argv[3:])
    sys.exit(0)


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import _launch  # noqa: E402  (bench/_launch.py: the broker process)
import checkout  # noqa: E402, F401  (bench/checkout.py: this tree's rmq_cluster first)
import produce  # noqa: E402  (the request layouts of produce.py's cases)
import remoting as remoting_bench  # noqa: E402  (bench/remoting.py: a process's CPU time)

from rmq_cluster.cluster.protocol.message import encode_batch  # noqa: E402
from rmq_cluster.cluster.remoting.codec import RemotingCommand, encode  # noqa: E402
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode  # noqa: E402

#: requests in flight by case (produce.py's batch case; ha.py's and dledger.py's single sends;
#: the pc case's: produce.py --produce-consume's 32 senders)
IN_FLIGHT = {"batch": 8, "single": 32, "pc": 32}
#: requests counted by case when --requests is not given (the single case's are cheaper; the pc
#: case's: four of each of its queues' send-and-pull cycles)
REQUESTS = {"batch": 1000, "single": 10000, "pc": 4096}
#: the pc case's queues (produce.py --produce-consume's, and the Java benchmark's topic)
PC_QUEUES = 1024
WAIT_S = 120.0
#: one line of ``strace -f -o``: "<tid> <syscall>(" (a "<... x resumed>" line is not a call)
_STRACE_CALL = re.compile(r"^(\d+)\s+([a-z_0-9]+)\(")
#: the number in an idle trio worker thread's name ("Trio thread 7": one row for them all)
_TRIO_WORKER = re.compile(r"(?<=^Trio thread )\d+$")


# ------------------------------------------------------------------ the client side


def _wait_for(ready: Callable[[], bool], proc: subprocess.Popen[Any], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the broker did not {what}")
        time.sleep(0.02)


def _wait_file(path: str, proc: subprocess.Popen[str]) -> None:
    _wait_for(lambda: os.path.exists(path), proc, f"write {path}")


def _send(sock: socket.socket, frames: list[bytes], n: int, in_flight: int) -> None:
    """``n`` requests (cycling ``frames``), ``in_flight`` at a time; every answer must be
    SUCCESS."""
    buf = bytearray()
    sent = got = 0
    while got < n:
        k = min(in_flight - (sent - got), n - sent)
        if k > 0:
            sock.sendall(b"".join(frames[(sent + j) % len(frames)] for j in range(k)))
            sent += k
        data = sock.recv(1 << 18)
        if not data:
            raise RuntimeError("the broker closed the connection")
        buf += data
        answers, used = produce._split_frames(buf)
        del buf[:used]
        for header, *_ in answers:
            if header["code"] != 0:
                raise RuntimeError(f"send failed: {header['code']} {header.get('remark')}")
        got += len(answers)


def _body(args: argparse.Namespace) -> bytes:
    """A message body of ``--body`` bytes, the same every run (CRCs and copies alike)."""
    return random.Random(7).randbytes(args.body)


def _frames(args: argparse.Namespace) -> list[bytes]:
    body = _body(args)
    if args.case == "single":
        return produce._frames(RequestCode.SEND_MESSAGE_V2, produce.TOPIC, body)
    items = [(0, body, {"UNIQ_KEY": f"{i:032X}", "TAGS": "TagA"}) for i in range(args.batch)]
    batch_body = encode_batch(items)
    return [
        encode(
            RemotingCommand.request(
                RequestCode.SEND_BATCH_MESSAGE,
                produce._send_ext(produce.BATCH_TOPIC, q, batch=True),
                batch_body,
            ),
            1 + q,
        )
        for q in range(produce.QUEUES)
    ]


def _traced_threads(pid: int) -> bool:
    """Whether every thread of ``pid`` has a tracer attached (strace's attach is done)."""
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            if "\nTracerPid:\t0\n" in status:
                return False
    except OSError:
        return False
    return True


def _thread_names(pid: int) -> dict[str, str]:
    """tid -> its name now (``comm``; trio's idle workers as one): the main thread is the
    event loop."""
    names: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            names[tid] = "(event loop)" if int(tid) == pid else _TRIO_WORKER.sub("*", comm)
    return names


def _count_strace(path: str, names: dict[str, str]) -> dict[str, dict[str, int]]:
    """``strace -f -o path``'s calls: by syscall, and by thread name then syscall."""
    by_call: dict[str, int] = {}
    by_thread: dict[str, dict[str, int]] = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        m = _STRACE_CALL.match(line)
        if m is None:
            continue
        tid, call = m.groups()
        by_call[call] = by_call.get(call, 0) + 1
        thread = by_thread.setdefault(names.get(tid, "(exited thread)"), {})
        thread[call] = thread.get(call, 0) + 1
    return {"by_call": by_call, **{f"thread:{k}": v for k, v in by_thread.items()}}


#: The load of a case: ``drive(n)`` makes ``n`` requests and returns once they are answered
#: (the pc case: and their messages consumed).
Drive = Callable[[int], None]


def _window(args: argparse.Namespace, proc: subprocess.Popen[str], drive: Drive,
            out: str) -> dict[str, Any]:  # fmt: skip
    """Count exactly ``args.requests`` requests: the tracer's counts, the syscalls', or (``--cpu``)
    the untraced broker's CPU time."""
    if args.cpu:
        start = remoting_bench.cpu_seconds(proc.pid)
        began = time.perf_counter()
        drive(args.requests)
        return {"cpu_s": remoting_bench.cpu_seconds(proc.pid) - start,
                "wall_s": time.perf_counter() - began}  # fmt: skip
    if args.syscalls == "perf":
        return _perf_window(args, proc, drive, out)
    if args.syscalls == "strace":
        return _strace_window(args, proc, drive, out)
    proc.send_signal(signal.SIGUSR1)
    _wait_file(out + ".on", proc)
    drive(args.requests)
    proc.send_signal(signal.SIGUSR2)
    _wait_file(out, proc)
    return dict(json.loads(Path(out).read_text()))


def _strace_window(args: argparse.Namespace, proc: subprocess.Popen[str], drive: Drive,
                   out: str) -> dict[str, Any]:  # fmt: skip
    """Every syscall of every broker thread over the window, by ``strace -f`` (which slows
    each syscall down: the broker reads more requests per ``recv`` than at full speed)."""
    strace = subprocess.Popen(
        ["strace", "-f", "-qq", "-s", "0", "-o", out, "-p", str(proc.pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for(lambda: _traced_threads(proc.pid), proc, "get strace attached")
        drive(args.requests)
        names = _thread_names(proc.pid)
    finally:
        strace.send_signal(signal.SIGINT)  # (detaches; the broker runs on)
        strace.wait(timeout=WAIT_S)
    return _count_strace(out, names)


def _perf_window(args: argparse.Namespace, proc: subprocess.Popen[str], drive: Drive,
                 out: str) -> dict[str, Any]:  # fmt: skip
    """Every syscall of every broker thread over the window, at full speed: ``perf stat``
    on the kernel's ``syscalls:sys_enter_*`` tracepoints, per thread, started disabled and
    switched on and off through its control FIFO (each switch acknowledged)."""
    ctl, ack = out + ".ctl", out + ".ack"
    os.mkfifo(ctl)
    os.mkfifo(ack)
    perf = subprocess.Popen(
        ["perf", "stat", "-e", "syscalls:sys_enter_*", "-x,", "--per-thread", "-D", "-1",
         "--control", f"fifo:{ctl},{ack}", "-o", out, "-p", str(proc.pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        ctl_fd = _open_fifo(ctl, os.O_WRONLY, perf)  # (ENXIO until perf reads it)
        ack_fd = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)
        _perf_command(ctl_fd, ack_fd, b"enable", perf)
        drive(args.requests)
        _perf_command(ctl_fd, ack_fd, b"disable", perf)
        names = _thread_names(proc.pid)
    finally:
        perf.send_signal(signal.SIGINT)  # (writes its counts; the broker runs on)
        perf.wait(timeout=WAIT_S)
    return _count_perf(out, proc.pid, names)


def _open_fifo(path: str, flags: int, perf: subprocess.Popen[bytes]) -> int:
    fd = [-1]

    def opened() -> bool:
        try:
            fd[0] = os.open(path, flags | os.O_NONBLOCK)
        except OSError:
            return False
        return True

    _wait_for(opened, perf, f"let perf open {path}")
    return fd[0]


def _perf_command(ctl_fd: int, ack_fd: int, command: bytes, perf: subprocess.Popen[bytes]) -> None:
    os.write(ctl_fd, command + b"\n")
    got = bytearray()

    def acked() -> bool:
        with contextlib.suppress(BlockingIOError):
            got.extend(os.read(ack_fd, 64))
        return b"ack" in got

    _wait_for(acked, perf, f"acknowledge perf's {command.decode()}")


def _count_perf(path: str, pid: int, names: dict[str, str]) -> dict[str, dict[str, int]]:
    """``perf stat -x, --per-thread``'s lines ("<comm>-<tid>,<count>,,syscalls:sys_enter_<x>,
    ..."): by syscall, and by thread name then syscall."""
    by_call: dict[str, int] = {}
    by_thread: dict[str, dict[str, int]] = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        fields = line.split(",")
        if len(fields) < 4 or not fields[1].isdigit() or int(fields[1]) == 0:
            continue
        tid = fields[0].rsplit("-", 1)[-1]
        call = fields[3].removeprefix("syscalls:sys_enter_")
        count = int(fields[1])
        by_call[call] = by_call.get(call, 0) + count
        name = names.get(tid, "(event loop)" if tid == str(pid) else "(exited thread)")
        thread = by_thread.setdefault(name, {})
        thread[call] = thread.get(call, 0) + count
    return {"by_call": by_call, **{f"thread:{k}": v for k, v in by_thread.items()}}


class _ProduceConsume:
    """The pc case's load (bench/produce.py --produce-consume's, single-threaded): sends, ``in
    flight`` at a time, to one queue after another of a ``queues``-queue topic on one
    connection, while a consumer on another keeps one long-polling PULL_MESSAGE in flight per
    queue, re-pulling at once from each answer's nextBeginOffset. The consumer keeps up, so
    nearly every pull parks and is woken by its queue's next message."""

    def __init__(self, port: int, queues: int, body: bytes, in_flight: int) -> None:
        requests = produce.pc_requests(queues, body)
        produce.prime_pc_topic(port, requests)  # (one message per queue: ``stored``)
        self.frames = [encode(r, 1 + q) for q, r in enumerate(requests)]
        self.queues, self.in_flight = queues, in_flight
        self.sender = socket.create_connection(("127.0.0.1", port))
        self.consumer = socket.create_connection(("127.0.0.1", port))
        self._bufs = {self.sender: bytearray(), self.consumer: bytearray()}
        self._sel = selectors.DefaultSelector()
        for sock in self._bufs:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sel.register(sock, selectors.EVENT_READ)
        self.next_send = 0
        self.stored, self.consumed, self.pulls, self.found = queues, 0, 0, 0
        for q in range(queues):
            self.consumer.sendall(produce._pull_frame(q, 0, q + 1))

    def close(self) -> None:
        self._sel.close()
        for sock in self._bufs:
            sock.close()

    def figures(self) -> tuple[int, int, int]:
        """(messages consumed, pulls answered, pulls answered with messages) so far."""
        return self.consumed, self.pulls, self.found

    def drive(self, n: int) -> None:
        """``n`` sends answered SUCCESS, and every message stored so far consumed."""
        sent = got = 0
        while got < n or self.consumed < self.stored:
            k = min(self.in_flight - (sent - got), n - sent)
            if k > 0:
                first = self.next_send
                self.sender.sendall(b"".join(
                    self.frames[(first + j) % self.queues] for j in range(k)))
                self.next_send, sent = first + k, sent + k
            events = self._sel.select(WAIT_S)
            if not events:
                raise RuntimeError(f"nothing from the broker in {WAIT_S:g}s")
            for key, _ in events:
                if key.fileobj is self.sender:
                    got += self._send_answers()
                else:
                    self._pull_answers()

    def _frames_read(self, sock: socket.socket) -> tuple[bytearray, list[tuple[Any, int, int]]]:
        data = sock.recv(1 << 18)
        if not data:
            raise RuntimeError("the broker closed the connection")
        buf = self._bufs[sock]
        buf += data
        return buf, produce._split_frames(buf)  # type: ignore[return-value]

    def _send_answers(self) -> int:
        buf, (answers, used) = self._frames_read(self.sender)
        for header, *_ in answers:
            if header["code"] != 0:
                raise RuntimeError(f"send failed: {header['code']} {header.get('remark')}")
        del buf[:used]
        self.stored += len(answers)
        return len(answers)

    def _pull_answers(self) -> None:
        buf, (answers, used) = self._frames_read(self.consumer)
        again = []
        for header, start, end in answers:
            q = (header["opaque"] - 1) % self.queues
            code = header["code"]
            if code == 0:
                self.consumed += produce._count_records(memoryview(buf)[start:end])
                self.found += 1
            elif code not in PULL_AGAIN_CODES:
                raise RuntimeError(f"pull failed: {code} {header.get('remark')}")
            self.pulls += 1
            offset = int((header.get("extFields") or {}).get("nextBeginOffset", 0))
            again.append(produce._pull_frame(q, offset, q + 1 + self.queues * (self.pulls % 1000)))
        del buf[:used]
        for frame in again:  # (one send each, as the Java consumer's Netty writes them)
            self.consumer.sendall(frame)


#: Pull answers the pc case's consumer pulls again after (no messages, not a failure).
PULL_AGAIN_CODES = (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                    ResponseCode.PULL_OFFSET_MOVED)


def _pc_window(args: argparse.Namespace, proc: subprocess.Popen[str], port: int,
               out: str) -> tuple[dict[str, Any], dict[str, float]]:  # fmt: skip
    """The pc case: its counts, and the consumer's figures per message sent in the window."""
    load = _ProduceConsume(port, args.queues, _body(args), args.in_flight)
    try:
        load.drive(args.warm)
        before = load.figures()
        counts = _window(args, proc, load.drive, out)
        consumed, pulls, found = (b - a for a, b in zip(before, load.figures(), strict=True))
    finally:
        load.close()
    return counts, {
        "consumed_per_msg": round(consumed / args.requests, 3),
        "pulls_per_msg": round(pulls / args.requests, 3),
        "msgs_per_found_pull": round(consumed / max(1, found), 3),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    pc: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="send-counts-") as store:
        out = str(Path(store) / "counts.json")
        proc, port = _launch.start_broker(
            store, root=args.tree.resolve(),
            queues=args.queues if args.case == "pc" else produce.QUEUES,
            command=(str(Path(__file__).resolve()), "--child", out), timeout=WAIT_S,
        )
        try:
            if args.case == "pc":
                counts, pc = _pc_window(args, proc, port, out)
            else:
                frames = _frames(args)
                with socket.create_connection(("127.0.0.1", port)) as sock:
                    _send(sock, frames, args.warm, args.in_flight)
                    counts = _window(args, proc, functools.partial(
                        _send, sock, frames, in_flight=args.in_flight), out)
        finally:
            _launch.stop(proc)
    if args.cpu:
        report = {**_head(args), **_report_cpu(counts, args)}
    elif args.syscalls:
        report = _report_syscalls(counts, args)
    else:
        report = _report(counts, args)
    return {**report, **pc}


def _report_cpu(counts: dict[str, float], args: argparse.Namespace) -> dict[str, float]:
    messages = args.requests * (args.batch if args.case == "batch" else 1)
    return {
        "broker_cpu_us_per_msg": round(counts["cpu_s"] / messages * 1e6, 2),
        "msgs_per_s": round(messages / counts["wall_s"]),
    }


def _short(key: str) -> str:
    path, _line, name = key.rsplit(":", 2)
    parts = Path(path).parts
    tail = "/".join(parts[-2:]) if "rmq_cluster" in parts else "/".join(parts[-3:])
    return f"{tail}:{name}"


def _head(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "benchmark": "send_counts",
        "case": args.case,
        "requests": args.requests,
        "messages_per_request": args.batch if args.case == "batch" else 1,
        "in_flight": args.in_flight,
        "body_bytes": args.body,
        **({"queues": args.queues} if args.case == "pc" else {}),
    }


def _per(counts: dict[str, int], n: int, floor: float) -> dict[str, float]:
    """``counts`` / ``n``, largest first, those of at least ``floor``."""
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    return {k: round(v / n, 3) for k, v in ranked if v / n >= floor}


def _report(counts: dict[str, dict[str, int]], args: argparse.Namespace) -> dict[str, Any]:
    ops, calls = counts["ops"], counts["calls"]
    head = _head(args)
    messages = args.requests * head["messages_per_request"]
    top = sorted(ops.items(), key=lambda kv: -kv[1])[: args.top]
    return {
        **head,
        "opcodes_per_msg": round(sum(ops.values()) / messages, 2),
        "calls_per_msg": round(sum(calls.values()) / messages, 3),
        "opcodes_per_msg_by_task": {
            k: round(v, 2) for k, v in _per(counts["tasks"], messages, 0.05).items()
        },
        "every_request": _every_request(ops, calls, args.requests, messages),
        "opcodes_per_request_by_function": _by_function(top, calls, args.requests),
    }


#: A function "every request runs" is called at least this often a request (0.95, not 1: the
#: dispatch's per-record calls miss a few records that a round takes in a run of one queue).
EVERY_REQUEST_CALLS = 0.95


def _every_request(ops: dict[str, int], calls: dict[str, int], requests: int,
                   messages: int) -> dict[str, float]:  # fmt: skip
    """Opcodes and calls per message of the functions (by short name, summed) called at least
    ``EVERY_REQUEST_CALLS`` times a request: the sends' own path, without the clock-driven
    work whose share moves with the tracer's slowdown (issue 32's tables)."""
    summed = _by_function(list(ops.items()), calls, 1)
    every = [row for row in summed.values() if row["calls"] >= EVERY_REQUEST_CALLS * requests]
    return {
        "opcodes_per_msg": round(sum(row["opcodes"] for row in every) / messages, 1),
        "calls_per_msg": round(sum(row["calls"] for row in every) / messages, 2),
        "functions": len(every),
    }


def _by_function(top: list[tuple[str, int]], calls: dict[str, int],
                 requests: int) -> dict[str, dict[str, float]]:  # fmt: skip
    """Opcodes and calls per request by "folder/file.py:qualified name" (functions that share
    it, lambdas say, summed)."""
    summed: dict[str, list[int]] = {}
    for key, n in top:
        row = summed.setdefault(_short(key), [0, 0])
        row[0] += n
        row[1] += calls.get(key, 0)
    return {
        name: {"opcodes": round(n / requests, 1), "calls": round(c / requests, 2)}
        for name, (n, c) in summed.items()
    }


def _report_syscalls(counts: dict[str, dict[str, int]], args: argparse.Namespace) -> dict[str, Any]:
    head = _head(args)
    messages = args.requests * head["messages_per_request"]
    threads = {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("thread:")}
    return {
        **head,
        "syscalls_per_msg": round(sum(counts["by_call"].values()) / messages, 3),
        "syscalls_per_msg_by_call": _per(counts["by_call"], messages, 0.001),
        "syscalls_per_msg_by_thread": {
            name: {"all": round(sum(calls.values()) / messages, 3), **_per(calls, messages, 1e-3)}
            for name, calls in sorted(threads.items(), key=lambda kv: -sum(kv[1].values()))
        },
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--case", choices=sorted(IN_FLIGHT), default="batch",
                   help="batch: SEND_BATCH_MESSAGE; single: SEND_MESSAGE_V2; pc: "
                        "SEND_MESSAGE_V2 with a consumer that keeps up (batch)")  # fmt: skip
    p.add_argument("--requests", "--batches", type=int, default=None,
                   help="requests counted (batch 1000, single 10000, pc 4096)")  # fmt: skip
    p.add_argument("--warm", type=int, default=None,
                   help="requests sent first, uncounted (a fifth of --requests; pc: at least "
                        "--queues)")  # fmt: skip
    p.add_argument("--queues", type=int, default=PC_QUEUES,
                   help=f"the pc case's queues ({PC_QUEUES})")  # fmt: skip
    p.add_argument("--in-flight", type=int, default=None, help="(batch 8, single 32)")
    p.add_argument("--batch", type=int, default=32, help="messages per batch (32)")
    p.add_argument("--body", type=int, default=1024, help="bytes per message (1024)")
    p.add_argument("--top", type=int, default=25, help="functions listed (25)")
    p.add_argument("--syscalls", nargs="?", const="perf", choices=("perf", "strace"),
                   help="count system calls instead (untraced broker; perf's tracepoints at "
                        "full speed, the default, or strace -f)")  # fmt: skip
    p.add_argument("--cpu", action="store_true",
                   help="time instead: the untraced broker's CPU (utime + stime) per message "
                        "over the window (for an A/B of exactly the counted load)")  # fmt: skip
    p.add_argument("--tree", type=Path, default=ROOT,
                   help="the checkout whose broker runs (default: this one)")  # fmt: skip
    args = p.parse_args()
    args.requests = REQUESTS[args.case] if args.requests is None else args.requests
    if args.warm is None:
        args.warm = max(args.requests // 5, args.queues if args.case == "pc" else 0)
    args.in_flight = IN_FLIGHT[args.case] if args.in_flight is None else args.in_flight
    if min(args.requests, args.batch, args.body, args.in_flight, args.queues) < 1 or args.warm < 0:
        p.error("--requests, --batch, --body, --in-flight and --queues must be positive, --warm "
                "not negative")  # fmt: skip
    if args.cpu and args.syscalls:
        p.error("--cpu and --syscalls measure different windows: one at a time")
    if args.syscalls and shutil.which(args.syscalls) is None:
        p.error(f"--syscalls {args.syscalls} needs {args.syscalls} on PATH")
    print(json.dumps(measure(args), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
