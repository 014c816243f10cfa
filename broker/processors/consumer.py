"""Client and consumer management, offsets and message queries (all answered inline).

HEART_BEAT, UNREGISTER_CLIENT, CHECK_CLIENT_CONFIG, GET_CONSUMER_LIST_BY_GROUP,
UPDATE/QUERY_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
GET_EARLIEST_MSG_STORETIME, LOCK/UNLOCK_BATCH_MQ, QUERY_MESSAGE, VIEW_MESSAGE_BY_ID.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

from ...cluster.acl.permission import SUB
from ...cluster.acl.signing import ACCESS_KEY
from ...cluster.filter.sql92 import SelectorError, compile_sql92
from ...cluster.protocol import fastjson
from ...cluster.protocol.message import RecordError, decode_record
from ...cluster.protocol.route import PermName
from ...cluster.remoting.codec import RemotingCommand
from ...cluster.remoting.codes import ResponseCode
from ...cluster.remoting.headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from ...cluster.remoting.processors import Later
from ..clients import (
    ClientChannelInfo,
    HeartbeatData,
    HeartbeatError,
    decode_heartbeat,
)
from ..topic_config import retry_topic
from .common import header_errors, message_topics

if TYPE_CHECKING:
    from ..context import BrokerContext

#: A message further than this share of RAM behind the CommitLog's end is "on disk"
#: (RocketMQ accessMessageInMemoryMaxRatio = 40).
ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO: Final = 0.40
UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"
#: Assumed RAM when the OS does not say.
FALLBACK_MEMORY_BYTES: Final = 8 * 1024**3


def _total_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return FALLBACK_MEMORY_BYTES


TOTAL_MEMORY_BYTES: Final = _total_memory_bytes()


def _mq_key(obj: Any) -> tuple[str, str, int]:
    if not isinstance(obj, dict):
        raise ValueError("MessageQueue must be an object")
    return (str(obj.get("topic", "")), str(obj.get("brokerName", "")), int(obj.get("queueId", 0)))


def _mq_obj(key: tuple[str, str, int]) -> dict[str, Any]:
    return {"brokerName": key[1], "queueId": key[2], "topic": key[0]}


class ConsumerProcessors:
    def __init__(self, ctrl: BrokerContext) -> None:
        self.ctrl = ctrl

    # ------------------------------------------------------------------ clients

    def heart_beat(
        self, conn: Any, request: RemotingCommand
    ) -> RemotingCommand | Later:
        """HEART_BEAT. As RocketMQ's ``ClientManageProcessor.heartBeat``: each consumer group's
        retry topic is created first and, when new, registered with the NameServers before the
        group's members are recorded and told (so the route of ``%RETRY%group`` exists by the
        time the client rebalances on this answer or on NOTIFY_CONSUMER_IDS_CHANGED)."""
        ctrl = self.ctrl
        try:
            hb = decode_heartbeat(request.body)
        except HeartbeatError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad heartbeat body: {exc}")
        created: list[str] = []
        for data in hb.consumers:
            sgc = ctrl.groups.find(data.group_name)
            if sgc is not None and sgc.retry_queue_nums > 0:
                topic = retry_topic(data.group_name)
                _tc, new = ctrl.topics.create_in_send_message_back(
                    topic, sgc.retry_queue_nums, PermName.PERM_RW
                )
                if new:
                    created.append(topic)
        if not created:
            return self._register_clients(conn, request, hb)
        return Later(self._register_topics_then_clients(conn, request, hb, created))

    async def _register_topics_then_clients(
        self, conn: Any, request: RemotingCommand, hb: HeartbeatData, topics: list[str]
    ) -> RemotingCommand:
        await self.ctrl.register_topics_now(topics)
        return self._register_clients(conn, request, hb)

    def _register_clients(
        self, conn: Any, request: RemotingCommand, hb: HeartbeatData
    ) -> RemotingCommand:
        ctrl = self.ctrl
        now = ctrl.now_ms()
        for data in hb.consumers:
            sgc = ctrl.groups.find(data.group_name)
            notify = sgc.notify_consumer_ids_changed_enable if sgc is not None else True
            info = ClientChannelInfo(
                conn, hb.client_id, request.language, request.version, conn.peer, now
            )
            changed = ctrl.clients.register_consumer(data, info)
            if changed:
                ctrl.log.info(
                    "consumer registered",
                    group=data.group_name,
                    client_id=hb.client_id,
                    remote=conn.peer,
                )
                if notify:
                    ctrl.notify_consumer_ids_changed(data.group_name)
        ctrl.state_changed()
        # the account the ACL admitted this heartbeat as: transaction checks go only to a
        # producer whose account may publish to the checked message's topic
        access_key = request.ext_fields.get(ACCESS_KEY) if ctrl.acl is not None else None
        for group in hb.producer_groups:
            ctrl.clients.register_producer(
                group,
                ClientChannelInfo(
                    conn, hb.client_id, request.language, request.version, conn.peer, now,
                    access_key,
                ),
            )
        return request.response(ResponseCode.SUCCESS)

    @header_errors
    def unregister_client(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        ctrl = self.ctrl
        h = UnregisterClientRequestHeader.from_ext_fields(request.ext_fields)
        if h.producer_group:
            ctrl.clients.unregister_producer(h.producer_group, conn)
        if h.consumer_group and ctrl.clients.unregister_consumer(h.consumer_group, conn):
            sgc = ctrl.groups.table.get(h.consumer_group)
            if sgc is None or sgc.notify_consumer_ids_changed_enable:
                ctrl.notify_consumer_ids_changed(h.consumer_group)
        ctrl.state_changed()
        return request.response(ResponseCode.SUCCESS)

    def check_client_config(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            body = fastjson.loads(bytes(request.body)) if request.body else {}
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad body: {exc}")
        if not isinstance(body, dict):
            return request.response(ResponseCode.SYSTEM_ERROR, "bad body: not an object")
        group = body.get("group")
        if isinstance(group, str) and self.ctrl.groups.find(group) is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "subscription group not exist"
            )
        sub = body.get("subscriptionData") or {}
        etype = str(sub.get("expressionType") or "TAG") if isinstance(sub, dict) else "TAG"
        if etype.upper() == "TAG":
            return request.response(ResponseCode.SUCCESS)
        if etype.upper() != "SQL92" or not self.ctrl.bcfg.enable_property_filter:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {etype}",
            )
        try:
            compile_sql92(str(sub.get("subString") or ""))
        except SelectorError as exc:
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        return request.response(ResponseCode.SUCCESS)

    @header_errors
    def get_consumer_list_by_group(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumerListByGroupRequestHeader.from_ext_fields(request.ext_fields)
        info = self.ctrl.clients.consumer_group(h.consumer_group)
        ids = info.client_ids() if info is not None else []
        if ids:
            return request.response(
                ResponseCode.SUCCESS, None, None, fastjson.dumps({"consumerIdList": ids})
            )
        return request.response(
            ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}"
        )

    # ------------------------------------------------------------------ offsets

    @header_errors
    def update_consumer_offset(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        self.ctrl.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return request.response(ResponseCode.SUCCESS)

    @header_errors
    def query_consumer_offset(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        ctrl = self.ctrl
        h = QueryConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = ctrl.offsets.query(h.consumer_group, h.topic, h.queue_id)
        if offset >= 0:
            return request.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})
        # answered from what is dispatched, as RocketMQ does: no dispatch round here (under a
        # send load that was up to MAX_DISPATCH_BYTES_PER_ROUND of reput work per query, and a
        # 4.x consumer asks once per queue it takes, one after the other)
        store = ctrl.store
        min_offset = store.get_min_offset_in_queue(h.topic, h.queue_id)
        if min_offset <= 0 and not self._in_disk(h.topic, h.queue_id, 0):
            return request.response(ResponseCode.SUCCESS, None, {"offset": "0"})
        return request.response(
            ResponseCode.QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
        )

    def _in_disk(self, topic: str, queue_id: int, offset: int) -> bool:
        store = self.ctrl.store
        if store.get_max_offset_in_queue(topic, queue_id) <= offset:
            return False
        phys = store.get_commitlog_offset_in_queue(topic, queue_id, offset)
        distance = store.max_phys_offset - phys
        return distance > TOTAL_MEMORY_BYTES * ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO

    @header_errors
    def get_max_offset(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.from_ext_fields(request.ext_fields)
        store = self.ctrl.store
        if store.dispatch_behind_bytes > 0:
            store.dispatch()
        offset = store.get_max_offset_in_queue(h.topic, h.queue_id)
        return request.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})

    @header_errors
    def get_min_offset(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.from_ext_fields(request.ext_fields)
        offset = self.ctrl.store.get_min_offset_in_queue(h.topic, h.queue_id)
        return request.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})

    @header_errors
    def search_offset_by_timestamp(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = self.ctrl.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp)
        return request.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})

    @header_errors
    def get_earliest_msg_storetime(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.from_ext_fields(request.ext_fields)
        ts = self.ctrl.store.get_earliest_message_time(h.topic, h.queue_id)
        return request.response(ResponseCode.SUCCESS, None, {"timestamp": str(ts)})

    # ------------------------------------------------------------------ locks

    def lock_batch_mq(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            body = fastjson.loads(bytes(request.body))
            group = str(body["consumerGroup"])
            client_id = str(body["clientId"])
            mqs = [_mq_key(m) for m in body.get("mqSet") or []]
        except (ValueError, KeyError, TypeError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad lock body: {exc!r}")
        ok = self.ctrl.locks.try_lock_batch(group, mqs, client_id, self.ctrl.now_ms())
        return request.response(
            ResponseCode.SUCCESS,
            None,
            None,
            fastjson.dumps({"lockOKMQSet": [_mq_obj(k) for k in ok]}),
        )

    def unlock_batch_mq(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            body = fastjson.loads(bytes(request.body))
            group = str(body["consumerGroup"])
            client_id = str(body["clientId"])
            mqs = [_mq_key(m) for m in body.get("mqSet") or []]
        except (ValueError, KeyError, TypeError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad unlock body: {exc!r}")
        self.ctrl.locks.unlock_batch(group, mqs, client_id)
        return request.response(ResponseCode.SUCCESS)

    # ------------------------------------------------------------------ queries

    @header_errors
    def query_message(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext_fields(request.ext_fields)
        begin, end = h.begin_timestamp, h.end_timestamp
        if request.ext_fields.get(UNIQUE_KEY_QUERY, "").lower() == "true":
            begin, end = 0, 2**63 - 1
        result = self.ctrl.store.query_message(h.topic, h.key, h.max_num, begin, end)
        ext = {
            "indexLastUpdateTimestamp": str(result.index_last_update_timestamp),
            "indexLastUpdatePhyoffset": str(result.index_last_update_phyoffset),
        }
        if not result.buffers:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                "can not find message, maybe time range not correct",
                ext,
            )
        access = self.ctrl.topic_access
        if access is not None:
            # the ACL admitted the header's topic; a delayed or half message found under it
            # also belongs to its real topic
            for view in result.buffers:
                try:
                    topics = message_topics(decode_record(view, check_crc=False))
                except RecordError:
                    continue
                denial = access(conn, request, topics, SUB)
                if denial is not None:
                    result.copy_body()  # releases the views
                    return denial
        return request.response(ResponseCode.SUCCESS, None, ext, result.copy_body())

    @header_errors
    def view_message_by_id(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext_fields(request.ext_fields)
        view = self.ctrl.store.read_record(h.offset)
        if view is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}"
            )
        try:
            access = self.ctrl.topic_access
            if access is not None:  # aclEnable: the topic of the message actually read
                try:
                    topics = message_topics(decode_record(view, check_crc=False))
                except RecordError:
                    return request.response(
                        ResponseCode.SYSTEM_ERROR,
                        f"can not find message by the offset, {h.offset}",
                    )
                denial = access(conn, request, topics, SUB)
                if denial is not None:
                    return denial
            body = bytes(view)
        finally:
            view.release()
        return request.response(ResponseCode.SUCCESS, None, None, body)
