"""Admin requests (RocketMQ ``AdminBrokerProcessor``, the selection mqadmin and slaves use)."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any, Final

from ...cluster.protocol import fastjson, topic_attributes
from ...cluster.protocol.names import (
    MAX_QUEUE_NUMS,
    validate_group,
    validate_queue_nums,
)
from ...cluster.protocol.route import TOPIC_FILTER_TYPES, KVTable, TopicConfig
from ...cluster.remoting.codec import RemotingCommand
from ...cluster.remoting.codes import CURRENT_VERSION, RequestCode, ResponseCode, Version
from ...cluster.remoting.connection import Connection
from ...cluster.remoting.errors import RemotingError
from ...cluster.remoting.headers import (
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    ResetOffsetRequestHeader,
)
from ...cluster.remoting.processors import Later
from ..apache_keys import runtime_info_keys
from ..metrics import RuntimeStats
from ..offsets import SubscriptionGroupConfig
from ..topic_config import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    validate_topic,
)
from .common import header_errors

if TYPE_CHECKING:
    from ..context import BrokerContext

BROKER_VERSION_DESC = "V4_9_7"


def _mq(topic: str, broker_name: str, queue_id: int) -> dict[str, Any]:
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


def disk_space(path: str) -> tuple[int, int]:
    """(total, free) bytes of the partition holding ``path``; (0, 0) if it cannot be read (a
    statvfs: cheap enough to answer an admin request inline)."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return 0, 0
    return usage.total, usage.free


