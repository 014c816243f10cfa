"""Admin calls the broker relays to one of its consumers, QUERY_CONSUME_TIME_SPAN and
GET_TOPIC_CONFIG.

RocketMQ 4.9 ``AdminBrokerProcessor.callConsumer``: GET_CONSUMER_RUNNING_INFO (307) and
CONSUME_MESSAGE_DIRECTLY (309) from an admin name a consumer group and a client id; the broker
finds that client's connection among the group's heartbeating members and calls it with the
same extFields and body (10 s), relaying the client's answer as is. CONSUME_MESSAGE_DIRECTLY
first reads the message named by ``msgId`` (an offset msgId) from the store, puts the stored
record in the body and its own ``brokerName`` in the extFields.

Errors (RocketMQ's codes and remarks): SYSTEM_ERROR ``The Consumer <g> <id> not online``, a
client older than V3_1_8_SNAPSHOT, CONSUME_MSG_TIMEOUT ``consumer <g> <id> Timeout: ..`` when
the client does not answer in time, SYSTEM_ERROR ``invoke consumer <g> <id> Exception: ..``.

GET_TOPIC_CONFIG (351) is a RocketMQ 5 admin read that 5.x tools call on every broker of a
topic's route (``DefaultMQAdminExt.examineConsumeStats`` does, and gives up on any answer but
SUCCESS or TOPIC_NOT_EXIST): one topic's config as ``TopicConfigAndQueueMapping`` JSON; we
have no static topics, so never a ``mappingDetail``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

from ...cluster.acl.permission import SUB
from ...cluster.protocol import fastjson
from ...cluster.protocol.message import RecordError, decode_offset_msg_id, decode_record
from ...cluster.remoting.codec import RemotingCommand
from ...cluster.remoting.codes import RequestCode, ResponseCode
from ...cluster.remoting.connection import Connection
from ...cluster.remoting.errors import RemotingError, RemotingTimeoutError
from ...cluster.remoting.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    HeaderError,
    QueryConsumeTimeSpanRequestHeader,
)
from ..topic_config import validate_topic
from .common import header_errors, message_topics

if TYPE_CHECKING:
    from ..context import BrokerContext

#: RocketMQ ``Broker2Client.callClient`` waits this long for the client.
CALL_CLIENT_TIMEOUT_S: Final = 10.0
#: MQVersion ordinal of V3_1_8_SNAPSHOT: older clients cannot answer these calls.
MIN_CLIENT_VERSION: Final = 62


class ConsumerRelayProcessors:
    def __init__(self, ctrl: BrokerContext) -> None:
        self.ctrl = ctrl

    async def get_consumer_running_info(
        self, conn: Any, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            h = GetConsumerRunningInfoRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad request header: {exc}")
        return await self._call_consumer(
            RequestCode.GET_CONSUMER_RUNNING_INFO, request, h.consumer_group, h.client_id,
            dict(request.ext_fields), bytes(request.body),
        )

    async def consume_message_directly(
        self, conn: Any, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            h = ConsumeMessageDirectlyResultRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad request header: {exc}")
        ext = dict(request.ext_fields)
        ext["brokerName"] = self.ctrl.bcfg.broker_name
        try:
            _host, offset = decode_offset_msg_id(h.msg_id or "")
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad msgId {h.msg_id!r}: {exc}")
        view = self.ctrl.store.read_record(offset)
        if view is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the msgId, {h.msg_id}"
            )
        try:
            access = self.ctrl.topic_access
            if access is not None:  # aclEnable: the topic of the message actually read
                try:
                    topics = message_topics(decode_record(view, check_crc=False))
                except RecordError:
                    return request.response(
                        ResponseCode.SYSTEM_ERROR,
                        f"can not find message by the msgId, {h.msg_id}",
                    )
                denial = access(conn, request, topics, SUB)
                if denial is not None:
                    return denial
            body = bytes(view)
        finally:
            view.release()
        return await self._call_consumer(
            RequestCode.CONSUME_MESSAGE_DIRECTLY, request, h.consumer_group, h.client_id,
            ext, body,
        )

    async def _call_consumer(
        self,
        code: int,
        request: RemotingCommand,
        group: str,
        client_id: str | None,
        ext: dict[str, str],
        body: bytes,
    ) -> RemotingCommand:
        ctrl = self.ctrl
        info = ctrl.clients.consumer_group(group)
        channel = (
            ctrl.clients.find_channel_by_client_id(group, client_id)
            if client_id is not None
            else None
        )
        ci = info.channels.get(channel) if info is not None and channel is not None else None
        if ci is None or not isinstance(channel, Connection) or channel.is_closed:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
            )
        if ci.version < MIN_CLIENT_VERSION:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{group}> Version <{ci.version}> too low to finish, "
                "please upgrade it to V3_1_8_SNAPSHOT",
            )
        call = RemotingCommand.request(code, ext, body)
        try:
            return await channel.invoke(call, CALL_CLIENT_TIMEOUT_S)
        except RemotingTimeoutError as exc:
            return request.response(
                ResponseCode.CONSUME_MSG_TIMEOUT,
                f"consumer <{group}> <{client_id}> Timeout: {exc}",
            )
        except RemotingError as exc:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"invoke consumer <{group}> <{client_id}> Exception: {exc}",
            )

    @header_errors
    def query_consume_time_span(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        """Per write queue: first/last store time, the time of the last consumed message and
        how long the next one has waited (RocketMQ ``QueryConsumeTimeSpanBody``)."""
        h = QueryConsumeTimeSpanRequestHeader.from_ext_fields(request.ext_fields)
        ctrl = self.ctrl
        tc = ctrl.topics.select(h.topic)
        if tc is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        store = ctrl.store
        now_ms = time.time_ns() // 1_000_000
        spans = []
        for qid in range(tc.write_queue_nums):
            min_time = store.get_earliest_message_time(h.topic, qid)
            max_offset = store.get_max_offset_in_queue(h.topic, qid)
            max_time = (
                store.get_message_store_timestamp(h.topic, qid, max_offset - 1)
                if max_offset > 0
                else -1
            )
            consumer_offset = ctrl.offsets.query(h.group, h.topic, qid)
            consume_time = (
                store.get_message_store_timestamp(h.topic, qid, consumer_offset - 1)
                if consumer_offset > 0
                else min_time
            )
            delay = 0
            if consumer_offset < max_offset:
                next_time = store.get_message_store_timestamp(
                    h.topic, qid, max(consumer_offset, 0)
                )
                delay = now_ms - next_time if next_time > 0 else 0
            spans.append(
                {
                    "consumeTimeStamp": consume_time,
                    "delayTime": delay,
                    "maxTimeStamp": max_time,
                    "messageQueue": {
                        "brokerName": ctrl.bcfg.broker_name,
                        "queueId": qid,
                        "topic": h.topic,
                    },
                    "minTimeStamp": min_time,
                }
            )
        body = fastjson.dumps({"consumeTimeSpanSet": spans})
        return request.response(ResponseCode.SUCCESS, None, None, body)

    def get_topic_config(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_TOPIC_CONFIG (351): header ``topic`` (and ``lo``, ignored: no static topics)."""
        topic = request.ext_fields.get("topic")
        bad = validate_topic(topic)
        if bad is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, bad)
        tc = self.ctrl.topics.select(topic) if topic is not None else None
        if tc is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}"
            )
        return request.response(
            ResponseCode.SUCCESS, None, None, fastjson.dumps(tc.to_json_obj())
        )
