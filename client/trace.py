"""Message traces written by our client (Java ``enableMsgTrace``): producers write a Pub record
per sent message, consumers a SubBefore and a SubAfter per consumed one, transaction producers
an EndTransaction per commit/rollback, into the trace topic, in Apache's format
(``cluster/protocol/trace.py``).

The send and consume paths never wait for traces: a record goes into a bounded queue
(``TRACE_QUEUE_SIZE``) without blocking, and one task per traced client takes the queued
records every ``TRACE_FLUSH_INTERVAL_S`` (``TRACE_WINDOW_RECORDS`` at a time), splits them
into messages of at most ``TRACE_BATCH_RECORDS`` records and ``TRACE_MAX_BODY_BYTES`` of
body, and sends those side by side to the trace topic through an inner producer. When the
queue is full the record is dropped and counted (``TraceDispatcher.dropped``); a trace
message the broker does not take is counted too (``failed``), logged at info, and not
retried.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, Protocol

import attrs
import trio

from ..cluster.clock import now_ms
from ..cluster.protocol.message import MessageConst
from ..cluster.protocol.trace import (
    DEFAULT_REGION,
    DEFAULT_TRACE_TOPIC,
    KEY_SEPARATOR,
    ConsumeReturnType,
    EndTransactionRecord,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceMessageType,
    TraceRecord,
    clean,
    encode_record,
    trace_keys,
)
from .errors import MQClientError
from .ids import UniqIdGenerator
from .model import Message, ReceivedMessage, SendResult, SendStatus

if TYPE_CHECKING:
    from .instance import ClientInstance

MC = MessageConst

#: Records waiting to be sent, per traced client; past this, new records are dropped.
TRACE_QUEUE_SIZE: Final = 2048
#: Records in one trace message at most (Apache's batchSize; a trace message's keys are its
#: records' ids and keys, and a message's properties hold at most 32 KiB).
TRACE_BATCH_RECORDS: Final = 100
#: Records gathered in one flush window at most; its trace messages are sent side by side.
TRACE_WINDOW_RECORDS: Final = 1000
#: Body bytes of one trace message at most (Apache's maxMsgSize, 128 000).
TRACE_MAX_BODY_BYTES: Final = 128_000
#: A trace message waits at most this long for more records before it is sent (Apache's
#: dispatcher polls its queue every 100 ms): one send per window, not one per record.
TRACE_FLUSH_INTERVAL_S: Final = 0.1
#: On close, queued records are sent for at most this long.
TRACE_CLOSE_FLUSH_S: Final = 3.0
#: The inner producer's group: this prefix, the traced client's group, its kind.
TRACE_PRODUCER_GROUP_PREFIX: Final = "_INNER_TRACE_PRODUCER"



class TraceSender(Protocol):
    """What ships trace messages (the inner ``Producer``)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def send(self, msg: Message) -> SendResult: ...


def inner_group(owner_group: str, kind: str) -> str:
    """The inner trace producer's group for a client of ``owner_group``."""
    return f"{TRACE_PRODUCER_GROUP_PREFIX}-{owner_group}-{kind}"[:255]


class TraceDispatcher:
    """The bounded queue and the task that ships one traced client's records. Appending
    touches no Trio machinery (a deque and a counter): the send and consume paths pay no task
    switch per record; the shipping task wakes every ``TRACE_FLUSH_INTERVAL_S``."""

    def __init__(self, instance: ClientInstance, sender: TraceSender,
                 topic: str = DEFAULT_TRACE_TOPIC, *, queue_size: int = TRACE_QUEUE_SIZE) -> None:
        self.instance = instance
        self.topic = topic
        self.log = instance.log.bind(trace_topic=topic)
        self.queue_size = queue_size
        #: records, or what builds one (built by the shipping task, off the send path)
        self._queue: deque[TraceRecord | Callable[[], TraceRecord]] = deque()
        self._closing = trio.Event()
        self._stopped = trio.Event()
        self._sender = sender
        self._started = False
        self.request_ids = UniqIdGenerator()
        #: records offered, dropped (queue full or closed), not taken by the broker
        self.appended = 0
        self.dropped = 0
        self.failed = 0
        self.sent_records = 0
        self.sent_messages = 0

    def append(self, record: TraceRecord | Callable[[], TraceRecord]) -> None:
        """Queue ``record`` (or a function making it, called later by the shipping task);
        never blocks (a full queue drops it and counts it)."""
        self.appended += 1
        if len(self._queue) >= self.queue_size or self._closing.is_set():
            self.dropped += 1
            return
        self._queue.append(record)

    async def start(self) -> None:
        await self._sender.start()
        self._started = True
        self.instance.spawn(self._run)

    async def close(self) -> None:
        """Send what is queued (at most ``TRACE_CLOSE_FLUSH_S``), then stop."""
        self._closing.set()
        if not self._started:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(TRACE_CLOSE_FLUSH_S):
            await self._stopped.wait()
        await self._sender.close()
        if self.dropped or self.failed:
            self.log.info("trace records lost", dropped=self.dropped, failed=self.failed)

    async def _run(self) -> None:
        try:
            while True:
                with trio.move_on_after(TRACE_FLUSH_INTERVAL_S):
                    await self._closing.wait()
                while self._queue:  # a window of records at a time, its messages side by side
                    n = min(len(self._queue), TRACE_WINDOW_RECORDS)
                    taken = [self._queue.popleft() for _ in range(n)]
                    batch = [r() if callable(r) else r for r in taken]
                    async with trio.open_nursery() as nursery:
                        for body, records in split_bodies(batch):
                            nursery.start_soon(self._ship, body, records)
                if self._closing.is_set():
                    return
        finally:
            self._stopped.set()

    async def _ship(self, body: bytes, records: Sequence[TraceRecord]) -> None:
        msg = Message(self.topic, body, keys=KEY_SEPARATOR.join(trace_keys(records)))
        try:
            await self._sender.send(msg)
        except MQClientError as exc:
            self.failed += len(records)
            self.log.info("trace message not sent", records=len(records), error=str(exc))
            return
        self.sent_records += len(records)
        self.sent_messages += 1


