"""Rebalance, offsets across restarts, orderly, broadcasting, delay, DLQ, transactions."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import trio

from rmq_cluster.client import (
    ClientInstance,
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageModel,
    OrderlyResult,
    Producer,
    PushConsumer,
    ReceivedMessage,
    TransactionProducer,
    TransactionState,
)
from rmq_cluster.client.admin import Admin
from rmq_cluster.client.consumer import PullConsumer
from rmq_cluster.client.model import MessageQueue, dlq_topic

from .conftest import WAIT_S, Cluster


async def _wait_for(predicate, *consumers: PushConsumer) -> None:  # type: ignore[no-untyped-def]
    """Wait until ``predicate()`` holds, re-checking whenever a consumer's assignment changes."""
    with trio.fail_after(WAIT_S):
        while not predicate():
            async with trio.open_nursery() as n:
                for c in consumers:
                    async def changed(c: PushConsumer = c) -> None:
                        await c.assignment_changed.wait()
                        n.cancel_scope.cancel()
                    n.start_soon(changed)


def _ok(msgs: list[ReceivedMessage]) -> ConsumeResult:
    return ConsumeResult.SUCCESS


async def test_rebalance_join_and_leave(cluster: Cluster) -> None:
    cc = cluster.client_config
    async with Producer("PG", client_config=cc()) as p:
        await p.send(Message("R1", b"x"))  # creates the topic (4 queues)
        c1 = PushConsumer("RG", client_config=cc(instance_name="c1"), listener=_ok)
        c1.subscribe("R1")
        async with c1:
            await _wait_for(lambda: len(c1.assigned_queues("R1")) == 4, c1)
            c2 = PushConsumer("RG", client_config=cc(instance_name="c2"), listener=_ok)
            c2.subscribe("R1")
            async with c2:
                def split() -> bool:
                    a, b = set(c1.assigned_queues("R1")), set(c2.assigned_queues("R1"))
                    return len(a) == 2 and len(b) == 2 and not a & b
                await _wait_for(split, c1, c2)
                assert len(set(c1.assigned_queues("R1")) | set(c2.assigned_queues("R1"))) == 4
            # c2 left: c1 takes every queue back (no queue orphaned)
            await _wait_for(lambda: len(c1.assigned_queues("R1")) == 4, c1)


