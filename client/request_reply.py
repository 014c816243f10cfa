"""Request-reply (RocketMQ 4.6+): a producer sends a request and waits for the consumer's reply.

    # requester
    async with Producer("PG", namesrv_addr=ns) as p:
        reply = await p.request(Message("Orders", b"price?"), timeout=3.0)

    # replier: a push consumer whose listener answers through a producer
    async with Producer("RPG", namesrv_addr=ns) as rp, PushConsumer(
        "CG", namesrv_addr=ns, listener=reply_listener(rp, lambda m: b"42")
    ) as c: ...

As Java's ``DefaultMQProducerImpl.request``: the request carries ``CORRELATION_ID`` (a random
UUID), ``REPLY_TO_CLIENT`` (the requester's client id) and ``TTL`` (the timeout in ms); the
producer heartbeats before its first request to a topic so the broker knows its connection.
``create_reply_message`` (Java ``MessageUtil.createReplyMessage``) addresses the reply to
``<CLUSTER>_REPLY_TOPIC`` (the ``CLUSTER`` property the broker stamped on the request) with
``MSG_TYPE=reply``; a producer sends such a message with SEND_REPLY_MESSAGE_V2 (325), and the
broker pushes it to the requester's connection (PUSH_REPLY_MESSAGE_TO_CLIENT, 326), where the
client instance hands it to the waiting ``request`` by correlation id.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import trio

from ..cluster.protocol.message import (
    MAX_MESSAGE_SIZE_BYTES,
    MessageConst,
    decode_properties,
    inflate_body,
)
from ..cluster.remoting.headers import ReplyMessageRequestHeader
from .errors import MQClientError
from .model import ConsumeResult, Message, MessageQueue, ReceivedMessage

MC = MessageConst
#: ``MSG_TYPE`` of a reply (Java ``MixAll.REPLY_MESSAGE_FLAG``).
REPLY_MESSAGE_FLAG: Final = "reply"
#: ``<cluster>_REPLY_TOPIC`` (Java ``MixAll.REPLY_TOPIC_POSTFIX``).
REPLY_TOPIC_POSTFIX: Final = "REPLY_TOPIC"
#: Java ``ClientErrorCode`` values carried as the errors' ``code``.
REQUEST_TIMEOUT_EXCEPTION: Final = 10006
CREATE_REPLY_MESSAGE_EXCEPTION: Final = 10007
#: Java ``DefaultMQProducer.request`` callers usually pass 3 s.
DEFAULT_REQUEST_TIMEOUT_S: Final = 3.0


class RequestTimeoutError(MQClientError):
    """The request was sent but no reply came in time (Java ``RequestTimeoutException``)."""


def reply_topic(cluster: str) -> str:
    return f"{cluster}_{REPLY_TOPIC_POSTFIX}"


def create_reply_message(request: ReceivedMessage, body: bytes) -> Message:
    """The reply to ``request`` (a message a consumer received from ``Producer.request``)."""
    props = request.properties
    cluster = props.get(MC.PROPERTY_CLUSTER)
    if cluster is None:
        raise MQClientError(
            "create reply message fail, requestMessage error, property[CLUSTER] is null.",
            code=CREATE_REPLY_MESSAGE_EXCEPTION,
        )
    reply_props = {MC.PROPERTY_MESSAGE_TYPE: REPLY_MESSAGE_FLAG}
    for key in (
        MC.PROPERTY_CORRELATION_ID,
        MC.PROPERTY_MESSAGE_REPLY_TO_CLIENT,
        MC.PROPERTY_MESSAGE_TTL,
    ):
        value = props.get(key)
        if value is not None:
            reply_props[key] = value
    return Message(reply_topic(cluster), body, properties=reply_props)


def is_reply(msg: Message) -> bool:
    return msg.properties.get(MC.PROPERTY_MESSAGE_TYPE) == REPLY_MESSAGE_FLAG


def _host(text: str) -> tuple[str, int]:
    """Java ``InetSocketAddress.toString()`` (``name/ip:port`` or ``/ip:port``) -> (ip, port)."""
    addr = text.rsplit("/", 1)[-1]
    host, _, port = addr.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return "0.0.0.0", 0


def reply_properties(header: ReplyMessageRequestHeader) -> dict[str, str]:
    return decode_properties(header.properties) if header.properties else {}


def reply_from_push(
    header: ReplyMessageRequestHeader, body: bytes, arrive_ms: int, *,
    max_body_bytes: int = MAX_MESSAGE_SIZE_BYTES, properties: dict[str, str] | None = None,
) -> ReceivedMessage:
    """The reply a broker pushed (Java ``ClientRemotingProcessor.receiveReplyMessage``).
    ``properties``: ``reply_properties(header)`` when the caller has them already. Raises
    ``BodyInflateError`` (a ValueError) when a COMPRESSED body cannot be inflated within
    ``max_body_bytes`` (Java inflates without a bound)."""
    body = inflate_body(body, header.sys_flag, max_body_bytes)
    props = dict(properties) if properties is not None else reply_properties(header)
    props[MC.PROPERTY_REPLY_MESSAGE_ARRIVE_TIME] = str(arrive_ms)
    return ReceivedMessage(
        topic=header.topic,
        body=body,
        properties=props,
        queue=MessageQueue(header.topic, "", header.queue_id),
        queue_offset=0,
        commitlog_offset=0,
        msg_id=props.get(MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
        reconsume_times=header.reconsume_times or 0,
        born_timestamp=header.born_timestamp,
        store_timestamp=header.store_timestamp,
        sys_flag=header.sys_flag,
        flag=header.flag,
        born_host=_host(header.born_host),
        store_host=_host(header.store_host),
        body_crc=0,
    )


class RequestFuture:
    """One request waiting for its reply (Java ``RequestResponseFuture``); a reply larger
    than ``max_body_bytes`` (before or after inflation) is refused with ``error`` set."""

    def __init__(self, correlation_id: str, max_body_bytes: int = MAX_MESSAGE_SIZE_BYTES
                 ) -> None:
        self.correlation_id = correlation_id
        self.max_body_bytes = max_body_bytes
        self.reply: ReceivedMessage | None = None
        self.error: str | None = None
        self.arrived = trio.Event()

    def put(self, reply: ReceivedMessage) -> None:
        self.reply = reply
        self.arrived.set()

    def fail(self, reason: str) -> None:
        self.error = reason
        self.arrived.set()


class RequestFutureTable:
    """The instance's requests in flight, by correlation id (Java ``RequestFutureHolder``)."""

    def __init__(self) -> None:
        self._table: dict[str, RequestFuture] = {}

    def __len__(self) -> int:
        return len(self._table)

    def register(self, correlation_id: str, max_body_bytes: int = MAX_MESSAGE_SIZE_BYTES
                 ) -> RequestFuture:
        fut = self._table[correlation_id] = RequestFuture(correlation_id, max_body_bytes)
        return fut

    def waiting(self, correlation_id: str | None) -> RequestFuture | None:
        """The request still waiting under ``correlation_id``, if any (None for a late,
        forged or foreign reply)."""
        return self._table.get(correlation_id) if correlation_id is not None else None

    def remove(self, correlation_id: str) -> None:
        self._table.pop(correlation_id, None)

    def deliver(self, reply: ReceivedMessage) -> bool:
        """Hand ``reply`` to its request; False when none waits (late or foreign reply)."""
        cid = reply.properties.get(MC.PROPERTY_CORRELATION_ID)
        fut = self._table.pop(cid, None) if cid is not None else None
        if fut is None:
            return False
        fut.put(reply)
        return True


ReplyFn = Callable[[ReceivedMessage], "bytes | Awaitable[bytes | None] | None"]


class ReplySender(Protocol):
    """What ``reply_listener`` needs of a producer (``client.producer.Producer``, which imports
    this module): sending a reply, and a logger."""

    log: Any

    async def send_reply(self, reply: Message, *, timeout: float | None = None) -> Any: ...


def reply_listener(producer: ReplySender, fn: ReplyFn) -> Callable[[list[ReceivedMessage]], Any]:
    """A push-consumer listener that answers each request with ``fn(msg)`` (bytes; None sends
    no reply) through ``producer``. Messages that are not requests (no ``REPLY_TO_CLIENT``)
    are passed to ``fn`` and not answered. A failed reply makes the batch consume later."""

    async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        for msg in msgs:
            out = fn(msg)
            body = await out if inspect.isawaitable(out) else out
            if body is None or MC.PROPERTY_MESSAGE_REPLY_TO_CLIENT not in msg.properties:
                continue
            try:
                await producer.send_reply(create_reply_message(msg, body))
            except MQClientError as exc:
                producer.log.info("reply failed", error=str(exc))
                return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    return listener
