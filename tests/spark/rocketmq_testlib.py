"""A real 2-master cluster (``rmq-cluster up 2m-noslave``, real processes) holding one topic
over 8 queues (4 per broker), seeded in two phases with a known cut time between them, and what
each queue must hold: (broker, queue id) -> [(queue offset, sha256 of body, keys, tags)]."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from rmq_cluster.deploy.testing import _in_thread, create_topics, rmq_cluster

QUEUES_PER_BROKER = 4
TAGS = ("TagA", "TagB", "TagC")
BATCH = 50  # messages per SEND_BATCH_MESSAGE while seeding


def body_of(i: int) -> bytes:
    return (f"m{i:06d}-".encode() * (1 + i % 23))[: 20 + (i * 37) % 400]


@attrs.frozen
class Seeded:
    namesrv: str
    topic: str
    cut_ms: int  # every phase-1 message was stored before it, every phase-2 one at or after
    expected: dict[tuple[str, int], list[tuple[int, str, str, str]]]
    phase1: frozenset[str]  # keys of phase-1 messages
    stores: dict[str, str] = attrs.field(factory=dict)  # broker name -> its store's root


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


async def _send(namesrv: str, topic: str, ids: range, expected: dict[Any, Any],
                batch: int = BATCH) -> None:
    from rmq_cluster.client import Admin, Message, Producer
    from rmq_cluster.client.model import MessageQueue

    async with Admin(namesrv_addr=namesrv) as admin:
        route = await admin.topic_route(topic)
    brokers = sorted(b.broker_name for b in route.broker_datas)
    queues = [MessageQueue(topic, b, q) for b in brokers for q in range(QUEUES_PER_BROKER)]
    by_queue: dict[MessageQueue, list[int]] = {q: [] for q in queues}
    for i in ids:
        by_queue[queues[(i * 7) % len(queues)]].append(i)
    async with Producer("seed_spark_source", namesrv_addr=namesrv) as producer:
        for mq, items in by_queue.items():
            for s in range(0, len(items), batch):
                chunk = items[s : s + batch]
                msgs = [Message(topic, body_of(i), tags=TAGS[i % 3], keys=f"k{i}",
                                properties={"n": str(i)}) for i in chunk]  # fmt: skip
                res = await producer.send_batch(msgs, queue=mq)
                rows = expected.setdefault((mq.broker_name, mq.queue_id), [])
                first = res.queue_offset
                assert first == (rows[-1][0] + 1 if rows else 0), (mq, first, rows[-1:])
                rows += [(first + j, sha(body_of(i)), f"k{i}", TAGS[i % 3])
                         for j, i in enumerate(chunk)]  # fmt: skip


@contextmanager
def seeded_cluster(count: int, topic: str = "SparkSource", *, batch: int = BATCH,
                   timeout: float = 60.0) -> Iterator[Seeded]:  # fmt: skip
    """``count`` messages in two halves (batches of ``batch``, our client's batch send)."""
    with rmq_cluster("2m-noslave") as cluster:
        create_topics(cluster.namesrv_addr, [topic], queues=QUEUES_PER_BROKER)
        expected: dict[Any, Any] = {}
        half = count // 2
        ns = cluster.namesrv_addr
        _in_thread(lambda: _send(ns, topic, range(half), expected, batch), timeout)
        cut = int(time.time() * 1000) + 1
        while int(time.time() * 1000) < cut + 20:  # a clear gap on the clock after the cut
            time.sleep(0.001)
        _in_thread(lambda: _send(ns, topic, range(half, count), expected, batch), timeout)
        stores = {b: str(cluster.dir / "store" / b) for b in ("broker-a", "broker-b")}
        yield Seeded(ns, topic, cut, expected, frozenset(f"k{i}" for i in range(half)), stores)