def split_bodies(records: Sequence[TraceRecord], max_bytes: int = TRACE_MAX_BODY_BYTES,
                 max_records: int = TRACE_BATCH_RECORDS
                 ) -> list[tuple[bytes, list[TraceRecord]]]:
    """``records`` as trace message bodies of at most ``max_bytes`` and ``max_records`` each
    (a record larger than ``max_bytes`` alone goes in a body of its own)."""
    out: list[tuple[bytes, list[TraceRecord]]] = []
    parts: list[bytes] = []
    held: list[TraceRecord] = []
    size = 0
    for r in records:
        data = encode_record(r).encode("utf-8")
        if held and (size + len(data) > max_bytes or len(held) >= max_records):
            out.append((b"".join(parts), held))
            parts, held, size = [], [], 0
        parts.append(data)
        held.append(r)
        size += len(data)
    if held:
        out.append((b"".join(parts), held))
    return out


# ------------------------------------------------------------------ records


def message_type(props: dict[str, str]) -> int:
    if props.get(MC.PROPERTY_TRANSACTION_PREPARED) == "true":
        return TraceMessageType.TRANS_HALF
    if props.get(MC.PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0"):
        return TraceMessageType.DELAY
    return TraceMessageType.NORMAL


def pub_record(group: str, props: dict[str, str], topic: str, body_length: int,
               store_host: str, result: SendResult, started_ms: int, ended_ms: int
               ) -> PubRecord:
    """The Pub record of one send answered by ``store_host``."""
    return PubRecord(
        timestamp=started_ms, region=clean(result.region_id or DEFAULT_REGION), group=group,
        topic=topic, msg_id=result.msg_id, tags=clean(props.get(MC.PROPERTY_TAGS)),
        keys=clean(props.get(MC.PROPERTY_KEYS)), store_host=store_host,
        body_length=body_length, cost_ms=max(0, ended_ms - started_ms),
        msg_type=message_type(props), offset_msg_id=clean(result.offset_msg_id),
        success=result.status is SendStatus.SEND_OK,
    )


def end_transaction_record(group: str, msg: Message, result: SendResult, store_host: str,
                           state: str, *, from_check: bool) -> EndTransactionRecord:
    props = msg.wire_properties()
    return EndTransactionRecord(
        timestamp=now_ms(), region=clean(result.region_id or DEFAULT_REGION), group=group,
        topic=msg.topic, msg_id=result.msg_id, tags=clean(props.get(MC.PROPERTY_TAGS)),
        keys=clean(props.get(MC.PROPERTY_KEYS)), store_host=store_host,
        msg_type=TraceMessageType.TRANS_HALF, transaction_id=clean(result.transaction_id),
        transaction_state=state, from_check=from_check,
    )


@attrs.frozen
class ConsumeTrace:
    """One listener call being traced: its request id, start, and the messages' SubBefores."""

    request_id: str
    started_ms: int
    befores: tuple[SubBeforeRecord, ...]


def consume_before(dispatcher: TraceDispatcher, group: str, msgs: Sequence[ReceivedMessage]
                   ) -> ConsumeTrace | None:
    """Queue a SubBefore per message (the trace topic's own messages are not traced)."""
    msgs = [m for m in msgs if m.topic != dispatcher.topic]
    if not msgs:
        return None
    started = now_ms()
    request_id = dispatcher.request_ids.next_id()
    befores = tuple(
        SubBeforeRecord(timestamp=started, region=clean(m.properties.get("MSG_REGION")
                                                        or DEFAULT_REGION),
                        group=group, request_id=request_id, msg_id=m.msg_id,
                        retry_times=m.reconsume_times, keys=clean(m.keys))
        for m in msgs)
    for r in befores:
        dispatcher.append(r)
    return ConsumeTrace(request_id, started, befores)


def consume_after(dispatcher: TraceDispatcher, ctx: ConsumeTrace, code: ConsumeReturnType
                  ) -> None:
    """Queue a SubAfter per message of ``ctx``: the call's time shared among them, stamped
    with its end (as Apache's 4.9 client does)."""
    ended = now_ms()
    cost = max(0, ended - ctx.started_ms) // max(1, len(ctx.befores))
    for b in ctx.befores:
        dispatcher.append(SubAfterRecord(
            request_id=ctx.request_id, msg_id=b.msg_id, cost_ms=cost,
            success=code is ConsumeReturnType.SUCCESS, keys=b.keys,
            context_code=int(code), timestamp=ended, group=b.group))
