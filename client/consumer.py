"""Consumers: ``PushConsumer`` (Java ``DefaultMQPushConsumer``: rebalance, long-polling pull per
queue, concurrent or orderly consumption, send-back of failures, offset commits) and
``PullConsumer`` (assign / seek / poll, plus raw ``pull``)::

    async def on_messages(msgs: list[ReceivedMessage]) -> ConsumeResult:
        ...
    async with PushConsumer("CG", namesrv_addr=ns, listener=on_messages) as c:
        c.subscribe("T", "TagA || TagB")   # or before entering
        await trio.sleep_forever()
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import attrs
import orjson
import trio

from ..cluster.clock import now_ms
from ..cluster.protocol import fastjson
from ..cluster.protocol.message import iter_records
from ..cluster.protocol.route import TopicRouteData
from ..cluster.protocol.trace import DEFAULT_TRACE_TOPIC, ConsumeReturnType
from ..cluster.remoting.codes import ResponseCode
from . import frames
from .allocate import AllocateStrategy, allocate_averagely
from .config import (
    DEFAULT_BROKER_SUSPEND_MAX_S,
    DEFAULT_CONSUME_CONCURRENCY,
    DEFAULT_LOCK_INTERVAL_S,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_RECONSUME_TIMES,
    DEFAULT_ORDERLY_SUSPEND_S,
    DEFAULT_PULL_BATCH_SIZE,
    DEFAULT_PULL_CALL_TIMEOUT_S,
    DEFAULT_PULL_THRESHOLD_FOR_QUEUE,
    LOCAL_RECONSUME_DELAY_S,
    PULL_ERROR_BACKOFF_S,
    ClientConfig,
)
from .errors import (
    MQBrokerError,
    MQClientError,
    MQRemotingError,
    NoRouteError,
)
from .instance import (
    MASTER_ID,
    ClientInstance,
    object_key_map,
    own_instance,
    subscribe_queues,
)
from .model import (
    ConsumeFromWhere,
    ConsumeResult,
    ConsumeType,
    MessageModel,
    MessageQueue,
    OrderlyResult,
    PullResult,
    PullStatus,
    ReceivedMessage,
    SkippedMessage,
    retry_topic,
)
from .offset_store import (
    OFFSET_NOT_FOUND,
    LocalOffsetStore,
    OffsetStore,
    RemoteOffsetStore,
    default_local_offset_dir,
)
from .producer import start_tracer
from .subscription import (
    ConsumerData,
    SubscriptionData,
    build_subscription,
)
from .trace import TraceDispatcher, consume_after, consume_before

Listener = Callable[[list[ReceivedMessage]], Any]
_PULL_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    out = fn(*args)
    if inspect.isawaitable(out):
        out = await out
    return out


# =========================================================================== pulling


class PullApi:
    """PULL_MESSAGE with the broker's suggestions followed (Java ``PullAPIWrapper``): the next
    pull of a queue goes to ``suggestWhichBrokerId``; a slave never gets COMMIT_OFFSET."""

    def __init__(self, instance: ClientInstance, group: str, *, log: Any = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.instance = instance
        self.group = group
        self.log = log if log is not None else instance.log.bind(consumer=group)
        #: a COMPRESSED body inflating past this is skipped (logged, counted), never delivered
        self.max_message_bytes = max_message_bytes
        #: messages skipped so far because their bodies could not be inflated within the bound
        self.skipped_messages = 0
        self.suggested: dict[MessageQueue, int] = {}

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        *,
        sub: SubscriptionData | None,
        max_nums: int = DEFAULT_PULL_BATCH_SIZE,
        suspend_s: float = 0.0,
        commit_offset: int = 0,
        timeout: float | None = None,
    ) -> PullResult:
        bid = self.suggested.get(mq, MASTER_ID)
        found = self.instance.find_broker_addr(mq.broker_name, bid)
        if found is None:
            await self.instance.update_route(mq.topic)
            found = self.instance.find_broker_addr(mq.broker_name, bid)
        if found is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        addr, slave = found
        use_commit = commit_offset > 0 and not slave
        flag = frames.pull_sys_flag(use_commit, suspend_s > 0, sub is not None)
        cmd = frames.pull_message(
            group=self.group,
            mq=mq,
            offset=offset,
            max_nums=max_nums,
            sys_flag=flag,
            commit_offset=commit_offset if use_commit else 0,
            suspend_ms=int(suspend_s * 1000),
            subscription=sub.sub_string if sub is not None else None,
            sub_version=sub.sub_version if sub is not None else 0,
            expression_type=sub.expression_type if sub is not None else "TAG",
        )
        t = timeout if timeout is not None else (
            suspend_s + DEFAULT_PULL_CALL_TIMEOUT_S - DEFAULT_BROKER_SUSPEND_MAX_S
            if suspend_s else self.instance.config.call_timeout_s
        )
        resp = await self.instance.invoke(addr, cmd, max(t, suspend_s + 1.0))
        status = _PULL_STATUS.get(resp.code)
        if status is None:
            raise MQBrokerError(resp.code, resp.remark, addr)
        ext = resp.ext_fields
        suggest = int(ext.get("suggestWhichBrokerId", MASTER_ID) or 0)
        self.suggested[mq] = suggest
        msgs: tuple[ReceivedMessage, ...] = ()
        skipped: tuple[SkippedMessage, ...] = ()
        if status is PullStatus.FOUND and resp.body:
            decoded, bad = ReceivedMessage.decode_pulled(
                resp.body, mq.broker_name, max_body_bytes=self.max_message_bytes)
            if bad:
                skipped = self._skipped(bad)
            if sub is None:
                msgs = tuple(decoded)
            else:
                matches = sub.matches
                msgs = tuple([m for m in decoded if matches(m.tags)])
        return PullResult(
            status=status,
            next_begin_offset=int(ext.get("nextBeginOffset", offset)),
            min_offset=int(ext.get("minOffset", 0)),
            max_offset=int(ext.get("maxOffset", 0)),
            messages=msgs,
            suggest_which_broker_id=suggest,
            skipped=skipped,
        )

    def _skipped(self, bad: list[SkippedMessage]) -> tuple[SkippedMessage, ...]:
        """Log and count the messages a pull found but cannot deliver: the consumer moves past
        them as past filtered ones (Java's decoder drops an undecodable message, and the rest of
        its batch, without a word; here only that message is dropped, and it is said why)."""
        self.skipped_messages += len(bad)
        for s in bad:
            self.log.warning("message skipped: body cannot be inflated", topic=s.topic,
                             queue_id=s.queue_id, queue_offset=s.queue_offset,
                             commitlog_offset=s.commitlog_offset, msg_id=s.msg_id,
                             reason=s.reason, skipped_total=self.skipped_messages)
        return tuple(bad)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self._offset_call(mq, frames.get_max_offset(mq))

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self._offset_call(mq, frames.get_min_offset(mq))

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self._offset_call(mq, frames.search_offset(mq, timestamp_ms))

    async def _offset_call(self, mq: MessageQueue, cmd: Any) -> int:
        found = self.instance.find_broker_addr(mq.broker_name)
        if found is None:
            await self.instance.update_route(mq.topic)
            found = self.instance.find_broker_addr(mq.broker_name)
        if found is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        resp = await self.instance.invoke_ok(found[0], cmd)
        return int(resp.ext_fields.get("offset", 0))


# =========================================================================== push consumer


class ProcessQueue:
    """The messages of one queue pulled and not yet consumed (offset -> message, ascending)."""

    def __init__(self, mq: MessageQueue, next_offset: int) -> None:
        self.mq = mq
        self.next_offset = next_offset
        self.msgs: dict[int, ReceivedMessage] = {}
        self.max_offset = -1
        self.dropped = False
        self.locked = False
        self.scope = trio.CancelScope()  # the pull loop's
        self.consume_scope = trio.CancelScope()  # the orderly consume loop's
        self.changed = trio.Event()  # set when messages are added or removed
        self.in_flight = 0
        self.local_retries: dict[int, int] = {}

    def add(self, msgs: Iterable[ReceivedMessage]) -> None:
        for m in msgs:
            self.msgs[m.queue_offset] = m
            if m.queue_offset > self.max_offset:
                self.max_offset = m.queue_offset
        self._poke()

    def remove(self, msgs: Iterable[ReceivedMessage]) -> int:
        """Drop consumed messages; the offset to commit (Java ``ProcessQueue.removeMessage``)."""
        for m in msgs:
            self.msgs.pop(m.queue_offset, None)
        self._poke()
        return self.commit_offset()

    def commit_offset(self) -> int:
        for first in self.msgs:
            return first
        return self.max_offset + 1 if self.max_offset >= 0 else -1

    def _poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


@attrs.frozen
class PushConfig:
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET
    #: for ConsumeFromWhere.TIMESTAMP (Java consumeTimestamp, default half an hour ago)
    consume_timestamp_ms: int | None = None
    orderly: bool = False
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    consume_batch_size: int = 1
    #: callbacks running at once in this consumer (Java consumeThreadMax)
    consume_concurrency: int = DEFAULT_CONSUME_CONCURRENCY
    #: callbacks running at once per queue (bounded in-flight per queue)
    max_in_flight_per_queue: int = DEFAULT_CONSUME_CONCURRENCY
    pull_threshold_for_queue: int = DEFAULT_PULL_THRESHOLD_FOR_QUEUE
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES
    #: a compressed body that inflates past this (Java maxMessageSize) is skipped and logged
    max_message_bytes: int = attrs.field(default=DEFAULT_MAX_MESSAGE_BYTES,
                                         validator=attrs.validators.ge(1))
    suspend_s: float = DEFAULT_BROKER_SUSPEND_MAX_S
    pull_error_backoff_s: float = PULL_ERROR_BACKOFF_S
    local_reconsume_delay_s: float = LOCAL_RECONSUME_DELAY_S
    lock_interval_s: float = DEFAULT_LOCK_INTERVAL_S
    orderly_suspend_s: float = DEFAULT_ORDERLY_SUSPEND_S
    #: broadcasting offsets (Java ~/.rocketmq_offsets)
    offset_store_dir: str | None = None
    #: in-flight consumption allowed to finish on close, at most this long
    shutdown_grace_s: float = 5.0
    #: hand at most this many messages to the listener over the consumer's life (0: no
    #: limit); the rest stay pulled but unconsumed and their offsets uncommitted, so the
    #: next consumer of the group gets them (``rmq-cluster consume --count N``)
    consume_limit: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    #: write SubBefore/SubAfter trace records per consumed message (Java ``enableMsgTrace``)
    #: into ``trace_topic`` (Java ``customizedTraceTopic``)
    enable_msg_trace: bool = False
    trace_topic: str = DEFAULT_TRACE_TOPIC


class PushConsumer:
    def __init__(
        self,
        group: str,
        *,
        listener: Listener | None = None,
        namesrv_addr: str | None = None,
        instance: ClientInstance | None = None,
        client_config: ClientConfig | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        config: PushConfig | None = None,
        allocate: AllocateStrategy = allocate_averagely,
        **config_overrides: Any,
    ) -> None:
        self.group = group
        self.config = config or PushConfig(**config_overrides)
        self.listener = listener
        self._listener_async = _is_async_callable(listener)
        self.allocate = allocate
        self._own_instance = instance is None
        if instance is None:
            instance = own_instance(client_config, namesrv_addr, access_key, secret_key)
        self.instance = instance
        self.log = instance.log.bind(consumer=group)
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.topic_queues: dict[str, list[MessageQueue]] = {}
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self.pull_api = PullApi(instance, group, log=self.log,
                                max_message_bytes=self.config.max_message_bytes)
        self.offsets: OffsetStore
        if self.config.message_model is MessageModel.BROADCASTING:
            d = self.config.offset_store_dir
            self.offsets = LocalOffsetStore(Path(d) if d else default_local_offset_dir(), group)
        else:
            self.offsets = RemoteOffsetStore(instance, group)
        self._limiter = trio.CapacityLimiter(max(1, self.config.consume_concurrency))
        self._nursery: trio.Nursery | None = None
        self._stack: AsyncExitStack | None = None
        self._rebalance_lock = trio.Lock()
        #: set (and replaced) whenever a queue is assigned to or released by this consumer
        self.assignment_changed = trio.Event()
        self._consuming = 0
        self._idle = trio.Event()
        self.running = False
        self.consumed_ok = 0
        self.consumed_failed = 0
        #: messages handed to the listener so far (counted against ``consume_limit``)
        self.handed = 0
        #: set once ``consume_limit`` messages were handed to the listener
        self.limit_reached = trio.Event()
        #: set while running with ``enable_msg_trace``
        self.tracer: TraceDispatcher | None = None

    # ------------------------------------------------------------------ setup

    def subscribe(self, topic: str, expression: str = "*", *, expression_type: str = "TAG"
                  ) -> None:
        """``expression``: tags (``"TagA || TagB"``, ``"*"``) or, with
        ``expression_type="SQL92"``, a selector on message properties (``"a > 5"``)."""
        sub = build_subscription(topic, expression, now_ms(), expression_type)
        self.subscriptions[topic] = sub
        if self.config.message_model is MessageModel.CLUSTERING:
            rt = retry_topic(self.group)
            self.subscriptions.setdefault(rt, build_subscription(rt, "*", now_ms()))
        if self.running:
            self.instance.spawn(self._refresh_after_subscribe, topic)

    async def _refresh_after_subscribe(self, topic: str) -> None:
        try:
            await self.instance.update_route(topic)
        except MQClientError as exc:
            self.log.info("route for new subscription failed", topic=topic, error=str(exc))
        await self.instance.send_heartbeat_to_all()
        self.instance.rebalance_soon()

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)

    def register_listener(self, listener: Listener) -> None:
        self.listener = listener
        self._listener_async = _is_async_callable(listener)

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self.listener is None:
            raise MQClientError("register a listener before starting the consumer")
        if self._own_instance:
            await self.instance.__aenter__()
        stack = AsyncExitStack()
        await stack.__aenter__()
        self._nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(self._nursery.cancel_scope.cancel)
        self._stack = stack
        try:
            self.instance.register_consumer(self)
            self.running = True
            self.tracer = await start_tracer(self.instance, self.group, "sub",
                                             self.config.enable_msg_trace,
                                             self.config.trace_topic)
            await self._start_work()
        except BaseException:
            self.running = False
            self.instance.unregister_consumer(self.group)
            if self.tracer is not None:
                await self.tracer.close()
                self.tracer = None
            self._stack = None
            await stack.aclose()
            if self._own_instance:
                await self.instance.__aexit__(None, None, None)
            raise

    async def _start_work(self) -> None:
        assert self._nursery is not None
        for topic in list(self.subscriptions):
            try:
                await self.instance.update_route(topic)
            except MQClientError as exc:
                self.log.info("route fetch failed", topic=topic, error=str(exc))
        await self.check_client_in_broker()
        await self.instance.send_heartbeat_to_all()
        if self.config.orderly:
            self._spawn(self._lock_loop)
        await self.do_rebalance()

    async def check_client_in_broker(self) -> None:
        """CHECK_CLIENT_CONFIG for every non-TAG (SQL92) subscription, at each master of its
        topic (Java's ``checkClientInBroker``): a broker without enablePropertyFilter, or an
        expression it cannot parse, fails the start with the broker's code and remark."""
        for sub in list(self.subscriptions.values()):
            if sub.expression_type == "TAG":
                continue
            route = self.instance.routes.get(sub.topic)
            addrs = [b.master_addr for b in route.broker_datas] if route is not None else []
            body = fastjson.dumps({
                "clientId": self.instance.client_id,
                "group": self.group,
                "subscriptionData": sub.to_json_obj(),
            })
            for addr in addrs:
                if addr is None:
                    continue
                resp = await self.instance.invoke(
                    addr, frames.request(frames.RC.CHECK_CLIENT_CONFIG, None, body)
                )
                if resp.code != ResponseCode.SUCCESS:
                    raise MQBrokerError(resp.code, resp.remark, addr)

    async def close(self) -> None:
        if not self.running:
            return
        self.running = False
        self.instance.unregister_consumer(self.group)
        try:
            await self._shutdown_steps()
            tracer, self.tracer = self.tracer, None
            if tracer is not None:
                await tracer.close()
        finally:
            await self._close_nurseries()

    async def _shutdown_steps(self) -> None:
        for pq in self.process_queues.values():
            pq.scope.cancel()  # stop pulling
        with trio.move_on_after(self.config.shutdown_grace_s):
            while self._consuming:
                await self._idle.wait()
        with trio.CancelScope(shield=True):
            try:
                await self.offsets.persist(list(self.process_queues), sync=True)
                if self.config.orderly:
                    await self._unlock(list(self.process_queues))
                with trio.move_on_after(self.instance.config.call_timeout_s):
                    await self.instance.unregister_client(None, self.group)
            except MQClientError as exc:
                self.log.info("shutdown step failed", error=str(exc))
        for pq in self.process_queues.values():
            pq.dropped = True
            pq.consume_scope.cancel()

    async def _close_nurseries(self) -> None:
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                await stack.aclose()
        finally:
            self._nursery = None
            if self._own_instance:
                await self.instance.__aexit__(None, None, None)

    @property
    def nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise MQClientError("consumer is not running")
        return self._nursery

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        self.nursery.start_soon(_logged, self.log, fn, *args)

    # ------------------------------------------------------------------ hooks for the instance

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.PUSH.value,
            message_model=self.config.message_model.value,
            consume_from_where=self.config.consume_from.value,
            subscriptions=tuple(self.subscriptions.values()),
        )

    def subscribed_topics(self) -> list[str]:
        return list(self.subscriptions)

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        queues = subscribe_queues(topic, route)
        if self.topic_queues.get(topic) != queues:
            self.topic_queues[topic] = queues
            self.instance.rebalance_soon()

    async def persist_offsets(self) -> None:
        await self.offsets.persist(list(self.process_queues))

    def assigned_queues(self, topic: str | None = None) -> list[MessageQueue]:
        return sorted(mq for mq, pq in self.process_queues.items()
                      if not pq.dropped and (topic is None or mq.topic == topic))

    # ------------------------------------------------------------------ rebalance

    async def do_rebalance(self) -> None:
        if not self.running:
            return
        async with self._rebalance_lock:
            for topic in list(self.subscriptions):
                try:
                    await self._rebalance_topic(topic)
                except MQClientError as exc:
                    self.log.info("rebalance of topic failed", topic=topic, error=str(exc))
            for mq in [mq for mq in self.process_queues if mq.topic not in self.subscriptions]:
                await self._drop(mq)

    async def _rebalance_topic(self, topic: str) -> None:
        queues = self.topic_queues.get(topic)
        if queues is None:
            route = await self.instance.update_route(topic)
            if route is None:
                return
            queues = self.topic_queues.setdefault(topic, subscribe_queues(topic, route))
        if self.config.message_model is MessageModel.BROADCASTING:
            mine = set(queues)
        else:
            try:
                cids = await self.instance.consumer_id_list(topic, self.group)
            except NoRouteError:
                return
            if not cids:
                return
            mine = set(self.allocate(self.group, self.instance.client_id, queues, cids))
        for mq in [mq for mq in self.process_queues if mq.topic == topic and mq not in mine]:
            await self._drop(mq)
        for mq in sorted(mine):
            if mq in self.process_queues:
                continue
            await self._add(mq)

    async def _drop(self, mq: MessageQueue) -> None:
        pq = self.process_queues.pop(mq, None)
        if pq is None:
            return
        pq.dropped = True
        pq.scope.cancel()
        pq.consume_scope.cancel()
        pq._poke()
        await self.offsets.persist([mq], sync=False)
        self.offsets.remove(mq)
        if self.config.orderly:
            await self._unlock([mq])
        self.log.debug("queue released", queue=str(mq))
        self._assignment_poke()

    def _assignment_poke(self) -> None:
        self.assignment_changed.set()
        self.assignment_changed = trio.Event()

    async def _add(self, mq: MessageQueue) -> None:
        if not self.running:
            return
        if self.config.orderly and not await self._lock([mq]):
            return
        try:
            offset = await self._compute_pull_from(mq)
        except MQClientError as exc:
            self.log.info("cannot compute offset", queue=str(mq), error=str(exc))
            return
        if not self.running:
            return
        pq = ProcessQueue(mq, offset)
        pq.locked = self.config.orderly
        self.process_queues[mq] = pq
        self.offsets.update(mq, offset)
        self._spawn(self._pull_loop, pq)
        if self.config.orderly:
            self._spawn(self._orderly_loop, pq)
        self.log.debug("queue assigned", queue=str(mq), offset=offset)
        self._assignment_poke()

    async def _compute_pull_from(self, mq: MessageQueue) -> int:
        """Java ``computePullFromWhere``: the stored offset if any, else by consume_from."""
        last = await self.offsets.read_from_store(mq)
        if last >= 0:
            return last
        if last != OFFSET_NOT_FOUND:
            raise MQClientError(f"bad stored offset {last} for {mq}")
        how = self.config.consume_from
        is_retry = mq.topic.startswith("%RETRY%")
        from_last = ConsumeFromWhere.LAST_OFFSET
        if how is ConsumeFromWhere.FIRST_OFFSET or (is_retry and how is from_last):
            return 0
        if how is ConsumeFromWhere.LAST_OFFSET or is_retry:
            return await self.pull_api.max_offset(mq)
        ts = self.config.consume_timestamp_ms
        if ts is None:
            ts = now_ms() - 30 * 60 * 1000
        return await self.pull_api.search_offset(mq, ts)

    # ------------------------------------------------------------------ orderly locks

    async def _lock(self, mqs: Sequence[MessageQueue]) -> bool:
        """LOCK_BATCH_MQ per broker; True if all of ``mqs`` are locked for us."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        ok_all = True
        for broker, group_mqs in by_broker.items():
            addr = self.instance.master_addr(broker)
            if addr is None:
                ok_all = False
                continue
            try:
                resp = await self.instance.invoke_ok(
                    addr, frames.lock_batch(self.group, self.instance.client_id, group_mqs))
            except MQClientError as exc:
                self.log.info("lock failed", broker=broker, error=str(exc))
                ok_all = False
                continue
            obj = fastjson.loads(bytes(resp.body)) if resp.body else {}
            locked = {MessageQueue.from_json_obj(o) for o in obj.get("lockOKMQSet") or []}
            for mq in group_mqs:
                pq = self.process_queues.get(mq)
                if pq is not None:
                    pq.locked = mq in locked
                    pq._poke()
                if mq not in locked:
                    ok_all = False
        return ok_all

    async def _unlock(self, mqs: Sequence[MessageQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, group_mqs in by_broker.items():
            addr = self.instance.master_addr(broker)
            if addr is None:
                continue
            try:
                await self.instance.invoke_oneway(
                    addr, frames.unlock_batch(self.group, self.instance.client_id, group_mqs))
            except MQClientError as exc:
                self.log.info("unlock failed", broker=broker, error=str(exc))

    async def _lock_loop(self) -> None:
        while True:
            await trio.sleep(self.config.lock_interval_s)  # lease renewal timer
            mqs = [mq for mq, pq in self.process_queues.items() if not pq.dropped]
            if mqs:
                await self._lock(mqs)

    # ------------------------------------------------------------------ pulling

    async def _pull_loop(self, pq: ProcessQueue) -> None:
        cfg = self.config
        with pq.scope:
            while not pq.dropped:
                if len(pq.msgs) >= cfg.pull_threshold_for_queue or (cfg.orderly and not pq.locked):
                    await pq.changed.wait()  # flow control: consumption makes room
                    continue
                sub = self.subscriptions.get(pq.mq.topic)
                if sub is None:
                    return
                commit = self.offsets.read(pq.mq) or 0
                try:
                    result = await self.pull_api.pull(
                        pq.mq, pq.next_offset, sub=sub, max_nums=cfg.pull_batch_size,
                        suspend_s=cfg.suspend_s,
                        commit_offset=commit if cfg.message_model is MessageModel.CLUSTERING
                        else 0,
                    )
                except MQClientError as exc:
                    self.log.info("pull failed", queue=str(pq.mq), error=str(exc))
                    if exc.code is None and await self.instance.refresh_after_failure(
                            pq.mq.topic, pq.mq.broker_name):
                        continue  # a new master: pull from it at once
                    await trio.sleep(cfg.pull_error_backoff_s)  # back-off timer
                    continue
                if pq.dropped:
                    return
                if result.status is PullStatus.OFFSET_ILLEGAL:
                    self.log.info("pull offset illegal", queue=str(pq.mq), offset=pq.next_offset,
                                  next=result.next_begin_offset)
                    pq.next_offset = result.next_begin_offset
                    self.offsets.update(pq.mq, result.next_begin_offset)
                    continue
                pq.next_offset = result.next_begin_offset
                if result.messages:
                    pq.add(result.messages)
                    if not cfg.orderly:
                        await self._dispatch(pq, list(result.messages))
                elif not pq.msgs:
                    # nothing cached and nothing matched: the offset moves on (correctTagsOffset)
                    self.offsets.update(pq.mq, result.next_begin_offset, increase_only=True)

    async def _dispatch(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        size = max(1, self.config.consume_batch_size)
        if not self._listener_async:
            # A plain function cannot overlap another on the event loop anyway: one task runs
            # the pulled batch in order (same results, no task per message).
            pq.in_flight += 1
            self._consuming += 1
            self._spawn(self._consume_in_order, pq, [msgs[i : i + size]
                                                     for i in range(0, len(msgs), size)])
            return
        for i in range(0, len(msgs), size):
            while pq.in_flight >= self.config.max_in_flight_per_queue and not pq.dropped:
                await pq.changed.wait()
            if pq.dropped:
                return
            pq.in_flight += 1
            self._consuming += 1
            self._spawn(self._consume_concurrently, pq, msgs[i : i + size])

    async def _run_listener(self, msgs: list[ReceivedMessage]) -> Any:
        tracer = self.tracer
        if tracer is None:
            return await self._call_listener(msgs)
        ctx = consume_before(tracer, self.group, msgs)
        status = await self._call_listener(msgs)
        if ctx is not None:
            consume_after(tracer, ctx, _return_type(status))
        return status

    async def _call_listener(self, msgs: list[ReceivedMessage]) -> Any:
        view = [m.restore_retry_topic(self.group) for m in msgs]
        listener = self.listener
        assert listener is not None
        if not self._listener_async:
            # runs to completion without yielding: no limiter needed (and no checkpoint)
            try:
                out = listener(view)
                return await out if inspect.isawaitable(out) else out
            except Exception as exc:
                self._listener_raised(exc, view)
                return _FAILED
        async with self._limiter:
            try:
                return await _call(listener, view)
            except Exception as exc:
                self._listener_raised(exc, view)
                return _FAILED

    def _listener_raised(self, exc: Exception, msgs: list[ReceivedMessage]) -> None:
        """An application bug: a warning with its traceback (the messages are retried)."""
        self.log.warning("listener raised, messages will be consumed again",
                         error=repr(exc), msg_ids=[m.msg_id for m in msgs], exc_info=exc)

    def _take(self, msgs: list[ReceivedMessage]) -> list[ReceivedMessage]:
        """The first of ``msgs`` the listener may still get under ``consume_limit`` (counted
        as handed); the others are left in their process queue, uncommitted."""
        limit = self.config.consume_limit
        if not limit:
            return msgs
        room = limit - self.handed
        taken = msgs[: max(0, room)]
        self.handed += len(taken)
        if self.handed >= limit:
            self.limit_reached.set()
        return taken

    async def _consume_in_order(self, pq: ProcessQueue, chunks: list[list[ReceivedMessage]]
                                ) -> None:
        try:
            for chunk in chunks:
                if pq.dropped:
                    return
                pq.in_flight += 1
                self._consuming += 1
                await self._consume_concurrently(pq, chunk)
        finally:
            self._consume_done(pq)

    def _consume_done(self, pq: ProcessQueue) -> None:
        pq.in_flight -= 1
        pq._poke()
        self._consuming -= 1
        if not self._consuming:
            self._idle.set()
            self._idle = trio.Event()

    async def _consume_concurrently(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        try:
            msgs = self._take(msgs)
            if not msgs:
                return  # over consume_limit: left for the group's next consumer
            while True:
                status = await self._run_listener(msgs)
                ok = status is None or status is ConsumeResult.SUCCESS or status is True
                if pq.dropped:
                    return
                if ok:
                    self.consumed_ok += len(msgs)
                    break
                self.consumed_failed += len(msgs)
                if self.config.message_model is MessageModel.BROADCASTING:
                    break  # Java drops failed broadcast messages
                failed = [m for m in msgs if not await self._send_back(m, 0)]
                if not failed:
                    break
                msgs = failed  # send-back failed: consume again here, later
                await trio.sleep(self.config.local_reconsume_delay_s)  # Java: 5 s timer
                if pq.dropped:
                    return
            offset = pq.remove(msgs)
            if offset >= 0:
                self.offsets.update(pq.mq, offset, increase_only=True)
        finally:
            self._consume_done(pq)

    async def _send_back(self, msg: ReceivedMessage, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK to the master of the message's broker (Java)."""
        addr = self.instance.master_addr(msg.queue.broker_name)
        if addr is None:
            return False
        origin = msg.restore_retry_topic(self.group)
        cmd = frames.send_back(
            commitlog_offset=msg.commitlog_offset,
            group=self.group,
            delay_level=delay_level,
            origin_msg_id=msg.msg_id,
            origin_topic=origin.topic,
            max_reconsume_times=self.config.max_reconsume_times,
        )
        try:
            await self.instance.invoke_ok(addr, cmd)
            return True
        except MQClientError as exc:
            self.log.info("send back failed", msg_id=msg.msg_id, error=str(exc))
            return False

    async def _orderly_loop(self, pq: ProcessQueue) -> None:
        """One message at a time per queue, in queue order, while the queue lock is held."""
        cfg = self.config
        with pq.consume_scope:
            while not pq.dropped:
                if not pq.locked or not pq.msgs:
                    await pq.changed.wait()
                    continue
                first = next(iter(pq.msgs.values()))
                if first.queue_offset not in pq.local_retries and not self._take([first]):
                    await trio.sleep_forever()  # over consume_limit: until the consumer stops
                self._consuming += 1
                try:
                    status = await self._run_listener([first])
                    if pq.dropped:
                        return
                    if status is None or status in (OrderlyResult.SUCCESS, ConsumeResult.SUCCESS,
                                                    True):
                        self.consumed_ok += 1
                        done = True
                    else:
                        self.consumed_failed += 1
                        tries = pq.local_retries.get(first.queue_offset, 0) + 1
                        pq.local_retries[first.queue_offset] = tries
                        done = tries >= cfg.max_reconsume_times and await self._send_back(
                            first, -1)  # exhausted: straight to the DLQ
                        if not done:
                            await trio.sleep(cfg.orderly_suspend_s)  # Java suspend timer
                    if done:
                        pq.local_retries.pop(first.queue_offset, None)
                        offset = pq.remove([first])
                        if offset >= 0:
                            self.offsets.update(pq.mq, offset, increase_only=True)
                finally:
                    self._consuming -= 1
                    if not self._consuming:
                        self._idle.set()
                        self._idle = trio.Event()

    # ------------------------------------------------------------------ broker -> client

    def running_info(self) -> bytes:
        """ConsumerRunningInfo (properties, subscriptions, per-queue state), fastjson-shaped."""
        props = {
            "PROP_CLIENT_VERSION": "V4_9_7",
            "PROP_CONSUME_TYPE": ConsumeType.PUSH.value,
            "PROP_CONSUMEORDERLY": str(self.config.orderly).lower(),
            "PROP_THREADPOOL_CORE_SIZE": str(self.config.consume_concurrency),
            "PROP_CONSUMER_START_TIMESTAMP": str(now_ms()),
            "messageModel": self.config.message_model.value,
            "consumeFromWhere": self.config.consume_from.value,
        }
        mq_pairs = []
        for mq, pq in sorted(self.process_queues.items()):
            mq_pairs.append((mq.to_json_obj(), {
                "cachedMsgCount": len(pq.msgs),
                "cachedMsgMaxOffset": pq.max_offset,
                "droped": pq.dropped,
                "locked": pq.locked,
                "commitOffset": self.offsets.read(mq) or 0,
            }))
        subs = fastjson.dumps([s.to_json_obj() for s in self.subscriptions.values()])
        return (b'{"jstack":"","mqTable":' + object_key_map(mq_pairs) + b',"properties":'
                + fastjson.dumps(props) + b',"statusTable":{},"subscriptionSet":' + subs + b"}")

    async def consume_directly(self, body: bytes, broker_name: str | None) -> bytes:
        """CONSUME_MESSAGE_DIRECTLY: the listener on the one message in ``body`` (inflated
        within ``max_message_bytes``), within the consumer's consume concurrency."""
        start = time.monotonic()
        try:
            rec = next(iter_records(body, check_crc=False))
            msg = ReceivedMessage.from_stored(rec, broker_name or "",
                                              max_body_bytes=self.config.max_message_bytes)
        except (StopIteration, ValueError) as exc:
            return orjson.dumps({"autoCommit": True, "consumeResult": "CR_THROW_EXCEPTION",
                                 "order": False, "remark": str(exc), "spentTimeMills": 0})
        status = await self._run_listener([msg])  # within the consume concurrency
        ok = status is None or status in (ConsumeResult.SUCCESS, OrderlyResult.SUCCESS, True)
        result = {
            "autoCommit": True,
            "consumeResult": "CR_SUCCESS" if ok else (
                "CR_THROW_EXCEPTION" if status is _FAILED else "CR_LATER"),
            "order": self.config.orderly,
            "spentTimeMills": int((time.monotonic() - start) * 1000),
        }
        return fastjson.dumps(result)

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: drop the queues, store the new offsets, rebalance.
        Only queues of ``topic`` this consumer knows (its route, its assignment) are reset."""
        known = set(self.topic_queues.get(topic) or ()) | {
            mq for mq in self.process_queues if mq.topic == topic}
        wanted = {mq: off for mq, off in offsets.items() if mq in known}
        if len(wanted) < len(offsets):
            self.log.warning("reset offset: unknown queues ignored", topic=topic,
                             ignored=len(offsets) - len(wanted))
        offsets = wanted
        for mq, offset in offsets.items():
            pq = self.process_queues.pop(mq, None)
            if pq is not None:
                pq.dropped = True
                pq.scope.cancel()
                pq._poke()
            self.offsets.update(mq, offset)
        await self.offsets.persist(list(offsets), sync=True)
        for mq in offsets:
            self.offsets.remove(mq)
        self.instance.rebalance_soon()


_FAILED = object()


def _return_type(status: Any) -> ConsumeReturnType:
    """A listener's answer as a SubAfter record's context code."""
    if status is None or status is True or status in (ConsumeResult.SUCCESS,
                                                      OrderlyResult.SUCCESS):
        return ConsumeReturnType.SUCCESS  # None and True count as success here (as above)
    if status is _FAILED:
        return ConsumeReturnType.EXCEPTION
    return ConsumeReturnType.FAILED


def _is_async_callable(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))  # noqa: B004 - callables with async __call__


async def _logged(log: Any, fn: Callable[..., Any], *args: Any) -> None:
    """A consumer task: exceptions are logged (a crash would cancel the consumer's owner)."""
    try:
        await fn(*args)
    except Exception:
        log.exception("consumer task failed", task=getattr(fn, "__qualname__", repr(fn)))


# =========================================================================== pull consumer


@attrs.define
class _Assigned:
    mq: MessageQueue
    offset: int
    consumed: int
    generation: int = 0
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    paused: bool = False


class PullConsumer:
    """Assign queues, seek, and poll batches (Java ``DefaultLitePullConsumer`` in assign mode);
    ``pull`` is the raw one-shot call (Java ``DefaultMQPullConsumer.pull``). Consumed offsets
    are committed to the broker every ``persist_offset_interval_s`` when ``auto_commit``."""

    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | None = None,
        instance: ClientInstance | None = None,
        client_config: ClientConfig | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        expression: str = "*",
        consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE,
        suspend_s: float = 5.0,
        auto_commit: bool = True,
        buffered_batches: int = 64,
        pull_error_backoff_s: float = PULL_ERROR_BACKOFF_S,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        enable_msg_trace: bool = False,
        trace_topic: str = DEFAULT_TRACE_TOPIC,
    ) -> None:
        if max_message_bytes < 1:
            raise MQClientError(f"max_message_bytes must be positive, not {max_message_bytes}")
        self.group = group
        self._own_instance = instance is None
        if instance is None:
            instance = own_instance(client_config, namesrv_addr, access_key, secret_key)
        self.instance = instance
        self.log = instance.log.bind(consumer=group)
        self.expression = expression
        self.consume_from = consume_from
        self.pull_batch_size = pull_batch_size
        self.suspend_s = suspend_s
        self.auto_commit = auto_commit
        self.pull_error_backoff_s = pull_error_backoff_s
        self.pull_api = PullApi(instance, group, log=self.log,
                                max_message_bytes=max_message_bytes)
        self.offsets = RemoteOffsetStore(instance, group)
        self.assigned: dict[MessageQueue, _Assigned] = {}
        self.subs: dict[str, SubscriptionData] = {}
        #: (queue, generation, messages, the offset past the batch's last message or skipped one)
        self._send, self._recv = trio.open_memory_channel[
            tuple[MessageQueue, int, list[ReceivedMessage], int]](buffered_batches)
        self._nursery: trio.Nursery | None = None
        self._stack: AsyncExitStack | None = None
        self.running = False
        self.enable_msg_trace = enable_msg_trace
        self.trace_topic = trace_topic
        #: set while running with ``enable_msg_trace``: each polled message gets a SubBefore
        #: and a successful SubAfter (a poll hands messages over; their processing is unseen)
        self.tracer: TraceDispatcher | None = None

    async def __aenter__(self) -> PullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._own_instance:
            await self.instance.__aenter__()
        stack = AsyncExitStack()
        await stack.__aenter__()
        self._nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(self._nursery.cancel_scope.cancel)
        self._stack = stack
        self.instance.register_consumer(self)
        self.running = True
        self.tracer = await start_tracer(self.instance, self.group, "sub",
                                         self.enable_msg_trace, self.trace_topic)

    async def close(self) -> None:
        if not self.running:
            return
        self.running = False
        self.instance.unregister_consumer(self.group)
        tracer, self.tracer = self.tracer, None
        if tracer is not None:  # not in a scope of its own: its producer's nursery must close
            await tracer.close()
        try:
            with trio.CancelScope(shield=True):
                if self.auto_commit:
                    await self.commit()
                with trio.move_on_after(self.instance.config.call_timeout_s):
                    await self.instance.unregister_client(None, self.group)
        except MQClientError as exc:
            self.log.info("shutdown step failed", error=str(exc))
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                await stack.aclose()
        finally:
            if self._own_instance:
                await self.instance.__aexit__(None, None, None)

    # hooks for the instance
    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, ConsumeType.PULL.value, MessageModel.CLUSTERING.value,
                            self.consume_from.value, tuple(self.subs.values()))

    def subscribed_topics(self) -> list[str]:
        return sorted({mq.topic for mq in self.assigned})

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        pass

    async def do_rebalance(self) -> None:
        pass

    async def persist_offsets(self) -> None:
        if self.auto_commit:
            self._sync_consumed()
            await self.offsets.persist(list(self.assigned))

    def running_info(self) -> bytes:
        return b'{"jstack":"","mqTable":{},"properties":{},"statusTable":{},"subscriptionSet":[]}'

    async def consume_directly(self, body: bytes, broker_name: str | None) -> bytes:
        return fastjson.dumps({"autoCommit": True, "consumeResult": "CR_LATER", "order": False,
                               "remark": "pull consumer", "spentTimeMills": 0})

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        for mq, off in offsets.items():
            if mq.topic == topic and mq in self.assigned:
                self.seek(mq, off)

    # API
    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.update_route(topic)
        if route is None:
            raise NoRouteError(f"no route for topic {topic!r}")
        return subscribe_queues(topic, route)

    async def assign(self, mqs: Iterable[MessageQueue], expression: str | None = None) -> None:
        """Consume exactly these queues, from the committed offset (else by consume_from)."""
        wanted = set(mqs)
        for mq in list(self.assigned):
            if mq not in wanted:
                st = self.assigned.pop(mq)
                st.scope.cancel()
        for mq in sorted(wanted):
            if mq.topic not in self.subs:
                self.subs[mq.topic] = build_subscription(
                    mq.topic, expression or self.expression, now_ms())
            if mq in self.assigned:
                continue
            if mq.topic not in self.instance.routes:
                await self.instance.update_route(mq.topic)
            offset = await self._start_offset(mq)
            st = _Assigned(mq, offset, offset)
            self.assigned[mq] = st
            self._spawn(self._fetch_loop, st)
        await self.instance.send_heartbeat_to_all()

    async def _start_offset(self, mq: MessageQueue) -> int:
        """The committed offset, else the consume-from position. A broker that cannot be
        reached (a master that just died, still in the cached route) gets one retry after a
        route refresh, which may point at its slave."""
        for attempt in range(2):
            try:
                offset = await self.offsets.read_from_store(mq)
                if offset < 0:
                    if self.consume_from is ConsumeFromWhere.FIRST_OFFSET:
                        offset = await self.pull_api.min_offset(mq)
                    else:
                        offset = await self.pull_api.max_offset(mq)
                return offset
            except MQRemotingError:
                if attempt:
                    raise
                await self.instance.update_route(mq.topic)
        raise AssertionError("unreachable")

    def seek(self, mq: MessageQueue, offset: int) -> None:
        st = self.assigned.get(mq)
        if st is None:
            raise MQClientError(f"{mq} is not assigned")
        st.generation += 1
        st.offset = offset
        st.consumed = offset
        st.scope.cancel()  # restart the fetch at the new offset

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        self.seek(mq, await self.pull_api.min_offset(mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        self.seek(mq, await self.pull_api.max_offset(mq))

    async def committed(self, mq: MessageQueue) -> int:
        return await self.offsets.read_from_store(mq)

    async def poll(self, timeout: float = 5.0) -> list[ReceivedMessage]:
        """The next batch of messages (one queue's pull), or [] after ``timeout``."""
        with trio.move_on_after(timeout):
            while True:
                mq, gen, msgs, past = await self._recv.receive()
                st = self.assigned.get(mq)
                if st is None or st.generation != gen:
                    continue
                if past > st.consumed:  # a skipped message counts as consumed once reached
                    st.consumed = past
                if msgs:
                    if self.tracer is not None:
                        ctx = consume_before(self.tracer, self.group, msgs)
                        if ctx is not None:
                            consume_after(self.tracer, ctx, ConsumeReturnType.SUCCESS)
                    return msgs
        return []

    def _sync_consumed(self) -> None:
        for mq, st in self.assigned.items():
            self.offsets.update(mq, st.consumed)

    async def commit(self) -> None:
        """Commit what ``poll`` returned so far (synchronously)."""
        self._sync_consumed()
        await self.offsets.persist(list(self.assigned), sync=True)

    async def pull(self, mq: MessageQueue, offset: int, *, max_nums: int = DEFAULT_PULL_BATCH_SIZE,
                   expression: str = "*", suspend_s: float = 0.0,
                   expression_type: str = "TAG") -> PullResult:
        sub = build_subscription(mq.topic, expression, 0, expression_type)
        return await self.pull_api.pull(mq, offset, sub=sub, max_nums=max_nums,
                                        suspend_s=suspend_s)

    @property
    def nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise MQClientError("consumer is not running")
        return self._nursery

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        self.nursery.start_soon(_logged, self.log, fn, *args)

    async def _fetch_loop(self, st: _Assigned) -> None:
        while self.running and self.assigned.get(st.mq) is st:
            gen = st.generation
            st.scope = trio.CancelScope()
            with st.scope:
                try:
                    result = await self.pull_api.pull(
                        st.mq, st.offset, sub=self.subs.get(st.mq.topic),
                        max_nums=self.pull_batch_size, suspend_s=self.suspend_s)
                except MQClientError as exc:
                    self.log.info("pull failed", queue=str(st.mq), error=str(exc))
                    await trio.sleep(self.pull_error_backoff_s)  # back-off timer
                    continue
                if gen != st.generation:
                    continue
                st.offset = result.next_begin_offset
                if result.messages or result.skipped:
                    past = 1 + max([m.queue_offset for m in result.messages]
                                   + [s.queue_offset for s in result.skipped])
                    await self._send.send((st.mq, gen, list(result.messages), past))
