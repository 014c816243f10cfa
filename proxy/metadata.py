"""What the proxy reads from the brokers' configs, as Apache's proxy does through its metadata
service, and keeps for a while: a topic's 5.x message type (GET_TOPIC_CONFIG on a master of the
topic's route: QueryRoute's accepted types, and a send to a topic no broker has is refused) and
a subscription group's policy (GET_ALL_SUBSCRIPTIONGROUP_CONFIG on a master of a topic the
group consumes: whether it consumes in order, its retries).
A read whose connection was lost under it is made once more on a new connection (calls.py).

An answer is kept ``ttl_s`` (a topic or group no broker has, ``missing_ttl_s``: one created a
moment later is seen soon), at most ``max_entries`` of each kind. A lookup the brokers could
not answer (no master, a timeout, a refusal) is kept for no time: the last known answer
stands; with none, a topic reads as "unknown" (the caller goes on as it did before it knew:
the broker still checks a send's type) and a group's lookup fails (the receive that asked
is refused: a FIFO group's receive never pops unordered for want of its config)."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Final, Generic, TypeVar

from ..client.errors import MQClientError, NoRouteError
from ..client.frames import request
from ..client.instance import ClientInstance
from ..cluster.logging import get_logger
from ..cluster.remoting.codes import RequestCode, ResponseCode
from . import convert
from .calls import fetch_route, idempotent_call
from .pb import definition_pb2 as pb

log = get_logger(node="proxy", component="metadata")
#: how long a topic's or group's config is trusted (Apache's proxy refreshes its caches
#: after 20 s: ``topicConfigCacheRefreshSeconds``, ``subscriptionGroupConfigCacheRefreshSeconds``)
DEFAULT_TTL_S: Final = 20.0
#: how long "no broker has it" is trusted
DEFAULT_MISSING_TTL_S: Final = 2.0
#: topics, and groups, kept at most (the oldest goes first)
DEFAULT_MAX_ENTRIES: Final = 4096
#: how long one config read may take: an SDK's startup waits for the Settings answer a
#: group's read holds up (the Python SDK 10 s), so a master that does not answer costs less
DEFAULT_READ_TIMEOUT_S: Final = 3.0

T = TypeVar("T")


class _Cache(Generic[T]):
    """Values by key with a time they are fresh until; an expired one is kept (the last known,
    for when a reload fails) until ``max_entries`` pushes it out, oldest first."""

    def __init__(self, max_entries: int, clock: Callable[[], float]) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._entries: dict[str, tuple[float, T]] = {}

    def get(self, key: str) -> tuple[bool, T] | None:
        """(fresh, the value known, fresh or not); None when none is."""
        hit = self._entries.get(key)
        if hit is None:
            return None
        return hit[0] > self.clock(), hit[1]

    def put(self, key: str, value: T, ttl_s: float) -> None:
        self._entries.pop(key, None)
        while len(self._entries) >= self.max_entries:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = (self.clock() + ttl_s, value)


class ProxyMetadata:
    def __init__(self, instance: ClientInstance, *, ttl_s: float = DEFAULT_TTL_S,
                 missing_ttl_s: float = DEFAULT_MISSING_TTL_S,
                 max_entries: int = DEFAULT_MAX_ENTRIES,
                 read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.instance = instance
        self.read_timeout_s = read_timeout_s
        self.ttl_s = ttl_s
        self.missing_ttl_s = missing_ttl_s
        self._topics: _Cache[convert.TopicInfo | None] = _Cache(max_entries, clock)
        self._groups: _Cache[convert.GroupPolicy | None] = _Cache(max_entries, clock)

    async def topic(self, topic: str) -> convert.TopicInfo | None:
        """``topic``'s info (``convert.MISSING_TOPIC`` when no broker has it); when the brokers
        cannot say, the last known (None: none)."""
        hit = self._topics.get(topic)
        if hit is not None and hit[0]:
            return hit[1]
        info = await self._load_topic(topic)
        if info is None:
            return None if hit is None else hit[1]
        self._topics.put(topic, info, self.ttl_s if info.exists else self.missing_ttl_s)
        return info

    async def group(self, group: str, topic: str, broker_addr: str | None = None
                    ) -> convert.GroupPolicy | None:
        """The policy of ``group`` (consuming ``topic``), asked of ``broker_addr`` (else of a
        master of ``topic``'s route); None when the broker has no such group. When the broker
        cannot say, the last known (a failing master does not turn an orderly group's receive
        into a disorderly one); with none known, the lookup's error (MQClientError, or
        ProxyError for an answer that does not parse): "no such group" is never guessed."""
        hit = self._groups.get(group)
        if hit is not None and hit[0]:
            return hit[1]
        try:
            addrs = [broker_addr] if broker_addr else (await self._masters(topic))[:1]
            policy = None
            for addr in addrs:
                cmd = request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
                resp = await idempotent_call(partial(self.instance.invoke_ok, addr, cmd),
                                             self.read_timeout_s, "group configs")
                policy = convert.group_policy(bytes(resp.body or b""), group)
        except (MQClientError, ValueError) as exc:
            log.info("group config unknown", group=group, topic=topic, error=str(exc)[:200],
                     last_known=hit is not None)
            if hit is not None:
                return hit[1]
            if isinstance(exc, ValueError):
                raise convert.ProxyError(pb.INTERNAL_SERVER_ERROR,
                                         f"group {group}'s config unreadable: {exc}") from exc
            raise
        self._groups.put(group, policy, self.ttl_s if policy is not None else self.missing_ttl_s)
        return policy

    async def _masters(self, topic: str) -> list[str]:
        route = await fetch_route(self.instance, topic, self.read_timeout_s)
        return [addr for bd in sorted(route.broker_datas, key=lambda b: b.broker_name)
                if (addr := bd.broker_addrs.get(convert.MASTER_ID))]

    async def _load_topic(self, topic: str) -> convert.TopicInfo | None:
        try:
            masters = await self._masters(topic)
        except NoRouteError:
            return convert.MISSING_TOPIC
        except MQClientError as exc:
            log.info("topic config unknown", topic=topic, error=str(exc)[:200])
            return None
        for addr in masters:
            try:
                cmd = request(RequestCode.GET_TOPIC_CONFIG, {"topic": topic})
                resp = await idempotent_call(partial(self.instance.invoke, addr, cmd),
                                             self.read_timeout_s, "topic config")
                if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                    continue
                if resp.code == ResponseCode.SUCCESS:
                    return convert.topic_info(bytes(resp.body or b""))
                log.info("topic config refused", topic=topic, addr=addr, code=resp.code)
            except (MQClientError, ValueError) as exc:
                log.info("topic config unknown", topic=topic, addr=addr, error=str(exc)[:200])
            return None
        return convert.MISSING_TOPIC
