"""Timer precision: p50/p99 lateness of timer messages beside delay-level messages (the 4.x way
of delaying, the baseline), measured in the same run on a real single-broker cluster.

The Python client sends ``--count`` timer messages (``deliver_time_ms`` spread over
``--spread-s`` seconds that begin once every send is done: all are pending together), then
``--count`` messages with delay level 1 (1 s). While the timers wait, the broker's CPU is read
from /proc (what an idle wheel with pending timers costs). A push consumer then reads both
topics; a message's lateness is its delivery's store time minus the time it asked for (the
timer's ``TIMER_DELIVER_MS``; born time + 1 s for a level-1 message), on the broker's clock.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (bench/checkout.py: import this checkout)
import trio

from rmq_cluster.client import ConsumeFromWhere, ConsumeResult, Message, Producer, PushConsumer
from rmq_cluster.client.config import ClientConfig
from rmq_cluster.deploy.testing import rmq_cluster

SENDERS = 32
TIMER_TOPIC = "BenchTimer"
LEVEL_TOPIC = "BenchDelayLevel"
CONSUME_WAIT_S = 120.0
IDLE_WINDOW_S = 4.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stats(values: list[int]) -> dict[str, Any]:
    v = sorted(values)
    if not v:
        return {"n": 0}

    def pct(q: float) -> int:
        return v[min(len(v) - 1, int(q * len(v)))]

    return {"n": len(v), "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": v[-1], "min_ms": v[0]}


async def _send_all(cfg: ClientConfig, count: int, lead_ms: int, spread_ms: int
                    ) -> tuple[int, float, float]:
    """-> (first due ms, timer send seconds, level send seconds)."""
    async with Producer("BenchTimerProducer", client_config=cfg) as producer:
        await producer.send(Message(TIMER_TOPIC, b"warm"))
        await producer.send(Message(LEVEL_TOPIC, b"warm"))
        begin = _now_ms() + lead_ms

        async def timers(first: int) -> None:
            for i in range(first, count, SENDERS):
                at = begin + i * spread_ms // count
                await producer.send(Message(TIMER_TOPIC, b"t%d" % i, deliver_time_ms=at))

        async def levels(first: int) -> None:
            for i in range(first, count, SENDERS):
                await producer.send(Message(LEVEL_TOPIC, b"l%d" % i, delay_level=1))

        t0 = time.monotonic()
        async with trio.open_nursery() as nursery:
            for first in range(SENDERS):
                nursery.start_soon(timers, first)
        t1 = time.monotonic()
        async with trio.open_nursery() as nursery:
            for first in range(SENDERS):
                nursery.start_soon(levels, first)
        return begin, t1 - t0, time.monotonic() - t1


async def _consume(cfg: ClientConfig, count: int) -> tuple[list[int], list[int]]:
    timer_late: list[int] = []
    level_late: list[int] = []
    seen: set[str] = set()
    done = trio.Event()

    def on_messages(msgs: list[Any]) -> ConsumeResult:
        for m in msgs:
            if m.body == b"warm" or m.msg_id in seen:
                continue
            seen.add(m.msg_id)
            if m.topic == TIMER_TOPIC:
                timer_late.append(m.store_timestamp - int(m.properties["TIMER_DELIVER_MS"]))
            else:
                level_late.append(m.store_timestamp - (m.born_timestamp + 1000))
        if len(seen) >= 2 * count:
            done.set()
        return ConsumeResult.SUCCESS

    async with PushConsumer("BenchTimerConsumer", client_config=cfg, listener=on_messages,
                            consume_from=ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.subscribe(TIMER_TOPIC, "*")
        consumer.subscribe(LEVEL_TOPIC, "*")
        with trio.move_on_after(CONSUME_WAIT_S):
            await done.wait()
    return timer_late, level_late


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="timers (and level messages)")
    parser.add_argument("--spread-s", type=float, default=10.0)
    parser.add_argument("--lead-s", type=float, default=40.0,
                        help="first timer due this long after the sends begin")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, rmq_cluster("single", directory=Path(tmp)) as c:
        broker_pid = next(pid for name, pid in c.pids().items() if name.startswith("broker"))
        cfg = ClientConfig(namesrv_addr=c.namesrv_addr, client_ip="127.0.0.1")
        cpu0, t0 = _cpu_s(broker_pid), time.monotonic()
        time.sleep(IDLE_WINDOW_S)  # the measured window: the broker idle, nothing pending
        idle_base = (_cpu_s(broker_pid) - cpu0) / (time.monotonic() - t0) * 1000
        begin, timer_send_s, level_send_s = trio.run(
            _send_all, cfg, args.count, int(args.lead_s * 1000), int(args.spread_s * 1000))
        idle_s = (begin - _now_ms()) / 1000 - 1.0
        idle_cpu = None
        if idle_s > 1.0:  # the level messages are out by now: only the wheel waits
            time.sleep(1.5)  # the last level-1 deliveries (1 s after their sends)
            cpu0, t0 = _cpu_s(broker_pid), time.monotonic()
            time.sleep(min(IDLE_WINDOW_S, max(0.5, idle_s - 1.5)))  # the measured window
            idle_cpu = (_cpu_s(broker_pid) - cpu0) / (time.monotonic() - t0) * 1000
        timer_late, level_late = trio.run(_consume, cfg, args.count)
    report = {
        "benchmark": "timer precision",
        "pending_timers": args.count,
        "spread_s": args.spread_s,
        "timer_send_s": round(timer_send_s, 2),
        "level_send_s": round(level_send_s, 2),
        "timer_lateness": _stats(timer_late),
        "baseline_delay_level_1_lateness": _stats(level_late),
        "broker_cpu_ms_per_s_while_timers_wait": None if idle_cpu is None else round(idle_cpu, 2),
        "baseline_broker_cpu_ms_per_s_idle_nothing_pending": round(idle_base, 2),
    }
    print(json.dumps(report, indent=2))
    sys.exit(0 if len(timer_late) == args.count else 1)


if __name__ == "__main__":
    main()
