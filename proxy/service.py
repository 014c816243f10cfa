"""``apache.rocketmq.v2.MessagingService``: each RPC decoded, answered through the remoting
side (``rmq_cluster.client``: NameServer routes, broker sends) and encoded back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as PbMessage

from ..client.errors import MQClientError
from ..client.instance import ClientInstance
from ..client.producer import Producer
from ..cluster.logging import get_logger
from ..cluster.protocol.message import decode_offset_msg_id
from ..cluster.protocol.names import validate_group, validate_topic
from . import convert
from .calls import fetch_route
from .config import ProxyConfig
from .consume import PopBridge
from .grpc_wire import GrpcStatus, GrpcWireError
from .h2_server import time_left_ms
from .metadata import ProxyMetadata
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb
from .polling import DEFAULT_CLIENT_REQUEST_TIMEOUT_MS, ReceiveCall
from .routes import MasterRoutes
from .transaction import TelemetrySession, TransactionBridge, TransactionRef

log = get_logger(node="proxy", component="service")
Send = Callable[[bytes], Awaitable[None]]
#: the RPCs not served: answered with Code NOT_IMPLEMENTED in their response. RecallMessage
#: among them: our broker has no recall (Apache's proxy answers NOT_IMPLEMENTED too when its
#: broker does not know the request code)
NOT_YET: Final = frozenset({
    "PullMessage", "UpdateOffset", "GetOffset", "QueryOffset", "RecallMessage",
    "SyncLiteSubscription",
})
#: the header the SDKs name themselves with on every call
CLIENT_ID_HEADER: Final = "x-mq-client-id"
#: and their version (Apache's proxy answers some refusals by it)
CLIENT_VERSION_HEADER: Final = "x-mq-client-version"


def _decode(cls: type[PbMessage], payload: bytes) -> Any:
    msg = cls()
    try:
        msg.ParseFromString(payload)
    except (DecodeError, ValueError, RecursionError) as exc:
        raise GrpcWireError(GrpcStatus.INVALID_ARGUMENT, f"bad {cls.__name__}") from exc
    return msg


class MessagingService:
    def __init__(self, config: ProxyConfig, instance: ClientInstance, producer: Producer, *,
                 nursery: trio.Nursery) -> None:
        """``nursery``: the proxy's own, for work that outlives a call (``PopBridge``)."""
        self.config = config
        self.instance = instance
        self.producer = producer
        routes = MasterRoutes(instance)
        self.metadata = ProxyMetadata(instance)
        self.pop = PopBridge(config, instance, routes, self.metadata, nursery=nursery)
        self.transactions = TransactionBridge(config, instance, routes)
        #: each client's request timeout (ms) from the Settings on its open Telemetry stream
        #: (one entry per open stream at most: dropped when the stream ends)
        self._request_timeouts: dict[str, tuple[TelemetrySession, int]] = {}
        self._unary: dict[str, Callable[[Any, dict[str, str]], Awaitable[Any]]] = {
            "QueryRoute": self.query_route,
            "Heartbeat": self.heartbeat,
            "SendMessage": self.send_message,
            "NotifyClientTermination": self.notify_client_termination,
            "AckMessage": lambda req, md: self.pop.ack(req, _client(md)),
            "ChangeInvisibleDuration": lambda req, md: self.pop.change_invisible(req, _client(md)),
            "EndTransaction": lambda req, _md: self.transactions.end_transaction(req),
            "QueryAssignment": self.query_assignment,
            "ForwardMessageToDeadLetterQueue":
                lambda req, md: self.pop.forward_to_dlq(req, _client(md)),
        }

    def kind(self, method: str) -> str | None:
        if method == "Telemetry":
            return "bidi"
        if method == "ReceiveMessage":
            return "server_stream"
        if method in self._unary or method in NOT_YET:
            return "unary"
        return None

    async def unary(self, method: str, request: bytes, metadata: dict[str, str]) -> bytes:
        req = _decode(getattr(spb, f"{method}Request"), request)
        handler = self._unary.get(method)
        if handler is None:
            resp = getattr(spb, f"{method}Response")()
            resp.status.CopyFrom(pb.Status(code=pb.NOT_IMPLEMENTED,
                                           message=f"{method} is not served"))
            return bytes(resp.SerializeToString())
        return bytes((await handler(req, metadata)).SerializeToString())

    async def stream(self, method: str, request: bytes, metadata: dict[str, str],
                     send: Send) -> None:
        client_id = metadata.get(CLIENT_ID_HEADER, "")
        known = self._request_timeouts.get(client_id)
        call = ReceiveCall(time_left_ms(metadata), metadata.get(CLIENT_VERSION_HEADER, ""),
                           known[1] if known else DEFAULT_CLIENT_REQUEST_TIMEOUT_MS, client_id)
        await self.pop.receive(_decode(spb.ReceiveMessageRequest, request), send, call)

    async def bidi(self, method: str, inbound: trio.MemoryReceiveChannel[bytes],
                   metadata: dict[str, str], send: Send) -> None:
        """Telemetry: each Settings a client sends is answered with the settings it runs
        with (the SDKs' startup waits for that first answer); a producer's stream also carries
        the broker's transaction checks to it, until the stream ends."""
        session = TelemetrySession(metadata.get(CLIENT_ID_HEADER, ""), send)
        try:
            async for payload in inbound:
                cmd = _decode(spb.TelemetryCommand, payload)
                if cmd.HasField("settings"):
                    await self._settings(session, cmd.settings)
        finally:
            self.transactions.unregister(session.client_id, session)
            known = self._request_timeouts.get(session.client_id)
            if known is not None and known[0] is session:
                del self._request_timeouts[session.client_id]

    async def _settings(self, session: TelemetrySession, settings: pb.Settings) -> None:
        if settings.HasField("subscription"):  # a consumer's sign of life, as a heartbeat
            self.pop.renewer.seen(session.client_id, settings.subscription.group.name)
        if session.client_id and settings.HasField("request_timeout"):
            ms = settings.request_timeout.ToMilliseconds()
            if ms > 0:
                self._request_timeouts[session.client_id] = (session, ms)
        if settings.HasField("publishing") and session.client_id:
            try:
                self.transactions.register(
                    session, (t.name for t in settings.publishing.topics))
            except convert.ProxyError as exc:
                raise GrpcWireError(GrpcStatus.INVALID_ARGUMENT, exc.message) from exc
        reply = spb.TelemetryCommand(
            status=convert.ok_status(),
            settings=convert.settings_reply(
                settings, self.config.max_body_bytes, await self._group_policy(settings),
                max_long_poll_ms=self.config.grpc_client_consumer_max_long_polling_timeout_ms),
        )
        await session.send(reply, self.config.call_timeout_s)

    async def _group_policy(self, settings: pb.Settings) -> convert.GroupPolicy | None:
        """A consumer's subscription group's policy, asked of a broker of its first topic;
        None (the defaults, as Apache's proxy answers) when the brokers cannot say (its
        receives are refused until they can: consume.py)."""
        if not settings.HasField("subscription") or settings.HasField("publishing"):
            return None
        group = settings.subscription.group.name
        topics = [e.topic.name for e in settings.subscription.subscriptions
                  if validate_topic(e.topic.name) is None]
        if validate_group(group) is not None or not topics:
            return None
        try:
            return await self.metadata.group(group, topics[0])
        except (MQClientError, convert.ProxyError):
            return None

    # ------------------------------------------------------------------ RPCs

    async def query_route(self, req: spb.QueryRouteRequest, metadata: dict[str, str]
                          ) -> spb.QueryRouteResponse:
        try:
            route = await fetch_route(self.instance, req.topic.name)
        except Exception as exc:
            return spb.QueryRouteResponse(status=convert.error_status(exc))
        endpoints = req.endpoints if req.endpoints.addresses else _authority(metadata)
        info = await self.metadata.topic(req.topic.name)
        accept = convert.accept_message_types(info.message_type) if info else convert.ALL_TYPES
        queues = convert.message_queues(req.topic.name, route, endpoints, accept)
        if not queues:
            status = pb.Status(code=pb.TOPIC_NOT_FOUND, message="no queue with a master")
            return spb.QueryRouteResponse(status=status)
        return spb.QueryRouteResponse(status=convert.ok_status(), message_queues=queues)

    async def heartbeat(self, req: spb.HeartbeatRequest, metadata: dict[str, str]
                        ) -> spb.HeartbeatResponse:
        """A consumer's heartbeat keeps the handles its receives renew (a client silent for
        ``channel_expired_timeout_ms`` is gone)."""
        self.pop.renewer.seen(_client(metadata), req.group.name)
        return spb.HeartbeatResponse(status=convert.ok_status())

    async def notify_client_termination(self, req: Any, metadata: dict[str, str]) -> Any:
        """The client is going: its producer groups are no longer announced for it, and the
        messages its receives' renewals hold are given back (in a second)."""
        self.transactions.unregister(_client(metadata))
        self.pop.renewer.gone(_client(metadata))
        return spb.NotifyClientTerminationResponse(status=convert.ok_status())

    async def query_assignment(self, req: spb.QueryAssignmentRequest, metadata: dict[str, str]
                               ) -> spb.QueryAssignmentResponse:
        problem = validate_topic(req.topic.name) or validate_group(req.group.name)
        if problem is not None:
            return spb.QueryAssignmentResponse(status=pb.Status(code=pb.BAD_REQUEST,
                                                                message=problem))
        try:
            route = await fetch_route(self.instance, req.topic.name)
        except Exception as exc:
            return spb.QueryAssignmentResponse(status=convert.error_status(exc))
        endpoints = req.endpoints if req.endpoints.addresses else _authority(metadata)
        try:
            policy = await self.metadata.group(req.group.name, req.topic.name)
        except (MQClientError, convert.ProxyError):  # unknown: the whole broker (-1), as
            policy = None  # Apache's proxy answers; the receives are refused until known
        found = convert.assignments(req.topic.name, route, endpoints,
                                    orderly=policy is not None and policy.orderly)
        if not found:
            status = pb.Status(code=pb.FORBIDDEN, message="no readable queue")
            return spb.QueryAssignmentResponse(status=status)
        return spb.QueryAssignmentResponse(status=convert.ok_status(), assignments=found)

    async def send_message(self, req: spb.SendMessageRequest, metadata: dict[str, str]
                           ) -> spb.SendMessageResponse:
        if not req.messages:
            status = pb.Status(code=pb.BAD_REQUEST, message="no message to send")
            return spb.SendMessageResponse(status=status)
        entries = [await self._send_one(m) for m in req.messages]
        failed = next((e.status for e in entries if e.status.code != pb.OK), None)
        return spb.SendMessageResponse(status=failed or convert.ok_status(), entries=entries)

    async def _send_one(self, m: pb.Message) -> spb.SendResultEntry:
        try:
            msg, group = convert.message_from_pb(m, self.config.max_body_bytes)
            await self._check_topic(msg.topic)
            if group is not None:
                queues = await self.producer.queues_for(msg.topic)
                result = await self.producer.send(msg, queue=convert.fifo_queue(queues, group))
            else:
                result = await self.producer.send(msg)
        except Exception as exc:
            if not isinstance(exc, convert.ProxyError):
                log.info("send failed", topic=m.topic.name, error=str(exc)[:200])
            return spb.SendResultEntry(status=convert.error_status(exc))
        tx_id = ""
        if m.system_properties.message_type == pb.TRANSACTION:
            _host, commitlog_offset = decode_offset_msg_id(result.offset_msg_id)
            tx_id = TransactionRef(result.queue.broker_name, result.queue_offset,
                                   commitlog_offset).encode()
        return spb.SendResultEntry(
            status=convert.ok_status(), message_id=m.system_properties.message_id,
            offset=result.queue_offset, transaction_id=tx_id,
        )

    async def _check_topic(self, topic: str) -> None:
        """A send to a topic no broker has is refused before it reaches one, as Apache's proxy
        refuses it (its type check finds no type); a broker's autoCreateTopicEnable never
        creates a topic for a 5.x client."""
        if validate_topic(topic) is not None:
            return  # the producer refuses it with its own words
        info = await self.metadata.topic(topic)
        if info is not None and not info.exists:
            raise convert.ProxyError(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                     f"topic {topic} does not exist, it has no message type")


def _client(metadata: dict[str, str]) -> str:
    """The client's id, as it names itself on every call ("" when it does not)."""
    return metadata.get(CLIENT_ID_HEADER, "")


def _authority(metadata: dict[str, str]) -> pb.Endpoints:
    host, _, port = metadata.get(":authority", "").rpartition(":")
    if not host or not port.isdigit():
        return pb.Endpoints(scheme=pb.IPv4, addresses=[])
    return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])
