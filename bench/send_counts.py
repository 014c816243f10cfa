"""Load-independent cost of batch sends: Python opcodes and calls per message in a real broker.

    python3 bench/send_counts.py [--batches 1000] [--batch 32] [--body 1024] [--tree DIR]

Starts ``mqbroker`` (ASYNC_FLUSH, a temp store, no NameServer; the code of ``--tree``, default
this checkout: run it with that tree's venv python) with a counter that ``SIGUSR1`` starts and
``SIGUSR2`` stops, sends ``--warm`` SEND_BATCH_MESSAGE requests (``--batch`` x ``--body`` bytes,
8 in flight, the load of bench/produce.py's batch case), then counts exactly ``--batches`` more:
every opcode and call the broker's main thread (the event loop: every request's work) runs,
by function and by the trio task that ran them. Unlike CPU time these counts do not move
with the machine's load, so two trees compare on a busy machine (with bench/ab.py: ``--base X
--new Y -- python3 /path/to/bench/send_counts.py --tree .``). Work that runs by the clock (the
samplers, the POP revive scan, the flush services) is counted too, and weighs more than at full
speed (the tracer slows the broker ~20x): compare the tasks that do the sends' work, the
connection's (``RemotingServer._handle_socket``) and the dispatch's (``reput_service``), in
``opcodes_per_msg_by_task``. Prints one JSON object: opcodes and calls per message, opcodes per
message by task, and the functions whose opcodes per batch are largest.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
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
        key = f"{code.co_filename}:{code.co_firstlineno}:{code.co_name}"
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
import produce  # noqa: E402  (the batch case's request layout)

from rmq_cluster.cluster.protocol.message import encode_batch  # noqa: E402
from rmq_cluster.cluster.remoting.codec import RemotingCommand, encode  # noqa: E402
from rmq_cluster.cluster.remoting.codes import RequestCode  # noqa: E402

IN_FLIGHT = 8
WAIT_S = 120.0


# ------------------------------------------------------------------ the client side


def _wait_file(path: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the broker did not write {path}")
        time.sleep(0.02)


def _send(sock: socket.socket, frames: list[bytes], n: int, opaque: list[int]) -> None:
    """``n`` requests (cycling ``frames``' bodies, fresh opaques), IN_FLIGHT at a time; every
    answer must be SUCCESS."""
    buf = bytearray()
    sent = got = 0
    while got < n:
        k = min(IN_FLIGHT - (sent - got), n - sent)
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
                raise RuntimeError(f"batch send failed: {header['code']} {header.get('remark')}")
        got += len(answers)
    opaque[0] += n


def _frames(args: argparse.Namespace) -> list[bytes]:
    rnd = random.Random(7)  # (the same bytes every run: CRCs and copies alike)
    body = rnd.randbytes(args.body)
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


def measure(args: argparse.Namespace) -> dict[str, Any]:
    frames = _frames(args)
    with tempfile.TemporaryDirectory(prefix="send-counts-") as store:
        out = str(Path(store) / "counts.json")
        proc, port = _launch.start_broker(
            store, root=args.tree.resolve(), queues=produce.QUEUES,
            command=(str(Path(__file__).resolve()), "--child", out), timeout=WAIT_S,
        )
        try:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                opaque = [0]
                _send(sock, frames, args.warm, opaque)
                proc.send_signal(signal.SIGUSR1)
                _wait_file(out + ".on", proc)
                _send(sock, frames, args.batches, opaque)
                proc.send_signal(signal.SIGUSR2)
                _wait_file(out, proc)
            counts = json.loads(Path(out).read_text())
        finally:
            _launch.stop(proc)
    return _report(counts, args)


def _short(key: str) -> str:
    path, _line, name = key.rsplit(":", 2)
    parts = Path(path).parts
    tail = "/".join(parts[-2:]) if "rmq_cluster" in parts else "/".join(parts[-3:])
    return f"{tail}:{name}"


def _report(counts: dict[str, dict[str, int]], args: argparse.Namespace) -> dict[str, Any]:
    ops, calls = counts["ops"], counts["calls"]
    messages = args.batches * args.batch
    top = sorted(ops.items(), key=lambda kv: -kv[1])[: args.top]
    return {
        "benchmark": "send_counts",
        "batches": args.batches,
        "messages_per_batch": args.batch,
        "body_bytes": args.body,
        "opcodes_per_msg": round(sum(ops.values()) / messages, 2),
        "calls_per_msg": round(sum(calls.values()) / messages, 3),
        "opcodes_per_msg_by_task": {
            name: round(v / messages, 2)
            for name, v in sorted(counts["tasks"].items(), key=lambda kv: -kv[1])
            if v / messages >= 0.05
        },
        "opcodes_per_batch_by_function": {
            _short(k): {
                "opcodes": round(v / args.batches, 1),
                "calls": round(calls.get(k, 0) / args.batches, 2),
            }
            for k, v in top
        },
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--batches", type=int, default=1000, help="batches counted (1000)")
    p.add_argument("--warm", type=int, default=200, help="batches sent first, uncounted (200)")
    p.add_argument("--batch", type=int, default=32, help="messages per batch (32)")
    p.add_argument("--body", type=int, default=1024, help="bytes per message (1024)")
    p.add_argument("--top", type=int, default=25, help="functions listed (25)")
    p.add_argument("--tree", type=Path, default=ROOT,
                   help="the checkout whose broker runs (default: this one)")  # fmt: skip
    args = p.parse_args()
    if min(args.batches, args.batch, args.body) < 1 or args.warm < 0:
        p.error("--batches, --batch and --body must be positive, --warm not negative")
    print(json.dumps(measure(args), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
