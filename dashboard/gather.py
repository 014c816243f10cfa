"""What each page shows, asked of the cluster through the admin protocol only (so the pages
work against Apache's nodes too). A broker that does not answer shows as an error in its row,
never as a failed page."""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs
import trio

from ..client.admin import (
    DLQ_GROUP_TOPIC_PREFIX,
    Admin,
    QueueProgress,
    controller_sync_state,
)
from ..client.errors import MQClientError, NoRouteError
from ..client.model import MessageQueue, ReceivedMessage
from ..cluster.protocol.message import decode_offset_msg_id
from ..cluster.protocol.trace import TraceType, TraceView

T = TypeVar("T")
RETRY_PREFIX = "%RETRY%"
#: topics the brokers make for themselves (not the user's)
SYSTEM_TOPICS = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "BenchmarkTest",
    "TRANS_CHECK_MAX_TIME_TOPIC",
})
_HA_SLAVE = re.compile(r"addr=(?P<addr>\S+) ackOffset=(?P<ack>-?\d+) diff=(?P<diff>-?\d+)")


async def attempt(fn: Callable[[], Awaitable[T]]) -> T | str:
    """The call's value, or the reason it failed as one line (shown in its row)."""
    try:
        return await fn()
    except (MQClientError, OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


async def gather_all(calls: dict[str, Callable[[], Awaitable[T]]]) -> dict[str, T | str]:
    """Each call side by side, each failing on its own."""
    out: dict[str, T | str] = {}

    async def one(key: str, fn: Callable[[], Awaitable[T]]) -> None:
        out[key] = await attempt(fn)

    async with trio.open_nursery() as n:
        for key, fn in calls.items():
            n.start_soon(one, key, fn)
    return out


def topic_kind(topic: str) -> str:
    if topic.startswith(RETRY_PREFIX):
        return "retry"
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "dlq"
    if topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_") or topic.startswith("RMQ_SYS_"):
        return "system"
    return "normal"


def _first(text: str | None) -> float:
    """``"12.50 0.0 0.0"`` (a TPS triple) -> 12.5; anything unreadable -> 0."""
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


def _int(text: Any, default: int = 0) -> int:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return default


@attrs.frozen
class BrokerRow:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    role: str
    version: str = ""
    disk_ratio: float = -1.0
    put_tps: float = 0.0
    get_tps: float = 0.0
    max_offset: int = 0
    runtime: str = ""
    error: str | None = None
    info: dict[str, str] = attrs.field(factory=dict, eq=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.broker_name}/{self.broker_id}"


def _role(broker_id: int, info: dict[str, str]) -> str:
    if "dLegerRole" in info:
        return f"DLEDGER {info['dLegerRole']}"
    if info.get("brokerRole"):
        return info["brokerRole"]
    return "MASTER" if broker_id == 0 else "SLAVE"


async def brokers(admin: Admin) -> list[BrokerRow]:
    """Every registered broker with its GET_BROKER_RUNTIME_INFO figures."""
    info = await admin.cluster_list()
    cluster_of = {b: c for c, names in info.cluster_addr_table.items() for b in names}
    addrs = {(name, bid): addr for name, bd in info.broker_addr_table.items()
             for bid, addr in bd.broker_addrs.items()}
    stats = await gather_all({
        f"{name}\x00{bid}": functools.partial(admin.broker_status, addr)
        for (name, bid), addr in addrs.items()})
    rows = []
    for (name, bid), addr in sorted(addrs.items()):
        got = stats[f"{name}\x00{bid}"]
        cluster = cluster_of.get(name, info.broker_addr_table[name].cluster)
        if isinstance(got, str):
            rows.append(BrokerRow(cluster, name, bid, addr, _role(bid, {}), error=got))
            continue
        rows.append(BrokerRow(
            cluster, name, bid, addr, _role(bid, got), version=got.get("brokerVersionDesc", ""),
            disk_ratio=float(got.get("commitLogDiskRatio", "-1") or -1),
            put_tps=_first(got.get("putTps")), get_tps=_first(got.get("getTransferedTps")),
            max_offset=_int(got.get("commitLogMaxOffset")), runtime=got.get("runtime", ""),
            info=got))
    return rows


@attrs.frozen
class ReplicaRow:
    """One slave (or DLedger follower) against its group's master."""

    broker_name: str
    broker_id: int
    addr: str
    master_addr: str
    master_offset: int
    offset: int
    #: None when the replica or its master did not answer
    lag_bytes: int | None
    error: str | None = None


@attrs.frozen
class GroupReplication:
    broker_name: str
    master: BrokerRow | None
    replicas: tuple[ReplicaRow, ...]
    #: haSlaveN lines the master reports (ours: per slave ack offset and diff)
    ha_slaves: tuple[dict[str, str], ...] = ()
    dledger: tuple[BrokerRow, ...] = ()


def replication(rows: list[BrokerRow]) -> list[GroupReplication]:
    """Per broker group: each slave's lag, master CommitLog max offset minus the slave's."""
    out = []
    for name in sorted({r.broker_name for r in rows}):
        members = [r for r in rows if r.broker_name == name]
        master = next((r for r in members if r.broker_id == 0), None)
        replicas = []
        for r in members:
            if r.broker_id == 0:
                continue
            mo = master.max_offset if master is not None else 0
            error = r.error or (master.error if master else "no master registered")
            replicas.append(ReplicaRow(
                name, r.broker_id, r.addr, master.addr if master else "", mo, r.max_offset,
                None if error else max(0, mo - r.max_offset), error))
        ha = []
        if master is not None:
            for k in sorted(k for k in master.info if k.startswith("haSlave")):
                m = _HA_SLAVE.search(master.info[k])
                if m:
                    ha.append({"addr": m["addr"], "ack": m["ack"], "diff": m["diff"],
                               "line": master.info[k]})
        dledger = tuple(r for r in members if "dLegerRole" in r.info)
        out.append(GroupReplication(name, master, tuple(replicas), tuple(ha), dledger))
    return out


async def sync_states(controller_addr: str, groups: list[GroupReplication],
                      cluster_secret: str | None) -> dict[str, Any] | str:
    """Controller mode: each group's master, epoch and SyncStateSet, or why not."""
    names = [g.broker_name for g in groups]
    return await attempt(functools.partial(
        controller_sync_state, controller_addr, names, cluster_secret=cluster_secret))


def lag_series(groups: list[GroupReplication]) -> dict[str, int]:
    """``{"broker-a/1 127.0.0.1:10921": lag bytes}`` for the live chart."""
    return {f"{r.broker_name}/{r.broker_id}": r.lag_bytes for g in groups for r in g.replicas
            if r.lag_bytes is not None}


# ------------------------------------------------------------------ topics


async def topic_detail(admin: Admin, topic: str) -> dict[str, Any]:
    route = await admin.topic_route(topic)
    stats = await attempt(lambda: admin.topic_stats(topic))
    by = {}
    for bd in route.broker_datas:
        addr = bd.select_broker_addr()
        if addr:
            by[bd.broker_name] = addr
    groups = await gather_all({name: functools.partial(admin.topic_consumed_by, topic, addr)
                               for name, addr in by.items()})
    consumed = sorted({g for v in groups.values() if isinstance(v, list) for g in v})
    return {"route": route, "stats": stats, "groups": consumed}


# ------------------------------------------------------------------ consumer groups


async def group_list(admin: Admin) -> tuple[list[dict[str, Any]], list[str]]:
    """Every subscription group on the masters (merged by name), and the errors met."""
    addrs = await admin.master_addrs()
    got = await gather_all({a: functools.partial(admin.subscription_groups, a) for a in addrs})
    groups: dict[str, dict[str, Any]] = {}
    errors = []
    for addr, table in sorted(got.items()):
        if isinstance(table, str):
            errors.append(f"{addr}: {table}")
            continue
        for name, cfg in table.items():
            row = groups.setdefault(name, {"name": name, "brokers": [], "config": cfg})
            row["brokers"].append(addr)
    return [groups[k] for k in sorted(groups)], errors


@attrs.frozen
class GroupDetail:
    group: str
    queues: tuple[QueueProgress, ...]
    tps: float
    total_lag: int
    clients: tuple[dict[str, Any], ...]
    consume_type: str
    message_model: str
    topics: tuple[str, ...]
    error: str | None = None


async def group_detail(admin: Admin, group: str) -> GroupDetail:
    progress = await attempt(lambda: admin.consumer_progress(group))
    conn = await attempt(lambda: admin.consumer_connection(group))
    queues: list[QueueProgress] = []
    tps = 0.0
    error = None
    if isinstance(progress, str):
        error = progress
    else:
        queues, tps = progress
    clients: list[dict[str, Any]] = []
    ctype = model = ""
    if isinstance(conn, dict):
        clients = [c for c in conn.get("connectionSet") or [] if isinstance(c, dict)]
        ctype = str(conn.get("consumeType") or "")
        model = str(conn.get("messageModel") or "")
    topics = sorted({q.queue.topic for q in queues})
    return GroupDetail(group, tuple(queues), tps, sum(q.diff for q in queues),
                       tuple(sorted(clients, key=lambda c: str(c.get("clientId")))),
                       ctype, model, tuple(topics), error)


def lag_by_queue(detail: GroupDetail) -> dict[str, int]:
    return {f"{q.queue.topic}/{q.queue.broker_name}/{q.queue.queue_id}": q.diff
            for q in detail.queues}


# ------------------------------------------------------------------ messages


async def query_messages(admin: Admin, *, topic: str = "", key: str = "", msg_id: str = "",
                         broker: str = "", queue_id: int | None = None, offset: int | None = None,
                         limit: int = 32) -> list[ReceivedMessage]:
    """By id (a broker offset id, or a client id with the topic), by key (with the topic), or
    ``limit`` messages of one queue from an offset."""
    if msg_id:
        return (await admin.query_msg_by_id(msg_id, topic or None))[:limit]
    if key:
        if not topic:
            raise MQClientError("a query by key needs the topic")
        return (await admin.query_msg_by_key(topic, key, max_num=limit))[:limit]
    if topic and broker and queue_id is not None and offset is not None:
        result = await admin.pull(MessageQueue(topic, broker, queue_id), offset, limit)
        return list(result.messages)[:limit]
    raise MQClientError("give a message id, a topic and a key, or a topic, broker, queue and "
                        "offset")


@attrs.frozen
class TracePath:
    """A message's path from the trace topic: who sent it (Pub records), each consumer group's
    consumptions (SubAfter records, in time order), consumptions begun and not yet ended
    (a SubBefore without its SubAfter), and transaction ends."""

    sent: tuple[TraceView, ...]
    consumed: tuple[tuple[str, tuple[TraceView, ...]], ...]
    in_flight: tuple[TraceView, ...]
    ended: tuple[TraceView, ...]


def trace_path(views: list[TraceView]) -> TracePath:
    done = {v.request_id for v in views if v.kind is TraceType.SUB_AFTER}
    groups: dict[str, list[TraceView]] = {}
    for v in views:
        if v.kind is TraceType.SUB_AFTER:
            groups.setdefault(v.group or "?", []).append(v)
    return TracePath(
        sent=tuple(v for v in views if v.kind is TraceType.PUB),
        consumed=tuple((g, tuple(sorted(vs, key=lambda v: v.timestamp or 0)))
                       for g, vs in groups.items()),
        in_flight=tuple(v for v in views
                        if v.kind is TraceType.SUB_BEFORE and v.request_id not in done),
        ended=tuple(v for v in views if v.kind is TraceType.END_TRANSACTION),
    )


async def message_trace(admin: Admin, msg_id: str, trace_topic: str
                        ) -> TracePath | str | None:
    """``msg_id``'s path from ``trace_topic`` (None: the cluster has no such topic; a string:
    why the query failed)."""
    try:
        return trace_path(await admin.query_msg_trace(msg_id, trace_topic))
    except NoRouteError:
        return None
    except MQClientError as exc:
        return str(exc)


async def broker_name_at(admin: Admin, addr: str) -> str:
    """The name of the broker group serving ``addr`` ("" when no broker there is known)."""
    try:
        info = await admin.cluster_list()
    except MQClientError:
        return ""
    for name, data in info.broker_addr_table.items():
        if addr in data.broker_addrs.values():
            return name
    return ""


def is_offset_id(msg_id: str) -> bool:
    try:
        decode_offset_msg_id(msg_id)
    except ValueError:
        return False
    return True


async def topics_or_empty(admin: Admin) -> list[str]:
    try:
        return await admin.topic_list()
    except NoRouteError:
        return []