async def test_offsets_resume_after_restart(cluster: Cluster) -> None:
    cc = cluster.client_config()
    async with Producer("PG", client_config=cc) as p:
        for i in range(10):
            await p.send(Message("O1", b"first-%d" % i))
        got1: list[ReceivedMessage] = []
        enough = trio.Event()

        def l1(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got1.extend(msgs)
            if len(got1) >= 10:
                enough.set()
            return ConsumeResult.SUCCESS

        async with PushConsumer("OG", client_config=cc, listener=l1,
                                consume_from=ConsumeFromWhere.FIRST_OFFSET) as c:
            c.subscribe("O1")
            with trio.fail_after(WAIT_S):
                await enough.wait()
        for i in range(5):
            await p.send(Message("O1", b"second-%d" % i))
        got2: list[ReceivedMessage] = []
        enough2 = trio.Event()

        def l2(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got2.extend(msgs)
            if len(got2) >= 5:
                enough2.set()
            return ConsumeResult.SUCCESS

        async with PushConsumer("OG", client_config=cc, listener=l2,
                                consume_from=ConsumeFromWhere.FIRST_OFFSET) as c:
            c.subscribe("O1")
            with trio.fail_after(WAIT_S):
                await enough2.wait()
    assert sorted(m.body for m in got2) == sorted(b"second-%d" % i for i in range(5))


async def test_orderly_per_queue(cluster: Cluster) -> None:
    cc = cluster.client_config()
    per_key: dict[str, list[int]] = defaultdict(list)
    queues_of_key: dict[str, set[int]] = defaultdict(set)
    done = trio.Event()
    failed_once: set[str] = set()
    total = 4 * 15

    def listener(msgs: list[ReceivedMessage]) -> OrderlyResult:
        m = msgs[0]
        key = m.keys or ""
        seq = int(m.body.split(b"-")[1])
        if seq == 3 and key not in failed_once:  # a suspended message is retried in place
            failed_once.add(key)
            return OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        per_key[key].append(seq)
        queues_of_key[key].add(m.queue_id)
        if sum(len(v) for v in per_key.values()) >= total:
            done.set()
        return OrderlyResult.SUCCESS

    async with Producer("PG", client_config=cc) as p:
        await p.send(Message("OR1", b"warm"))
        for seq in range(15):
            for key in ("k1", "k2", "k3", "k4"):
                await p.send_orderly(Message("OR1", b"%s-%d" % (key.encode(), seq), keys=key),
                                     key)
        c = PushConsumer("ORG", client_config=cc, listener=listener, orderly=True,
                         orderly_suspend_s=0.05, consume_from=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe("OR1")
        async with c:
            with trio.fail_after(WAIT_S):
                await done.wait()
    for key, seqs in per_key.items():
        assert seqs == list(range(15)), key
        assert len(queues_of_key[key]) == 1


async def test_broadcasting_every_member_gets_everything(cluster: Cluster, tmp_path: Path
                                                         ) -> None:
    cc = cluster.client_config
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    done = {"a": trio.Event(), "b": trio.Event()}

    def make(name: str):  # type: ignore[no-untyped-def]
        def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got[name].extend(m.body for m in msgs)
            if len(got[name]) >= 6:
                done[name].set()
            return ConsumeResult.SUCCESS
        return listener

    async with Producer("PG", client_config=cc()) as p:
        await p.send(Message("B1", b"warm"))
        consumers = []
        for name in ("a", "b"):
            c = PushConsumer("BG", client_config=cc(instance_name=name), listener=make(name),
                             message_model=MessageModel.BROADCASTING,
                             consume_from=ConsumeFromWhere.LAST_OFFSET,
                             offset_store_dir=str(tmp_path / name))
            c.subscribe("B1")
            consumers.append(c)
        async with consumers[0], consumers[1]:
            await _wait_for(lambda: all(len(c.assigned_queues("B1")) == 4 for c in consumers),
                            *consumers)
            for i in range(6):
                await p.send(Message("B1", b"b%d" % i))
            with trio.fail_after(WAIT_S):
                await done["a"].wait()
                await done["b"].wait()
    assert sorted(got["a"]) == sorted(got["b"]) == [b"b%d" % i for i in range(6)]
    assert (tmp_path / "a" / "BG" / "offsets.json").read_bytes().startswith(b'{"offsetTable":{{')


async def test_delay_level(cluster: Cluster) -> None:
    cc = cluster.client_config()
    async with Producer("PG", client_config=cc) as p:
        await p.send(Message("D1", b"warm"))
        got: list[ReceivedMessage] = []
        done = trio.Event()

        def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(m for m in msgs if m.body == b"later")
            if got:
                done.set()
            return ConsumeResult.SUCCESS

        async with PushConsumer("DG", client_config=cc, listener=listener,
                                consume_from=ConsumeFromWhere.LAST_OFFSET) as c:
            c.subscribe("D1")
            r = await p.send(Message("D1", b"later", delay_level=1))
            sent_at = trio.current_time()
            with trio.fail_after(WAIT_S):
                await done.wait()
            assert trio.current_time() - sent_at >= 0.5  # level 1 is "1s" in this cluster
    assert got[0].msg_id == r.msg_id and got[0].topic == "D1"


async def test_dlq_after_max_reconsume_times(cluster: Cluster) -> None:
    cc = cluster.client_config()
    async with Admin(client_config=cc) as admin:  # the DLQ topic exists up front: pull can wait
        await admin.update_topic(dlq_topic("QG"), broker_addr=cluster.addr,
                                 read_queue_nums=1, write_queue_nums=1)
    async with Producer("PG", client_config=cc) as p:
        r = await p.send(Message("Q1", b"poison"))

        def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            return ConsumeResult.RECONSUME_LATER

        async with PushConsumer("QG", client_config=cc, listener=listener,
                                max_reconsume_times=1,
                                consume_from=ConsumeFromWhere.FIRST_OFFSET) as c:
            c.subscribe("Q1")
            async with PullConsumer("QDLQ", client_config=cc,
                                    consume_from=ConsumeFromWhere.FIRST_OFFSET) as pc:
                await pc.assign([MessageQueue(dlq_topic("QG"), "broker-a", 0)])
                with trio.fail_after(WAIT_S):
                    found = await pc.poll(WAIT_S)
    assert found[0].msg_id == r.msg_id and found[0].body == b"poison"
    assert found[0].reconsume_times >= 1


async def test_transactions_commit_rollback_and_check(cluster: Cluster) -> None:
    cc = cluster.client_config()
    checked = trio.Event()

    def execute(msg: Message, arg: object) -> TransactionState:
        return arg  # type: ignore[return-value]

    def check(msg: ReceivedMessage) -> TransactionState:
        checked.set()
        return TransactionState.COMMIT_MESSAGE

    got: dict[bytes, ReceivedMessage] = {}
    both = trio.Event()

    def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        for m in msgs:
            got[m.body] = m
        if b"commit" in got and b"unknown" in got:
            both.set()
        return ConsumeResult.SUCCESS

    async with ClientInstance(cc) as inst, TransactionProducer(
        "TXG", instance=inst, execute_local=execute, check_local=check
    ) as tp:
        await tp.send(Message("X1", b"warm"))
        async with PushConsumer("XCG", instance=inst, listener=listener,
                                consume_from=ConsumeFromWhere.FIRST_OFFSET) as c:
            c.subscribe("X1")
            r1, s1 = await tp.send_in_transaction(Message("X1", b"commit"),
                                                  TransactionState.COMMIT_MESSAGE)
            await tp.send_in_transaction(Message("X1", b"rollback"),
                                         TransactionState.ROLLBACK_MESSAGE)
            await tp.send_in_transaction(Message("X1", b"unknown"), TransactionState.UNKNOW)
            with trio.fail_after(WAIT_S):
                await checked.wait()
                await both.wait()
            conns = [a for a, c in inst.remoting._connections.items() if not c.is_closed]
            # nothing of the rolled-back message is in the topic (pulled from offset 0)
            everything: list[bytes] = []
            async with PullConsumer("XPC", instance=inst) as pc:
                for mq in await pc.fetch_queues("X1"):
                    res = await pc.pull(mq, 0)
                    everything += [m.body for m in res.messages]
    assert s1 is TransactionState.COMMIT_MESSAGE
    # one instance, one connection per address, shared by producer and consumers
    assert sorted(conns) == sorted({cluster.ns_addr, cluster.addr})
    assert b"rollback" not in got and b"rollback" not in everything
    assert sorted(everything) == [b"commit", b"unknown", b"warm"]
    assert got[b"commit"].msg_id == r1.msg_id


async def test_consume_from_timestamp(cluster: Cluster) -> None:
    """A group without a stored offset and CONSUME_FROM_TIMESTAMP starts each queue at the
    broker's SEARCH_OFFSET_BY_TIMESTAMP answer for ``consume_timestamp_ms``.

    (Like a Java broker, ours answers QUERY_CONSUMER_OFFSET with 0 for a new group while the
    queue is young, so the "no offset" answer is simulated here.)"""
    cc = cluster.client_config()
    mq = MessageQueue("TS1", "broker-a", 0)
    async with Producer("PG", client_config=cc) as p:
        sent = [await p.send(Message("TS1", b"m-%d" % i), queue=mq) for i in range(6)]
        async with PullConsumer("TSP", client_config=cc) as pc:
            res = await pc.pull(mq, sent[3].queue_offset)
            stamp = res.messages[0].store_timestamp
            expected = await pc.pull_api.search_offset(mq, stamp)
        got: list[int] = []
        done = trio.Event()

        def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(m.queue_offset for m in msgs if m.queue_id == 0)
            if len(got) >= 6 - expected:
                done.set()
            return ConsumeResult.SUCCESS

        c = PushConsumer("TSG", client_config=cc, listener=listener,
                         consume_from=ConsumeFromWhere.TIMESTAMP, consume_timestamp_ms=stamp)
        c.subscribe("TS1")
        real_read = c.offsets.read_from_store

        async def no_stored_offset(q: MessageQueue) -> int:
            await real_read(q)
            return -1

        c.offsets.read_from_store = no_stored_offset  # type: ignore[method-assign]
        async with c:
            with trio.fail_after(WAIT_S):
                await done.wait()
    assert 0 < expected <= 3
    assert sorted(got) == list(range(expected, 6))
