"""Issue 33 (chaos, replicated modes): kill -9 of the master (or DLedger leader) while a producer
sends under load and POP consumers pop and ack, with timer messages pending across the kill.

One cluster per profile as real processes (``rmq_cluster``): ``2m-2s-sync`` (the slave is
promoted by hand, RocketMQ 4.x's switch), ``2m-2s-controller`` (the controllers elect the slave)
and ``dledger`` (the group elects a new leader). A producer (our client) sends plain messages
from a few concurrent senders all along. POP consumers (raw POP_MESSAGE / ACK_MESSAGE over our
client's remoting, as Apache's 5.x client sends them) pop every queue of every group's master
and ack each message at once. Once the victim group (the first by name) served some pops, the
producer sends timer messages to its queues, due 6 s later, and its master is SIGKILLed (by
pid); the consumers follow the route to the new master, the producer goes on a few seconds.

What must hold (the report printed per profile counts the rest):

* nothing acked on send is lost: every message whose send answered SEND_OK is popped, and
  acked -- but for those the dead master handed out whose ack got no answer and which never
  came back: their ack was stored before the kill (the new master's revive log holds it);
* an ack the broker answered SUCCESS within the message's invisible time stays: the message is
  never handed out again after that answer (the ack is stored as a send is: on the slave /
  committed before the answer), neither from the topic nor revived. A message is the stored
  one (group, topic, queue, offset: a promoted slave or new leader holds it at the same place),
  not its body: a send in flight at the kill may have reached the slave while its answer was
  lost, and the producer's retry stores the body a second time elsewhere (RocketMQ's producer
  is at least once too); the report lists such bodies (``stored_twice``);
* duplicates are bounded by what at-least-once allows: at most the messages the dead master
  handed out and did not answer an ack for, plus those acked only after their invisible time
  ran out (a body stored twice counts one delivery per copy);
* every timer message lands in its topic once (one stored copy), delivered by the new master.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
import trio

from rmq_cluster.client import Message, Producer
from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.errors import MQClientError
from rmq_cluster.client.frames import pull_sys_flag, request
from rmq_cluster.client.instance import ClientInstance
from rmq_cluster.cluster.protocol.message import iter_records
from rmq_cluster.cluster.protocol.pop import (
    ACK_TAG,
    CK_TAG,
    POLLING_FULL,
    POLLING_TIMEOUT,
    AckRecord,
    Checkpoint,
    ReceiptHandle,
    pop_retry_topic,
    real_topic,
    revive_topic,
)
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.deploy.testing import RunningCluster, create_topics, rmq_cluster
from tests.integration.broker.pop_testlib import (
    ack_fields,
    pop_fields,
    receipt_handle,
    sigkill_node,
)

pytestmark = pytest.mark.slow  # one cluster per profile: ~40-60 s each on 2 busy cores

TOPIC: Final = "PopChaosT"
GROUP: Final = "PopChaosG"
QUEUES: Final = 4
SENDERS: Final = 4
#: Plain sends per sender and second (the load; sends slow down by themselves on 2 cores).
SEND_RATE: Final = 15.0
TIMERS: Final = 8
#: Timers come due this long after the kill (the failover must happen first to deliver them).
TIMER_AFTER_KILL_MS: Final = 6_000
#: The victim group's master dies once its consumers acked this many of its messages.
ACKED_BEFORE_KILL: Final = 40
#: The producer goes on this long after the kill (sends through the failover).
LOAD_AFTER_KILL_S: Final = 3.0
POPPERS_PER_GROUP: Final = 2
POP_BATCH: Final = 16
INVISIBLE_MS: Final = 6_000
POLL_MS: Final = 1_000
CALL_TIMEOUT_S: Final = 5.0
#: Between two calls to a master that is not there (yet): the route is re-read then.
RETRY_S: Final = 0.2
#: Everything acked within this after the load ends (revives after INVISIBLE_MS, timers).
DRAIN_S: Final = 45.0
#: A message in flight on the dead master comes back this long after its invisible time.
REVIVE_GRACE_MS: Final = 4_000
FAILOVER_S: Final = 40.0
#: The brokers' reviveQueueNum (the default).
REVIVE_QUEUES: Final = 8


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.frozen
class Delivery:
    body: bytes
    #: received at (local ms)
    got: int
    #: from the pop retry topic (a revived copy)
    retry: bool
    #: where the message is stored: (group, real topic, queue, queue offset); a promoted
    #: slave or a new leader holds the same messages at the same offsets
    where: tuple[str, str, int, int]


@attrs.define
class Book:
    """What the producer and the consumers saw, with local times (ms)."""

    sent_ok: set[bytes] = attrs.field(factory=set)
    timers: set[bytes] = attrs.field(factory=set)
    deliveries: list[Delivery] = attrs.field(factory=list)
    #: bodies the victim's first master handed out (before it died): (topic, queue, offset)
    from_old: dict[bytes, tuple[str, int, int]] = attrs.field(factory=dict)
    #: bodies whose ack that master answered SUCCESS
    acked_by_old: set[bytes] = attrs.field(factory=set)
    old_addr: str = ""
    #: body -> the first ack answered SUCCESS: (answered at, within its invisible time)
    acked: dict[bytes, tuple[int, bool]] = attrs.field(factory=dict)
    #: the same per stored message (Delivery.where)
    acked_at: dict[tuple[str, str, int, int], tuple[int, bool]] = attrs.field(factory=dict)
    #: timer body -> the stored copies popped from the topic itself (group, queue, offset)
    timer_copies: dict[bytes, set[tuple[str, int, int]]] = attrs.field(factory=dict)
    victim_acked: int = 0
    #: ("ack" or "ck", topic, queue, offset) of the records in the new master's revive log
    revive_log: set[tuple[str, str, int, int]] = attrs.field(factory=set)
    changed: trio.Event = attrs.field(factory=trio.Event)

    def touch(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, cond: Callable[[], bool], timeout: float) -> bool:
        with trio.move_on_after(timeout):
            while not cond():
                await self.changed.wait()
            return True
        return False


class Masters:
    """Each group's master address, from the route, re-read when a call to it fails."""

    def __init__(self, instance: ClientInstance) -> None:
        self.instance = instance
        self.addrs: dict[str, str] = {}

    async def refresh(self) -> None:
        try:
            route = await self.instance.fetch_route(TOPIC)
        except MQClientError:
            return
        self.addrs = {bd.broker_name: str(bd.broker_addrs[0]) for bd in route.broker_datas
                      if 0 in bd.broker_addrs}


