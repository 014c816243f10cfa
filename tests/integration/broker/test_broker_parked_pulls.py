"""Parked pulls cost no task: many long-polling pulls over one connection park as objects, a
message wakes exactly its queue's pulls (answered through their connection's answer_later, in
order of the store's read), the rest answer PULL_NOT_FOUND at their own suspendTimeoutMillis,
and pulls parked by a connection that closed are dropped harmlessly when they come due."""

from __future__ import annotations

import contextlib

import pytest
import trio

from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import PULL_SUBSCRIPTION, PULL_SUSPEND, WAIT_S, Cluster, messages, ok

PER_QUEUE = 16
QUEUES = 4
#: queue 1's pulls park this long, so one answered by its deadline, not by the message, would
#: come ~10 s after the send, far past WOKEN_WITHIN_S (with the others' 2 s, a deadline answer
#: and a slow wake on a loaded machine were both near the 1 s bound)
WOKEN_SUSPEND_MS = 10_000
WOKEN_WITHIN_S = 5.0


def _tasks_under(nursery: trio.Nursery) -> int:
    n = 0
    for task in nursery.child_tasks:
        n += 1
        for child in task.child_nurseries:
            n += _tasks_under(child)
    return n


def _pull_ext(topic: str, queue_id: int, offset: int, suspend_ms: int) -> dict[str, str]:
    return {
        "consumerGroup": "CG", "topic": topic, "queueId": str(queue_id),
        "queueOffset": str(offset), "maxMsgNums": "32",
        "sysFlag": str(PULL_SUBSCRIPTION | PULL_SUSPEND), "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms), "subscription": "*", "subVersion": "0",
    }


async def test_many_parked_pulls_take_no_task_each_and_wake_per_queue(cluster: Cluster) -> None:
    topic = "ParkMany"
    ok(await cluster.send(topic, b"m0", queue_id=0))  # creates the topic (4 queues)
    broker = cluster.broker
    assert broker._nursery is not None
    tasks_before = _tasks_under(broker._nursery)
    results: dict[tuple[int, int], tuple[RemotingCommand, float]] = {}
    queue1_done = trio.Event()

    async def parked_pull(q: int, i: int) -> None:
        offset = 1 if q == 0 else 0
        suspend_ms = WOKEN_SUSPEND_MS if q == 1 else 2_000
        resp = await cluster.call(RequestCode.PULL_MESSAGE,
                                  _pull_ext(topic, q, offset, suspend_ms), timeout=15)
        results[q, i] = (resp, trio.current_time())
        if sum(1 for (rq, _) in results if rq == 1) == PER_QUEUE:
            queue1_done.set()

    async with trio.open_nursery() as nursery:
        started = trio.current_time()
        for q in range(QUEUES):
            for i in range(PER_QUEUE):
                nursery.start_soon(parked_pull, q, i)
        with trio.fail_after(WAIT_S):
            await broker.wait_until(lambda b: b.hold.parked == QUEUES * PER_QUEUE)
        # 64 parked pulls, no task for any of them
        assert _tasks_under(broker._nursery) - tasks_before < 4
        sent_at = trio.current_time()
        ok(await cluster.send(topic, b"m1", queue_id=1))
        with trio.fail_after(WAIT_S):
            await queue1_done.wait()
        assert broker.hold.parked == (QUEUES - 1) * PER_QUEUE
        assert not any(q != 1 for (q, _) in results)
    for (q, _), (resp, at) in results.items():
        if q == 1:
            assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
            assert [m.body for m in messages(resp)] == [b"m1"]
            assert resp.ext_fields["nextBeginOffset"] == "1"
            assert at - sent_at < WOKEN_WITHIN_S
        else:  # woken by their own deadline: nothing new, as RocketMQ answers it
            assert resp.code == ResponseCode.PULL_NOT_FOUND, (resp.code, resp.remark)
            assert 1.9 < at - started < 2.0 + WAIT_S
            assert resp.ext_fields["nextBeginOffset"] == str(1 if q == 0 else 0)
    assert broker.hold.parked == 0


async def test_pulls_of_a_closed_connection_come_due_harmlessly(cluster: Cluster) -> None:
    topic = "ParkClosed"
    ok(await cluster.send(topic, b"m0", queue_id=0))
    broker = cluster.broker
    async with open_remoting_client(node="doomed") as doomed:
        conn = await doomed.connection(cluster.addr)

        async def parked(q: int) -> None:
            with contextlib.suppress(Exception):  # the connection is closed under it
                await conn.invoke(RemotingCommand.request(
                    RequestCode.PULL_MESSAGE, _pull_ext(topic, q, 1 if q == 0 else 0, 600)),
                    timeout=10)

        async with trio.open_nursery() as nursery:
            for q in range(QUEUES):
                nursery.start_soon(parked, q)
            with trio.fail_after(WAIT_S):
                await broker.wait_until(lambda b: b.hold.parked == QUEUES)
            await conn.aclose()
    ok(await cluster.send(topic, b"m1", queue_id=0))  # wakes queue 0's pull: no one to answer
    with trio.fail_after(WAIT_S):  # the others come due at 600 ms
        await broker.wait_until(lambda b: b.hold.parked == 0)
    # the broker serves on
    resp = await cluster.pull(topic, 1, queue_id=0)
    assert resp.code == ResponseCode.SUCCESS and [m.body for m in messages(resp)] == [b"m1"]


async def test_a_caught_up_pull_parks_without_a_read_and_its_wake_reads_once(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull at its queue's end parks on ``store.at_queue_end`` (its miss counted, no read
    built); the message that wakes it is read once, and the woken answer (encoded from the pull
    answer's template) carries what a direct pull of the same offset answers."""
    topic = "ParkNoRead"
    ok(await cluster.send(topic, b"m0", queue_id=0))
    store = cluster.broker.store
    reads: list[int] = []
    real_get = store.get_message

    def counting_get(*args: object, **kwargs: object) -> object:
        reads.append(1)
        return real_get(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "get_message", counting_get)
    misses = store.get_miss_times
    answer: list[RemotingCommand] = []
    async with trio.open_nursery() as nursery:

        async def pull() -> None:
            answer.append(await cluster.call(RequestCode.PULL_MESSAGE,
                                             _pull_ext(topic, 0, 1, 10_000), timeout=15))

        nursery.start_soon(pull)
        with trio.fail_after(WAIT_S):
            await cluster.broker.wait_until(lambda b: b.hold.parked == 1)
        assert (reads, store.get_miss_times) == ([], misses + 1)
        ok(await cluster.send(topic, b"m1", queue_id=0))
    assert len(reads) == 1
    (woken,) = answer
    direct = ok(await cluster.call(RequestCode.PULL_MESSAGE, _pull_ext(topic, 0, 1, 0)))
    ok(woken)
    assert [m.body for m in messages(woken)] == [b"m1"]
    assert (woken.remark, woken.ext_fields, bytes(woken.body)) == (
        direct.remark, direct.ext_fields, bytes(direct.body))
    assert woken.ext_fields["nextBeginOffset"] == "2"
