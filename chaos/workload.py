"""The chaos workload (Trio shell): producers and a consumer that record a JSONL history.

Producers send synchronously (one send in flight each) at ``rate`` sends/s in total, spread
over several topics and queues; an orderly topic sends each key's messages in sequence to the
key's queue (``send_orderly``). Every send is recorded as ``invoke`` then one of ``ok`` (status,
msgId, broker, queue, offset, CommitLog offset), ``fail`` (the broker refused, no route) or
``unknown`` (timed out, or the connection broke with the request possibly written). The
consumer pulls every queue of every topic from the first offset and records every receive.
The event format is chaos.checker's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

import attrs
import orjson
import trio

from ..client import (
    Admin,
    ClientConfig,
    ConsumeFromWhere,
    Message,
    MessageQueue,
    MQBrokerError,
    MQClientError,
    MQRemotingError,
    MQTimeoutError,
    Producer,
    PullConsumer,
)
from ..cluster.logging import get_logger
from ..cluster.protocol.message import decode_offset_msg_id
from ..cluster.remoting.errors import RemotingConnectError

#: Clients poll the NameServers this often (Java: pollNameServerInterval, 30 s) so a dead or
#: restarted master is noticed within a second, as chaos runs want.
CHAOS_POLL_NAMESRV_S: Final = 1.0
CHAOS_HEARTBEAT_S: Final = 5.0
#: The consumer retries a failed pull after this (Java: 3 s).
PULL_BACKOFF_S: Final = 0.5
PULL_SUSPEND_S: Final = 1.0
POLL_WAIT_S: Final = 0.5
#: After the last acked message arrived, queues must reach their max offsets within this.
DRAIN_TIMEOUT_S: Final = 90.0
DRAIN_CHECK_INTERVAL_S: Final = 0.5
#: Queues read to their ends with acked messages missing: wait this long for more, then stop.
DRAIN_SETTLE_S: Final = 10.0
HISTORY_FLUSH_EVENTS: Final = 256
BODY_SEPARATOR: Final = b"|"

log = get_logger(component="chaos.workload")


@attrs.frozen
class WorkloadConfig:
    rate: float = 50.0
    producers: int = 4
    topics: tuple[str, ...] = ("ChaosTopicA", "ChaosTopicB")
    orderly_topic: str | None = "ChaosOrderly"
    queues: int = 4
    keys: int = 8
    body_bytes: int = 128
    send_timeout_s: float = 3.0
    retries: int = 2
    consumer_group: str = "ChaosConsumer"
    producer_group: str = "ChaosProducer"
    #: the clients' NameServer poll (pollNameServerInterval): 1 s by default in a chaos run
    route_poll_s: float = CHAOS_POLL_NAMESRV_S

    @property
    def all_topics(self) -> tuple[str, ...]:
        return (*self.topics, self.orderly_topic) if self.orderly_topic else self.topics

    def validate(self) -> None:
        if not 0 < self.rate <= 100_000:
            raise ValueError("rate must be in (0, 100000] sends/s")
        if not 1 <= self.producers <= 256:
            raise ValueError("producers must be 1..256")
        if self.queues < 1 or self.keys < 1:
            raise ValueError("queues and keys must be at least 1")
        if not 0.1 <= self.route_poll_s <= 3600:
            raise ValueError("route poll must be 0.1..3600 s")


class History:
    """The JSONL history: events in memory (for the checker) and appended to ``path``."""

    def __init__(self, path: Path | None, *, t0: float | None = None) -> None:
        self.t0 = time.monotonic() if t0 is None else t0
        self.events: list[dict[str, Any]] = []
        self.path = path
        self._file: IO[bytes] | None = open(path, "wb") if path is not None else None  # noqa: SIM115
        self._unflushed = 0
        self.invoked = 0
        self.acked = 0
        self.failed = 0
        self.unknown = 0
        self.received = 0
        self.changed = trio.Event()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def record(self, kind: str, **fields: Any) -> dict[str, Any]:
        ev = {"t": round(self.now(), 6), "type": kind, **fields}
        self.events.append(ev)
        if kind == "invoke":
            self.invoked += 1
        elif kind == "ok":
            self.acked += 1
        elif kind == "fail":
            self.failed += 1
        elif kind == "unknown":
            self.unknown += 1
        elif kind == "receive":
            self.received += 1
        if self._file is not None:
            self._file.write(orjson.dumps(ev) + b"\n")
            self._unflushed += 1
            if self._unflushed >= HISTORY_FLUSH_EVENTS or kind in ("fault", "phase"):
                self._file.flush()
                self._unflushed = 0
        self.changed.set()
        self.changed = trio.Event()
        return ev

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def client_config(
    namesrv_addr: str, instance: str, route_poll_s: float = CHAOS_POLL_NAMESRV_S
) -> ClientConfig:
    return ClientConfig(
        namesrv_addr=namesrv_addr,
        instance_name=instance,
        poll_namesrv_interval_s=route_poll_s,
        heartbeat_interval_s=CHAOS_HEARTBEAT_S,
    )


async def create_topics(namesrv_addr: str, cfg: WorkloadConfig, masters: list[str]) -> None:
    """Each topic with ``queues`` queues on every master (addresses given)."""
    async with Admin(client_config=client_config(namesrv_addr, "chaos-admin")) as admin:
        for topic in cfg.all_topics:
            for addr in masters:
                await admin.update_topic(
                    topic, broker_addr=addr, read_queue_nums=cfg.queues,
                    write_queue_nums=cfg.queues, order=topic == cfg.orderly_topic,
                )


def _classify(exc: BaseException) -> str:
    """fail: the send certainly did not store (refused, nothing connected, no route);
    unknown: it may have (a timeout, a connection that broke after the request went out)."""
    if isinstance(exc, MQTimeoutError):
        return "unknown"
    if isinstance(exc, MQRemotingError):
        cause = exc.__cause__
        return "fail" if isinstance(cause, RemotingConnectError) else "unknown"
    return "fail"


class Workload:
    def __init__(self, namesrv_addr: str, cfg: WorkloadConfig, history: History) -> None:
        cfg.validate()
        self.namesrv_addr = namesrv_addr
        self.cfg = cfg
        self.history = history
        self.stopping = trio.Event()
        self.queues: list[MessageQueue] = []
        #: (topic, broker, queue id) -> next offset the consumer will read
        self.next_offset: dict[MessageQueue, int] = {}
        self.consumer: PullConsumer | None = None
        self.log = log

    # ------------------------------------------------------------------ producers

    async def run_producers(self) -> None:
        async with trio.open_nursery() as nursery:
            for k in range(self.cfg.producers):
                nursery.start_soon(self._producer, k)

    async def _producer(self, k: int) -> None:
        cfg = self.cfg
        cc = client_config(self.namesrv_addr, f"chaos-producer-{k}", cfg.route_poll_s)
        per_s = cfg.rate / cfg.producers
        pad = b"x" * max(0, cfg.body_bytes - 24)
        my_keys = [f"key{j}" for j in range(cfg.keys) if j % cfg.producers == k] or [f"key{k}"]
        seqs = dict.fromkeys(my_keys, 0)
        topics = cfg.all_topics
        async with Producer(
            f"{cfg.producer_group}{k}", client_config=cc,
            send_timeout_s=cfg.send_timeout_s, retry_times_when_send_failed=cfg.retries,
        ) as producer:
            next_t = trio.current_time()
            n = 0
            while not self.stopping.is_set():
                next_t = max(next_t + 1.0 / per_s, trio.current_time() - 1.0)
                with trio.move_on_at(next_t):
                    await self.stopping.wait()  # the pace of the workload; stop wakes it
                if self.stopping.is_set():
                    break
                topic = topics[n % len(topics)]
                op_id = f"p{k}-{n}"
                n += 1
                body = op_id.encode() + BODY_SEPARATOR + pad
                fields: dict[str, Any] = {"id": op_id, "topic": topic}
                key = None
                if topic == cfg.orderly_topic:
                    key = my_keys[n % len(my_keys)]
                    seqs[key] += 1
                    fields.update(key=key, seq=seqs[key])
                msg = Message(topic, body, keys=op_id)
                self.history.record("invoke", **fields)
                try:
                    if key is not None:
                        result = await producer.send_orderly(msg, key)
                    else:
                        result = await producer.send(msg)
                except MQClientError as exc:
                    self.history.record(_classify(exc), id=op_id, error=_err(exc))
                    continue
                phy = None
                try:
                    phy = decode_offset_msg_id(result.offset_msg_id)[1]
                except ValueError:
                    phy = None
                self.history.record(
                    "ok", id=op_id, status=result.status.value, msg_id=result.msg_id,
                    broker=result.queue.broker_name, queue=result.queue.queue_id,
                    offset=result.queue_offset, phy=phy,
                )

    # ------------------------------------------------------------------ consumer

    async def run_consumer(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                           ) -> None:
        cfg = self.cfg
        cc = client_config(self.namesrv_addr, "chaos-consumer", cfg.route_poll_s)
        async with PullConsumer(
            cfg.consumer_group, client_config=cc, consume_from=ConsumeFromWhere.FIRST_OFFSET,
            auto_commit=False, pull_error_backoff_s=PULL_BACKOFF_S, suspend_s=PULL_SUSPEND_S,
        ) as consumer:
            self.consumer = consumer
            queues: list[MessageQueue] = []
            for topic in cfg.all_topics:
                queues.extend(await consumer.fetch_queues(topic))
            self.queues = sorted(queues)
            await consumer.assign(self.queues)
            for mq in self.queues:
                consumer.seek(mq, 0)
                self.next_offset[mq] = 0
            task_status.started()
            while True:
                msgs = await consumer.poll(POLL_WAIT_S)
                for m in msgs:
                    op_id = bytes(m.body).split(BODY_SEPARATOR, 1)[0].decode("utf-8", "replace")
                    self.history.record(
                        "receive", id=op_id, topic=m.topic, broker=m.queue.broker_name,
                        queue=m.queue_id, offset=m.queue_offset,
                    )
                    if m.queue_offset + 1 > self.next_offset.get(m.queue, 0):
                        self.next_offset[m.queue] = m.queue_offset + 1

    async def queue_ends(self) -> dict[MessageQueue, int] | None:
        """Every queue's max offset now (None if a queue cannot be asked)."""
        consumer = self.consumer
        if consumer is None:
            return None
        ends = {}
        for mq in self.queues:
            try:
                ends[mq] = await consumer.pull_api.max_offset(mq)
            except MQClientError:
                return None
        return ends

    def missing_acked(self) -> int:
        acked = {e["id"] for e in self.history.events if e["type"] == "ok"}
        got = {e["id"] for e in self.history.events if e["type"] == "receive"}
        return len(acked - got)

    async def drain(self, *, timeout: float = DRAIN_TIMEOUT_S,
                    progress: Callable[[str], Any] | None = None) -> bool:
        """Wait until every queue was read to its end (asked again every check interval)
        and no acked message is missing, or ``timeout``; whether it completed."""
        deadline = trio.current_time() + timeout
        settled_at: float | None = None
        while trio.current_time() < deadline:
            ends = await self.queue_ends()
            if ends is not None and all(
                self.next_offset.get(mq, 0) >= end for mq, end in ends.items()
            ):
                if self.missing_acked() == 0:
                    return True
                # every queue read to its end and acked messages still missing: they are
                # lost unless a queue grows again within the settle time
                settled_at = settled_at if settled_at is not None else trio.current_time()
                if trio.current_time() - settled_at >= DRAIN_SETTLE_S:
                    return True
            else:
                settled_at = None
            if progress is not None:
                progress(f"draining: {self.history.received} received, "
                         f"{self.missing_acked()} acked not yet received")
            with trio.move_on_at(min(deadline, trio.current_time() + DRAIN_CHECK_INTERVAL_S)):
                await self.history.changed.wait()
        return False


def _err(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MQBrokerError):
        text = f"{type(exc).__name__} code {exc.code}: {exc.remark}"
    return text[:200]


def is_finite_rate(rate: float) -> bool:
    return math.isfinite(rate) and rate > 0
