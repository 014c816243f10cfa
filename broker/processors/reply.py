"""SEND_REPLY_MESSAGE (324) / SEND_REPLY_MESSAGE_V2 (325): request-reply (RocketMQ 4.6+).

A consumer answers a request with a message whose ``MSG_TYPE`` is ``reply``; its producer sends
it with code 325 (324 with long header names) to ``<cluster>_REPLY_TOPIC``. As RocketMQ 4.9's
``ReplyMessageProcessor``, the broker:

1. checks the send as any send (header, broker permission, topic name and permission,
   auto-create, queue id);
2. pushes the reply to the requester: the producer connection whose heartbeat carried the
   client id named by the ``REPLY_TO_CLIENT`` property, with PUSH_REPLY_MESSAGE_TO_CLIENT (326)
   (properties + ``PUSH_REPLY_TIME``, header ``bornHost``/``storeHost`` as ``/ip:port``);
3. stores the reply in its topic when ``storeReplyMessageEnable`` (default true);
4. answers SUCCESS (msgId/queueOffset from the store, "0" when not stored) when the push was
   acknowledged, else SYSTEM_ERROR with RocketMQ's remarks: ``reply message
   properties[REPLY_TO_CLIENT] is null``, ``push reply message fail, channel of <id> not found.``
   or ``push reply message to <id>fail.``.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any, Final

from ...cluster.protocol.message import (
    MessageConst,
    decode_properties,
    encode_properties,
    new_message,
)
from ...cluster.protocol.route import PermName
from ...cluster.remoting.codec import RemotingCommand
from ...cluster.remoting.codes import RequestCode, ResponseCode
from ...cluster.remoting.connection import Connection
from ...cluster.remoting.errors import RemotingError
from ...cluster.remoting.headers import (
    HeaderError,
    ReplyMessageRequestHeader,
    SendMessageRequestHeader,
    parse_send_header,
)
from ..topic_config import is_not_allowed_send_topic, validate_topic
from .common import FAQ_SUGGEST, MSG_REGION_DEFAULT, TRACE_ON_DEFAULT
from .send import peer_host

if TYPE_CHECKING:
    from ..context import BrokerContext

#: How long the broker waits for the requester to acknowledge a pushed reply (RocketMQ
#: ``Broker2Client.callClient``: 10 s).
PUSH_REPLY_TIMEOUT_S: Final = 10.0
_REPLY_TO: Final = MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT


def java_socket_address(host: str, port: int) -> str:
    """``InetSocketAddress.toString()`` of an IP literal: ``/ip:port``."""
    return f"/{host}:{port}"


def find_producer_channel(ctrl: BrokerContext, client_id: str) -> Connection | None:
    """The live connection of a client that heartbeats as a producer (Java
    ``ProducerManager.findChannel``); any of its producer groups will do."""
    for channels in ctrl.clients.producers.values():
        for channel, info in channels.items():
            if (
                info.client_id == client_id
                and isinstance(channel, Connection)
                and not channel.is_closed
            ):
                return channel
    return None


class ReplyProcessor:
    def __init__(self, ctrl: BrokerContext) -> None:
        self.ctrl = ctrl

    def _check(
        self, conn: Any, request: RemotingCommand, h: SendMessageRequestHeader
    ) -> RemotingCommand | int:
        """RocketMQ ``msgCheck``: an error response, or the queue id to use."""
        ctrl = self.ctrl
        if ctrl.is_slave:
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"the broker[{ctrl.bcfg.broker_ip1}] is a slave, sending message is forbidden",
            )
        if not PermName.is_writeable(ctrl.bcfg.broker_permission):
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{ctrl.bcfg.broker_ip1}] sending message is forbidden",
            )
        bad = validate_topic(h.topic)
        if bad is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, bad)
        if is_not_allowed_send_topic(h.topic):
            return request.response(
                ResponseCode.NO_PERMISSION, f"Sending message to topic[{h.topic}] is forbidden."
            )
        tc = ctrl.topics.select(h.topic)
        if tc is None:
            tc, created, _why = ctrl.topics.create_in_send_message(
                h.topic, h.default_topic, h.default_topic_queue_nums
            )
            if tc is None:
                return request.response(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{h.topic}] not exist, apply first please! {FAQ_SUGGEST}",
                )
            if created:
                ctrl.topic_created(h.topic)
        if h.queue_id >= max(tc.write_queue_nums, tc.read_queue_nums):
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{h.queue_id}] is illegal, {tc} Producer: {conn.peer}",
            )
        if not PermName.is_writeable(tc.perm):
            return request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] sending message is forbidden"
            )
        if h.queue_id < 0:
            return random.randrange(max(1, tc.write_queue_nums))
        return h.queue_id

    async def process(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        ctrl = self.ctrl
        try:
            h = parse_send_header(request.code, request.ext_fields)
        except HeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad request header: {exc}")
        checked = self._check(conn, request, h)
        if isinstance(checked, RemotingCommand):
            return checked
        queue_id = checked
        body = bytes(request.body)
        max_size = ctrl.settings.store.max_message_size
        if len(body) > max_size:
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size over max value, MAX: {max_size}, got {len(body)}",
            )
        props = decode_properties(h.properties) if h.properties else {}
        push_ok, remark = await self._push(conn, h, props, body)
        ext = {
            "msgId": "0",
            "queueId": str(queue_id),
            "queueOffset": "0",
            "MSG_REGION": MSG_REGION_DEFAULT,
            "TRACE_ON": TRACE_ON_DEFAULT,
        }
        if ctrl.bcfg.store_reply_message_enable:
            msg = new_message(
                h.topic, body, queue_id, h.flag, props, h.sys_flag, h.born_timestamp,
                peer_host(conn.peer), ctrl.store_host, h.reconsume_times or 0,
            )
            result = await ctrl.store.put_message(msg)
            appended = result.result
            if appended is not None and result.status.stored:
                ctrl.stats.put_total += appended.msg_num
                ext["msgId"] = appended.msg_id
                ext["queueOffset"] = str(appended.logics_offset)
            else:
                ctrl.log.warning("reply message not stored", topic=h.topic,
                                 status=result.status.value, remark=result.remark)
        if not push_ok:
            return request.response(ResponseCode.SYSTEM_ERROR, remark, ext)
        return request.response(ResponseCode.SUCCESS, None, ext)

    async def _push(
        self, conn: Any, h: SendMessageRequestHeader, props: dict[str, str], body: bytes
    ) -> tuple[bool, str]:
        ctrl = self.ctrl
        sender = props.get(_REPLY_TO)
        if sender is None:
            ctrl.log.warning("reply without REPLY_TO_CLIENT")
            return False, f"reply message properties[{_REPLY_TO}] is null"
        channel = find_producer_channel(ctrl, sender)
        if channel is None:
            remark = f"push reply message fail, channel of <{sender}> not found."
            ctrl.log.warning("reply push failed", reason="requester not connected", client=sender)
            return False, remark
        pushed = dict(props)
        pushed[MessageConst.PROPERTY_PUSH_REPLY_TIME] = str(time.time_ns() // 1_000_000)
        born_ip, born_port = peer_host(conn.peer)
        store_ip, store_port = ctrl.store_host
        header = ReplyMessageRequestHeader(
            producer_group=h.producer_group,
            topic=h.topic,
            default_topic=h.default_topic,
            default_topic_queue_nums=h.default_topic_queue_nums,
            queue_id=h.queue_id,
            sys_flag=h.sys_flag,
            born_timestamp=h.born_timestamp,
            flag=h.flag,
            properties=encode_properties(pushed).decode(),
            reconsume_times=h.reconsume_times,
            unit_mode=h.unit_mode,
            born_host=java_socket_address(born_ip, born_port),
            store_host=java_socket_address(store_ip, store_port),
            store_timestamp=time.time_ns() // 1_000_000,
        )
        push = RemotingCommand.request(
            RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, header.to_ext_fields(), body
        )
        try:
            response = await channel.invoke(push, PUSH_REPLY_TIMEOUT_S)
        except RemotingError as exc:
            ctrl.log.warning("reply push failed", client=sender, error=str(exc))
            return False, f"push reply message to {sender}fail."
        if response.code != ResponseCode.SUCCESS:
            ctrl.log.warning("reply push refused", client=sender, code=response.code,
                             remark=response.remark)
            return False, f"push reply message to {sender}fail."
        return True, ""
