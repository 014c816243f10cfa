"""``rmq-cluster demo``: send a few messages to a running cluster and read them back.

Uses the Python client (``rmq_cluster.client``): a ``Producer`` sends ``count`` messages (the
topic is created on first use from TBW102, like a RocketMQ broker with
``autoCreateTopicEnable``), then a ``PullConsumer`` pulls each queue written to from the offset
of the first message sent there.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any, Final

import trio

#: The whole demo (routes, sends, pulls) must finish within this.
DEMO_TIMEOUT_S: Final = 30.0
PRODUCER_GROUP: Final = "rmq-cluster-demo-producer"
CONSUMER_GROUP: Final = "rmq-cluster-demo-consumer"
ROUTE_POLL_INTERVAL_S: Final = 0.05


async def demo(
    namesrv_addr: str,
    *,
    count: int = 5,
    topic: str = "RmqClusterDemo",
    say: Callable[[str], None] | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
) -> dict[str, Any]:
    out = say or (lambda _line: None)
    run_id = uuid.uuid4().hex[:8]
    started = time.monotonic()
    with trio.fail_after(DEMO_TIMEOUT_S):
        sent = await _send_all(namesrv_addr, topic, count, run_id, out,
                               access_key=access_key, secret_key=secret_key)  # fmt: skip
        received = await _read_back(namesrv_addr, topic, count, run_id, sent, out,
                                    access_key=access_key, secret_key=secret_key)  # fmt: skip
    sent_bodies = sorted(s["body"] for s in sent)
    got_bodies = sorted(r["body"] for r in received)
    ok = sent_bodies == got_bodies
    error = None if ok else f"sent {len(sent)} messages but read back {len(received)}"
    elapsed = time.monotonic() - started
    out(
        f"demo {'OK' if ok else 'FAILED'}: {len(sent)} sent, {len(received)} received on topic "
        f"{topic} via {namesrv_addr} in {elapsed:.2f} s"
    )
    return {
        "ok": ok,
        "error": error,
        "topic": topic,
        "namesrv_addr": namesrv_addr,
        "sent": sent,
        "received": received,
        "elapsed_s": round(elapsed, 3),
    }


async def _send_all(
    namesrv_addr: str,
    topic: str,
    count: int,
    run_id: str,
    out: Callable[[str], None],
    *,
    access_key: str | None,
    secret_key: str | None,
) -> list[dict[str, Any]]:
    """Send ``count`` messages tagged with ``run_id``; what each send answered."""
    from ..client import Message, Producer

    sent: list[dict[str, Any]] = []
    async with Producer(PRODUCER_GROUP, namesrv_addr=namesrv_addr, access_key=access_key,
                        secret_key=secret_key) as producer:  # fmt: skip
        for i in range(count):
            body = f"hello #{i} from rmq-cluster demo {run_id}".encode()
            msg = Message(topic, body, tags="demo", keys=f"{run_id}-{i}")
            result = await producer.send(msg)
            sent.append(
                {
                    "body": body.decode(),
                    "msg_id": result.msg_id,
                    "status": result.status.name,
                    "broker": result.queue.broker_name,
                    "queue_id": result.queue.queue_id,
                    "queue_offset": result.queue_offset,
                }
            )
            out(
                f"sent     {body.decode()!r} -> {result.queue.broker_name} "
                f"queue {result.queue.queue_id} offset {result.queue_offset} "
                f"({result.status.name})"
            )
    return sent


async def _read_back(
    namesrv_addr: str,
    topic: str,
    count: int,
    run_id: str,
    sent: list[dict[str, Any]],
    out: Callable[[str], None],
    *,
    access_key: str | None,
    secret_key: str | None,
) -> list[dict[str, Any]]:
    """Pull this run's messages back, from the first offset each queue was sent at."""
    from ..client import PullConsumer, PullStatus

    first: dict[tuple[str, int], int] = {}
    for s in sent:
        key = (s["broker"], s["queue_id"])
        first[key] = min(first.get(key, s["queue_offset"]), s["queue_offset"])
    received: list[dict[str, Any]] = []
    async with PullConsumer(CONSUMER_GROUP, namesrv_addr=namesrv_addr, access_key=access_key,
                            secret_key=secret_key) as consumer:  # fmt: skip
        queues = await _route_with(consumer, topic, set(first))
        for key, offset in sorted(first.items()):
            mq = queues.get(key)
            if mq is None:
                continue
            pulled = await consumer.pull(mq, offset, max_nums=count)
            if pulled.status is not PullStatus.FOUND:
                continue
            for m in pulled.messages:
                if run_id.encode() not in m.body:
                    continue
                received.append(
                    {
                        "body": m.body.decode("utf-8", "replace"),
                        "msg_id": m.msg_id,
                        "broker": m.queue.broker_name,
                        "queue_id": m.queue.queue_id,
                        "queue_offset": m.queue_offset,
                    }
                )
                out(
                    f"received {m.body.decode('utf-8', 'replace')!r} <- "
                    f"{m.queue.broker_name} queue {m.queue.queue_id} offset {m.queue_offset}"
                )
    return received


async def _route_with(consumer: Any, topic: str, wanted: set[tuple[str, int]]) -> dict[Any, Any]:
    """The topic's queues by (broker, queue id), once the route holds every ``wanted`` one.

    A broker that created the topic on first send registers it with the NameServers right
    after; the caller's deadline (``DEMO_TIMEOUT_S``) bounds the wait."""
    while True:
        fetched = await consumer.fetch_queues(topic)
        queues = {(q.broker_name, q.queue_id): q for q in fetched}
        if all(key in queues for key in wanted):
            return queues
        await trio.sleep(ROUTE_POLL_INTERVAL_S)


def run_demo(
    namesrv_addr: str,
    *,
    count: int = 5,
    topic: str = "RmqClusterDemo",
    say: Callable[[str], None] | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
) -> dict[str, Any]:
    """``demo`` in its own Trio run; errors come back as ``{"ok": False, "error": ...}``."""
    try:
        return trio.run(lambda: demo(namesrv_addr, count=count, topic=topic, say=say,
                                     access_key=access_key, secret_key=secret_key))
    except ImportError as exc:
        return _failed(namesrv_addr, topic, f"the Python client is not available: {exc}")
    except trio.TooSlowError:
        return _failed(namesrv_addr, topic, f"demo did not finish within {DEMO_TIMEOUT_S:g} s")
    except Exception as exc:
        return _failed(namesrv_addr, topic, f"{type(exc).__name__}: {exc}")


def _failed(namesrv_addr: str, topic: str, error: str) -> dict[str, Any]:
    return {"ok": False, "error": error, "topic": topic, "namesrv_addr": namesrv_addr,
            "sent": [], "received": [], "elapsed_s": None}