async def _pop_round(book: Book, masters: Masters, group: str, victim: str) -> bool:
    """One pop from ``group``'s master and an ack of each message; False on a failed call."""
    addr = masters.addrs.get(group)
    if addr is None:
        return False
    ext = pop_fields(TOPIC, GROUP, max_nums=POP_BATCH, invisible_ms=INVISIBLE_MS,
                     poll_ms=POLL_MS, exp="*")
    try:
        resp = await masters.instance.invoke(addr, request(RC.POP_MESSAGE, ext),
                                             CALL_TIMEOUT_S + POLL_MS / 1000)
    except MQClientError:
        return False
    if resp.code != 0:
        return resp.code in (POLLING_FULL, POLLING_TIMEOUT)  # nothing there
    for m in iter_records(bytes(resp.body or b"")):
        got = _now_ms()
        # (the broker group as the handle's broker name)
        h = receipt_handle(m, resp.ext_fields, group)
        retry = h.flag != "0"
        body = bytes(m.body)
        real = real_topic(TOPIC, GROUP, h.flag)
        book.deliveries.append(Delivery(body, got, retry, (group, real, h.queue_id,
                                                           h.queue_offset)))
        if addr == book.old_addr:
            book.from_old[body] = (real, h.queue_id, h.queue_offset)
        if body in book.timers and not retry:
            book.timer_copies.setdefault(body, set()).add((group, m.queue_id, m.queue_offset))
        await _ack(book, masters, addr, h, body, group, group == victim)
    book.touch()
    return True


async def _ack(book: Book, masters: Masters, addr: str, h: ReceiptHandle, body: bytes,
               group: str, victim: bool) -> None:
    ext = ack_fields(TOPIC, GROUP, h)
    topic = ext["topic"]
    try:
        resp = await masters.instance.invoke(addr, request(RC.ACK_MESSAGE, ext), CALL_TIMEOUT_S)
    except MQClientError:
        return
    if resp.code != 0:
        return
    now = _now_ms()
    book.acked.setdefault(body, (now, now < h.pop_time + h.invisible_time))
    book.acked_at.setdefault((group, topic, h.queue_id, h.queue_offset),
                             (now, now < h.pop_time + h.invisible_time))
    if addr == book.old_addr:
        book.acked_by_old.add(body)
    if victim:
        book.victim_acked += 1


