"""Admin calls with mqadmin's names (Java ``DefaultMQAdminExt``)::

    async with Admin(namesrv_addr=ns) as admin:
        info = await admin.cluster_list()
        await admin.update_topic("T", cluster="DefaultCluster", read_queue_nums=8)
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

import attrs
import orjson
import trio

from ..cluster.config import format_properties, parse_properties
from ..cluster.protocol import fastjson
from ..cluster.protocol.message import (
    BodyInflateError,
    StoredMessage,
    decode_offset_msg_id,
    iter_records,
)
from ..cluster.protocol.route import (
    NAMESPACE_ORDER_TOPIC_CONFIG,
    ClusterInfo,
    KVTable,
    TopicList,
    TopicRouteData,
)
from ..cluster.protocol.trace import DEFAULT_TRACE_TOPIC, TraceView, decode, views_of
from ..cluster.remoting.codes import RequestCode, ResponseCode
from . import frames
from .config import ClientConfig
from .consumer import PullApi
from .errors import MQBrokerError, MQClientError, NoRouteError
from .instance import ClientInstance, own_instance, parse_offset_table
from .model import MessageQueue, PullResult, ReceivedMessage, retry_topic
from .subscription import build_subscription

RC = RequestCode
#: Java queryMessage: maxNum default for mqadmin queryMsgByKey.
QUERY_MAX_NUM = 64
#: Calls the broker relays to a client wait this many call timeouts (Java: timeoutMillis * 3).
RELAY_TIMEOUT_FACTOR = 3
_MQ_OBJECT_KEY = re.compile(
    r'\{"brokerName":"(?P<b>[^"]*)","queueId":(?P<q>-?\d+),"topic":"(?P<t>[^"]*)"\}:'
)


def parse_running_info(body: bytes) -> dict[str, Any]:
    """ConsumerRunningInfo JSON (``mqTable`` keyed by MessageQueue objects, as fastjson
    writes them) -> a dict whose ``mqTable`` is a list of rows with topic/brokerName/queueId."""
    text = body.decode("utf-8", "replace")
    text = _MQ_OBJECT_KEY.sub(
        lambda m: orjson.dumps(f"{m['t']}\x00{m['b']}\x00{m['q']}").decode() + ":", text)
    obj = fastjson.loads(text)
    if not isinstance(obj, dict):
        raise MQClientError("bad ConsumerRunningInfo body")
    rows = []
    for key, value in (obj.get("mqTable") or {}).items():
        topic, broker, qid = [*str(key).split("\x00"), "", "", "-1"][:3]
        row = {"topic": topic, "brokerName": broker, "queueId": int(qid)}
        if isinstance(value, dict):
            row.update(value)
        rows.append(row)
    obj["mqTable"] = sorted(rows, key=lambda r: (r["topic"], r["brokerName"], r["queueId"]))
    return obj

_STATS_ROW = re.compile(
    r'\{"brokerName":"(?P<b>[^"]*)","queueId":(?P<q>-?\d+),"topic":"(?P<t>[^"]*)"\}:'
    r"(?P<v>\{[^{}]*\})"
)


_TOPIC_OFFSET_ROW = re.compile(
    r'\{"brokerName":"(?P<b>[^"]*)","queueId":(?P<q>-?\d+),"topic":"(?P<t>[^"]*)"\}:'
    r"(?P<v>\{[^{}]*\})"
)
#: DLQ topics of groups (``MixAll.DLQ_GROUP_TOPIC_PREFIX``).
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
#: mqadmin's group for its own pulls (``MixAll.TOOLS_CONSUMER_GROUP``).
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
#: VIEW_BROKER_STATS_DATA names mqadmin statsAll asks (``BrokerStatsManager``).
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"


@attrs.frozen
class TopicOffset:
    """One queue of GET_TOPIC_STATS_INFO (Java ``TopicOffset``)."""

    queue: MessageQueue
    min_offset: int
    max_offset: int
    last_update_timestamp: int


def parse_topic_stats(body: bytes) -> list[TopicOffset]:
    """TopicStatsTable JSON (``offsetTable`` keyed by MessageQueue objects) -> rows."""
    text = bytes(body).decode("utf-8", "replace")
    rows = []
    for m in _TOPIC_OFFSET_ROW.finditer(text):
        v = orjson.loads(m["v"])
        rows.append(TopicOffset(
            MessageQueue(m["t"], m["b"], int(m["q"])), int(v.get("minOffset", 0)),
            int(v.get("maxOffset", 0)), int(v.get("lastUpdateTimestamp", 0))))
    return sorted(rows, key=lambda r: r.queue)


@attrs.frozen
class QueueProgress:
    queue: MessageQueue
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


def parse_consume_stats(body: bytes) -> tuple[list[QueueProgress], float]:
    text = bytes(body).decode("utf-8", "replace")
    rows = []
    for m in _STATS_ROW.finditer(text):
        v = orjson.loads(m["v"])
        rows.append(QueueProgress(
            MessageQueue(m["t"], m["b"], int(m["q"])),
            int(v.get("brokerOffset", 0)), int(v.get("consumerOffset", 0)),
            int(v.get("lastTimestamp", 0)),
        ))
    tps = re.search(r'"consumeTps":([0-9.eE+-]+)', text)
    return sorted(rows, key=lambda r: r.queue), float(tps.group(1)) if tps else 0.0


class Admin:
    def __init__(self, *, namesrv_addr: str | None = None,
                 instance: ClientInstance | None = None,
                 client_config: ClientConfig | None = None,
                 access_key: str | None = None,
                 secret_key: str | None = None) -> None:
        self._own_instance = instance is None
        if instance is None:
            instance = own_instance(client_config, namesrv_addr, access_key, secret_key)
        self.instance = instance

    async def __aenter__(self) -> Admin:
        if self._own_instance:
            await self.instance.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._own_instance:
            await self.instance.__aexit__(*exc)

    async def _ns(self, code: int, ext: dict[str, Any] | None = None) -> bytes:
        resp = await self.instance.invoke_namesrv(frames.request(code, ext))
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, "namesrv")
        return bytes(resp.body)

    async def _broker(self, addr: str, code: int, ext: dict[str, Any] | None = None,
                      body: bytes = b"") -> bytes:
        resp = await self.instance.invoke_ok(addr, frames.request(code, ext, body))
        return bytes(resp.body)

    @property
    def namesrv_addrs(self) -> tuple[str, ...]:
        return tuple(self.instance.namesrv_addrs)

    async def _each_ns(self, code: int, ext: dict[str, Any] | None = None
                       ) -> list[tuple[str, dict[str, str]]]:
        """The request on every NameServer (as mqadmin's cluster-wide writes do); each one's
        address and answered extFields. The first refusal raises."""
        out = []
        for addr in self.namesrv_addrs:
            resp = await self.instance.invoke(addr, frames.request(code, ext))
            if resp.code != ResponseCode.SUCCESS:
                raise MQBrokerError(resp.code, resp.remark, addr)
            out.append((addr, dict(resp.ext_fields or {})))
        return out

    # ------------------------------------------------------------------ mqadmin commands

    async def cluster_list(self) -> ClusterInfo:
        return ClusterInfo.decode(await self._ns(RC.GET_BROKER_CLUSTER_INFO))

    async def topic_route(self, topic: str) -> TopicRouteData:
        return await self.instance.fetch_route(topic)

    async def topic_list(self) -> list[str]:
        return sorted(TopicList.decode(await self._ns(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
                      .topic_list)

    async def broker_status(self, broker_addr: str) -> dict[str, str]:
        return dict(KVTable.decode(await self._broker(broker_addr, RC.GET_BROKER_RUNTIME_INFO))
                    .table)

    async def master_addrs(self, cluster: str | None = None) -> list[str]:
        info = await self.cluster_list()
        names = (info.cluster_addr_table.get(cluster, frozenset()) if cluster
                 else set(info.broker_addr_table))
        if cluster and not names:
            raise MQClientError(f"cluster {cluster!r} not found")
        out = []
        for name in sorted(names):
            bd = info.broker_addr_table.get(name)
            if bd is not None and bd.master_addr:
                out.append(bd.master_addr)
        return out

    async def update_topic(
        self, topic: str, *, cluster: str | None = None, broker_addr: str | None = None,
        read_queue_nums: int = 8, write_queue_nums: int = 8, perm: int = 6, order: bool = False,
    ) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on one broker (``broker_addr``) or every master of
        ``cluster``; the addresses updated."""
        if broker_addr:
            addrs = [broker_addr]
        elif cluster:
            addrs = await self.master_addrs(cluster)
        else:
            raise MQClientError("updateTopic needs a broker address (-b) or a cluster (-c)")
        ext = {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": read_queue_nums,
            "writeQueueNums": write_queue_nums, "perm": perm, "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0, "order": order,
        }
        for addr in addrs:
            await self._broker(addr, RC.UPDATE_AND_CREATE_TOPIC, ext)
        if order:
            await self._put_order_conf(topic, addrs, write_queue_nums)
        return addrs

    async def _put_order_conf(self, topic: str, addrs: list[str], write_queue_nums: int) -> str:
        """mqadmin ``updateTopic -o true``: the NameServers' ORDER_TOPIC_CONFIG entry for the
        topic, ``brokerName:writeQueueNums`` of every broker updated, ``;``-joined."""
        info = await self.cluster_list()
        names = sorted({name for name, bd in info.broker_addr_table.items()
                        if set(bd.broker_addrs.values()) & set(addrs)})
        if not names:
            raise MQClientError(f"no broker of {addrs} is registered: cannot set the order conf")
        conf = ";".join(f"{name}:{write_queue_nums}" for name in names)
        await self._each_ns(RC.PUT_KV_CONFIG, {
            "namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": topic, "value": conf})
        return conf

    async def delete_topic(self, topic: str, cluster: str) -> dict[str, Any]:
        """``mqadmin deleteTopic -t T -c C``: DELETE_TOPIC_IN_BROKER on every master of the
        cluster, then DELETE_TOPIC_IN_NAMESRV and the order conf on every NameServer."""
        addrs = await self.master_addrs(cluster)
        for addr in addrs:
            await self._broker(addr, RC.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        await self._each_ns(RC.DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster})
        await self._each_ns(RC.DELETE_KV_CONFIG, {
            "namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": topic})
        return {"topic": topic, "cluster": cluster, "brokers": addrs,
                "namesrvs": list(self.namesrv_addrs)}

    async def update_sub_group(self, config: dict[str, Any], addrs: list[str]) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (a SubscriptionGroupConfig body) on ``addrs``."""
        body = fastjson.dumps(config)
        for addr in addrs:
            await self._broker(addr, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)

    async def delete_sub_group(self, group: str, addrs: list[str]) -> None:
        for addr in addrs:
            await self._broker(addr, RC.DELETE_SUBSCRIPTIONGROUP, {"groupName": group})

    async def topic_stats(self, topic: str) -> list[TopicOffset]:
        """``mqadmin topicStatus``: GET_TOPIC_STATS_INFO from each broker of the route."""
        route = await self.instance.fetch_route(topic)
        rows: list[TopicOffset] = []
        for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = bd.select_broker_addr()
            if addr:
                rows += parse_topic_stats(
                    await self._broker(addr, RC.GET_TOPIC_STATS_INFO, {"topic": topic}))
        return sorted(rows, key=lambda r: r.queue)

    async def producer_connection(self, group: str, topic: str) -> list[dict[str, Any]]:
        """``mqadmin producerConnection -g G -t T``: the group's connections on the topic's
        brokers (GET_PRODUCER_CONNECTION_LIST), one entry per client."""
        route = await self.instance.fetch_route(topic)
        found: dict[str, dict[str, Any]] = {}
        last: MQBrokerError | None = None
        for bd in route.broker_datas:
            addr = bd.master_addr
            if not addr:
                continue
            try:
                body = await self._broker(addr, RC.GET_PRODUCER_CONNECTION_LIST,
                                          {"producerGroup": group})
            except MQBrokerError as exc:
                last = exc
                continue
            obj = fastjson.loads(body)
            for c in (obj or {}).get("connectionSet") or []:
                found.setdefault(str(c.get("clientId")), c)
        if not found:
            raise last or MQClientError(f"the producer group[{group}] not exist")
        return [found[k] for k in sorted(found)]

    async def wipe_write_perm(self, broker_name: str, *, add: bool = False
                              ) -> list[tuple[str, int]]:
        """``mqadmin wipeWritePerm`` / ``addWritePerm -b BROKER_NAME``: on every NameServer;
        (namesrv, topics changed) each."""
        code = RC.ADD_WRITE_PERM_OF_BROKER if add else RC.WIPE_WRITE_PERM_OF_BROKER
        key = "addTopicCount" if add else "wipeTopicCount"
        done = await self._each_ns(code, {"brokerName": broker_name})
        return [(addr, int(ext.get(key, "0") or 0)) for addr, ext in done]

    async def view_broker_stats(self, broker_addr: str, name: str, key: str) -> dict[str, Any]:
        """VIEW_BROKER_STATS_DATA: BrokerStatsData (statsMinute/statsHour/statsDay, each with
        sum, tps, avgpt)."""
        obj = fastjson.loads(await self._broker(
            broker_addr, RC.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key}))
        return obj if isinstance(obj, dict) else {}

    async def topic_consumed_by(self, topic: str, broker_addr: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO on one broker."""
        obj = fastjson.loads(await self._broker(broker_addr, RC.QUERY_TOPIC_CONSUME_BY_WHO,
                                                {"topic": topic}))
        return sorted(str(g) for g in (obj or {}).get("groupList") or [])

    async def subscription_groups(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG on one broker: its SubscriptionGroupConfig table
        (group name -> config), as rocketmq-dashboard lists consumer groups."""
        obj = fastjson.loads(await self._broker(broker_addr, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        table = (obj or {}).get("subscriptionGroupTable") if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            return {}
        return {str(k): v for k, v in table.items() if isinstance(v, dict)}

    async def acl_config(self, broker_addr: str) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_ACL_CONFIG (admin only): the broker's plain ACL rules
        (``globalWhiteAddrs``, ``plainAccessConfigs``). The answer holds secret keys: the
        caller must not show them."""
        obj = fastjson.loads(await self._broker(broker_addr, RC.GET_BROKER_CLUSTER_ACL_CONFIG))
        return obj if isinstance(obj, dict) else {}

    # ------------------------------------------------------------------ reading queues

    def pull_api(self, group: str = TOOLS_CONSUMER_GROUP) -> PullApi:
        return PullApi(self.instance, group)

    async def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, *,
                   expression: str = "*", group: str = TOOLS_CONSUMER_GROUP) -> PullResult:
        """One PULL_MESSAGE without suspending or committing (mqadmin's pull consumer)."""
        sub = build_subscription(mq.topic, expression, 0)
        return await self.pull_api(group).pull(mq, offset, sub=sub, max_nums=max_nums)

    async def queues_of(self, topic: str, broker_name: str | None = None) -> list[MessageQueue]:
        """The topic's read queues (of one broker), as mqadmin's pull tools list them."""
        route = await self.instance.update_route(topic)
        if route is None:
            raise NoRouteError(f"no route for topic {topic!r}")
        out = []
        for q in route.queue_datas:
            if broker_name is None or q.broker_name == broker_name:
                out += [MessageQueue(topic, q.broker_name, i) for i in range(q.read_queue_nums)]
        if broker_name is not None and not out:
            raise MQClientError(f"broker {broker_name!r} has no queue of topic {topic!r}")
        return sorted(out)

    async def consumer_progress(self, group: str) -> tuple[list[QueueProgress], float]:
        """Per-queue broker vs consumer offsets of ``group`` (GET_CONSUME_STATS on each
        broker of ``%RETRY%group``'s route, as mqadmin does)."""
        try:
            route = await self.instance.fetch_route(retry_topic(group))
        except NoRouteError:
            route = None
        addrs = []
        if route is not None:
            addrs = [a for a in (b.select_broker_addr() for b in route.broker_datas) if a]
        else:
            addrs = await self.master_addrs()
        rows: list[QueueProgress] = []
        tps = 0.0
        for addr in addrs:
            try:
                body = await self._broker(addr, RC.GET_CONSUME_STATS, {"consumerGroup": group})
            except MQBrokerError as exc:
                if exc.code == ResponseCode.CONSUMER_NOT_ONLINE:
                    continue
                raise
            r, t = parse_consume_stats(body)
            rows += r
            tps += t
        return sorted(rows, key=lambda r: r.queue), tps

    async def query_msg_by_id(self, msg_id: str, topic: str | None = None
                              ) -> list[ReceivedMessage]:
        """An offset msgId (broker's) via VIEW_MESSAGE_BY_ID; otherwise, with ``topic``, the
        client UNIQ_KEY via QUERY_MESSAGE (``_UNIQUE_KEY_QUERY``)."""
        try:
            host, offset = decode_offset_msg_id(msg_id)
        except ValueError:
            host = None
            offset = -1
        if host is not None and not (0 < host[1] < 65536 and offset >= 0):
            host = None  # not an offset msgId (a client UNIQ_KEY is 32 hex characters too)
        if host is not None:
            addr = f"{host[0]}:{host[1]}"
            name = self._broker_name_of(addr)
            try:
                body = await self._broker(addr, RC.VIEW_MESSAGE_BY_ID, {"offset": offset})
                msgs = self._readable(iter_records(body), name)
                if msgs and (msgs[0].offset_msg_id == msg_id.upper() or topic is None):
                    return msgs
            except MQClientError:
                if topic is None:
                    raise
        if topic is None:
            raise MQClientError(f"{msg_id} is not a broker msgId; pass the topic to look up "
                                "a client (UNIQ_KEY) id")
        msgs = await self._query(topic, msg_id, unique=True, max_num=32)
        return [m for m in msgs if m.msg_id == msg_id][:1] or msgs[:1]

    async def query_msg_by_key(self, topic: str, key: str, max_num: int = QUERY_MAX_NUM
                               ) -> list[ReceivedMessage]:
        msgs = await self._query(topic, key, unique=False, max_num=max_num)
        return [m for m in msgs if key in (m.keys or "").split(" ")]

    async def query_msg_trace(self, msg_id: str, trace_topic: str = DEFAULT_TRACE_TOPIC,
                              max_num: int = QUERY_MAX_NUM) -> list[TraceView]:
        """``mqadmin queryMsgTraceById``: the trace records about ``msg_id`` (a client
        UNIQ_KEY), found by key in ``trace_topic``, oldest trace message first."""
        msgs = await self.query_msg_by_key(trace_topic, msg_id, max_num)
        return views_of(((decode(m.body).records, m.born_host[0]) for m in msgs), msg_id)

    def _readable(self, records: Iterable[StoredMessage], broker_name: str
                  ) -> list[ReceivedMessage]:
        """The records as messages; one whose body cannot be inflated within maxMessageSize (a
        compression bomb, a corrupt body) is left out with a logged reason."""
        out = []
        for r in records:
            try:
                out.append(ReceivedMessage.from_stored(r, broker_name))
            except BodyInflateError as exc:
                self.instance.log.warning(
                    "message skipped: body cannot be inflated", topic=r.topic,
                    queue_id=r.queue_id, queue_offset=r.queue_offset,
                    commitlog_offset=r.commitlog_offset, reason=str(exc))
        return out

    def _broker_name_of(self, addr: str) -> str:
        for name, addrs in self.instance.broker_addrs.items():
            if addr in addrs.values():
                return name
        return ""

    async def _query(self, topic: str, key: str, *, unique: bool, max_num: int
                     ) -> list[ReceivedMessage]:
        route = await self.instance.update_route(topic)
        if route is None:
            raise NoRouteError(f"no route for topic {topic!r}")
        ext: dict[str, Any] = {
            "topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": 0,
            "endTimestamp": int(time.time() * 1000) + 60_000,
        }
        if unique:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        out: list[ReceivedMessage] = []

        async def one(name: str, addr: str) -> None:
            resp = await self.instance.invoke(addr, frames.request(RC.QUERY_MESSAGE, ext))
            if resp.code == ResponseCode.SUCCESS:
                out.extend(self._readable(iter_records(bytes(resp.body), check_crc=False), name))
            elif resp.code != ResponseCode.QUERY_NOT_FOUND:
                raise MQBrokerError(resp.code, resp.remark, addr)

        async with trio.open_nursery() as n:
            for bd in route.broker_datas:
                addr = bd.select_broker_addr()
                if addr:
                    n.start_soon(one, bd.broker_name, addr)
        return sorted(out, key=lambda m: (m.store_timestamp, m.commitlog_offset))

    async def reset_offset_by_time(
        self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
    ) -> dict[MessageQueue, int]:
        """``mqadmin resetOffsetByTime``: move ``group``'s offsets on ``topic`` to the first
        message stored at or after ``timestamp_ms`` (-1: the queues' ends; ``force=False``
        only moves offsets back). Online consumers are moved by their brokers
        (INVOKE_BROKER_TO_RESET_OFFSET -> RESET_CONSUMER_CLIENT_OFFSET); for a group that is
        not online the committed offsets are rewritten instead, as mqadmin falls back to."""
        route = await self.instance.update_route(topic)
        if route is None:
            raise NoRouteError(f"no route for topic {topic!r}")
        ext = {"topic": topic, "group": group, "timestamp": str(timestamp_ms),
               "isForce": "true" if force else "false"}
        moved: dict[MessageQueue, int] = {}
        for bd in route.broker_datas:
            addr = bd.master_addr
            if addr is None:
                continue
            resp = await self.instance.invoke(
                addr, frames.request(RC.INVOKE_BROKER_TO_RESET_OFFSET, ext))
            if resp.code == ResponseCode.SUCCESS:
                moved.update(parse_offset_table(bytes(resp.body)))
                continue
            if resp.code != ResponseCode.CONSUMER_NOT_ONLINE:
                raise MQBrokerError(resp.code, resp.remark, addr)
            queues = next((q.write_queue_nums for q in route.queue_datas
                           if q.broker_name == bd.broker_name), 0)
            for qid in range(queues):
                mq = MessageQueue(topic, bd.broker_name, qid)
                moved[mq] = await self._commit_offset_at(addr, group, mq, timestamp_ms, force)
        return moved

    # ------------------------------------------------------------------ consumers, via brokers

    async def _group_broker_addr(self, group: str) -> str:
        """A broker serving the group (Java: the ``%RETRY%group`` route's first broker)."""
        try:
            return await self.instance.broker_addr_for_topic(retry_topic(group))
        except NoRouteError:
            raise MQClientError(f"the consumer group {group!r} has no route (never online?)",
                                code=ResponseCode.CONSUMER_NOT_ONLINE) from None

    async def consumer_connection(self, group: str) -> dict[str, Any]:
        """``mqadmin consumerConnection``: the group's online clients (ConsumerConnection)."""
        addr = await self._group_broker_addr(group)
        body = await self._broker(addr, RC.GET_CONSUMER_CONNECTION_LIST,
                                  {"consumerGroup": group})
        obj = fastjson.loads(body)
        return obj if isinstance(obj, dict) else {}

    async def consumer_running_info(self, group: str, client_id: str, *,
                                    jstack: bool = False) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO relayed by a broker to the client (ConsumerRunningInfo);
        ``mqTable`` comes back as a list of per-queue rows."""
        addr = await self._group_broker_addr(group)
        ext = {"consumerGroup": group, "clientId": client_id,
               "jstackEnable": "true" if jstack else "false"}
        resp = await self.instance.invoke_ok(
            addr, frames.request(RC.GET_CONSUMER_RUNNING_INFO, ext),
            self.instance.config.call_timeout_s * RELAY_TIMEOUT_FACTOR)
        return parse_running_info(bytes(resp.body))

    async def consumer_status(self, group: str, client_id: str | None = None
                              ) -> list[dict[str, Any]]:
        """``mqadmin consumerStatus``: running info of one client, or of every online client
        of the group (``[{"clientId":..,"runningInfo":{..}}]``)."""
        if client_id is not None:
            ids = [client_id]
        else:
            conn = await self.consumer_connection(group)
            ids = sorted(str(c.get("clientId")) for c in conn.get("connectionSet") or [])
        return [{"clientId": cid, "runningInfo": await self.consumer_running_info(group, cid)}
                for cid in ids]

    async def consume_message_directly(self, group: str, client_id: str, msg_id: str,
                                       topic: str | None = None) -> dict[str, Any]:
        """``mqadmin consumeMessageDirectly``-like: the broker holding the message hands it to
        ``client_id``'s listener (CONSUME_MESSAGE_DIRECTLY) and relays the outcome
        (ConsumeMessageDirectlyResult: consumeResult, spentTimeMills, ...). ``msg_id``: an
        offset msgId, or a client id with ``topic``."""
        msgs = await self.query_msg_by_id(msg_id, topic)
        if not msgs:
            raise MQClientError(f"message {msg_id} not found",
                                code=ResponseCode.QUERY_NOT_FOUND)
        msg = msgs[0]
        addr = f"{msg.store_host[0]}:{msg.store_host[1]}"
        ext = {"consumerGroup": group, "clientId": client_id, "msgId": msg.offset_msg_id}
        resp = await self.instance.invoke_ok(
            addr, frames.request(RC.CONSUME_MESSAGE_DIRECTLY, ext),
            self.instance.config.call_timeout_s * RELAY_TIMEOUT_FACTOR)
        obj = fastjson.loads(bytes(resp.body))
        return obj if isinstance(obj, dict) else {"result": obj}

    async def query_consume_time_span(self, topic: str, group: str) -> list[dict[str, Any]]:
        """QUERY_CONSUME_TIME_SPAN on every broker of the topic: per queue the first and last
        store times, the consumed-up-to time and the next message's delay (ms)."""
        route = await self.instance.update_route(topic)
        if route is None:
            raise NoRouteError(f"no route for topic {topic!r}")
        out: list[dict[str, Any]] = []
        for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = bd.select_broker_addr()
            if not addr:
                continue
            body = await self._broker(addr, RC.QUERY_CONSUME_TIME_SPAN,
                                      {"topic": topic, "group": group})
            obj = fastjson.loads(body)
            out.extend((obj or {}).get("consumeTimeSpanSet") or [])
        return out

    # ------------------------------------------------------------------ broker config

    async def get_broker_config(self, broker_addr: str) -> dict[str, str]:
        """``mqadmin getBrokerConfig -b``: the running broker's config (GET_BROKER_CONFIG)."""
        return parse_properties(
            (await self._broker(broker_addr, RC.GET_BROKER_CONFIG)).decode("utf-8"))

    async def update_broker_config(self, broker_addr: str, values: dict[str, str]) -> None:
        """``mqadmin updateBrokerConfig -b ADDR -k KEY -v VALUE`` (UPDATE_BROKER_CONFIG): the
        broker applies the keys at once (``brokerPermission=4`` makes it read-only) and
        writes them into its config file; unknown keys are refused with a remark."""
        if not values:
            raise MQClientError("no key to update")
        await self._broker(broker_addr, RC.UPDATE_BROKER_CONFIG,
                           body=format_properties(values).encode("utf-8"))

    async def _commit_offset_at(self, addr: str, group: str, mq: MessageQueue,
                                timestamp_ms: int, force: bool) -> int:
        q = {"topic": mq.topic, "queueId": str(mq.queue_id)}
        if timestamp_ms == -1:
            resp = await self.instance.invoke_ok(addr, frames.request(RC.GET_MAX_OFFSET, q))
        else:
            resp = await self.instance.invoke_ok(addr, frames.request(
                RC.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": str(timestamp_ms)}))
        target = max(0, int(resp.ext_fields.get("offset", "0")))
        if not force:
            cur = await self.instance.invoke(addr, frames.request(
                RC.QUERY_CONSUMER_OFFSET, {**q, "consumerGroup": group}))
            if cur.code == ResponseCode.SUCCESS:
                target = min(target, int(cur.ext_fields.get("offset", "0")))
        await self.instance.invoke_ok(addr, frames.request(
            RC.UPDATE_CONSUMER_OFFSET, {**q, "consumerGroup": group, "commitOffset": str(target)}))
        return target



async def controller_sync_state(controller_addr: str, broker_names: Iterable[str], *,
                                cluster_secret: str | None = None) -> dict[str, Any]:
    """``mqadmin getSyncStateSet``'s call (CONTROLLER_GET_SYNC_STATE_DATA) to the controller
    leader of ``controller_addr`` (``h:p;h:p;h:p``): per broker group its master, master epoch,
    SyncStateSet epoch and in-sync / not-in-sync replicas (``ReplicasInfo``). Our controllers
    serve only peers that know ``cluster_secret``."""
    from ..cluster.protocol.controller import (
        ControllerRequestCode,
        ReplicasInfo,
        decode_replicas_table,
        encode_broker_names,
    )
    from ..cluster.protocol.controller_client import (
        ControllerClient,
        parse_controller_addrs,
    )
    from ..cluster.remoting.client_pool import open_remoting_client
    from ..cluster.remoting.codec import RemotingCommand
    from ..cluster.remoting.peer_auth import peer_handshake

    try:
        addrs = parse_controller_addrs(controller_addr)
    except ValueError as exc:
        raise MQClientError(str(exc)) from None
    from ..cluster.remoting.errors import RemotingError

    try:
        async with open_remoting_client(
            node="admin-controller",
            handshake=peer_handshake(cluster_secret) if cluster_secret else None,
        ) as client:
            resp = await ControllerClient(client, addrs).call(RemotingCommand.request(
                ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {},
                encode_broker_names(sorted(broker_names))))
    except RemotingError as exc:
        raise MQClientError(f"controller {controller_addr}: {exc}") from None
    if resp.code != ResponseCode.SUCCESS:
        raise MQBrokerError(resp.code, resp.remark, controller_addr)
    table: dict[str, ReplicasInfo] = decode_replicas_table(resp.body or b"")
    return dict(sorted(table.items()))
