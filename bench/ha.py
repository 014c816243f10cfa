"""HA replication benchmark: prints one JSON object.

    python -m bench.ha [--messages 60000] [--writers 256] [--repeats 3] [--slave-process]

Three put workloads with ``--writers`` concurrent writers (1 KiB bodies, put_message through
the store's put path), measured in the same run, interleaved, median of ``--repeats``:
  * none:  ASYNC_MASTER, no HAService client (the baseline);
  * async: ASYNC_MASTER + 1 slave replicating over loopback;
  * sync:  SYNC_MASTER + 1 slave (a put returns once the slave acked it).
Then the replication lag at half of the measured ASYNC max rate (paced writers): per message,
master append -> the master reading the slave's ack covering it (``ack_lag``; a full round
trip) and, in-process only, master append -> the bytes being in the slave's CommitLog
(``apply_lag``).

Master and slave run in ONE trio loop of one process by default (they share one core); with
``--slave-process`` the slave runs in a child process (``python -m bench.ha --serve-slave``).
Targets (issue 7): sync >= 0.9x async throughput with 256 in flight; lag p99 < 10 ms at half load.
"""

from __future__ import annotations

import argparse
import array
import bisect
import functools
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import orjson
import trio

from cluster.logging import configure_logging
from cluster.protocol.message import Message
from ha.client import HAClient
from ha.config import HAConfig
from ha.connection import HAService
from store import flush
from store.config import BrokerRole, MessageStoreConfig
from store.message_store import MessageStore

BODY_BYTES = 1024
FILE_BYTES = 128 * 1024 * 1024
HOST = ("127.0.0.1", 10911)
QUEUES = 8
CATCH_UP_TIMEOUT_S = 60.0
PACE_TICK_S = 0.001
#: Lag percentiles leave out puts of the first this many seconds of a run: the slave creates its
#: ConsumeQueue and IndexFiles as the first messages arrive (~3 ms each, on its event loop),
#: a one-time stall that would otherwise be most of a 3 s run's p99.
LAG_WARMUP_S = 0.5


def config(root: str, role: BrokerRole) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=root, mapped_file_size_commit_log=FILE_BYTES, broker_role=role
    )