async def _popper(book: Book, masters: Masters, group: str, victim: str) -> None:
    while True:
        if not await _pop_round(book, masters, group, victim):
            await trio.sleep(RETRY_S)  # a dead or not yet elected master: read the route again
            await masters.refresh()


async def _sender(producer: Producer, book: Book, first: int, stop: trio.Event) -> None:
    n = first
    while not stop.is_set():
        body = b"m-%d" % n
        n += SENDERS
        try:
            result = await producer.send(Message(TOPIC, body))
        except MQClientError:
            continue
        if result.status.name == "SEND_OK":
            book.sent_ok.add(body)
        await trio.sleep(1.0 / SEND_RATE)  # the load's pace, not a wait for a condition


async def _send_timers(producer: Producer, book: Book, victim: str, due_ms: int) -> None:
    queues = [q for q in await producer.queues_for(TOPIC) if q.broker_name == victim]
    for i in range(TIMERS):
        body = b"timer-%d" % i
        msg = Message(TOPIC, body, deliver_time_ms=due_ms + i * 100)
        result = await producer.send(msg, queue=queues[i % len(queues)])
        assert result.status.name == "SEND_OK", result
        book.timers.add(body)
        book.sent_ok.add(body)


def _kill_master(cluster: RunningCluster, group: str, addr: str) -> str | None:
    """SIGKILL the group's master (the node at ``addr``), by pid, and wait until it is gone;
    -> its slave when the profile has no election (plain SYNC M/S: the caller promotes it,
    RocketMQ 4.x's manual switch)."""
    sigkill_node(cluster, addr)
    if cluster.profile != "2m-2s-sync":
        return None
    (slave,) = [str(n["name"]) for n in cluster.nodes
                if n["kind"] == "broker" and n["group"] == group and n["addr"] != addr]
    return slave


def _promote(cluster: RunningCluster, slave: str) -> None:
    done = cluster.cli("promote", slave)
    assert done.returncode == 0, done.stderr


async def _run(cluster: RunningCluster) -> dict[str, Any]:
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, client_ip="127.0.0.1",
                       poll_namesrv_interval_s=0.5, heartbeat_interval_s=1.0)
    book = Book()
    async with Producer("PopChaosP", client_config=cfg) as producer, \
            trio.open_nursery() as nursery:
        masters = Masters(producer.instance)
        await masters.refresh()
        groups = sorted(masters.addrs)
        victim = groups[0]
        old_addr = book.old_addr = masters.addrs[victim]
        for group in groups:
            for _ in range(POPPERS_PER_GROUP):
                nursery.start_soon(_popper, book, masters, group, victim)
        stop = trio.Event()
        for first in range(SENDERS):
            nursery.start_soon(_sender, producer, book, first, stop)
        assert await book.until(lambda: book.victim_acked >= ACKED_BEFORE_KILL, 30.0), (
            "the victim group served no pops")
        # the timers, on the victim group, due TIMER_AFTER_KILL_MS after the kill that follows
        due = _now_ms() + 500 + TIMER_AFTER_KILL_MS
        await _send_timers(producer, book, victim, due)
        promote_s = 0.0
        killed_at = _now_ms()
        slave = await trio.to_thread.run_sync(_kill_master, cluster, victim, old_addr)
        killed_done = _now_ms()
        if slave is not None:
            t0 = time.monotonic()
            await trio.to_thread.run_sync(_promote, cluster, slave)
            promote_s = time.monotonic() - t0
        with trio.fail_after(FAILOVER_S):
            while masters.addrs.get(victim) in (None, old_addr):
                await trio.sleep(RETRY_S)  # another process elects: poll the route
                await masters.refresh()
        failover_ms = _now_ms() - killed_at
        await trio.sleep(LOAD_AFTER_KILL_S)  # the load goes on through and after the failover
        stop.set()
        drained = await _drain(book, killed_at + failover_ms)
        book.revive_log = await _revive_log(masters, victim)
        nursery.cancel_scope.cancel()
    report = _report(book, cluster.profile, due, killed_done, failover_ms, drained)
    report["promote_s"] = round(promote_s, 1)
    return report