class AdminProcessors:
    def __init__(self, ctrl: BrokerContext) -> None:
        self.ctrl = ctrl
        self.runtime = RuntimeStats()

    def _refuse_on_slave(self, request: RemotingCommand) -> RemotingCommand | None:
        if self.ctrl.is_slave:
            return request.response(
                ResponseCode.SYSTEM_ERROR, "the broker is a slave: admin writes are refused"
            )
        return None

    @header_errors
    def update_and_create_topic(
        self, conn: Any, request: RemotingCommand
    ) -> RemotingCommand | Later:
        refused = self._refuse_on_slave(request)
        if refused is not None:
            return refused
        h = CreateTopicRequestHeader.from_ext_fields(request.ext_fields)
        bad = validate_topic(h.topic)
        if bad is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, bad)
        if h.topic == AUTO_CREATE_TOPIC_KEY_TOPIC or h.topic in NOT_ALLOWED_SEND_TOPICS:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The topic[{h.topic}] is conflict with system topic.",
            )
        too_many = validate_queue_nums(h.read_queue_nums, h.write_queue_nums)
        if too_many is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, too_many)
        if h.topic_filter_type not in TOPIC_FILTER_TYPES:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"bad topicFilterType {h.topic_filter_type!r}"
            )
        current = self.ctrl.topics.select(h.topic)
        try:  # RocketMQ 5 topic attributes ("+message.type=FIFO")
            attributes = topic_attributes.alter(
                current is None, current.attribute_map if current else {}, h.attributes)
        except topic_attributes.AttributeError_ as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        if attributes.get(topic_attributes.MESSAGE_TYPE) == "MIXED":
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    "MIXED message type is not supported.")
        tc = TopicConfig(
            h.topic,
            h.read_queue_nums,
            h.write_queue_nums,
            h.perm,
            h.topic_filter_type,
            h.topic_sys_flag or 0,
            h.order,
            tuple(sorted(attributes.items())),
        )
        self.ctrl.topics.update(tc)
        self.ctrl.topic_created(h.topic)
        answer = request.response(ResponseCode.SUCCESS)

        async def registered() -> RemotingCommand:
            # as RocketMQ's registerIncrementBrokerData: the NameServers know the new route
            # before the creator is answered (the Go client's admin looks it up right away),
            # waiting as long as a registration may take (a loaded host is slow to answer)
            await self.ctrl.register_topics_now(
                [h.topic], self.ctrl.bcfg.register_broker_timeout_mills / 1000.0
            )
            return answer

        return Later(registered())

    @header_errors
    def delete_topic(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        refused = self._refuse_on_slave(request)
        if refused is not None:
            return refused
        h = DeleteTopicRequestHeader.from_ext_fields(request.ext_fields)
        bad = validate_topic(h.topic)  # (the name gate answers first; never a path from it)
        if bad is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, bad)
        if self.ctrl.topics.delete(h.topic):
            self.ctrl.topic_created(h.topic)
        # as RocketMQ's cleanUnusedTopic: the deleted topic's ConsumeQueues go with it
        self.ctrl.store.delete_topic(h.topic)
        return request.response(ResponseCode.SUCCESS)

    def get_all_topic_config(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        return request.response(
            ResponseCode.SUCCESS, None, None, self.ctrl.topics.wrapper().encode()
        )

    def update_and_create_subscription_group(
        self, conn: Any, request: RemotingCommand
    ) -> RemotingCommand:
        refused = self._refuse_on_slave(request)
        if refused is not None:
            return refused
        try:
            sgc = SubscriptionGroupConfig.from_json_obj(fastjson.loads(bytes(request.body)))
        except (ValueError, TypeError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad body: {exc}")
        bad = validate_group(sgc.group_name)
        if bad is None and not 0 <= sgc.retry_queue_nums <= MAX_QUEUE_NUMS:
            bad = f"retryQueueNums[{sgc.retry_queue_nums}] is out of range [0, {MAX_QUEUE_NUMS}]"
        if bad is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, bad)
        self.ctrl.groups.update(sgc)
        self.ctrl.mark_dirty()
        return request.response(ResponseCode.SUCCESS)

    def get_all_subscription_group(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, None, None, self.ctrl.groups.encode())

    def get_all_consumer_offset(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, None, None, self.ctrl.offsets.encode())

    def get_all_delay_offset(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        return request.response(
            ResponseCode.SUCCESS, None, None, self.ctrl.schedule.offsets.encode()
        )

    def get_broker_runtime_info(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        ctrl = self.ctrl
        store = ctrl.store
        stats = ctrl.stats
        table = {
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "brokerVersion": str(CURRENT_VERSION),
            "msgPutTotalTodayNow": str(stats.put_total),
            "msgGetTotalTodayNow": str(stats.get_total),
            "msgPutTotalYesterdayMorning": str(stats.yesterday_morning[0]),
            "msgPutTotalTodayMorning": str(stats.today_morning[0]),
            "msgGetTotalYesterdayMorning": str(stats.yesterday_morning[1]),
            "msgGetTotalTodayMorning": str(stats.today_morning[1]),
            "putTps": stats.put_tps_figures(),
            "getTransferedTps": stats.get_tps_figures(),
            "commitLogMinOffset": str(store.min_phys_offset),
            "commitLogMaxOffset": str(store.max_phys_offset),
            "dispatchBehindBytes": str(store.dispatch_behind_bytes),
            "pullThreadPoolQueueSize": str(ctrl.hold.parked),
            "bootTimestamp": str(ctrl.boot_timestamp_ms),
            "brokerActive": "true",
            "runtime": f"[ {(ctrl.now_ms() - ctrl.boot_timestamp_ms) // 1000} s ]",
            "scheduleMessageOffset": " ".join(
                f"{lvl},{off}" for lvl, off in sorted(ctrl.schedule.offsets.table.items())
            ),
        }
        scfg = ctrl.settings.store
        table.update(self.runtime.table(  # RocketMQ's store figures
            ctrl, disk_space(scfg.commit_log_dir), disk_space(scfg.consume_queue_dir)
        ))
        # Apache's thread-pool, page-cache-lock and transient-pool keys, as an idle Apache
        # broker answers them (ours where we have the figure, e.g. parked pulls)
        apache = runtime_info_keys(str(scfg.commit_log_dir), float(table["commitLogDiskRatio"]))
        table = {**apache, **table}
        if ctrl.ha is not None:
            table.update(ctrl.ha.runtime_info())  # replication state (per-slave ack, diff)
        if ctrl.server is not None:  # connections, refusals, buffered input (our keys)
            table.update(ctrl.server.runtime_info())
        backend_info = store.runtime_info()  # DLedger: role, term, leader, commit, match indexes
        if backend_info:  # (the file CommitLog has no keys of its own)
            table.update(backend_info)
            # our key: the id this broker registers now (0 while it is the group's leader)
            table["brokerId"] = str(ctrl.broker_id)
        return request.response(ResponseCode.SUCCESS, None, None, KVTable(table).encode())

    @header_errors
    def get_topic_stats_info(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        topic = request.ext_fields.get("topic", "")
        ctrl = self.ctrl
        tc = ctrl.topics.select(topic)
        if tc is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = ctrl.store
        table = []
        for qid in range(tc.write_queue_nums):
            mx = store.get_max_offset_in_queue(topic, qid)
            mn = store.get_min_offset_in_queue(topic, qid)
            last = store.get_message_store_timestamp(topic, qid, mx - 1) if mx > 0 else 0
            table.append(
                (
                    _mq(topic, ctrl.bcfg.broker_name, qid),
                    {
                        "lastUpdateTimestamp": max(0, last),
                        "maxOffset": mx,
                        "minOffset": mn,
                    },
                )
            )
        body = _offset_table_json(table)
        return request.response(ResponseCode.SUCCESS, None, None, body)

    @header_errors
    def get_consume_stats(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.from_ext_fields(request.ext_fields)
        topics = [h.topic] if h.topic else sorted(
            self.ctrl.offsets.topics_of_group(h.consumer_group)
        )
        body, _diff = self._consume_stats(h.consumer_group, topics)
        return request.response(ResponseCode.SUCCESS, None, None, body.encode())

    def _consume_stats(self, group: str, topics: list[str]) -> tuple[str, int]:
        """(``ConsumeStats`` JSON, its total diff) of ``group`` over ``topics``: per write
        queue the broker's max offset, the group's committed offset and the store time of
        the last message it consumed. A topic this broker does not have is left out.
        ``consumeTps`` is the group's consumption over the last minute, summed over the
        topics (``mqadmin statsAll``'s GROUP_GET_NUMS figure, see ``consumed_since``)."""
        ctrl = self.ctrl
        store = ctrl.store
        table = []
        diff = 0
        consumed = 0
        window_s = CONSUME_TPS_WINDOW_S
        since_ms = ctrl.now_ms() - window_s * 1000
        for topic in topics:
            tc = ctrl.topics.select(topic)
            if tc is None:
                continue
            consumed += consumed_since(ctrl, topic, tc.write_queue_nums, group, since_ms)
            for qid in range(tc.write_queue_nums):
                broker_offset = max(0, store.get_max_offset_in_queue(topic, qid))
                consumer_offset = max(0, ctrl.offsets.query(group, topic, qid))
                last = (
                    store.get_message_store_timestamp(topic, qid, consumer_offset - 1)
                    if consumer_offset > 0
                    else 0
                )
                diff += broker_offset - consumer_offset
                table.append(
                    (
                        _mq(topic, ctrl.bcfg.broker_name, qid),
                        {
                            "brokerOffset": broker_offset,
                            "consumerOffset": consumer_offset,
                            "lastTimestamp": max(0, last),
                        },
                    )
                )
        inner = _offset_table_json(table)[1:-1].decode()  # "offsetTable":{...}
        tps = fastjson.dumps(round(consumed / window_s, 2)).decode()
        return '{"consumeTps":' + tps + "," + inner + "}", diff

    def get_broker_consume_stats(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONSUME_STATS (317), ``mqadmin brokerConsumeStats``: per subscription
        group, one ConsumeStats per topic it has offsets for (with ``isOrder=true`` only the
        topics whose config is orderly), and the diff of them all."""
        order_text = request.ext_fields.get("isOrder")
        if order_text not in ("true", "false"):
            return request.response(
                ResponseCode.SYSTEM_ERROR, "isOrder: missing, or not true/false"
            )
        ctrl = self.ctrl
        groups = []
        total = 0
        for group in sorted(ctrl.groups.table):
            topics = []
            for topic in sorted(ctrl.offsets.topics_of_group(group)):
                tc = ctrl.topics.select(topic)
                if tc is not None and (order_text == "false" or tc.order):
                    topics.append(topic)
            stats = [self._consume_stats(group, [t]) for t in topics]
            total += sum(d for _s, d in stats)
            groups.append(fastjson.dumps(group).decode() + ":[" + ",".join(
                s for s, _d in stats) + "]")
        body = (
            '{"brokerAddr":' + fastjson.dumps(ctrl.broker_addr).decode()
            + ',"consumeStatsList":[' + ",".join("{" + g + "}" for g in groups) + "]"
            + ',"totalDiff":' + str(total) + "}"
        )
        return request.response(ResponseCode.SUCCESS, None, None, body.encode())

    @header_errors
    def get_consumer_connection_list(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumerConnectionListRequestHeader.from_ext_fields(request.ext_fields)
        info = self.ctrl.clients.consumer_group(h.consumer_group)
        if info is None or not info.channels:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"the consumer group[{h.consumer_group}] not online",
            )
        body = {
            "connectionSet": [
                {
                    "clientAddr": ci.addr,
                    "clientId": ci.client_id,
                    "language": ci.language,
                    "version": ci.version,
                }
                for ci in info.channels.values()
            ],
            "consumeFromWhere": info.consume_from_where,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": {t: s.to_json_obj() for t, s in info.subscriptions.items()},
        }
        return request.response(ResponseCode.SUCCESS, None, None, fastjson.dumps(body))


class MoreAdminProcessors(AdminProcessors):
    """DELETE_SUBSCRIPTIONGROUP, GET_PRODUCER_CONNECTION_LIST, QUERY_TOPIC_CONSUME_BY_WHO,
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER."""

    def delete_subscription_group(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        refused = self._refuse_on_slave(request)
        if refused is not None:
            return refused
        group = request.ext_fields.get("groupName")
        if not group:
            return request.response(ResponseCode.SYSTEM_ERROR, "groupName is required")
        bad = validate_group(group)
        if bad is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, bad)
        if self.ctrl.groups.delete(group):
            self.ctrl.mark_dirty()
        return request.response(ResponseCode.SUCCESS)

    def get_producer_connection_list(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        group = request.ext_fields.get("producerGroup", "")
        channels = self.ctrl.clients.producers.get(group)
        if not channels:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist"
            )
        body = {
            "connectionSet": [
                {
                    "clientAddr": ci.addr,
                    "clientId": ci.client_id,
                    "language": ci.language,
                    "version": ci.version,
                }
                for ci in channels.values()
            ]
        }
        return request.response(ResponseCode.SUCCESS, None, None, fastjson.dumps(body))

    def query_topic_consume_by_who(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        topic = request.ext_fields.get("topic", "")
        groups = set(self.ctrl.clients.groups_subscribing(topic))
        groups |= self.ctrl.offsets.groups_of_topic(topic)
        return request.response(
            ResponseCode.SUCCESS, None, None, fastjson.dumps({"groupList": sorted(groups)})
        )

    def get_system_topic_list(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        topics = [t.topic_name for t in self.ctrl.topics.system_topics()]
        return request.response(
            ResponseCode.SUCCESS, None, None, fastjson.dumps({"topicList": sorted(topics)})
        )


#: BrokerStatsData's windows (statsMinute, statsHour, statsDay) in seconds.
STATS_WINDOWS_S: Final = (("statsMinute", 60), ("statsHour", 3600), ("statsDay", 86400))
#: ConsumeStats.consumeTps: a group's consumption over this window (RocketMQ: the minute
#: figure of GROUP_GET_NUMS), in messages per second.
CONSUME_TPS_WINDOW_S: Final = 60
#: VIEW_BROKER_STATS_DATA names we answer (RocketMQ ``BrokerStatsManager``): messages put to a
#: topic, messages of a topic a group consumed.
TOPIC_PUT_NUMS: Final = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS: Final = "GROUP_GET_NUMS"
#: ``statsKey`` of GROUP_GET_NUMS: ``topic@group``.
STATS_KEY_SEPARATOR: Final = "@"


class StatsProcessor:
    """VIEW_BROKER_STATS_DATA (315), what ``mqadmin statsAll`` asks: ``BrokerStatsData`` for
    TOPIC_PUT_NUMS (key: topic) and GROUP_GET_NUMS (key: ``topic@group``), one
    ``{"sum","tps","avgpt"}`` per window (last minute, hour, day).

    The figures come from the store, not from sampled counters: a window's put count is, per
    queue of the topic, the messages stored since the window began (max offset minus the
    offset at that time); a group's get count is how many of those the group has committed.
    So they survive a restart, and a message consumed twice counts once. ``avgpt`` (time per
    call) is not measured here and is 0."""

    def __init__(self, ctrl: BrokerContext) -> None:
        self.ctrl = ctrl

    def view_broker_stats_data(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        name = ext.get("statsName")
        key = ext.get("statsKey")
        if not name or key is None:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    "statsName and statsKey are required")
        if name == TOPIC_PUT_NUMS:
            topic, group = key, None
        elif name == GROUP_GET_NUMS:
            topic, sep, group = key.partition(STATS_KEY_SEPARATOR)
            if not sep:
                return request.response(ResponseCode.SYSTEM_ERROR,
                                        f"statsKey of {name} must be topic@group")
        else:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"The stats <{name}> <{key}> not exist")
        bad = validate_topic(topic) or (validate_group(group) if group is not None else None)
        if bad is not None:  # checked here: statsKey joins two names (the gate's table cannot)
            return request.response(ResponseCode.SYSTEM_ERROR, bad)
        ctrl = self.ctrl
        tc = ctrl.topics.select(topic)
        if tc is None or (group is not None
                          and all(ctrl.offsets.query(group, topic, q) < 0
                                  for q in range(tc.write_queue_nums))):
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"The stats <{name}> <{key}> not exist")
        now = ctrl.now_ms()
        body: dict[str, Any] = {}
        for label, window_s in STATS_WINDOWS_S:
            total = consumed_since(ctrl, topic, tc.write_queue_nums, group,
                                   now - window_s * 1000)
            body[label] = {"avgpt": 0.0, "sum": total, "tps": round(total / window_s, 2)}
        return request.response(ResponseCode.SUCCESS, None, None, fastjson.dumps(body))


def consumed_since(
    ctrl: BrokerContext, topic: str, queues: int, group: str | None, since_ms: int
) -> int:
    """Messages of ``topic``'s first ``queues`` queues stored since ``since_ms`` that
    ``group`` has committed (every one stored since then when ``group`` is None): per queue,
    the committed offset (at most the max offset) minus the first offset stored since."""
    store = ctrl.store
    total = 0
    for qid in range(queues):
        end = store.get_max_offset_in_queue(topic, qid)
        if end <= 0:
            continue
        start = _first_offset_at_or_after(store, topic, qid, since_ms, end)
        if group is None:
            total += end - start
        else:
            total += max(0, min(end, ctrl.offsets.query(group, topic, qid)) - start)
    return total


def _first_offset_at_or_after(store: Any, topic: str, qid: int, since_ms: int, end: int) -> int:
    """The first offset of the queue stored at or after ``since_ms`` (``end`` if none)."""
    off = max(store.get_offset_in_queue_by_time(topic, qid, since_ms),
              store.get_min_offset_in_queue(topic, qid))
    # the store answers the nearest message (one before the first newer one at most)
    if off < end and 0 <= store.get_message_store_timestamp(topic, qid, off) < since_ms:
        off += 1
    return off


class ResetOffsetProcessor:
    """INVOKE_BROKER_TO_RESET_OFFSET (222), RocketMQ ``Broker2Client.resetOffset`` (what
    ``mqadmin resetOffsetByTime`` asks): per write queue of the topic, the offset at
    ``timestamp`` (-1: the queue's end), kept at the committed offset unless ``isForce`` or
    earlier; every online consumer of the group gets RESET_CONSUMER_CLIENT_OFFSET (oneway) and
    moves there. Offline groups answer CONSUMER_NOT_ONLINE (the admin then commits offsets)."""

    def __init__(self, ctrl: BrokerContext) -> None:
        self.ctrl = ctrl

    @header_errors
    def reset_offset(
        self, conn: Any, request: RemotingCommand
    ) -> RemotingCommand | Later:
        ctrl = self.ctrl
        h = ResetOffsetRequestHeader.from_ext_fields(request.ext_fields)
        tc = ctrl.topics.select(h.topic)
        if tc is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={h.topic}",
            )
        store = ctrl.store
        broker_name = ctrl.bcfg.broker_name
        table: list[tuple[int, int]] = []
        committed_offsets = [
            ctrl.offsets.query(h.group, h.topic, qid) for qid in range(tc.write_queue_nums)
        ]
        if all(c == -1 for c in committed_offsets) and ctrl.groups.find(h.group) is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"THe consumer group <{h.group}> not exist"
            )
        for qid, committed in enumerate(committed_offsets):
            # a queue the group has not committed yet moves to the target (RocketMQ refuses
            # the whole reset until every queue has a committed offset)
            if h.timestamp == -1:
                target = store.get_max_offset_in_queue(h.topic, qid)
            else:
                target = store.get_offset_in_queue_by_time(h.topic, qid, h.timestamp)
            target = max(target, 0)
            keep = not h.is_force and committed != -1 and target >= committed
            table.append((qid, committed if keep else target))
        body = _reset_body(h.topic, broker_name, table, cpp=request.language == "CPP")
        info = ctrl.clients.consumer_group(h.group)
        if info is None or not info.channels:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {h.group} "
                f"Topic: {h.topic} Timestamp: {h.timestamp}",
            )
        for ci in list(info.channels.values()):
            if ci.version < Version.V3_0_7_SNAPSHOT:
                return request.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"the client does not support this feature. version={ci.version}",
                )
        notify = RemotingCommand.request(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            ResetOffsetRequestHeader(
                topic=h.topic, group=h.group, timestamp=h.timestamp, is_force=h.is_force
            ).to_ext_fields(),
            body,
            oneway=True,
        )
        channels = [c for c in info.channels if isinstance(c, Connection)]
        answer = request.response(
            ResponseCode.SUCCESS, None, None, _reset_body(h.topic, broker_name, table, cpp=False)
        )

        async def notify_all() -> RemotingCommand:
            for channel in channels:
                try:
                    await channel.invoke_oneway(notify)
                except RemotingError as exc:
                    ctrl.log.warning("reset offset notify failed", group=h.group, error=str(exc))
            ctrl.log.info("consumer offsets reset", group=h.group, topic=h.topic,
                          timestamp=h.timestamp, offsets=dict(table), clients=len(channels))
            return answer

        return Later(notify_all())


def _reset_body(topic: str, broker_name: str, table: list[tuple[int, int]], *, cpp: bool) -> bytes:
    """ResetOffsetBody (``{"offsetTable":{{mq}:offset}}``) or, for a C++ caller,
    ResetOffsetBodyForC (``{"offsetTable":[{"brokerName",..,"offset",..}]}``)."""
    if cpp:
        return fastjson.dumps({"offsetTable": [
            {"brokerName": broker_name, "offset": off, "queueId": qid, "topic": topic}
            for qid, off in table
        ]})
    parts = [
        fastjson.dumps(_mq(topic, broker_name, qid)).decode() + ":" + str(off)
        for qid, off in table
    ]
    return ('{"offsetTable":{' + ",".join(parts) + "}}").encode()


def _offset_table_json(entries: list[tuple[dict[str, Any], dict[str, Any]]]) -> bytes:
    """``{"offsetTable":{{"brokerName":..}:{..},..}}``: fastjson's object-keyed map."""
    parts = [
        fastjson.dumps(key).decode() + ":" + fastjson.dumps(value).decode()
        for key, value in entries
    ]
    return ('{"offsetTable":{' + ",".join(parts) + "}}").encode()