class StepCounter(trio.abc.Instrument):
    """Counts task steps (scheduler wakeups): SYNC costs one more per put than ASYNC."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


class Marks:
    """(offset, time) pairs in two arrays."""

    def __init__(self) -> None:
        self.offsets = array.array("q")
        self.times = array.array("d")

    def add(self, offset: int, t: float) -> None:
        self.offsets.append(offset)
        self.times.append(t)

    def __len__(self) -> int:
        return len(self.offsets)


def pct(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def make_messages(n: int) -> list[Message]:
    body = os.urandom(BODY_BYTES)
    return [
        Message(topic="BenchTopic", body=body, queue_id=i % QUEUES, born_host=("10.0.0.1", 5000),
                store_host=HOST, properties={"TAGS": "TagA", "UNIQ_KEY": f"{i:032X}"})
        for i in range(n)
    ]


async def _serve_slave_inproc(
    root: str, master_addr: str, *, task_status: trio.TaskStatus[MessageStore]
) -> None:
    store = MessageStore.open(config(root, BrokerRole.SLAVE))
    try:
        async with trio.open_nursery() as n:
            await n.start(flush.run, store)
            await n.start(HAClient(store, master_addr, HAConfig()).run)
            task_status.started(store)
    finally:
        store.close()


def _spawn_slave(root: str, master_addr: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.ha", "--serve-slave", root, master_addr],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
    )


async def run_mode(
    root: str, mode: str, msgs: list[Message], writers: int, *, rate: float | None,
    slave_process: bool, count_steps: bool = False,
) -> dict[str, Any]:
    """One workload; ``rate`` paces the writers (messages/s in total) for the lag run."""
    role = BrokerRole.SYNC_MASTER if mode == "sync" else BrokerRole.ASYNC_MASTER
    store = MessageStore.open(config(os.path.join(root, "master"), role))
    ha = HAService(store, HAConfig(ha_listen_port=0), host="127.0.0.1")
    # arrays, not lists of tuples: nothing here for the garbage collector to scan
    latencies = array.array("d")
    appended = Marks()  # (end offset, time appended)
    acks = Marks()  # (push2SlaveMaxOffset, time it rose)
    applied = Marks()  # (slave max offset, time) - in-process only
    statuses: dict[str, int] = {}
    proc: subprocess.Popen[bytes] | None = None
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(flush.run, store)
            port = await nursery.start(ha.run)
            slave_store: MessageStore | None = None
            if mode != "none":
                addr = f"127.0.0.1:{port}"
                sroot = os.path.join(root, "slave")
                if slave_process:
                    proc = _spawn_slave(sroot, addr)
                else:
                    slave_store = await nursery.start(_serve_slave_inproc, sroot, addr)
                with trio.fail_after(CATCH_UP_TIMEOUT_S):
                    await ha.wait_for_slaves(1)

                async def watch_acks() -> None:
                    while True:
                        v = ha.ack_watermark.value
                        await ha.ack_watermark.wait_for(v + 1)
                        acks.add(ha.ack_watermark.value, time.perf_counter())

                nursery.start_soon(watch_acks)
                if slave_store is not None:
                    s = slave_store

                    async def watch_slave() -> None:
                        while True:
                            await s.wait_appended_beyond(s.max_phys_offset)
                            applied.add(s.max_phys_offset, time.perf_counter())

                    nursery.start_soon(watch_slave)

            # warm-up (not measured): one message per queue creates the ConsumeQueue and
            # index files on both sides, as on a broker that has been running (creating an
            # IndexFile fallocates ~420 MB inline in dispatch: a ~100 ms stall)
            for q in range(QUEUES):
                store.append_message(Message(
                    topic="BenchTopic", body=b"warm-up", queue_id=q, store_host=HOST,
                    properties={"TAGS": "TagA", "UNIQ_KEY": f"WARMUP{q:026X}"},
                ))
            store.dispatch_all()
            if mode != "none":
                with trio.fail_after(CATCH_UP_TIMEOUT_S):
                    await ha.ack_watermark.wait_for(store.max_phys_offset)
                if slave_store is not None:
                    await slave_store.wait_appended_beyond(store.max_phys_offset - 1)
                    slave_store.dispatch_all()
            per_writer = len(msgs) // writers
            tokens = trio.Semaphore(0) if rate else None

            async def pacer() -> None:
                """Token bucket: releases ``rate`` puts per second, one tick per PACE_TICK_S."""
                assert tokens is not None and rate is not None
                start = trio.current_time()
                released = 0
                while True:
                    await trio.sleep(PACE_TICK_S)
                    due = int((trio.current_time() - start) * rate)
                    for _ in range(due - released):
                        tokens.release()
                    released = due

            async def writer(w: int) -> None:
                chunk = msgs[w * per_writer : (w + 1) * per_writer]
                for m in chunk:
                    if tokens is not None:
                        await tokens.acquire()
                    t0 = time.perf_counter()
                    r = await store.put_message(m)
                    t1 = time.perf_counter()
                    latencies.append(t1 - t0)
                    statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
                    if r.result is not None:
                        appended.add(r.result.end_offset, t0)
                    # a put is one request: its handler yields at least once (receive/respond)
                    await trio.lowlevel.checkpoint()

            pace_scope = trio.CancelScope()
            if rate:

                async def run_pacer() -> None:
                    with pace_scope:
                        await pacer()

                nursery.start_soon(run_pacer)
            counter = StepCounter()
            if count_steps:  # an instrument costs ~1 us per task step: off unless asked
                trio.lowlevel.add_instrument(counter)
            t0 = time.perf_counter()
            c0 = time.process_time()
            async with trio.open_nursery() as ws:
                for w in range(writers):
                    ws.start_soon(writer, w)
            dt = time.perf_counter() - t0
            cpu = time.process_time() - c0
            if count_steps:
                trio.lowlevel.remove_instrument(counter)
            pace_scope.cancel()
            if mode != "none":
                with trio.fail_after(CATCH_UP_TIMEOUT_S):
                    await ha.ack_watermark.wait_for(store.max_phys_offset)
                    if slave_store is not None:
                        await slave_store.wait_appended_beyond(store.max_phys_offset - 1)
            nursery.cancel_scope.cancel()
    finally:
        store.close()
        if proc is not None:
            assert proc.stdin is not None
            proc.stdin.close()  # the child exits at EOF on stdin
            proc.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)

    steady_from = t0 + LAG_WARMUP_S  # lag is judged in steady state (see LAG_WARMUP_S)

    def lags(marks: Marks) -> list[float]:
        out = []
        for end, t in zip(appended.offsets, appended.times, strict=True):
            if t < steady_from:
                continue
            i = bisect.bisect_left(marks.offsets, end)
            if i < len(marks.offsets):
                out.append(marks.times[i] - t)
        return out

    result: dict[str, Any] = {
        "puts_per_s": len(latencies) / dt,
        "task_steps_per_put": counter.steps / len(latencies) if count_steps else None,
        "cpu_us_per_put": cpu / len(latencies) * 1e6,
        "put_p50_ms": pct(latencies, 50) * 1000,
        "put_p99_ms": pct(latencies, 99) * 1000,
        "statuses": statuses,
    }
    if mode != "none":
        ack_lag = lags(acks)
        result["ack_lag_p50_ms"] = pct(ack_lag, 50) * 1000
        result["ack_lag_p99_ms"] = pct(ack_lag, 99) * 1000
        result["ack_advances"] = len(acks)
        if applied:
            apply_lag = lags(applied)
            result["apply_lag_p50_ms"] = pct(apply_lag, 50) * 1000
            result["apply_lag_p99_ms"] = pct(apply_lag, 99) * 1000
    return result


async def _serve_slave_main(root: str, master_addr: str) -> None:
    async with trio.open_nursery() as n:
        await n.start(_serve_slave_inproc, root, master_addr)
        # run until the parent closes our stdin
        await trio.to_thread.run_sync(sys.stdin.buffer.read)
        n.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=60_000)
    parser.add_argument("--writers", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slave-process", action="store_true")
    parser.add_argument("--count-steps", action="store_true",
                        help="count trio task steps per put (an instrument: slows every step)")
    parser.add_argument("--dir", default=None, help="parent for the temp dirs")
    parser.add_argument("--serve-slave", nargs=2, metavar=("DIR", "MASTER_ADDR"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    configure_logging("warning", stream=sys.stderr)
    if args.serve_slave:
        trio.run(_serve_slave_main, *args.serve_slave)
        return
    msgs = make_messages(args.messages)
    gc.collect()
    gc.freeze()  # the prepared messages are permanent: keep them out of every collection
    runs: dict[str, list[dict[str, Any]]] = {"none": [], "async": [], "sync": []}
    for _ in range(args.repeats):
        for mode in runs:
            root = tempfile.mkdtemp(prefix=f"rmq-bench-ha-{mode}-", dir=args.dir)
            runs[mode].append(trio.run(
                functools.partial(run_mode, rate=None, slave_process=args.slave_process,
                                  count_steps=args.count_steps),
                root, mode, msgs, args.writers,
            ))

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[mode])

    async_rate = med("async", "puts_per_s")
    half = async_rate / 2
    lag_runs = []
    for _ in range(args.repeats):
        root = tempfile.mkdtemp(prefix="rmq-bench-ha-lag-", dir=args.dir)
        n_lag = min(len(msgs), max(args.writers, int(half * 3)))  # ~3 s of paced load
        lag_runs.append(trio.run(
            functools.partial(run_mode, rate=half, slave_process=args.slave_process),
            root, "async", msgs[:n_lag], args.writers,
        ))
    out: dict[str, Any] = {
        "bench": "ha",
        "slave": "child process" if args.slave_process else "same process, same trio loop",
        "messages": args.messages,
        "writers": args.writers,
        "body_bytes": BODY_BYTES,
        "repeats": args.repeats,
    }
    for mode in runs:
        out[mode] = {
            "puts_per_s": round(med(mode, "puts_per_s")),
            "put_p50_ms": round(med(mode, "put_p50_ms"), 3),
            "put_p99_ms": round(med(mode, "put_p99_ms"), 3),
            "task_steps_per_put": (
                round(med(mode, "task_steps_per_put"), 2) if args.count_steps else None
            ),
            "cpu_us_per_put": round(med(mode, "cpu_us_per_put"), 1),
            "statuses": runs[mode][-1]["statuses"],
        }
        if mode != "none":
            out[mode]["ack_lag_p99_ms"] = round(med(mode, "ack_lag_p99_ms"), 3)
            out[mode]["ack_advances_last_run"] = runs[mode][-1]["ack_advances"]
    out["sync_vs_async_throughput"] = round(med("sync", "puts_per_s") / async_rate, 3)
    out["async_vs_none_throughput"] = round(async_rate / med("none", "puts_per_s"), 3)
    lag: dict[str, Any] = {
        "rate_target_per_s": round(half),
        "rate_achieved_per_s": round(statistics.median(r["puts_per_s"] for r in lag_runs)),
        "ack_lag_p50_ms": round(statistics.median(r["ack_lag_p50_ms"] for r in lag_runs), 3),
        "ack_lag_p99_ms": round(statistics.median(r["ack_lag_p99_ms"] for r in lag_runs), 3),
    }
    if all("apply_lag_p99_ms" in r for r in lag_runs):
        lag["apply_lag_p50_ms"] = round(
            statistics.median(r["apply_lag_p50_ms"] for r in lag_runs), 3)
        lag["apply_lag_p99_ms"] = round(
            statistics.median(r["apply_lag_p99_ms"] for r in lag_runs), 3)
    out["lag_at_half_async_load"] = lag
    out["targets"] = {
        "sync_vs_async_throughput_min": 0.9,
        "lag_p99_ms_max_at_half_load": 10.0,
        "sync_ok": out["sync_vs_async_throughput"] >= 0.9,
        "lag_ok": lag["ack_lag_p99_ms"] < 10.0,
    }
    sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