async def _revive_log(masters: Masters, group: str) -> set[tuple[str, str, int, int]]:
    """("ack" or "ck", topic, queue, offset) of each message acked or popped (checkpointed)
    in ``group``'s revive log, read from its master."""
    route = await masters.instance.fetch_route(TOPIC)
    (cluster,) = {bd.cluster for bd in route.broker_datas}
    out: set[tuple[str, str, int, int]] = set()
    for qid in range(REVIVE_QUEUES):
        offset = 0
        while True:
            ext = {"consumerGroup": "PopChaosAudit", "topic": revive_topic(cluster),
                   "queueId": str(qid), "queueOffset": str(offset), "maxMsgNums": "32",
                   "sysFlag": str(pull_sys_flag(False, False, True)), "commitOffset": "0",
                   "suspendTimeoutMillis": "0",
                   "subscription": "*", "subVersion": "0", "expressionType": "TAG"}
            resp = await masters.instance.invoke(masters.addrs[group],
                                                 request(RC.PULL_MESSAGE, ext), CALL_TIMEOUT_S)
            if resp.code != 0:
                break
            for rec in iter_records(bytes(resp.body or b"")):
                if rec.tags == ACK_TAG:
                    ack = AckRecord.decode(rec.body)
                    out.add(("ack", ack.topic, ack.queue_id, ack.ack_offset))
                elif rec.tags == CK_TAG:
                    ck = Checkpoint.decode(rec.body)
                    out.update(("ck", ck.topic, ck.queue_id, o) for o in ck.offsets)
            offset = int(resp.ext_fields["nextBeginOffset"])
    return out


async def _drain(book: Book, failover_done_ms: int) -> bool:
    """Until every message acked on send was delivered and acked -- but for those the dead
    master handed out and whose ack got no answer (it may have been stored): they have until
    their invisible time ran out on the new master and a revive round to come back."""
    def in_flight() -> set[bytes]:
        return book.from_old.keys() - book.acked.keys()

    def consumed() -> bool:
        return book.sent_ok <= book.acked.keys() | in_flight()

    if not await book.until(consumed, DRAIN_S):
        return False
    grace_s = (failover_done_ms + INVISIBLE_MS + REVIVE_GRACE_MS - _now_ms()) / 1000
    await book.until(lambda: not in_flight(), max(0.0, grace_s))
    return True


def _stored_copies(book: Book) -> dict[bytes, set[tuple[str, str, int, int]]]:
    """body -> the places it was popped from in the topic itself: more than one when the
    producer stored it twice (a send whose answer was lost, retried on another queue)."""
    copies: dict[bytes, set[tuple[str, str, int, int]]] = {}
    for d in book.deliveries:
        if not d.retry:
            copies.setdefault(d.body, set()).add(d.where)
    return copies


def _acked_then_redelivered(book: Book, copies: dict[bytes, set[Any]]) -> list[Delivery]:
    """Deliveries of a message after an ack of it was answered within its invisible time: the
    same stored message again (same place: a promoted slave holds it at the same offset), or
    a revived copy of it (the pop retry topic) once the message, or an earlier revived copy,
    had such an ack -- every copy, when the producer stored the body twice."""
    def acked_before(where: tuple[str, str, int, int], t: int) -> bool:
        at, in_time = book.acked_at.get(where, (0, False))
        return in_time and at < t

    places: dict[bytes, set[tuple[str, str, int, int]]] = {}
    for d in book.deliveries:
        places.setdefault(d.body, set()).add(d.where)

    def bad(d: Delivery) -> bool:
        if acked_before(d.where, d.got):
            return True
        if not d.retry:
            return False
        stored = copies.get(d.body, set())
        if len(stored) > 1:
            return all(acked_before(w, d.got) for w in stored)
        return any(acked_before(w, d.got) for w in places[d.body])

    return [d for d in book.deliveries if bad(d)]


