"""Issue 33 (chaos): kill -9 of a broker in the middle of POP consumption with timers pending.

One NameServer and one broker as real processes (tests/interop/oracle.py). A producer sends
plain messages and timer messages (due 3-5 s later) to a topic; a POP consumer pops with a short
invisible time and acks half of what it gets. Then the broker is SIGKILLed, restarted on the
same store, and the consumer goes on (acking everything) until every message was acked.

What must hold, at least once and no more than an at-least-once consumer expects:

* every message, plain and timer, reaches the consumer and is acked;
* a message acked before the kill (its ack answered SUCCESS) is never delivered again: not
  revived (its ack survived) and not popped afresh from the topic (the consumer offset a pop
  moved reaches disk only every few seconds; the restarted broker moves it again from the
  checkpoints it finds in the revive log; Apache pops such messages again);
* every timer message lands in its topic exactly once (no second delivery after recovery);
* the duplicates (messages popped again because they were popped but not acked before the
  kill) are counted in the report the test prints.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from rmq_cluster.cluster.protocol.message import iter_records
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.cluster.remoting.errors import RemotingError
from tests.interop import oracle, pop_scenario, scenario

pytestmark = pytest.mark.slow  # two broker boots and a kill -9: ~20 s

TOPIC: Final = "ChaosPopT"
GROUP: Final = "ChaosPopG"
QUEUES: Final = 2
PLAIN: Final = 40
TIMERS: Final = 12
INVISIBLE_MS: Final = 2_000
#: Consumption after the restart must be over within this (revives at 2 s, timers at 5 s).
DRAIN_TIMEOUT_S: Final = 45.0
CALL_TIMEOUT_S: Final = 5.0


def _body(kind: str, n: int) -> bytes:
    return f"{kind}-{n}".encode()


class Consumer:
    """A POP consumer over raw remoting that records what it saw and what it acked."""

    def __init__(self, client: Any, addr: str) -> None:
        self.client = client
        self.addr = addr
        self.deliveries: Counter[bytes] = Counter()
        self.acked: set[bytes] = set()
        #: bodies that came from the pop retry topic (a revive), not the topic itself
        self.revived: set[bytes] = set()

    async def call(self, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        req = RemotingCommand.request(code, ext, body)
        return await self.client.invoke(self.addr, req, CALL_TIMEOUT_S)

    async def pop_once(self, ack_every: int) -> int:
        """One pop; acks every ``ack_every``-th message popped; -> messages popped."""
        resp = await self.call(RC.POP_MESSAGE, pop_scenario.pop(GROUP, TOPIC, 8, INVISIBLE_MS)({}))
        if resp.code != 0:
            return 0
        ctx: dict[str, Any] = {}
        pop_scenario.save_pop("h")(ctx, resp)
        records = list(iter_records(bytes(resp.body)))
        assert len(records) == len(ctx["h"]), "one receipt handle per record"
        for i, (rec, handle) in enumerate(zip(records, ctx["h"], strict=True)):
            body = bytes(rec.body)
            self.deliveries[body] += 1
            if rec.topic != TOPIC:
                self.revived.add(body)
            if i % ack_every == 0:
                ack = await self.call(RC.ACK_MESSAGE,
                                      {"consumerGroup": GROUP, "topic": TOPIC, **handle})
                if ack.code == 0:
                    self.acked.add(body)
        return len(records)


async def _setup(client: Any, addr: str) -> None:
    await client.invoke(addr, RemotingCommand.request(
        RC.UPDATE_AND_CREATE_TOPIC, {**pop_scenario.create_topic(TOPIC),
                                     "readQueueNums": str(QUEUES),
                                     "writeQueueNums": str(QUEUES)}), CALL_TIMEOUT_S)
    for n in range(PLAIN + TIMERS):
        timer = n >= PLAIN
        extra = {"TIMER_DELAY_SEC": str(3 + n % 3)} if timer else None
        ext = scenario.send_v2(TOPIC, n % QUEUES, n, extra=extra)
        body = _body("timer" if timer else "plain", n)
        resp = await client.invoke(addr, RemotingCommand.request(RC.SEND_MESSAGE_V2, ext, body),
                                   CALL_TIMEOUT_S)
        assert resp.code == 0, (n, resp.code, resp.remark)


async def _topic_bodies(client: Any, addr: str) -> Counter[bytes]:
    """Every record in the topic's queues (timer messages once delivered), by body."""
    out: Counter[bytes] = Counter()
    for qid in range(QUEUES):
        offset = 0
        while True:
            req = RemotingCommand.request(RC.PULL_MESSAGE, scenario.pull(TOPIC, qid, offset))
            resp = await client.invoke(addr, req, CALL_TIMEOUT_S)
            if resp.code != 0:
                break
            recs = list(iter_records(bytes(resp.body)))
            out.update(bytes(r.body) for r in recs)
            offset = int(resp.ext_fields["nextBeginOffset"])
    return out


