"""End to end through the client against an in-process NameServer + Broker."""

from __future__ import annotations

import zlib
from collections import Counter

import trio

from rmq_cluster.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    ReceivedMessage,
    SendStatus,
)
from rmq_cluster.client.model import MessageQueue
from rmq_cluster.cluster.protocol.message import SYSFLAG_COMPRESSED

from .conftest import WAIT_S, Cluster


class Collector:
    """A listener that records messages and sets an event once ``want`` distinct ids arrived."""

    def __init__(self, want: int) -> None:
        self.want = want
        self.msgs: list[ReceivedMessage] = []
        self.ids: set[str] = set()
        self.done = trio.Event()

    def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        for m in msgs:
            self.msgs.append(m)
            self.ids.add(m.msg_id)
        if len(self.ids) >= self.want:
            self.done.set()
        return ConsumeResult.SUCCESS

    async def wait(self) -> None:
        with trio.fail_after(WAIT_S):
            await self.done.wait()


async def test_all_send_modes_reach_a_push_consumer(cluster: Cluster) -> None:
    cc = cluster.client_config()
    got = Collector(1 + 20 + 3 + 8)
    async with Producer("PG", client_config=cc) as p:
        first = await p.send(Message("T1", b"sync", tags="A", keys=["k1", "k2"],
                                     properties={"color": "red"}))
        assert first.status is SendStatus.SEND_OK and len(first.msg_id) == 32
        assert len(first.offset_msg_id) == 32 and first.queue_offset == 0
        handles = [p.send_async(Message("T1", b"async-%d" % i)) for i in range(20)]
        results = [await h.result() for h in handles]
        assert len({r.msg_id for r in results}) == 20
        for i in range(3):
            await p.send_oneway(Message("T1", b"oneway-%d" % i))
        batch = await p.send_batch([Message("T1", b"batch-%d" % i, keys=f"b{i}") for i in range(8)])
        assert len(batch.msg_id.split(",")) == 8
        async with PushConsumer("CG1", client_config=cc, listener=got,
                                consume_from=ConsumeFromWhere.FIRST_OFFSET) as c:
            c.subscribe("T1", "*")
            await got.wait()
    by_id = {m.msg_id: m for m in got.msgs}
    m = by_id[first.msg_id]
    assert m.body == b"sync" and m.tags == "A" and m.keys == "k1 k2"
    assert m.properties["color"] == "red" and m.offset_msg_id == first.offset_msg_id
    assert {r.msg_id for r in results} <= set(by_id)
    assert set(batch.msg_id.split(",")) <= set(by_id)


