"""Long polling with batches: the dispatcher announces arrivals once per run of records of a
queue with one tagsCode (not once per record), and a parked pull must still wake exactly when
a record it wants arrives -- also when that record sits in the middle of a batch whose last
record carries another tag -- and must stay parked for batches it does not want."""

from __future__ import annotations

import trio

from rmq_cluster.cluster.protocol.message import encode_batch
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import WAIT_S, Cluster, messages, ok

#: a woken pull answers within this long; the parked pull's own timeout is 10 s (nothing polls
#: on a tick), so 5 s tells a wake from a timeout with room for a loaded 2-core machine
WAKE_WITHIN_S = 5.0


async def _send_batch(cluster: Cluster, topic: str, tags: list[str], prefix: str) -> None:
    items = [
        (0, f"{prefix}{i}".encode(), {"UNIQ_KEY": f"{prefix}{i:031d}"[:32], "TAGS": tag})
        for i, tag in enumerate(tags)
    ]
    ok(
        await cluster.send(
            topic, encode_batch(items), code=RequestCode.SEND_BATCH_MESSAGE, extra={"m": "true"}
        )
    )


async def test_parked_pull_wakes_for_a_tag_inside_a_batch(cluster: Cluster) -> None:
    topic = "LPBatch"
    ok(await cluster.send(topic, b"zero", tags="TagA"))
    result: dict[str, object] = {}

    async def parked_pull() -> None:
        result["resp"] = await cluster.pull(topic, 1, sub="TagA", suspend_ms=10_000, timeout=15)
        result["at"] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked_pull)
        with trio.fail_after(WAIT_S):
            await cluster.broker.wait_until(lambda b: b.hold.parked > 0)
        # a batch of other tags only: dispatched, and the pull stays parked
        await _send_batch(cluster, topic, ["TagB"] * 8, "b")
        cluster.broker.store.dispatch_all()
        assert cluster.broker.hold.parked == 1 and "resp" not in result
        # the wanted tag in the middle of a batch that ends with other tags
        sent_at = trio.current_time()
        await _send_batch(cluster, topic, ["TagB"] * 3 + ["TagA"] + ["TagC"] * 4, "c")
    resp = result["resp"]
    assert resp.code == ResponseCode.SUCCESS  # type: ignore[attr-defined]
    assert [m.body for m in messages(resp)] == [b"c3"]  # type: ignore[arg-type]
    assert float(result["at"]) - sent_at < WAKE_WITHIN_S  # type: ignore[arg-type]


async def test_parked_pulls_on_two_queues_wake_for_their_own_batches(cluster: Cluster) -> None:
    """Runs are per queue: a batch to queue 1 wakes queue 1's parked pull, not queue 0's."""
    topic = "LPBatch2"
    ok(await cluster.send(topic, b"q0", queue_id=0))
    ok(await cluster.send(topic, b"q1", queue_id=1))
    result: dict[int, object] = {}
    answered = {0: trio.Event(), 1: trio.Event()}

    async def parked_pull(queue_id: int) -> None:
        result[queue_id] = await cluster.pull(
            topic, 1, queue_id=queue_id, suspend_ms=10_000, timeout=15
        )
        answered[queue_id].set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked_pull, 0)
        nursery.start_soon(parked_pull, 1)
        with trio.fail_after(WAIT_S):
            await cluster.broker.wait_until(lambda b: b.hold.parked == 2)
        items = [(0, f"x{i}".encode(), {"UNIQ_KEY": f"X{i:031d}"}) for i in range(5)]
        ok(
            await cluster.send(
                topic, encode_batch(items), queue_id=1, code=RequestCode.SEND_BATCH_MESSAGE,
                extra={"m": "true"},
            )
        )
        with trio.fail_after(WAKE_WITHIN_S):
            await answered[1].wait()
        assert 0 not in result and cluster.broker.hold.parked == 1
        ok(await cluster.send(topic, b"late", queue_id=0))
    assert [m.body for m in messages(result[1])] == [f"x{i}".encode() for i in range(5)]  # type: ignore[arg-type]
    assert [m.body for m in messages(result[0])] == [b"late"]  # type: ignore[arg-type]
