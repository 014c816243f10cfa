"""Producers (Java ``DefaultMQProducer`` / ``TransactionMQProducer``), Trio-native::

    async with Producer("PG", namesrv_addr="127.0.0.1:9876") as p:
        result = await p.send(Message("T", b"hi", tags="A", keys="k1"))

Sync send with retries on another broker, ``send_async`` (a handle to await; many in flight),
oneway, batches (one SEND_BATCH_MESSAGE), orderly sends through a queue selector, latency
fault tolerance, new topics through TBW102's route, UNIQ_KEY ids, zlib over 4 KiB.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from ..cluster.clock import now_ms
from ..cluster.protocol.message import (
    SYSFLAG_COMPRESSED,
    SYSFLAG_TRANSACTION_PREPARED_TYPE,
    MessageConst,
    decode_offset_msg_id,
    encode_batch,
    iter_records,
    java_string_hash,
)
from ..cluster.protocol.route import TopicRouteData
from ..cluster.protocol.trace import DEFAULT_TRACE_TOPIC
from ..cluster.remoting.codes import RequestCode, ResponseCode
from ..cluster.remoting.connection import Connection
from ..cluster.remoting.errors import RemotingError
from ..cluster.remoting.headers import CheckTransactionStateRequestHeader
from . import frames
from .config import (
    DEFAULT_COMPRESS_OVER_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED,
    DEFAULT_SEND_TIMEOUT_S,
    ClientConfig,
)
from .errors import (
    MQBrokerError,
    MQClientError,
    MQRemotingError,
    NoRouteError,
    TransactionError,
)
from .fault import FIRST_PENALIZED_LATENCY_MS, LatencyFaultTolerance
from .ids import UniqIdGenerator
from .instance import ClientInstance, own_instance, publish_queues
from .model import (
    RETRY_GROUP_TOPIC_PREFIX,
    Message,
    MessageQueue,
    ReceivedMessage,
    SendResult,
    SendStatus,
    TransactionState,
)
from .request_reply import (
    DEFAULT_REQUEST_TIMEOUT_S,
    REPLY_MESSAGE_FLAG,
    REQUEST_TIMEOUT_EXCEPTION,
    RequestTimeoutError,
    is_reply,
)
from .subscription import JavaMapOrder
from .trace import TraceDispatcher, end_transaction_record, inner_group, pub_record

MC = MessageConst
#: Java compresses with zlib level 5 and marks the type in sysFlag bits 8-10 (0x300 = ZLIB).
COMPRESS_LEVEL = 5
SYSFLAG_COMPRESSION_ZLIB = 0x300
#: Broker answers that make the producer try another queue/broker (Java sendDefaultImpl).
RETRY_RESPONSE_CODES = frozenset({
    ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
    ResponseCode.NO_PERMISSION, ResponseCode.NO_BUYER_ID, ResponseCode.NOT_IN_CURRENT_UNIT,
})
#: refusals that mean "not the master (any more)": the route is re-read at once
FAILOVER_RESPONSE_CODES = frozenset({ResponseCode.SERVICE_NOT_AVAILABLE})
_STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
_UNIQ = UniqIdGenerator()

QueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]


def select_by_hash(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """Java ``SelectMessageQueueByHash``: abs(arg.hashCode()) % len(queues)."""
    h = java_string_hash(arg) if isinstance(arg, str) else hash(arg)
    return queues[abs(h) % len(queues)]


@attrs.frozen
class ProducerConfig:
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S
    retry_times_when_send_failed: int = DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED
    retry_another_broker_when_not_store_ok: bool = False
    compress_over_bytes: int = DEFAULT_COMPRESS_OVER_BYTES
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    #: Java defaults this to false; we default to on (it only ever avoids slow/failed brokers).
    send_latency_fault_enable: bool = True
    #: write a Pub trace record per sent message (Java ``enableMsgTrace``) ...
    enable_msg_trace: bool = False
    #: ... into this topic (Java ``customizedTraceTopic``)
    trace_topic: str = DEFAULT_TRACE_TOPIC


class SendHandle:
    """What ``send_async`` returns: ``await handle.result()`` gives the SendResult or raises."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self._result: SendResult | None = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    async def result(self) -> SendResult:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


