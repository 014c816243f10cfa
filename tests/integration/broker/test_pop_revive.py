"""The POP revive scan on a live broker: checkpoints Apache's broker sent through its timer wait
for the timer (not a fixed margin), revive offsets an earlier version of ours wrote resume at
the right record, and a broker without POP consumers runs no revive round."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.cluster.protocol import pop as wire
from rmq_cluster.cluster.protocol.message import Message, MessageConst
from rmq_cluster.cluster.remoting.codes import RequestCode
from rmq_cluster.store.config import TIMER_TOPIC
from rmq_cluster.store.timer.hook import TIMER_DELIVER_MS, TIMER_OUT_MS, slot_time

from .conftest import Cluster, broker_settings, ok, running_cluster
from .pop_testlib import POP_PROPS, pop, pop_until, popped

WAIT_S = 10.0


async def _topic(cluster: Cluster, topic: str) -> None:
    ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
        "perm": "6", "topicFilterType": "SINGLE_TAG"}))


def _append(broker: BrokerNode, topic: str, body: bytes, props: dict[str, str],
            queue_id: int = 0) -> None:
    now = broker.now_ms()
    put = broker.store.append_message(Message(
        topic=topic, body=body, queue_id=queue_id, properties=props, born_timestamp=now,
        born_host=broker.store_host, store_host=broker.store_host))
    assert put.result is not None and put.status.stored, put.status


def _through_timer(broker: BrokerNode, record: wire.Checkpoint | wire.AckRecord,
                   deliver_ms: int) -> None:
    """A revive record as Apache's broker writes it: into the timer queue, due at
    ``deliver_ms``, bound for revive queue 0."""
    service = broker.pop.service
    service.ensure_topic(service.revive_topic, service.revive_queue_num)
    tag = wire.CK_TAG if isinstance(record, wire.Checkpoint) else wire.ACK_TAG
    _append(broker, TIMER_TOPIC, record.encode(), {
        MessageConst.PROPERTY_TAGS: tag,
        MessageConst.PROPERTY_REAL_TOPIC: service.revive_topic,
        MessageConst.PROPERTY_REAL_QUEUE_ID: "0",
        TIMER_DELIVER_MS: str(deliver_ms),
        TIMER_OUT_MS: str(slot_time(deliver_ms, 1000)),
        MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uuid.uuid4().hex.upper(),
    })


async def _until(predicate: Callable[[], bool], deadline_s: float) -> bool:
    """Whether ``predicate`` held before the deadline (checked every 20 ms)."""
    with trio.move_on_after(deadline_s):
        while not predicate():  # noqa: ASYNC110 - the ledger wakes nobody
            await trio.sleep(0.02)
        return True
    return False


def _stall_timer(broker: BrokerNode, stalled: bool) -> None:
    timer = broker.timer
    assert timer is not None
    timer.cfg = attrs.evolve(timer.cfg, timer_stop_dequeue=stalled)
    broker._timer_wake.set()


async def test_timer_delivered_checkpoint_waits_for_the_timer_not_a_margin(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        broker = cluster.broker
        service = broker.pop.service
        await _topic(cluster, "TdT")
        ok(await cluster.send("TdT", b"acked"))
        ok(await cluster.send("TdT", b"lost"))
        broker.offsets.commit("TdG", "TdT", 0, 2)  # (as the pops would have)
        now = broker.now_ms()

        def record(offset: int, invisible_ms: int) -> tuple[wire.Checkpoint, wire.AckRecord]:
            ck = wire.Checkpoint(topic="TdT", cid="TdG", queue_id=0, start_offset=offset,
                                 pop_time=now, invisible_time=invisible_ms, diffs=(0,),
                                 broker_name="broker-a")
            ack = wire.AckRecord(topic="TdT", consumer_group="TdG", queue_id=0,
                                 start_offset=offset, ack_offset=offset, pop_time=now,
                                 broker_name="broker-a")
            return ck, ack

        # acked: its checkpoint comes through the timer at once, its ack at the revive time;
        # the timer stalls in between (a loaded broker's timer, slowed to a halt)
        ck, ack = record(0, 3000)
        _through_timer(broker, ck, now)
        _through_timer(broker, ack, ck.revive_time)
        assert await _until(lambda: len(service.ledger) == 1, WAIT_S)
        _stall_timer(broker, True)
        # long past the revive time (and the 5 s margin main waited): the ack is still in the
        # timer, so the checkpoint is not revived
        wait_s = (ck.revive_time + 6000 - broker.now_ms()) / 1000.0
        assert not await _until(lambda: service.revived > 0, wait_s)
        assert len(service.ledger) == 1
        # the timer goes on: the ack arrives and finishes the checkpoint; nothing is revived
        _stall_timer(broker, False)
        assert await _until(lambda: len(service.ledger) == 0, WAIT_S)
        assert service.revived == 0

        # not acked, the timer idle: revived as soon as its time comes, not 5 s later
        now = broker.now_ms()
        ck, _ack = record(1, 1000)
        _through_timer(broker, ck, now)
        assert await _until(lambda: service.revived == 1, (ck.revive_time + 2500 - now) / 1000)
        back = await pop_until(cluster, "TdT", "TdG", 1, deadline_s=WAIT_S)
        assert [m.body for m in back] == [b"lost"]


async def test_revive_offset_an_earlier_version_wrote(tmp_path: Path) -> None:
    """Before the revive offset named the last record done with (as Apache's), ours named the
    next one to read: a store of that version resumes at its oldest unfinished checkpoint."""
    async with running_cluster(tmp_path, reviveInterval="600000") as cluster:
        broker = cluster.broker
        service = broker.pop.service
        await _topic(cluster, "OldT")
        ok(await cluster.send("OldT", b"popped, never acked"))
        # what that version left on disk: a pop's checkpoint (its records had no
        # TIMER_DELIVER_MS), the group's offset past the message, the revive offset naming
        # the checkpoint (the next record to read)
        service.ensure_topic(service.revive_topic, service.revive_queue_num)
        ck = wire.Checkpoint(topic="OldT", cid="OldG", queue_id=0, start_offset=0,
                             pop_time=broker.now_ms(), invisible_time=500, diffs=(0,),
                             broker_name="broker-a")
        _append(broker, service.revive_topic, ck.encode(),
                {MessageConst.PROPERTY_TAGS: wire.CK_TAG})
        broker.offsets.commit("OldG", "OldT", 0, 1)
        broker.offsets.commit(wire.REVIVE_GROUP, service.revive_topic, 0, 0)
        await cluster.stop_broker()
        await cluster.start_broker(broker_settings(cluster.store_dir, cluster.ns_addr, **POP_PROPS))
        back = await pop_until(cluster, "OldT", "OldG", 1, deadline_s=WAIT_S)
        assert [m.body for m in back] == [b"popped, never acked"]
        assert back[0].reconsume_times == 1


async def test_no_revive_round_without_pop(tmp_path: Path) -> None:
    """Sends alone wake no revive round (each used to scan, and dispatch for the reput); a
    pop's checkpoint does, and is revived."""
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        service = cluster.broker.pop.service
        rounds = [0]
        revive_once = service.revive_once

        def counted() -> int:
            rounds[0] += 1
            return revive_once()

        service.revive_once = counted  # type: ignore[method-assign]
        await _topic(cluster, "NoPopT")
        start = trio.current_time()
        sent = 0
        while trio.current_time() - start < 1.0:  # ten revive intervals of sends
            ok(await cluster.send("NoPopT", b"x" * 64))
            sent += 1
        assert rounds[0] <= 1, (rounds[0], sent)  # (the boot's recovery round)
        (_m,) = popped(await pop(cluster, "NoPopT", "NoPopG", max_nums=1, invisible_ms=300))
        assert await _until(lambda: service.revived == 1, WAIT_S)
        assert rounds[0] >= 2