async def test_subscribe_before_start_and_tag_filter(cluster: Cluster) -> None:
    cc = cluster.client_config()
    got = Collector(8)
    async with Producer("PG", client_config=cc) as p:
        for i in range(12):
            await p.send(Message("T2", b"m%d" % i, tags="ABC"[i % 3]))
        c = PushConsumer("CG2", client_config=cc, listener=got,
                         consume_from=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe("T2", "A || C")
        async with c:
            await got.wait()
    assert {m.tags for m in got.msgs} == {"A", "C"}
    assert len(got.ids) == 8


async def test_compression_over_4k(cluster: Cluster) -> None:
    cc = cluster.client_config()
    body = b"0123456789abcdef" * 1024  # 16 KiB
    async with Producer("PG", client_config=cc) as p:
        r = await p.send(Message("T3", body))
        small = await p.send(Message("T3", b"x" * 100))
        async with PullConsumer("CG3", client_config=cc) as pc:
            res = await pc.pull(r.queue, r.queue_offset)
            assert res.status is PullStatus.FOUND
            m = res.messages[0]
            assert m.body == body and m.sys_flag & SYSFLAG_COMPRESSED
            assert m.sys_flag & 0x300 == 0x300
            res2 = await pc.pull(small.queue, small.queue_offset)
            assert not res2.messages[0].sys_flag & SYSFLAG_COMPRESSED
    # the stored body really is the zlib stream
    stored = cluster.broker.store
    assert stored is not None
    assert zlib.decompress(zlib.compress(body, 5)) == body


async def test_pull_consumer_assign_seek_poll_commit(cluster: Cluster) -> None:
    cc = cluster.client_config()
    async with Producer("PG", client_config=cc) as p:
        mq = MessageQueue("T4", "broker-a", 0)
        for i in range(10):
            await p.send(Message("T4", b"p%d" % i), queue=mq)
        async with PullConsumer("CG4", client_config=cc,
                                consume_from=ConsumeFromWhere.FIRST_OFFSET) as pc:
            queues = await pc.fetch_queues("T4")
            assert mq in queues and len(queues) == 4
            await pc.assign([mq])
            seen: list[int] = []
            with trio.fail_after(WAIT_S):
                while len(seen) < 10:
                    seen += [m.queue_offset for m in await pc.poll(1.0)]
            assert seen == list(range(10))
            pc.seek(mq, 7)
            again: list[int] = []
            with trio.fail_after(WAIT_S):
                while len(again) < 3:
                    again += [m.queue_offset for m in await pc.poll(1.0)]
            assert again == [7, 8, 9]
            # long polling: a message sent while the pull is parked at the broker arrives
            hold = cluster.broker.hold
            changed = [trio.Event()]
            hold._on_change = lambda: changed[0].set()  # the hold service's hook (test-only)
            async with trio.open_nursery() as n:
                async def late() -> None:
                    while not hold.parked:
                        await changed[0].wait()
                        changed[0] = trio.Event()
                    await p.send(Message("T4", b"late"), queue=mq)
                n.start_soon(late)
                with trio.fail_after(WAIT_S):
                    msgs = await pc.poll(WAIT_S)
            assert [m.body for m in msgs] == [b"late"]
            await pc.commit()
            assert await pc.committed(mq) == 11


async def test_retry_after_failed_consume(cluster: Cluster) -> None:
    cc = cluster.client_config()
    attempts: Counter[str] = Counter()
    done = trio.Event()
    seen: list[ReceivedMessage] = []

    def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        for m in msgs:
            attempts[m.msg_id] += 1
            seen.append(m)
            if attempts[m.msg_id] == 1:
                return ConsumeResult.RECONSUME_LATER
            done.set()
        return ConsumeResult.SUCCESS

    async with Producer("PG", client_config=cc) as p:
        r = await p.send(Message("T5", b"retry-me", tags="X"))
        async with PushConsumer("CG5", client_config=cc, listener=listener,
                                consume_from=ConsumeFromWhere.FIRST_OFFSET) as c:
            c.subscribe("T5")
            with trio.fail_after(WAIT_S):
                await done.wait()
    assert attempts[r.msg_id] == 2
    second = seen[-1]
    assert second.topic == "T5" and second.reconsume_times == 1 and second.body == b"retry-me"


async def test_async_listener_runs_concurrently_bounded_per_queue(cluster: Cluster) -> None:
    cc = cluster.client_config()
    mq = MessageQueue("T6", "broker-a", 0)
    running = 0
    peak = 0
    seen: set[str] = set()
    all_in = trio.Event()
    release = trio.Event()

    async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running >= 4:
            release.set()  # the bound is reached: let everyone finish
        await release.wait()
        running -= 1
        seen.update(m.msg_id for m in msgs)
        if len(seen) >= 12:
            all_in.set()
        return ConsumeResult.SUCCESS

    async with Producer("PG", client_config=cc) as p:
        for i in range(12):
            await p.send(Message("T6", b"c%d" % i), queue=mq)
        async with PushConsumer("CG6", client_config=cc, listener=listener,
                                max_in_flight_per_queue=4,
                                consume_from=ConsumeFromWhere.FIRST_OFFSET) as c:
            c.subscribe("T6")
            with trio.fail_after(WAIT_S):
                await all_in.wait()
    assert peak == 4  # concurrent, and never more than the per-queue bound


async def test_sync_sends_survive_the_broker_dropping_the_connection(cluster: Cluster) -> None:
    """Sync sends go one at a time, so the client's connection lends its reading to them: a
    close by the broker between two sends is found by the next send before it writes anything
    (RemotingUnsentError), and the client sends it on a new connection: no send fails (so
    the broker is not isolated as faulty) and each message is stored exactly once."""
    cc = cluster.client_config()
    async with Producer("PGDrop", client_config=cc) as p:
        # every update of the fault table, whether its send failed (isolation): a loaded
        # machine's slow but successful send (>= 550 ms) is remembered too, and is no failure
        isolated: list[bool] = []
        record = p.fault.update

        def update(broker_name: str, latency_ms: int, isolation: bool, now_ms: int) -> None:
            isolated.append(isolation)
            record(broker_name, latency_ms, isolation, now_ms)

        p.fault.update = update  # type: ignore[method-assign]
        sent = [await p.send(Message("TDrop", b"before-%d" % i)) for i in range(3)]
        conn = p.instance._conns[cluster.addr]
        # the path under test: a send that reads its own answer. The reader lends only for
        # LEND_IDLE_S (50 ms) after an answer, and the producer's heartbeat shares the
        # connection: a loaded machine's stall or a heartbeat between two sends makes one go
        # through the reader, so send until one was lone (almost always the first)
        lone_before = conn.lone_calls
        with trio.fail_after(WAIT_S):
            while conn.lone_calls == lone_before:
                sent.append(await p.send(Message("TDrop", b"lone-%d" % len(sent))))
        assert conn.lone_calls == lone_before + 1
        server = cluster.broker.server
        assert server is not None
        for served in list(server.connections):
            await served.aclose()
        with trio.fail_after(WAIT_S):  # the FIN reached the client (nobody has read it)
            while not conn._sock.readable_now() and not conn.is_closed:  # noqa: ASYNC110
                await trio.sleep(0.001)
        for i in range(3):
            with trio.fail_after(WAIT_S):
                sent.append(await p.send(Message("TDrop", b"after-%d" % i)))
        assert all(r.status is SendStatus.SEND_OK for r in sent)
        assert p.instance._conns[cluster.addr] is not conn
        # no send failed: the broker was not marked unavailable (a failed send isolates it)
        assert not any(isolated), isolated
    store = cluster.broker.store
    stored = sum(store.get_max_offset_in_queue("TDrop", q) for q in range(4))
    assert stored == len(sent)  # none lost, none sent twice
    got = Collector(stored)
    async with PushConsumer("CGDrop", client_config=cc, listener=got,
                            consume_from=ConsumeFromWhere.FIRST_OFFSET) as c:
        c.subscribe("TDrop", "*")
        await got.wait()
    assert sorted(Counter(m.body for m in got.msgs).values()) == [1] * stored
