"""POP receive+ack rate and timer delivery on our broker beside Apache RocketMQ 5.3.1's, one run.

    python3 bench/pop.py [--count 20000] [--poppers 8] [--timers 10000] [--spread-s 10]
                         [--lead-s 20] [--rounds 1] [--quick-jvm]

Each kind of broker runs in turn on its own (tests/interop/oracle.py starts one NameServer --
ours: Maven Central has no 5.x NameServer jar -- and the broker from the same broker.conf on free
loopback ports in a temp dir, and always stops them); with ``--rounds N`` they alternate, the
order flipping each round. Against each, over raw remoting as Apache's 5.x client sends it:

* **POP**: ``--count`` 256-byte messages are stored in a 4-queue topic first, then ``--poppers``
  concurrent consumers pop them (POP_MESSAGE, 32 at most, every queue, 60 s invisible) and ack
  each one (ACK_MESSAGE) until all were acked: messages received and acked per second, and the
  broker's CPU ms per 1000 messages over that window (/proc/<pid>/stat);
* **timers**: ``--timers`` messages with ``TIMER_DELIVER_MS`` spread over ``--spread-s`` seconds
  that begin ``--lead-s`` after the sends start (all pending together), sent from 16 concurrent
  senders, then read back by pulling the topic: a message's lateness is the store time of its
  delivered copy minus the time it asked for (one clock: the machine's). Apache rounds a due
  time down to its 1 s slot, so its lateness may be negative; ours is never early.

``ratios`` is ours / Apache's (rates above 1: we are faster; lateness below 1: we are closer).
Both JVM and Python nodes share the machine's cores with this load generator. Prints one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import checkout  # noqa: E402,F401  (bench/checkout.py: this tree's rmq_cluster first)

sys.path.insert(0, str(ROOT))  # tests.interop.oracle imports tests.cache_lock
import trio  # noqa: E402

from rmq_cluster.cluster.protocol.message import iter_records  # noqa: E402
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client  # noqa: E402
from rmq_cluster.cluster.remoting.codec import RemotingCommand  # noqa: E402
from rmq_cluster.cluster.remoting.codes import RequestCode as RC  # noqa: E402
from rmq_cluster.cluster.remoting.codes import ResponseCode  # noqa: E402
from tests.interop import oracle, pop_scenario, scenario  # noqa: E402

POP_TOPIC: Final = "BenchPopT"
POP_GROUP: Final = "BenchPopG"
TIMER_TOPIC: Final = "BenchTimerT"
QUEUES: Final = 4
BODY_BYTES: Final = 256
SENDERS: Final = 16
POP_NUMS: Final = 32
INVISIBLE_MS: Final = 60_000
CALL_TIMEOUT_S: Final = 10.0
PHASE_TIMEOUT_S: Final = 600.0
#: A send answered SYSTEM_BUSY (Apache's flow control) is sent again, this often at most.
BUSY_RETRIES: Final = 50
BUSY_BACKOFF_S: Final = 0.05
KINDS: Final = {"ours": "ours", "apache_5_3_1": "java5"}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[int]) -> dict[str, Any]:
    v = sorted(values)
    if not v:
        return {"n": 0}
    return {"n": len(v), "min_ms": v[0], "p50_ms": v[len(v) // 2],
            "p99_ms": v[min(len(v) - 1, int(0.99 * len(v)))], "max_ms": v[-1]}


class Bench:
    def __init__(self, client: Any, addr: str) -> None:
        self.client = client
        self.addr = addr
        #: sends answered SYSTEM_BUSY and sent again
        self.busy = 0

    async def call(self, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        resp: RemotingCommand = await self.client.invoke(
            self.addr, RemotingCommand.request(code, ext, body), CALL_TIMEOUT_S)
        return resp

    async def create_topic(self, topic: str, attributes: str = "") -> None:
        ext = {**pop_scenario.create_topic(topic, attributes),
               "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES)}
        resp = await self.call(RC.UPDATE_AND_CREATE_TOPIC, ext)
        assert resp.code == 0, resp.remark

    async def send_all(self, topic: str, count: int,
                       body_and_extra: Any) -> float:
        """``count`` sends from SENDERS concurrent senders; -> seconds."""
        async def sender(first: int) -> None:
            for n in range(first, count, SENDERS):
                body, extra = body_and_extra(n)
                ext = scenario.send_v2(topic, n % QUEUES, n, extra=extra)
                for _attempt in range(BUSY_RETRIES):
                    resp = await self.call(RC.SEND_MESSAGE_V2, ext, body)
                    if resp.code != ResponseCode.SYSTEM_BUSY:
                        break
                    self.busy += 1  # Apache's flow control: its client retries too
                    await trio.sleep(BUSY_BACKOFF_S)
                assert resp.code == 0, (resp.code, resp.remark)

        t0 = time.monotonic()
        async with trio.open_nursery() as nursery:
            for first in range(SENDERS):
                nursery.start_soon(sender, first)
        return time.monotonic() - t0

    async def pop_ack_all(self, count: int, poppers: int) -> tuple[int, float]:
        """Pop and ack until ``count`` were acked; -> (acked, seconds)."""
        acked = 0

        async def popper() -> None:
            nonlocal acked
            while acked < count:
                ext = pop_scenario.pop(POP_GROUP, POP_TOPIC, POP_NUMS, INVISIBLE_MS,
                                       poll_ms=500)({})
                resp = await self.call(RC.POP_MESSAGE, ext)
                ctx: dict[str, Any] = {}
                pop_scenario.save_pop("h")(ctx, resp)
                for handle in ctx.get("h", []):
                    ack = await self.call(RC.ACK_MESSAGE, {
                        "consumerGroup": POP_GROUP, "topic": POP_TOPIC, **handle})
                    acked += ack.code == 0

        t0 = time.monotonic()
        with trio.move_on_after(PHASE_TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                for _ in range(poppers):
                    nursery.start_soon(popper)
        return acked, time.monotonic() - t0

    async def read_timers(self, count: int) -> tuple[list[int], list[int]]:
        """Pull the timer topic until ``count`` delivered copies were read; -> (lateness,
        store times), ms."""
        late: list[int] = []
        stored: list[int] = []
        offsets = [0] * QUEUES
        with trio.move_on_after(PHASE_TIMEOUT_S):
            while len(late) < count:
                got = 0
                for qid in range(QUEUES):
                    ext = scenario.pull(TIMER_TOPIC, qid, offsets[qid])
                    resp = await self.call(RC.PULL_MESSAGE, ext)
                    if resp.code != 0:
                        continue
                    for rec in iter_records(bytes(resp.body or b"")):
                        due = int(bytes(rec.body).split(b":", 1)[0])
                        late.append(rec.store_timestamp - due)
                        stored.append(rec.store_timestamp)
                        got += 1
                    offsets[qid] = int(resp.ext_fields["nextBeginOffset"])
                if not got:
                    await trio.sleep(0.2)  # nothing due yet: poll the queues again
        return late, stored


async def _measure(cluster: oracle.Cluster, args: argparse.Namespace) -> dict[str, Any]:
    pid = cluster.broker.pid
    async with open_remoting_client(node="bench-pop") as client:
        b = Bench(client, cluster.broker_addr)
        await b.create_topic(POP_TOPIC)
        await b.create_topic(TIMER_TOPIC, "+message.type=DELAY")
        pad = b"x" * BODY_BYTES
        fill_s = await b.send_all(POP_TOPIC, args.count, lambda n: (pad, None))
        cpu0 = _cpu_s(pid)
        acked, pop_s = await b.pop_ack_all(args.count, args.poppers)
        pop_cpu = _cpu_s(pid) - cpu0
        begin = _now_ms() + int(args.lead_s * 1000)
        spread = int(args.spread_s * 1000)

        def timer(n: int) -> tuple[bytes, dict[str, str]]:
            due = begin + n * spread // args.timers
            return b"%d:%d" % (due, n), {"TIMER_DELIVER_MS": str(due)}

        timer_send_s = await b.send_all(TIMER_TOPIC, args.timers, timer)
        late, stored = await b.read_timers(args.timers)
    window_s = (max(stored) - min(stored)) / 1000 if len(stored) > 1 else 0.0
    return {
        "fill_msgs_per_s": round(args.count / fill_s, 1),
        "pop_ack_msgs_per_s": round(acked / pop_s, 1),
        "pop_acked": acked,
        "pop_broker_cpu_ms_per_1000_msgs": round(pop_cpu * 1e6 / max(1, acked), 1),
        "timer_sends_per_s": round(args.timers / timer_send_s, 1),
        "sends_answered_busy": b.busy,
        "timer_sends_done_before_first_due": timer_send_s < args.lead_s,
        "timer_lateness": _pct(late),
        #: deliveries per second from the first delivered copy to the last (asked: spread)
        "timer_delivered_per_s": round(len(stored) / window_s, 1) if window_s else None,
    }


def _run_kind(name: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-pop-{name}-") as tmp, \
            oracle.running_cluster(KINDS[name], Path(tmp), quick_jvm=args.quick_jvm) as cluster:
        return trio.run(_measure, cluster, args)


def _ratio(ours: Any, theirs: Any) -> float | None:
    if not isinstance(ours, int | float) or not isinstance(theirs, int | float) or not theirs:
        return None
    return round(ours / theirs, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000, help="messages popped and acked")
    parser.add_argument("--poppers", type=int, default=8)
    parser.add_argument("--timers", type=int, default=10_000)
    parser.add_argument("--spread-s", type=float, default=10.0)
    parser.add_argument("--lead-s", type=float, default=20.0,
                        help="the first timer is due this long after the timer sends begin")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--quick-jvm", action="store_true",
                        help="the tests' C1-only JVM (faster boot, slower steady state)")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in KINDS}
    for r in range(args.rounds):
        order = list(KINDS) if r % 2 == 0 else list(KINDS)[::-1]
        for name in order:
            runs[name].append(_run_kind(name, args))
    last = {name: results[-1] for name, results in runs.items()}
    ours, theirs = last["ours"], last["apache_5_3_1"]
    report = {
        "benchmark": "POP receive+ack and timer delivery, ours vs Apache RocketMQ 5.3.1",
        "args": vars(args),
        "runs": runs,
        "ratios_ours_over_apache": {
            "pop_ack_msgs_per_s": _ratio(ours["pop_ack_msgs_per_s"],
                                         theirs["pop_ack_msgs_per_s"]),
            "pop_broker_cpu_ms_per_1000_msgs": _ratio(
                ours["pop_broker_cpu_ms_per_1000_msgs"],
                theirs["pop_broker_cpu_ms_per_1000_msgs"]),
            "timer_sends_per_s": _ratio(ours["timer_sends_per_s"], theirs["timer_sends_per_s"]),
            "timer_p50_lateness": _ratio(ours["timer_lateness"].get("p50_ms"),
                                         theirs["timer_lateness"].get("p50_ms")),
            "timer_p99_lateness": _ratio(ours["timer_lateness"].get("p99_ms"),
                                         theirs["timer_lateness"].get("p99_ms")),
        },
    }
    print(json.dumps(report, indent=2))
    complete = all(r["pop_acked"] >= args.count and r["timer_lateness"]["n"] >= args.timers
                   for results in runs.values() for r in results)
    sys.exit(0 if complete else 1)


if __name__ == "__main__":
    main()
