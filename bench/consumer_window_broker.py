"""Our ``mqbroker`` with counters for bench/consumer_window.py: what the broker does per second.

    python3 bench/consumer_window_broker.py COUNTS.jsonl -c broker.conf

Runs ``rmq_cluster.broker``'s main with these hooks around the remoting state machine and the
Trio loop (a measurement harness: it wraps methods of the installed tree, nothing else):

* requests by code and the time their processors ran inline (``ConnectionState.answer_inline``);
* the records of every PULL_MESSAGE answer (inline ones and parked pulls' frames), by walking
  the stored records' size words of the body;
* the read steps (``ConnectionState.take``): how many frames each held (buckets), their time;
* the event loop: time parked in its I/O wait, batches between two waits, batches over 2 ms
  (the wait a request arriving on another connection may see).

One JSON line a second goes to COUNTS.jsonl (cumulative figures, ``t`` monotonic, ``cpu`` the
process's CPU seconds); the caller takes differences over its windows.
"""

from __future__ import annotations

import json
import struct
import sys
import threading
import time
from typing import Any

import trio

from rmq_cluster.cluster.remoting import connection_state as cs

PULL_MESSAGE = 11
_SIZE = struct.Struct(">i")
#: read-step buckets: frames at most this many
STEP_BUCKETS = (1, 4, 8, 16, 32, 64)
LONG_BATCH_S = 0.002


class Counters:
    def __init__(self) -> None:
        self.requests: dict[int, int] = {}
        self.inline_ns: dict[int, int] = {}
        self.pull = {"answers": 0, "records": 0, "empty": 0}
        self.loop = {"io_wait_s": 0.0, "batches": 0, "long_batches": 0, "max_batch_s": 0.0}
        self.steps: dict[str, list[int]] = {}  # bucket -> [steps, ns]

    def pull_answer(self, body: Any) -> None:
        records = off = 0
        n = len(body) if body else 0
        while off + 4 <= n:
            size = _SIZE.unpack_from(body, off)[0]
            if size <= 0:
                break
            off += size
            records += 1
        self.pull["answers"] += 1
        self.pull["records"] += records
        self.pull["empty"] += records == 0

    def snapshot(self) -> dict[str, Any]:
        snap = {"t": time.monotonic(), "cpu": time.process_time(),
                "requests": dict(self.requests), "inline_ns": dict(self.inline_ns),
                "pull": dict(self.pull), "loop": dict(self.loop),
                "steps": {k: list(v) for k, v in self.steps.items()}}
        self.loop["max_batch_s"] = 0.0
        return snap


def _bucket(n: int) -> str:
    return next((str(b) for b in STEP_BUCKETS if n <= b), "more")


def hook(c: Counters) -> None:
    """Wrap the state machine's methods (every connection of the process)."""
    state = cs.ConnectionState
    inline, queue, later_frame, take = (
        state.answer_inline, state.queue_answer, state.answer_later_frame, state.take)

    def answer_inline(self: Any, request: Any) -> Any:
        t = time.perf_counter_ns()
        try:
            return inline(self, request)
        finally:
            code = request.code
            c.requests[code] = c.requests.get(code, 0) + 1
            c.inline_ns[code] = c.inline_ns.get(code, 0) + time.perf_counter_ns() - t

    def queue_answer(self: Any, opaque: int, code: int, response: Any) -> None:
        if code == PULL_MESSAGE and response is not None:
            c.pull_answer(getattr(response, "body", b""))
        queue(self, opaque, code, response)

    def answer_later_frame(self: Any, request: Any, head: bytes, body: bytes) -> None:
        if request.code == PULL_MESSAGE:
            c.pull_answer(body)
        later_frame(self, request, head, body)

    def take_step(self: Any, commands: list[Any]) -> Any:
        t = time.perf_counter_ns()
        try:
            return take(self, commands)
        finally:
            e = c.steps.setdefault(_bucket(len(commands)), [0, 0])
            e[0] += 1
            e[1] += time.perf_counter_ns() - t

    state.answer_inline = answer_inline  # type: ignore[method-assign]
    state.queue_answer = queue_answer  # type: ignore[method-assign]
    state.answer_later_frame = answer_later_frame  # type: ignore[method-assign]
    state.take = take_step  # type: ignore[method-assign]


class LoopClock(trio.abc.Instrument):
    """The loop's time in its I/O wait, and its batches (the runs between two waits)."""

    def __init__(self, c: Counters) -> None:
        self.c = c
        self.wait_started = 0.0
        self.batch_started = time.perf_counter()

    def before_io_wait(self, timeout: float) -> None:
        now = time.perf_counter()
        batch = now - self.batch_started
        loop = self.c.loop
        loop["batches"] += 1
        loop["long_batches"] += batch > LONG_BATCH_S
        loop["max_batch_s"] = max(loop["max_batch_s"], batch)
        self.wait_started = now

    def after_io_wait(self, timeout: float) -> None:
        now = time.perf_counter()
        self.c.loop["io_wait_s"] += now - self.wait_started
        self.batch_started = now


def main() -> None:
    path, argv = sys.argv[1], sys.argv[2:]
    c = Counters()
    hook(c)
    run = trio.run

    def instrumented_run(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("instruments", []).append(LoopClock(c))
        return run(*args, **kwargs)

    trio.run = instrumented_run  # the broker's main calls trio.run

    def dump() -> None:
        with open(path, "a") as f:
            while True:
                time.sleep(1.0)
                f.write(json.dumps(c.snapshot()) + "\n")
                f.flush()

    threading.Thread(target=dump, daemon=True).start()
    from rmq_cluster.broker.__main__ import main as broker_main

    sys.exit(broker_main(argv))


if __name__ == "__main__":
    main()
