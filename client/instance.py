"""The client instance (Java ``MQClientInstance``): one per client id, shared by the producers
and consumers given it. It owns the remoting connections (one per broker address), the route
cache and broker address table, the periodic tasks (route refresh, heartbeats, offset persist,
rebalance) and answers the broker's calls to the client.

Trio shell: this module spawns tasks and sleeps (its timers are periodic, not waits for a
condition); the request shapes live in ``frames`` and the pure logic in the other modules.
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AsyncExitStack
from typing import Any, Protocol

import attrs
import orjson
import trio

from ..cluster.acl.signing import credentials_from
from ..cluster.clock import now_ms
from ..cluster.logging import get_logger
from ..cluster.protocol import fastjson
from ..cluster.protocol.message import BodyInflateError, MessageConst
from ..cluster.protocol.names import MAX_QUEUE_NUMS
from ..cluster.protocol.route import PermName, TopicRouteData
from ..cluster.remoting.client_pool import RemotingClient, open_remoting_client
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.codes import RequestCode, ResponseCode
from ..cluster.remoting.connection import Connection
from ..cluster.remoting.errors import (
    RemotingError,
    RemotingTimeoutError,
    RemotingUnsentError,
)
from ..cluster.remoting.headers import (
    CheckTransactionStateRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    ReplyMessageRequestHeader,
    ResetOffsetRequestHeader,
)
from ..cluster.remoting.processors import checked
from . import frames
from .config import (
    AUTO_CREATE_TOPIC_KEY,
    CLIENT_INNER_PRODUCER_GROUP,
    DEFAULT_TOPIC_QUEUE_NUMS,
    ClientConfig,
    with_credentials,
)
from .errors import (
    ClientStateError,
    MQBrokerError,
    MQClientError,
    MQRemotingError,
    MQTimeoutError,
    NoRouteError,
)
from .ids import build_client_id, default_instance_name, local_ip
from .model import MessageQueue
from .request_reply import (
    RequestFutureTable,
    reply_from_push,
    reply_properties,
)
from .subscription import ConsumerData, heartbeat_body
from .suspects import SuspectRoutes

MASTER_ID = 0
#: A failing periodic task waits this long before its next round (it is logged, not fatal).
LOOP_ERROR_BACKOFF_S = 1.0
#: The remark of a broker -> client request refused because it did not come from a broker.
REFUSED_NOT_A_BROKER = "request refused: not a connection to a broker of this client"


class ProducerHook(Protocol):
    group: str

    def publish_topics(self) -> Iterable[str]: ...

    def on_route(self, topic: str, route: TopicRouteData) -> None: ...

    def on_new_master(self, broker_name: str) -> None: ...

    async def check_transaction(
        self, conn: Connection, header: CheckTransactionStateRequestHeader, body: bytes
    ) -> None: ...


class ConsumerHook(Protocol):
    group: str

    def consumer_data(self) -> ConsumerData: ...

    def subscribed_topics(self) -> Iterable[str]: ...

    def on_route(self, topic: str, route: TopicRouteData) -> None: ...

    async def do_rebalance(self) -> None: ...

    async def persist_offsets(self) -> None: ...

    def running_info(self) -> bytes: ...

    async def consume_directly(self, body: bytes, broker_name: str | None) -> bytes: ...

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None: ...


def publish_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Writable queues of brokers with a master (Java ``topicRouteData2TopicPublishInfo``)."""
    out: list[MessageQueue] = []
    if route.order_topic_conf:
        for part in route.order_topic_conf.split(";"):
            name, _, nums = part.partition(":")
            if name and nums.strip().isdigit():
                out += [MessageQueue(topic, name, i) for i in range(int(nums))]
        return out
    masters = {b.broker_name for b in route.broker_datas if MASTER_ID in b.broker_addrs}
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if PermName.is_writeable(qd.perm) and qd.broker_name in masters:
            out += [MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums)]
    return out