def _report(book: Book, profile: str, due: int, killed_done: int, failover_ms: int,
            drained: bool) -> dict[str, Any]:
    counts = Counter(d.body for d in book.deliveries)
    copies = _stored_copies(book)
    in_flight = book.from_old.keys() - book.acked_by_old
    redelivered_after_ack = _acked_then_redelivered(book, copies)
    late_acks = sum(1 for _t, in_time in book.acked.values() if not in_time)
    return {
        "profile": profile,
        "sent_ok": len(book.sent_ok),
        "timers": len(book.timers),
        "deliveries": len(book.deliveries),
        "from_retry_topic": sum(1 for d in book.deliveries if d.retry),
        # a message the producer stored twice is two messages: each delivered once is none
        "duplicates": sum(c - max(1, len(copies.get(b, ()))) for b, c in counts.items()),
        "stored_twice": {b.decode(): sorted(w) for b, w in copies.items() if len(w) > 1},
        "in_flight_at_kill": len(in_flight),
        "late_acks": late_acks,
        "missing": sorted(b.decode() for b in book.sent_ok - counts.keys()),
        "never_acked": sorted(b.decode() for b in book.sent_ok - book.acked.keys()),
        "never_acked_ack_stored": sorted(
            b.decode() for b in book.sent_ok - book.acked.keys()
            if ("ack", *book.from_old.get(b, ("", -1, -1))) in book.revive_log),
        "never_acked_ck_stored": sorted(
            b.decode() for b in book.sent_ok - book.acked.keys()
            if ("ck", *book.from_old.get(b, ("", -1, -1))) in book.revive_log),
        "revive_log_records": Counter(kind for kind, *_x in book.revive_log),
        # each such body with every delivery of it (place, time) and every ack of those places
        "acked_then_redelivered": {
            b.decode(): [(d.where, d.got, book.acked_at.get(d.where)) for d in book.deliveries
                         if d.body == b]
            for b in sorted({d.body for d in redelivered_after_ack})},
        "timer_copies": {b.decode(): len(c) for b, c in book.timer_copies.items()},
        "timers_due_after_kill": due > killed_done,
        "failover_ms": failover_ms,
        "drained": drained,
    }


@pytest.mark.parametrize("profile", ["2m-2s-sync", "2m-2s-controller", "dledger"])
def test_pop_and_timers_through_a_master_kill(profile: str, tmp_path: Path) -> None:
    # the nodes' logs and stores stay in tmp_path when the test fails (pytest keeps the last
    # few): a failover that went wrong once in many runs can be read afterwards
    cluster_dir = tmp_path / "cluster"
    with rmq_cluster(profile, directory=cluster_dir, purge=False) as cluster:
        create_topics(cluster.namesrv_addr, [TOPIC], queues=QUEUES, order=False)
        report = trio.run(_run, cluster)
    report["logs"] = str(cluster_dir / "logs")
    print(json.dumps(report, sort_keys=True))  # the checker's report: duplicates counted
    assert report["timers_due_after_kill"], "the timers were due before the kill ended"
    assert not report["missing"], f"acked on send, never popped: {report}"
    assert report["drained"], report
    # an ack the dead master stored but could not answer: in the new master's revive log
    assert report["never_acked"] == report["never_acked_ack_stored"], report
    assert not report["acked_then_redelivered"], f"an acked message came back: {report}"
    assert report["duplicates"] <= report["in_flight_at_kill"] + report["late_acks"], report
    assert report["timer_copies"] == {f"timer-{i}": 1 for i in range(TIMERS)}, report
    shutil.rmtree(cluster_dir, ignore_errors=True)


def test_checker_tells_a_second_store_from_a_redelivery() -> None:
    """The checker (no cluster): a body the producer stored twice (its send's answer lost in
    the kill, the retry stored on the other group) delivered once per copy is no redelivery;
    the same stored message handed out after its ack, or revived after it, is."""
    book = Book()
    a, b = ("broker-a", TOPIC, 1, 7), ("broker-b", TOPIC, 0, 3)
    retry = ("broker-b", pop_retry_topic(TOPIC, GROUP), 0, 0)
    book.deliveries += [Delivery(b"twice", 100, False, b), Delivery(b"twice", 900, False, a)]
    book.acked_at.update({b: (150, True), a: (950, True)})
    assert _acked_then_redelivered(book, _stored_copies(book)) == []
    again = [Delivery(b"twice", 1000, False, a), Delivery(b"once", 1100, True, retry)]
    book.deliveries += [Delivery(b"once", 200, False, ("broker-b", TOPIC, 0, 4)), *again]
    book.acked_at[("broker-b", TOPIC, 0, 4)] = (250, True)
    assert _acked_then_redelivered(book, _stored_copies(book)) == again