class Producer:
    def __init__(
        self,
        group: str = "DEFAULT_PRODUCER",
        *,
        namesrv_addr: str | None = None,
        instance: ClientInstance | None = None,
        client_config: ClientConfig | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        config: ProducerConfig | None = None,
        **config_overrides: Any,
    ) -> None:
        self.group = group
        self.config = config or ProducerConfig(**config_overrides)
        self._own_instance = instance is None
        if instance is None:
            instance = own_instance(client_config, namesrv_addr, access_key, secret_key)
        self.instance = instance
        self.publish_info: dict[str, list[MessageQueue]] = {}
        self._counter = itertools.count(int(time.time() * 1000) % 1000)
        self.fault = LatencyFaultTolerance()
        self._map_order = JavaMapOrder()  # properties in Java HashMap order, per key sequence
        self.log = instance.log.bind(producer=group)
        self.running = False
        #: set while running with ``enable_msg_trace``
        self.tracer: TraceDispatcher | None = None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._own_instance:
            await self.instance.__aenter__()
        self.instance.register_producer(self)
        self.running = True
        self.tracer = await start_tracer(self.instance, self.group, "pub",
                                         self.config.enable_msg_trace, self.config.trace_topic)

    async def close(self) -> None:
        if not self.running:
            return
        self.running = False
        tracer, self.tracer = self.tracer, None
        if tracer is not None:
            await tracer.close()
        self.instance.unregister_producer(self.group)
        try:
            with trio.CancelScope(shield=True), trio.move_on_after(
                self.instance.config.call_timeout_s
            ):
                await self.instance.unregister_client(self.group, None)
        finally:
            if self._own_instance:
                await self.instance.__aexit__(None, None, None)

    # ------------------------------------------------------------------ hooks for the instance

    def publish_topics(self) -> list[str]:
        return list(self.publish_info)

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        self.publish_info[topic] = publish_queues(topic, route)

    def on_new_master(self, broker_name: str) -> None:
        """The route names a new master for ``broker_name`` after it failed: the latency
        fault isolation (up to 10 minutes) was earned by the dead master, not this one."""
        self.fault.forget(broker_name)

    # ------------------------------------------------------------------ routes and queues

    async def queues_for(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues (fetching the route, or TBW102's, on first use)."""
        queues = self.publish_info.get(topic)
        if not queues:
            self.publish_info.setdefault(topic, [])
            route = await self.instance.update_route(topic, use_default=True)
            if route is not None:
                self.publish_info[topic] = publish_queues(topic, route)
            queues = self.publish_info.get(topic)
        if not queues:
            raise NoRouteError(f"No route info of this topic: {topic}")
        return queues

    def select_queue(self, queues: Sequence[MessageQueue], last_broker: str | None
                     ) -> MessageQueue:
        n = len(queues)
        if last_broker is None and not self.fault.items:
            return queues[next(self._counter) % n]  # nothing to avoid: plain round robin
        if self.config.send_latency_fault_enable:
            now = now_ms()
            for _ in range(n):
                mq = queues[next(self._counter) % n]
                if self.fault.is_available(mq.broker_name, now) and (
                    last_broker is None or mq.broker_name != last_broker or n == 1
                ):
                    return mq
            best = self.fault.pick_one_at_least(now)
            candidates = [q for q in queues if q.broker_name == best]
            if candidates:
                return candidates[next(self._counter) % len(candidates)]
            return queues[next(self._counter) % n]
        if last_broker is not None:
            for _ in range(n):
                mq = queues[next(self._counter) % n]
                if mq.broker_name != last_broker:
                    return mq
        return queues[next(self._counter) % n]

    # ------------------------------------------------------------------ sending

    def _check(self, msg: Message) -> None:
        if not self.running:
            raise MQClientError("producer is not running")
        if not msg.topic:
            raise MQClientError("topic is empty", code=ResponseCode.MESSAGE_ILLEGAL)
        if len(msg.body) == 0:
            raise MQClientError("the message body length is zero",
                                code=ResponseCode.MESSAGE_ILLEGAL)
        if len(msg.body) > self.config.max_message_bytes:
            raise MQClientError(
                f"the message body size over max value, MAX: {self.config.max_message_bytes}",
                code=ResponseCode.MESSAGE_ILLEGAL,
            )

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Sync send. ``queue`` or ``selector(queues, msg, arg)`` pin the queue (no retry on
        another broker then); otherwise round robin with retries on failure."""
        self._check(msg)
        if queue is not None or selector is not None:
            if queue is None:
                queues = await self.queues_for(msg.topic)
                assert selector is not None
                queue = selector(queues, msg, arg)
            return await self._send_kernel(msg, queue, timeout)
        return await self._send_default(msg, timeout, self._times())

    async def send_orderly(self, msg: Message, key: Any, *, timeout: float | None = None
                           ) -> SendResult:
        """Same ``key`` -> same queue (hash selector): per-key order for an orderly consumer."""
        return await self.send(msg, selector=select_by_hash, arg=key, timeout=timeout)

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        self._check(msg)
        if queue is None:
            queue = self.select_queue(await self.queues_for(msg.topic), None)
        await self._send_kernel(msg, queue, None, oneway=True)

    def send_async(self, msg: Message, *, queue: MessageQueue | None = None,
                   callback: Callable[[SendResult | None, BaseException | None], Any] | None = None,
                   ) -> SendHandle:
        """Start a send in the background; await ``handle.result()``. ``callback(result, error)``
        runs when it completes (Java SendCallback)."""
        handle = SendHandle()

        async def run() -> None:
            try:
                handle._result = await self.send(msg, queue=queue)
            except MQClientError as exc:
                handle._error = exc
            finally:
                handle._done.set()
            if callback is not None:
                out = callback(handle._result, handle._error)
                if inspect.isawaitable(out):
                    await out

        self.instance.spawn(run)
        return handle

    async def send_batch(self, msgs: Sequence[Message], *, queue: MessageQueue | None = None,
                         timeout: float | None = None) -> SendResult:
        """One SEND_BATCH_MESSAGE for messages of one topic (no delay, no retry topic)."""
        if not msgs:
            raise MQClientError("batch is empty")
        topic = msgs[0].topic
        for m in msgs:
            if m.topic != topic:
                raise MQClientError("the topic of the messages in one batch should be the same")
            if m.delay_level > 0:
                raise MQClientError("TimeDelayLevel is not supported for batching")
            if m.deliver_time_ms is not None or m.delay_ms is not None:
                raise MQClientError("timer messages are not supported for batching")
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                raise MQClientError("Retry Group is not supported for batching")
            self._check(m)
        ids: list[str] = []
        items = []
        for m in msgs:
            props = m.wire_properties()
            uid = props.setdefault(MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, _UNIQ.next_id())
            ids.append(uid)
            items.append((m.flag, m.body, self._map_order.ordered(props)))
        body = encode_batch(items)
        if len(body) > self.config.max_message_bytes:
            raise MQClientError("the batch body size over max value",
                                code=ResponseCode.MESSAGE_ILLEGAL)
        batch = _Batch(topic, body, ",".join(ids), msgs[0].wait_store_msg_ok)
        if queue is not None:
            return await self._send_kernel(batch, queue, timeout)
        return await self._send_default(batch, timeout, self._times())

    def _times(self) -> int:
        return 1 + self.config.retry_times_when_send_failed

    async def _send_default(self, msg: Message | _Batch, timeout: float | None, times: int
                            ) -> SendResult:
        t = self.config.send_timeout_s if timeout is None else timeout
        start = _clock()
        deadline = start + t
        last_broker: str | None = None
        last_error: MQClientError | None = None
        msg = _with_uniq_id(msg)  # every attempt carries one id: a retried send is idempotent
        for attempt in range(times):
            if attempt:
                start = _clock()
            remaining = deadline - start
            if remaining <= 0:
                break
            queues = self.publish_info.get(msg.topic) or await self.queues_for(msg.topic)
            mq = self.select_queue(queues, last_broker)
            last_broker = mq.broker_name
            try:
                result = await self._send_kernel(msg, mq, remaining)
            except MQRemotingError as exc:
                self._fault(mq, start, isolation=True)
                last_error = exc
                self.log.info("send failed, retrying", queue=str(mq), error=str(exc))
                if await self._after_failure(mq, deadline):
                    last_broker = None  # its new master may take the retry
                continue
            except MQBrokerError as exc:
                self._fault(mq, start, isolation=True)
                last_error = exc
                if exc.code not in RETRY_RESPONSE_CODES:
                    raise
                self.log.info("send refused, retrying", queue=str(mq), error=str(exc))
                if exc.code in FAILOVER_RESPONSE_CODES and await self._after_failure(mq, deadline):
                    last_broker = None
                continue
            except MQClientError as exc:  # e.g. the broker vanished from the route
                last_error = exc
                if await self._after_failure(mq, deadline):
                    last_broker = None
                continue
            self._fault(mq, start, isolation=False)
            if result.status is SendStatus.SLAVE_NOT_AVAILABLE:
                await self._after_failure(mq, deadline)  # stored; a failover may be under way
            if result.status is not SendStatus.SEND_OK and (
                self.config.retry_another_broker_when_not_store_ok
            ):
                continue
            return result
        if last_error is not None:
            raise last_error
        raise MQClientError(f"send to {msg.topic} timed out after {t:g}s")

    async def _after_failure(self, mq: MessageQueue, deadline: float) -> bool:
        """Re-read the route of a broker that failed (within the send's time left); True if
        the broker has a new master to retry on."""
        with trio.move_on_after(max(0.0, deadline - _clock())):
            return await self.instance.refresh_after_failure(mq.topic, mq.broker_name)
        return False

    def _fault(self, mq: MessageQueue, start: float, *, isolation: bool) -> None:
        if self.config.send_latency_fault_enable:
            latency = int((_clock() - start) * 1000)
            if not isolation and latency < FIRST_PENALIZED_LATENCY_MS and (
                mq.broker_name not in self.fault.items
            ):
                return  # nothing to remember: the broker stays available (the common case)
            self.fault.update(mq.broker_name, latency, isolation, now_ms())

    async def _master_after_route_update(self, mq: MessageQueue) -> str:
        """The master address of ``mq``'s broker once its topic's route is fetched again."""
        await self.instance.update_route(mq.topic, use_default=True)
        addr = self.instance.master_addr(mq.broker_name)
        if addr is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        return addr

    async def _send_kernel(self, msg: Message | _Batch, mq: MessageQueue, timeout: float | None,
                           *, oneway: bool = False, extra: dict[str, str] | None = None,
                           sys_flag_extra: int = 0) -> SendResult:
        addr = self.instance.master_addr(mq.broker_name)
        if addr is None:
            addr = await self._master_after_route_update(mq)
        traced = self.tracer is not None and not oneway and not isinstance(msg, _Batch)
        started = now_ms() if traced else 0
        sys_flag = sys_flag_extra
        reconsume_times = 0
        max_reconsume: int | None = None
        if isinstance(msg, _Batch):
            body = msg.body
            props = {MC.PROPERTY_WAIT_STORE_MSG_OK: "true" if msg.wait else "false"}
            uniq = msg.ids
            batch = True
        else:
            batch = False
            props = msg.wire_properties()
            if extra:
                props.update(extra)
            uniq = props.setdefault(MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, _UNIQ.next_id())
            body = msg.body
            if len(body) >= self.config.compress_over_bytes:
                body = zlib.compress(body, COMPRESS_LEVEL)
                sys_flag |= SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_ZLIB
            if props.get(MC.PROPERTY_TRANSACTION_PREPARED) == "true":
                sys_flag |= SYSFLAG_TRANSACTION_PREPARED_TYPE
            if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                rt = props.pop(MC.PROPERTY_RECONSUME_TIME, None)
                mx = props.pop(MC.PROPERTY_MAX_RECONSUME_TIMES, None)
                reconsume_times = int(rt) if rt else 0
                max_reconsume = int(mx) if mx else None
        cmd = frames.send_message(
            group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            sys_flag=sys_flag,
            born_timestamp=now_ms(),
            flag=0 if batch else msg.flag,  # type: ignore[union-attr]
            properties=self._map_order.properties_string(props),
            body=body,
            broker_name=mq.broker_name,
            batch=batch,
            reconsume_times=reconsume_times,
            max_reconsume_times=max_reconsume,
        )
        if not batch and props.get(MC.PROPERTY_MESSAGE_TYPE) == REPLY_MESSAGE_FLAG:
            # a reply goes through the broker's reply processor (Java MQClientAPIImpl)
            cmd = attrs.evolve(cmd, code=int(RequestCode.SEND_REPLY_MESSAGE_V2))
        if oneway:
            await self.instance.invoke_oneway(addr, attrs.evolve(cmd, flag=cmd.flag | 2))
            return SendResult(SendStatus.SEND_OK, uniq, "", mq, -1)
        t = self.config.send_timeout_s if timeout is None else timeout
        resp = await self.instance.invoke(addr, cmd, t)
        status = _STATUS.get(resp.code)
        if status is None:
            raise MQBrokerError(resp.code, resp.remark, addr)
        ext = resp.ext_fields
        try:
            queue_id = int(ext.get("queueId", mq.queue_id))
            queue_offset = int(ext.get("queueOffset", -1))
        except ValueError as exc:
            raise MQClientError(f"bad send response header: {exc}", addr=addr) from None
        result = SendResult(
            status=status,
            msg_id=uniq,
            offset_msg_id=ext.get("msgId", ""),
            queue=mq if queue_id == mq.queue_id else MessageQueue(mq.topic, mq.broker_name,
                                                                  queue_id),
            queue_offset=queue_offset,
            transaction_id=ext.get("transactionId"),
            region_id=ext.get("MSG_REGION"),
        )
        if traced and self.tracer is not None and mq.topic != self.tracer.topic:
            # built later by the shipping task: the send path only queues its inputs
            self.tracer.append(functools.partial(pub_record, self.group, props, mq.topic,
                                                 len(msg.body), addr, result, started,
                                                 now_ms()))
        return result

    # ------------------------------------------------------------------ request-reply

    async def request(
        self,
        msg: Message,
        timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
    ) -> ReceivedMessage:
        """Send ``msg`` as a request and return the reply a consumer sent with
        ``send_reply(create_reply_message(request, body))`` (Java ``DefaultMQProducer.request``).
        Raises ``RequestTimeoutError`` when the request was sent but no reply came within
        ``timeout`` seconds, another ``MQClientError`` when the request could not be sent."""
        self._check(msg)
        start = _clock()
        correlation_id = str(uuid.uuid4())
        props = {
            MC.PROPERTY_CORRELATION_ID: correlation_id,
            MC.PROPERTY_MESSAGE_REPLY_TO_CLIENT: self.instance.client_id,
            MC.PROPERTY_MESSAGE_TTL: str(int(timeout * 1000)),
        }
        msg = attrs.evolve(msg, properties={**msg.properties, **props})
        if msg.topic not in self.instance.routes:
            # the broker finds the requester by its heartbeat: send one before the first
            # request to a new topic (Java prepareSendRequest)
            await self.queues_for(msg.topic)
            await self.instance.send_heartbeat_to_all()
        futures = self.instance.request_futures
        fut = futures.register(correlation_id, self.config.max_message_bytes)
        try:
            remaining = timeout - (_clock() - start)
            try:
                await self.send(msg, queue=queue, selector=selector, arg=arg,
                                timeout=max(remaining, 0.001))
            except MQClientError as exc:
                raise MQClientError(
                    f"send request message to <{msg.topic}> fail: {exc}",
                    code=exc.code, remark=exc.remark, addr=exc.addr,
                ) from exc
            with trio.move_on_after(max(0.0, timeout - (_clock() - start))):
                await fut.arrived.wait()
            if fut.error is not None:
                raise MQClientError(
                    f"send request message to <{msg.topic}> OK, but its reply was refused: "
                    f"{fut.error}"
                )
            if fut.reply is None:
                raise RequestTimeoutError(
                    f"send request message to <{msg.topic}> OK, but wait reply message "
                    f"timeout, {int(timeout * 1000)} ms.",
                    code=REQUEST_TIMEOUT_EXCEPTION,
                )
            return fut.reply
        finally:
            futures.remove(correlation_id)

    async def send_reply(self, reply: Message, *, timeout: float | None = None) -> SendResult:
        """Send a reply built by ``create_reply_message`` (SEND_REPLY_MESSAGE_V2): the broker
        pushes it to the requester and stores it in ``<cluster>_REPLY_TOPIC``."""
        if not is_reply(reply):
            raise MQClientError(
                "not a reply message: build it with create_reply_message(request, body)"
            )
        return await self.send(reply, timeout=timeout)

    # ------------------------------------------------------------------ transactions

    async def check_transaction(
        self, conn: Connection, header: CheckTransactionStateRequestHeader, body: bytes
    ) -> None:
        """A plain producer ignores back-checks (Java logs them); TransactionProducer answers."""
        self.log.info("transaction check ignored by a non-transactional producer")


async def start_tracer(instance: ClientInstance, group: str, kind: str, enabled: bool,
                       topic: str) -> TraceDispatcher | None:
    """A started trace dispatcher for a client of ``group`` when ``enabled``: its records go
    through an inner producer on an instance of its own (as Apache's trace producer): its
    connections are not the traced client's, so a lone send keeps reading its own answer."""
    if not enabled:
        return None
    config = attrs.evolve(instance.config, instance_name=f"{instance.instance_name}-trace")
    tracer = TraceDispatcher(instance, Producer(inner_group(group, kind), client_config=config),
                             topic)
    await tracer.start()
    return tracer


@attrs.frozen
class _Batch:
    topic: str
    body: bytes
    ids: str
    wait: bool


ExecuteLocal = Callable[[Message, Any], "TransactionState | Awaitable[TransactionState]"]
CheckLocal = Callable[[ReceivedMessage], "TransactionState | Awaitable[TransactionState]"]


def _with_uniq_id(msg: Message | _Batch) -> Message | _Batch:
    """``msg`` with its UNIQ_KEY set once, before the first attempt (a batch has its ids)."""
    if isinstance(msg, _Batch) or MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX in msg.properties:
        return msg
    props = {**msg.properties, MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: _UNIQ.next_id()}
    return attrs.evolve(msg, properties=props)


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    out = fn(*args)
    if inspect.isawaitable(out):
        out = await out
    return out


class TransactionProducer(Producer):
    """Half message, local transaction, END_TRANSACTION; answers the broker's back-checks with
    ``check_local(msg)``."""

    def __init__(self, group: str, *, execute_local: ExecuteLocal, check_local: CheckLocal,
                 **kwargs: Any) -> None:
        super().__init__(group, **kwargs)
        self.execute_local = execute_local
        self.check_local = check_local

    async def start(self) -> None:
        await super().start()
        self.instance.heartbeat_soon()

    async def send_in_transaction(self, msg: Message, arg: Any = None
                                  ) -> tuple[SendResult, TransactionState]:
        if msg.delay_level > 0:
            raise TransactionError("delay level is not supported for transaction messages")
        if msg.deliver_time_ms is not None or msg.delay_ms is not None:
            raise TransactionError("timer messages are not supported for transaction messages")
        self._check(msg)
        props = {MC.PROPERTY_TRANSACTION_PREPARED: "true", MC.PROPERTY_PRODUCER_GROUP: self.group}
        msg = attrs.evolve(msg, properties={**msg.properties, **props})
        result = await self._send_default(msg, None, self._times())
        state = TransactionState.UNKNOW
        remark: str | None = None
        if result.status is SendStatus.SEND_OK:
            try:
                state = await _call(self.execute_local, msg, arg)
                if not isinstance(state, TransactionState):
                    state = TransactionState.UNKNOW
            except Exception as exc:
                remark = f"executeLocalTransactionBranch exception: {exc!r}"
                self.log.info("local transaction failed", error=repr(exc))
        else:
            state = TransactionState.ROLLBACK_MESSAGE
        await self._end_transaction(result, state, remark)
        if self.tracer is not None:
            self.tracer.append(end_transaction_record(
                self.group, msg, result, self.instance.master_addr(result.queue.broker_name)
                or "", state.name, from_check=False))
        return result, state

    async def _end_transaction(self, result: SendResult, state: TransactionState,
                               remark: str | None) -> None:
        addr = self.instance.master_addr(result.queue.broker_name)
        if addr is None:
            raise TransactionError(f"no master for {result.queue.broker_name}")
        _host, offset = decode_offset_msg_id(result.offset_msg_id)
        cmd = frames.end_transaction(
            group=self.group,
            tran_state_table_offset=result.queue_offset,
            commitlog_offset=offset,
            commit_or_rollback=state.value,
            from_check=False,
            msg_id=result.msg_id,
            transaction_id=result.transaction_id,
            remark=remark,
        )
        await self.instance.invoke_oneway(addr, cmd)

    async def check_transaction(
        self, conn: Connection, header: CheckTransactionStateRequestHeader, body: bytes
    ) -> None:
        try:
            stored = next(iter_records(body, check_crc=False))
        except (StopIteration, ValueError) as exc:
            self.log.info("bad transaction check body", error=str(exc))
            return
        try:
            msg = ReceivedMessage.from_stored(
                stored, "", max_body_bytes=self.config.max_message_bytes)
        except ValueError as exc:
            self.log.warning("transaction check skipped: body cannot be inflated",
                             topic=stored.topic, commitlog_offset=stored.commitlog_offset,
                             transaction_id=header.transaction_id, reason=str(exc))
            return
        try:
            state = await _call(self.check_local, msg)
            if not isinstance(state, TransactionState):
                state = TransactionState.UNKNOW
        except Exception as exc:
            self.log.info("check_local failed", error=repr(exc))
            state = TransactionState.UNKNOW
        unique = msg.properties.get(MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.offset_msg_id
        cmd = frames.end_transaction(
            group=self.group,
            tran_state_table_offset=header.tran_state_table_offset,
            commitlog_offset=stored.commitlog_offset,
            commit_or_rollback=state.value,
            from_check=True,
            msg_id=unique,
            transaction_id=header.transaction_id,
        )
        try:
            await conn.invoke_oneway(self.instance.sign(cmd))
        except RemotingError as exc:
            self.log.info("end transaction after check failed", error=str(exc))


#: Latency and send deadlines (cheaper than trio.current_time on the per-message path).
_clock = time.monotonic