def subscribe_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Readable queues (Java ``topicRouteData2TopicSubscribeInfo``)."""
    out: list[MessageQueue] = []
    for qd in route.queue_datas:
        if PermName.is_readable(qd.perm):
            out += [MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums)]
    return sorted(out)


_MQ_KEY = re.compile(
    r'\{"brokerName":"(?P<b>[^"]*)","queueId":(?P<q>-?\d{1,10}),"topic":"(?P<t>[^"]*)"\}'
    r':(?P<o>-?\d{1,19})(?!\d)'
)
#: A queue offset is a Java long: anything outside [0, 2^63) in an offset table is dropped.
MAX_QUEUE_OFFSET = 2**63 - 1


def _offset_entry(topic: Any, broker: Any, queue_id: Any, offset: Any
                  ) -> tuple[MessageQueue, int] | None:
    """One checked entry of an offset table: names are strings, the queue id a valid one and
    the offset a Java long >= 0; None for anything else."""
    if not (isinstance(topic, str) and isinstance(broker, str)):
        return None
    try:
        qid, off = int(queue_id), int(offset)
    except (TypeError, ValueError):
        return None
    if not (0 <= qid < MAX_QUEUE_NUMS and 0 <= off <= MAX_QUEUE_OFFSET):
        return None
    return MessageQueue(topic, broker, qid), off


def parse_offset_table(body: bytes) -> dict[MessageQueue, int]:
    """``{"offsetTable":{{mq}:offset,...}}`` (Java, MessageQueue object keys) or the C++ form
    ``{"offsetTable":[{"brokerName","offset","queueId","topic"}]}``. Entries that are not
    well-formed (a name that is not a string, a queue id or offset out of range) are left
    out: a peer's table never raises."""
    text = bytes(body).decode("utf-8", "replace")
    out = dict(filter(None, (_offset_entry(m["t"], m["b"], m["q"], m["o"])
                             for m in _MQ_KEY.finditer(text))))
    if out:
        return out
    try:
        obj = fastjson.loads(text)
    except ValueError:
        return {}
    table = obj.get("offsetTable") if isinstance(obj, dict) else None
    if isinstance(table, list):
        for item in table:
            if isinstance(item, dict):
                entry = _offset_entry(item.get("topic"), item.get("brokerName"),
                                      item.get("queueId"), item.get("offset"))
                if entry is not None:
                    out[entry[0]] = entry[1]
    return out


def object_key_map(pairs: Iterable[tuple[Any, Any]]) -> bytes:
    """A fastjson map whose keys are objects (``{{"brokerName":..}:value}``)."""
    parts = [fastjson.dumps(k).decode() + ":" + fastjson.dumps(v).decode() for k, v in pairs]
    return ("{" + ",".join(parts) + "}").encode()


def own_instance(
    client_config: ClientConfig | None,
    namesrv_addr: str | None,
    access_key: str | None,
    secret_key: str | None,
) -> ClientInstance:
    """The instance a producer, consumer or admin makes when it is not given one: the client
    config with the NameServer address and ACL credentials it was given on top."""
    cc = with_credentials(client_config or ClientConfig(), access_key, secret_key)
    if namesrv_addr:
        cc = attrs.evolve(cc, namesrv_addr=namesrv_addr)
    return ClientInstance(cc)