async def _scenario(cluster: oracle.Cluster) -> dict[str, Any]:
    everything = {_body("plain", n) for n in range(PLAIN)} | {
        _body("timer", n) for n in range(PLAIN, PLAIN + TIMERS)}
    async with open_remoting_client(node="chaos-pop") as client:
        await _setup(client, cluster.broker_addr)
        before = Consumer(client, cluster.broker_addr)
        while len(before.acked) < PLAIN // 3:
            await before.pop_once(ack_every=2)
        acked_before_kill = set(before.acked)
        await trio.to_thread.run_sync(cluster.broker.kill9)
        await trio.to_thread.run_sync(cluster.restart_broker)
    async with open_remoting_client(node="chaos-pop-after") as client:
        after = Consumer(client, cluster.broker_addr)
        with trio.move_on_after(DRAIN_TIMEOUT_S):
            while not everything <= acked_before_kill | after.acked:
                for _attempt in range(3):
                    try:
                        if await after.pop_once(ack_every=1) == 0:
                            await trio.sleep(0.2)  # nothing visible yet: revive or timer due
                        break
                    except RemotingError:
                        await trio.sleep(0.2)  # the restarted broker's first calls
        in_topic = await _topic_bodies(client, cluster.broker_addr)
    all_deliveries = before.deliveries + after.deliveries
    return {
        "missing": sorted(b.decode() for b in everything - acked_before_kill - after.acked),
        "acked_then_redelivered": sorted(b.decode() for b in acked_before_kill
                                         if after.deliveries[b]),
        "acked_then_revived": sorted(b.decode() for b in acked_before_kill
                                     if b in after.revived),
        "timers_in_topic": {b.decode(): c for b, c in in_topic.items()
                            if b.startswith(b"timer")},
        "duplicates": sum(c - 1 for c in all_deliveries.values() if c > 1),
        "acked_before_kill": len(acked_before_kill),
        "deliveries": sum(all_deliveries.values()),
    }


def test_kill9_during_pop_with_pending_timers(tmp_path: Path) -> None:
    with oracle.running_cluster("ours", tmp_path / "pop-kill9") as cluster:
        report = trio.run(_scenario, cluster)
    print(json.dumps(report, sort_keys=True))  # the checker's report: duplicates counted
    assert not report["missing"], f"never acked: {report}"
    assert not report["acked_then_redelivered"], f"an acked message came back: {report}"
    timers = report["timers_in_topic"]
    assert len(timers) == TIMERS and set(timers.values()) == {1}, (
        f"each timer delivered into its topic exactly once: {timers}")


ORDER_TOPIC: Final = "ChaosPopFifo"
ORDER_GROUP: Final = "ChaosPopOrderG"
#: The orderly batch stays invisible far longer than the test runs.
ORDER_INVISIBLE_MS: Final = 120_000
#: The broker writes config/consumerOrderInfo.json with the offsets (flushConsumerOffsetInterval).
PERSIST_WAIT_S: Final = 30.0


def _wait_written(path: Path, needle: bytes) -> None:
    deadline = time.monotonic() + PERSIST_WAIT_S
    while needle not in (path.read_bytes() if path.exists() else b""):
        assert time.monotonic() < deadline, f"{path} never named {needle!r}"
        time.sleep(0.2)  # another process writes it: poll the file, with a deadline


async def _order_scenario(cluster: oracle.Cluster) -> dict[str, Any]:
    """Orderly pop of a batch, kill -9 once the broker wrote its order info, then: the batch is
    still in flight (the queue stays blocked), and the old receipt handles ack it."""
    addr = cluster.broker_addr
    info_file = cluster.store_dir / "config" / "consumerOrderInfo.json"
    pop_order = pop_scenario.pop(ORDER_GROUP, ORDER_TOPIC, 2, ORDER_INVISIBLE_MS, order=True)
    async with open_remoting_client(node="chaos-pop-order") as client:
        consumer = Consumer(client, addr)
        await client.invoke(addr, RemotingCommand.request(
            RC.UPDATE_AND_CREATE_TOPIC, pop_scenario.create_topic(
                ORDER_TOPIC, "+message.type=FIFO")), CALL_TIMEOUT_S)
        for n in range(3):
            ext = scenario.send_v2(ORDER_TOPIC, 0, n, extra={"__SHARDINGKEY": "g"})
            resp = await client.invoke(addr, RemotingCommand.request(
                RC.SEND_MESSAGE_V2, ext, _body("fifo", n)), CALL_TIMEOUT_S)
            assert resp.code == 0, resp.remark
        first = await consumer.call(RC.POP_MESSAGE, pop_order({}))
        ctx: dict[str, Any] = {}
        pop_scenario.save_pop("h")(ctx, first)
        assert [bytes(r.body) for r in iter_records(bytes(first.body))] == [
            _body("fifo", 0), _body("fifo", 1)]
        await trio.to_thread.run_sync(_wait_written, info_file, ORDER_TOPIC.encode())
        await trio.to_thread.run_sync(cluster.broker.kill9)
        await trio.to_thread.run_sync(cluster.restart_broker)
    async with open_remoting_client(node="chaos-pop-order-after") as client:
        consumer = Consumer(client, cluster.broker_addr)
        blocked = await consumer.call(RC.POP_MESSAGE, pop_order({}))
        acks = [(await consumer.call(RC.ACK_MESSAGE, {"consumerGroup": ORDER_GROUP,
                                                      "topic": ORDER_TOPIC, **h})).code
                for h in ctx["h"]]
        after = await consumer.call(RC.POP_MESSAGE, pop_order({}))
    return {
        "blocked_after_restart": [bytes(r.body).decode()
                                  for r in iter_records(bytes(blocked.body or b""))],
        "acks": acks,
        "next": [bytes(r.body).decode() for r in iter_records(bytes(after.body or b""))],
    }


def test_kill9_keeps_an_orderly_batch_in_flight(tmp_path: Path) -> None:
    """Apache persists its orderly pops (ConsumerOrderInfoManager, consumerOrderInfo.json):
    after a kill -9 a batch still invisible is not handed to another consumer, out of order."""
    with oracle.running_cluster("ours", tmp_path / "pop-order-kill9") as cluster:
        report = trio.run(_order_scenario, cluster)
    assert report["blocked_after_restart"] == [], report
    assert report["acks"] == [0, 0] and report["next"] == ["fifo-2"], report