class ClientInstance:
    """Use as ``async with ClientInstance(ClientConfig(namesrv_addr=...)) as inst``, then pass
    ``instance=inst`` to producers/consumers to share it; without one each makes its own."""

    def __init__(self, config: ClientConfig | None = None, **overrides: Any) -> None:
        self.config = config if config is not None else ClientConfig(**overrides)
        self.namesrv_addrs = self.config.namesrv_list()
        if not self.namesrv_addrs:
            raise MQClientError("no NameServer address: pass namesrv_addr or set NAMESRV_ADDR")
        self.client_ip = self.config.client_ip or local_ip()
        name = self.config.instance_name
        if name == "DEFAULT":
            name = default_instance_name()
        self.instance_name = name
        self.client_id = build_client_id(self.client_ip, name, self.config.unit_name)
        try:
            self._credentials = credentials_from(
                self.config.access_key, self.config.secret_key, self.config.security_token
            )
        except ValueError as exc:
            raise MQClientError(str(exc)) from None
        self.log = get_logger(node=self.client_id, role="client")
        self.routes: dict[str, TopicRouteData] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.broker_versions: dict[str, int] = {}
        self.producers: dict[str, ProducerHook] = {}
        self.consumers: dict[str, ConsumerHook] = {}
        self._ns_index = random.randrange(len(self.namesrv_addrs))
        self._remoting: RemotingClient | None = None
        self._conns: dict[str, Connection] = {}
        self._nursery: trio.Nursery | None = None
        self._stack: AsyncExitStack | None = None
        self._route_locks: dict[str, trio.Lock] = {}
        #: topics whose route is re-read fast because a broker serving them failed
        self._suspects = SuspectRoutes(self.config.failover_route_poll_s,
                                       self.config.failover_route_window_s)
        self._suspect_now = trio.Event()
        self._rebalance_now = trio.Event()
        self._heartbeat_now = trio.Event()
        self._heartbeat_lock = trio.Lock()
        #: Producer.request calls waiting for their replies, by correlation id
        self.request_futures = RequestFutureTable()
        #: transaction checks being answered (at most config.max_pending_transaction_checks)
        self._pending_checks = 0
        #: transaction checks dropped because that many were being answered already
        self.dropped_transaction_checks = 0
        self.running = False

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ClientInstance:
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            self._remoting = await stack.enter_async_context(
                open_remoting_client(self._processors(), node=self.client_id)
            )
            nursery = await stack.enter_async_context(trio.open_nursery())
            stack.callback(nursery.cancel_scope.cancel)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        self._nursery = nursery
        self.running = True
        nursery.start_soon(self._periodic, "route", self._route_interval, self.update_all_routes)
        nursery.start_soon(self._periodic_evented, "heartbeat", self._heartbeat_interval,
                           "_heartbeat_now", self.send_heartbeat_to_all)
        nursery.start_soon(self._watch_suspects)
        nursery.start_soon(self._periodic, "persist", self._persist_interval,
                           self._persist_all)
        nursery.start_soon(self._periodic_evented, "rebalance", self._rebalance_interval,
                           "_rebalance_now", self.rebalance_all)
        self.log.debug("client instance started", namesrv=";".join(self.namesrv_addrs))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.running = False
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()  # not shielded here: the nursery must exit in its own scope
        self._remoting = None
        self._nursery = None

    @property
    def nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise ClientStateError("client instance is not running")
        return self._nursery

    def _route_interval(self) -> float:
        return self.config.poll_namesrv_interval_s

    def _heartbeat_interval(self) -> float:
        return self.config.heartbeat_interval_s

    def _persist_interval(self) -> float:
        return self.config.persist_offset_interval_s

    def _rebalance_interval(self) -> float:
        return self.config.rebalance_interval_s

    async def _periodic(
        self, name: str, interval: Callable[[], float], fn: Callable[[], Awaitable[None]]
    ) -> None:
        while True:
            await trio.sleep(interval())  # a timer, not a wait for a condition
            await self._guarded(name, fn)

    async def _periodic_evented(
        self, name: str, interval: Callable[[], float], event_attr: str,
        fn: Callable[[], Awaitable[None]],
    ) -> None:
        while True:
            with trio.move_on_after(interval()):
                await getattr(self, event_attr).wait()
            setattr(self, event_attr, trio.Event())
            await self._guarded(name, fn)

    async def _guarded(self, name: str, fn: Callable[[], Awaitable[None]]) -> None:
        try:
            await fn()
        except (MQClientError, RemotingError, OSError) as exc:
            self.log.info("periodic task failed", task=name, error=str(exc))
        except Exception:
            self.log.exception("periodic task crashed", task=name)

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``fn`` in the instance's nursery; an exception is logged, never propagated (a
        crash there would cancel the task that entered the instance)."""
        self.nursery.start_soon(_logged, self.log, fn, *args)

    def rebalance_soon(self) -> None:
        self._rebalance_now.set()

    def heartbeat_soon(self) -> None:
        self._heartbeat_now.set()

    # ------------------------------------------------------------------ registration

    def register_producer(self, producer: ProducerHook) -> None:
        if producer.group in self.producers:
            raise MQClientError(f"producer group {producer.group!r} already runs in this instance")
        self.producers[producer.group] = producer

    def unregister_producer(self, group: str) -> None:
        self.producers.pop(group, None)

    def register_consumer(self, consumer: ConsumerHook) -> None:
        if consumer.group in self.consumers:
            raise MQClientError(f"consumer group {consumer.group!r} already runs in this instance")
        self.consumers[consumer.group] = consumer

    def unregister_consumer(self, group: str) -> None:
        self.consumers.pop(group, None)

    async def unregister_client(self, producer_group: str | None, consumer_group: str | None
                                ) -> None:
        """Tell every broker this client left the group (Java unregisterClientWithLock)."""
        cmd = frames.unregister_client(self.client_id, producer_group, consumer_group)

        async def one(addr: str) -> None:
            try:
                await self.invoke(addr, cmd, self.config.call_timeout_s)
            except MQClientError as exc:
                self.log.debug("unregister failed", addr=addr, error=str(exc))

        async with trio.open_nursery() as n:
            for addrs in list(self.broker_addrs.values()):
                for addr in set(addrs.values()):
                    n.start_soon(one, addr)

    # ------------------------------------------------------------------ calls

    @property
    def remoting(self) -> RemotingClient:
        if self._remoting is None:
            raise ClientStateError("client instance is not running")
        return self._remoting

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float | None = None
                     ) -> RemotingCommand:
        """One call; remoting failures become ``MQRemotingError`` (``MQTimeoutError``)."""
        t = self.config.call_timeout_s if timeout is None else timeout
        if self._credentials is not None:
            cmd = self._credentials.sign(cmd)
        try:
            for attempt in (1, 2):
                conn = self._conns.get(addr)
                if conn is None or conn.is_closed:  # (re)connect; the fast path skips the pool
                    start = trio.current_time()
                    with trio.move_on_after(t):
                        conn = await self.remoting.connection(addr)
                    if conn is None or conn.is_closed:
                        raise MQTimeoutError(f"connecting to {addr} took longer than {t:g}s",
                                             addr=addr)
                    self._conns[addr] = conn
                    t = max(0.0, t - (trio.current_time() - start))
                try:
                    return await conn.invoke(cmd, t)
                except RemotingUnsentError:
                    if attempt == 2:
                        raise
                    # the connection was found closed before the request went out (nothing
                    # reached the broker): once more on a new connection
            raise AssertionError("unreachable")
        except RemotingTimeoutError as exc:
            raise MQTimeoutError(str(exc), addr=addr) from exc
        except RemotingError as exc:
            raise MQRemotingError(str(exc), addr=addr) from exc
        except ValueError as exc:  # a malformed address
            raise MQRemotingError(str(exc), addr=addr) from exc

    async def invoke_ok(self, addr: str, cmd: RemotingCommand, timeout: float | None = None,
                        ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        resp = await self.invoke(addr, cmd, timeout)
        if resp.code not in ok:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return resp

    def sign(self, cmd: RemotingCommand) -> RemotingCommand:
        """``cmd`` signed with this instance's ACL credentials (as is without any)."""
        return cmd if self._credentials is None else self._credentials.sign(cmd)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        cmd = self.sign(cmd)
        try:
            await self.remoting.invoke_oneway(addr, cmd)
        except RemotingError as exc:
            raise MQRemotingError(str(exc), addr=addr) from exc

    async def invoke_namesrv(self, cmd: RemotingCommand, timeout: float | None = None
                             ) -> RemotingCommand:
        """Call the current NameServer; on a remoting failure move on to the next one."""
        last: MQRemotingError | None = None
        n = len(self.namesrv_addrs)
        for i in range(n):
            addr = self.namesrv_addrs[(self._ns_index + i) % n]
            try:
                resp = await self.invoke(addr, cmd, timeout)
            except MQRemotingError as exc:
                last = exc
                self.log.info("namesrv call failed, trying the next", addr=addr, error=str(exc))
                continue
            self._ns_index = (self._ns_index + i) % n
            return resp
        assert last is not None
        raise last

    # ------------------------------------------------------------------ routes

    async def fetch_route(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC; NoRouteError (code 17) when the NameServer has none."""
        resp = await self.invoke_namesrv(frames.get_route(topic))
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise NoRouteError(f"no route for topic {topic!r}", code=resp.code, remark=resp.remark)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, "namesrv")
        return TopicRouteData.decode(bytes(resp.body))

    async def update_route(self, topic: str, *, use_default: bool = False) -> TopicRouteData | None:
        """Refresh one topic's route and tell the producers/consumers using it. ``use_default``:
        a topic unknown to the NameServer takes TBW102's route (auto-create on first send)."""
        lock = self._route_locks.setdefault(topic, trio.Lock())
        async with lock:
            try:
                route = await self.fetch_route(topic)
            except NoRouteError:
                if not use_default:
                    return None
                try:
                    tmpl = await self.fetch_route(AUTO_CREATE_TOPIC_KEY)
                except NoRouteError:
                    return None
                route = _default_route(tmpl)
            old = self.routes.get(topic)
            if old != route:
                self._apply_route(topic, route)
            return route

    def _apply_route(self, topic: str, route: TopicRouteData) -> None:
        self.routes[topic] = route
        new_addr = False
        for bd in route.broker_datas:
            known = self.broker_addrs.get(bd.broker_name)
            if known != dict(bd.broker_addrs):
                new_addr = new_addr or not known or bool(
                    set(bd.broker_addrs.values()) - set(known.values())
                )
                self.broker_addrs[bd.broker_name] = dict(bd.broker_addrs)
        for p in list(self.producers.values()):
            if topic in set(p.publish_topics()):
                p.on_route(topic, route)
        for c in list(self.consumers.values()):
            if topic in set(c.subscribed_topics()):
                c.on_route(topic, route)
        if new_addr:
            self.heartbeat_soon()

    async def update_all_routes(self) -> None:
        topics: set[str] = set()
        for p in list(self.producers.values()):
            topics.update(p.publish_topics())
        for c in list(self.consumers.values()):
            topics.update(c.subscribed_topics())
        async with trio.open_nursery() as n:
            for topic in topics:
                n.start_soon(self._update_quietly, topic)
        self._clean_offline_brokers()

    async def _update_quietly(self, topic: str) -> None:
        try:
            await self.update_route(topic, use_default=any(
                topic in set(p.publish_topics()) for p in self.producers.values()))
        except MQClientError as exc:
            self.log.info("route update failed", topic=topic, error=str(exc))

    async def refresh_after_failure(self, topic: str, broker_name: str) -> bool:
        """``broker_name`` failed serving ``topic`` (no answer, not available, or no master in
        the route): re-read the route now unless that was just done, and keep re-reading it
        until a new master shows up (client/suspects.py). True if the broker's master address
        changed."""
        before = self.master_addr(broker_name)
        now = trio.current_time()
        self._suspects.mark(topic, broker_name, before, now)
        self._suspect_now.set()
        if self._suspects.fetch_due(topic, now):
            await self._refresh_suspect(topic)
        return self.master_addr(broker_name) not in (before, None)

    async def _refresh_suspect(self, topic: str) -> None:
        self._suspects.fetched(topic, trio.current_time())
        await self._update_quietly(topic)
        for broker in self._suspects.settle(topic, self.master_addr):
            self.log.info("new master in the route", topic=topic, broker=broker,
                          addr=self.master_addr(broker))
            for p in list(self.producers.values()):
                p.on_new_master(broker)

    async def _watch_suspects(self) -> None:
        """Re-read suspect topics' routes every ``failover_route_poll_s`` while any remain."""
        while True:
            topics = self._suspects.topics(trio.current_time())
            if not topics:
                await self._suspect_now.wait()
                self._suspect_now = trio.Event()
                continue
            for topic in topics:
                if self._suspects.fetch_due(topic, trio.current_time()):
                    await self._refresh_suspect(topic)
            with trio.move_on_after(self.config.failover_route_poll_s):  # the poll period
                await self._suspect_now.wait()
            self._suspect_now = trio.Event()

    def _clean_offline_brokers(self) -> None:
        live: dict[str, set[str]] = {}
        for route in self.routes.values():
            for bd in route.broker_datas:
                live.setdefault(bd.broker_name, set()).update(bd.broker_addrs.values())
        for name in list(self.broker_addrs):
            if name not in live:
                del self.broker_addrs[name]

    def find_broker_addr(
        self, broker_name: str, broker_id: int = MASTER_ID, *, only_this: bool = False
    ) -> tuple[str, bool] | None:
        """(address, is_slave): the given id, else (unless ``only_this``) any broker of the
        group (Java ``findBrokerAddressInSubscribe``)."""
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        if addr is not None:
            return addr, broker_id != MASTER_ID
        if only_this:
            return None
        bid = min(addrs)
        return addrs[bid], bid != MASTER_ID

    def master_addr(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    async def broker_addr_for_topic(self, topic: str) -> str:
        """Any broker address serving ``topic`` (Java ``findBrokerAddrByTopic``)."""
        route = self.routes.get(topic) or await self.update_route(topic)
        if route is None or not route.broker_datas:
            raise NoRouteError(f"no route for topic {topic!r}")
        for bd in route.broker_datas:
            addr = bd.select_broker_addr()
            if addr:
                return addr
        raise NoRouteError(f"no broker address for topic {topic!r}")

    # ------------------------------------------------------------------ heartbeats

    def heartbeat_data(self) -> tuple[bytes, bool] | None:
        consumers = [c.consumer_data() for c in self.consumers.values()]
        groups = [*self.producers]
        if not consumers and not groups:
            return None
        groups.append(CLIENT_INNER_PRODUCER_GROUP)
        return heartbeat_body(self.client_id, groups, consumers), bool(consumers)

    async def send_heartbeat_to_all(self) -> None:
        """HEART_BEAT to every broker (producer-only instances: masters only)."""
        async with self._heartbeat_lock:
            data = self.heartbeat_data()
            if data is None:
                return
            body, has_consumers = data

            async def one(addr: str) -> None:
                try:
                    resp = await self.invoke(addr, frames.heartbeat(body))
                    self.broker_versions[addr] = resp.version
                    if resp.code != ResponseCode.SUCCESS:
                        self.log.info("heartbeat refused", addr=addr, code=resp.code,
                                      remark=resp.remark)
                except MQClientError as exc:
                    self.log.info("heartbeat failed", addr=addr, error=str(exc))

            async with trio.open_nursery() as n:
                for addrs in list(self.broker_addrs.values()):
                    for bid, addr in addrs.items():
                        if bid != MASTER_ID and not has_consumers:
                            continue
                        n.start_soon(one, addr)

    # ------------------------------------------------------------------ consumers

    async def rebalance_all(self) -> None:
        for c in list(self.consumers.values()):
            try:
                await c.do_rebalance()
            except MQClientError as exc:
                self.log.info("rebalance failed", group=c.group, error=str(exc))

    async def _persist_all(self) -> None:
        for c in list(self.consumers.values()):
            await c.persist_offsets()

    async def consumer_id_list(self, topic: str, group: str) -> list[str]:
        addr = await self.broker_addr_for_topic(topic)
        resp = await self.invoke_ok(addr, frames.get_consumer_list(group))
        obj = fastjson.loads(bytes(resp.body)) if resp.body else {}
        return [str(x) for x in (obj.get("consumerIdList") or [])]

    # ------------------------------------------------------------------ broker -> client

    def _processors(self) -> dict[int, Any]:
        rc = RequestCode
        table = {
            rc.NOTIFY_CONSUMER_IDS_CHANGED: self._on_notify_ids_changed,
            rc.CHECK_TRANSACTION_STATE: self._on_check_transaction,
            rc.GET_CONSUMER_RUNNING_INFO: self._on_running_info,
            rc.CONSUME_MESSAGE_DIRECTLY: self._on_consume_directly,
            rc.RESET_CONSUMER_CLIENT_OFFSET: self._on_reset_offset,
            rc.PUSH_REPLY_MESSAGE_TO_CLIENT: self._on_push_reply,
        }
        return {code: checked(p, self._broker_only) for code, p in table.items()}

    def is_broker_connection(self, conn: Connection) -> bool:
        """Whether ``conn`` is a connection this client opened to a broker it knows from the
        routes (the client listens on no port: every connection is one it opened, but a
        NameServer's or any other address's is not a broker's)."""
        known = {a for addrs in self.broker_addrs.values() for a in addrs.values()}
        return conn.peer in known or any(self._conns.get(a) is conn for a in known)

    def _broker_only(self, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
        """The gate in front of every broker -> client request: refused unless it comes on a
        connection to a known broker."""
        if self.is_broker_connection(conn):
            return None
        self.log.warning("request refused: not from a broker this client knows",
                         code=req.code, peer=conn.peer)
        return req.response(ResponseCode.SYSTEM_ERROR, REFUSED_NOT_A_BROKER)

    def _on_push_reply(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        """A reply to one of our requests (Java ``receiveReplyMessage``). Only a reply whose
        correlation id names a request still waiting is read, and only within that request's
        ``max_message_bytes`` (before and after inflation); any other is dropped with a
        logged reason before its body is touched. SUCCESS unless the reply was refused."""
        try:
            header = ReplyMessageRequestHeader.from_ext_fields(req.ext_fields)
            props = reply_properties(header)
        except ValueError as exc:
            self.log.warning("reply dropped: bad header", error=str(exc), peer=conn.peer)
            return req.response(ResponseCode.SYSTEM_ERROR, "process reply message fail")
        cid = props.get(MessageConst.PROPERTY_CORRELATION_ID)
        fut = self.request_futures.waiting(cid)
        if fut is None:
            self.log.warning("reply dropped: no request waits for it", correlation_id=cid,
                             born_host=header.born_host, body_bytes=len(req.body))
            return req.response(ResponseCode.SUCCESS)  # as Java: a late reply is no error
        try:
            if len(req.body) > fut.max_body_bytes:
                raise BodyInflateError(f"reply body of {len(req.body)} bytes is over "
                                       f"{fut.max_body_bytes} (max_message_bytes)")
            reply = reply_from_push(header, bytes(req.body), now_ms(),
                                    max_body_bytes=fut.max_body_bytes, properties=props)
        except BodyInflateError as exc:
            self.log.warning("reply refused", correlation_id=cid, born_host=header.born_host,
                             reason=str(exc))
            fut.fail(str(exc))
            return req.response(ResponseCode.SYSTEM_ERROR, "process reply message fail")
        self.request_futures.deliver(reply)
        return req.response(ResponseCode.SUCCESS)

    def _on_notify_ids_changed(self, conn: Connection, req: RemotingCommand
                               ) -> RemotingCommand | None:
        try:
            group = NotifyConsumerIdsChangedRequestHeader.from_ext_fields(
                req.ext_fields).consumer_group
        except ValueError:
            group = "?"
        self.log.debug("consumer ids changed", group=group, broker=conn.peer)
        self.rebalance_soon()
        return None

    async def _on_check_transaction(self, conn: Connection, req: RemotingCommand
                                    ) -> RemotingCommand | None:
        try:
            header = CheckTransactionStateRequestHeader.from_ext_fields(req.ext_fields)
        except ValueError as exc:
            self.log.warning("bad transaction check", error=str(exc))
            return None
        from ..cluster.protocol.message import MessageConst, iter_records

        group = None
        try:
            for rec in iter_records(bytes(req.body), check_crc=False):
                group = rec.properties.get(MessageConst.PROPERTY_PRODUCER_GROUP)
                break
        except ValueError:
            group = None
        producer = self.producers.get(group or "")
        if producer is None:
            self.log.info("transaction check for an unknown group", group=group)
            return None
        if self._pending_checks >= self.config.max_pending_transaction_checks:
            self.dropped_transaction_checks += 1
            self.log.warning("transaction check dropped: too many pending", group=group,
                             pending=self._pending_checks, transaction_id=header.transaction_id,
                             dropped_total=self.dropped_transaction_checks)
            return None  # the broker checks again later
        self._pending_checks += 1
        self.spawn(self._check_transaction, producer, conn, header, bytes(req.body))
        return None

    async def _check_transaction(self, producer: ProducerHook, conn: Connection,
                                 header: CheckTransactionStateRequestHeader, body: bytes) -> None:
        try:
            await producer.check_transaction(conn, header, body)
        finally:
            self._pending_checks -= 1

    def _on_running_info(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        header = GetConsumerRunningInfoRequestHeader.from_ext_fields(req.ext_fields)
        consumer = self.consumers.get(header.consumer_group)
        if consumer is None:
            return req.response(ResponseCode.SYSTEM_ERROR, _no_group(header.consumer_group))
        return req.response(ResponseCode.SUCCESS, body=consumer.running_info())

    async def _on_consume_directly(self, conn: Connection, req: RemotingCommand
                                   ) -> RemotingCommand:
        header = ConsumeMessageDirectlyResultRequestHeader.from_ext_fields(req.ext_fields)
        consumer = self.consumers.get(header.consumer_group)
        if consumer is None:
            return req.response(ResponseCode.SYSTEM_ERROR, _no_group(header.consumer_group))
        body = await consumer.consume_directly(bytes(req.body), header.broker_name)
        return req.response(ResponseCode.SUCCESS, body=body)

    async def _on_reset_offset(self, conn: Connection, req: RemotingCommand
                               ) -> RemotingCommand | None:
        header = ResetOffsetRequestHeader.from_ext_fields(req.ext_fields)
        consumer = self.consumers.get(header.group)
        if consumer is None or header.topic not in set(consumer.subscribed_topics()):
            self.log.info("reset offset for a group or topic not consumed here",
                          group=header.group, topic=header.topic)
            return None
        offsets = parse_offset_table(bytes(req.body))
        await consumer.reset_offsets(header.topic, offsets)
        return None


def _no_group(group: str) -> str:
    return f"The Consumer Group <{group}> not exist in this consumer"


async def _logged(log: Any, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    try:
        await fn(*args)
    except Exception:
        log.exception("background task failed", task=getattr(fn, "__qualname__", repr(fn)))


def _default_route(tmpl: TopicRouteData) -> TopicRouteData:
    """TBW102's route with each broker's queues capped at defaultTopicQueueNums (Java)."""
    import attrs

    qds = tuple(
        attrs.evolve(
            q,
            read_queue_nums=min(DEFAULT_TOPIC_QUEUE_NUMS, q.read_queue_nums),
            write_queue_nums=min(DEFAULT_TOPIC_QUEUE_NUMS, q.read_queue_nums),
        )
        for q in tmpl.queue_datas
    )
    return attrs.evolve(tmpl, queue_datas=qds)


def json_body(obj: Any) -> bytes:
    return orjson.dumps(obj)
