"""The gRPC calls replayed to Apache RocketMQ 5.3.1's Proxy and to ours (``mqproxy``), over the
v2 protobuf classes of ``rmq_cluster.proxy.pb`` on a small blocking HTTP/2 client
(tests/integration/proxy/proxy_testlib.H2Client), each answer flattened field by field.

Two clients, as an SDK is: a producer and a consumer, each with its ``x-mq-client-id`` and its
Telemetry stream kept open after the ``Settings`` it announces (Apache's proxy refuses a
Heartbeat or a ReceiveMessage from a client whose settings it has not seen). The topics are
made over remoting first (``SETUP``: one per message type, as the 5.x type check wants).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any, Final

import attrs
import h2.events
import orjson
from google.protobuf import duration_pb2, json_format, timestamp_pb2
from google.protobuf.message import Message as PbMessage

from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.proxy.grpc_wire import frame
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.pb import service_pb2 as spb
from tests.integration.proxy.proxy_testlib import H2Client, _split
from tests.interop import pop_scenario
from tests.interop.scenario import Step

TOPIC: Final = "ProxyOracleT"
FIFO_TOPIC: Final = "ProxyOracleFifo"
DELAY_TOPIC: Final = "ProxyOracleDelay"
GROUP: Final = "ProxyOracleG"
#: a group that consumes in order (consumeMessageOrderly): its consumers are told fifo
ORDERLY_GROUP: Final = "ProxyOracleOrderG"
MISSING_TOPIC: Final = "ProxyOracleNoSuchTopic"
#: never sent to (a send to MISSING_TOPIC may create it: autoCreateTopicEnable)
UNKNOWN_TOPIC: Final = "ProxyOracleNeverSeen"
#: a delay message's delivery time after its send (short: the scenario waits for it)
DELAY_MS: Final = 2_000
#: how long the scenario waits for a delayed message to become receivable
DELAY_WAIT_S: Final = 30.0
INVISIBLE_S: Final = 30
#: past the proxies' longest invisible time (``maxInvisibleTimeMills``, 12 h)
TOO_LONG_INVISIBLE_S: Final = 13 * 3600
#: below a receive's shortest (``minInvisibleTimeMillsForRecv``, 10 s)
TOO_SHORT_INVISIBLE_S: Final = 5
#: the orderly receives' invisible time (the shortest a receive may ask): the redelivery's wait
ORDERLY_INVISIBLE_S: Final = 10
#: how long the scenario waits for an orderly message left unacked to be handed out again
REDELIVERY_WAIT_S: Final = 40.0

#: the broadcast topic Apache's proxy creates at boot when the NameServer routes none
#: (``heartbeatSyncerTopicName``); made here first: its own creation checks the route three
#: times at once, and loses to the broker's registration on a loaded machine ("create system
#: broadcast topic ... failed", the proxy exits)
HEARTBEAT_SYNCER_TOPIC: Final = "DefaultHeartBeatSyncerTopic"

SETUP: Final[tuple[Step, ...]] = (
    Step("create_topic", "broker", RC.UPDATE_AND_CREATE_TOPIC,
         pop_scenario.create_topic(TOPIC, "+message.type=NORMAL")),
    Step("create_fifo_topic", "broker", RC.UPDATE_AND_CREATE_TOPIC,
         pop_scenario.create_topic(FIFO_TOPIC, "+message.type=FIFO")),
    Step("create_delay_topic", "broker", RC.UPDATE_AND_CREATE_TOPIC,
         pop_scenario.create_topic(DELAY_TOPIC, "+message.type=DELAY")),
    Step("create_group", "broker", RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
         body=pop_scenario.group_body(GROUP, 16)),
    Step("create_orderly_group", "broker", RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
         body=orjson.dumps({**orjson.loads(pop_scenario.group_body(ORDERLY_GROUP, 3)),
                            "consumeMessageOrderly": True})),
    Step("create_syncer_topic", "broker", RC.UPDATE_AND_CREATE_TOPIC,
         pop_scenario.create_topic(HEARTBEAT_SYNCER_TOPIC)),
)

Ctx = dict[str, Any]


@attrs.define
class Clients:
    """The producer's and the consumer's connections to one proxy, and what steps learnt."""

    producer: H2Client
    consumer: H2Client
    #: a SimpleConsumer of ORDERLY_GROUP (its receives pop in order)
    orderly: H2Client
    ctx: Ctx = attrs.field(factory=dict)

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()
        self.orderly.close()


def _metadata(client_id: str) -> list[tuple[str, str]]:
    return [("x-mq-client-id", client_id), ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"), ("x-mq-client-version", "5.0.0"),
            ("x-mq-request-id", "0")]


def _open_telemetry(client: H2Client, settings: pb.Settings) -> dict[str, Any]:
    """Announce ``settings`` on a Telemetry stream left open; the first answer, flattened."""
    sid = client.start_call("Telemetry")
    client.conn.send_data(sid, frame(spb.TelemetryCommand(settings=settings).SerializeToString()))
    client.flush()
    body = b""
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        data = client.sock.recv(65536)
        if not data:
            raise ConnectionError("the proxy closed the connection")
        for ev in client.conn.receive_data(data):
            if isinstance(ev, h2.events.DataReceived) and ev.stream_id == sid:
                client.conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                body += ev.data
            elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                return {"stream": "ended"}
        client.flush()
        if len(body) >= 5 and len(body) >= 5 + int.from_bytes(body[1:5], "big"):
            cmd = spb.TelemetryCommand.FromString(_split(body)[0])
            return flatten(cmd)
    raise TimeoutError("no Telemetry answer")


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromMilliseconds(int(seconds * 1000))
    return d


def _now() -> timestamp_pb2.Timestamp:
    t = timestamp_pb2.Timestamp()
    t.FromMilliseconds(int(time.time() * 1000))
    return t


def _endpoints(port: int) -> pb.Endpoints:
    return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=port)])


def orderly_telemetry(port: int) -> dict[str, Any]:
    """A push consumer of ORDERLY_GROUP announced: the settings it is answered (fifo, the
    group's retries)."""
    client = H2Client(port, metadata=_metadata("proxy-oracle-orderly"))
    try:
        return _open_telemetry(client, pb.Settings(
            client_type=pb.PUSH_CONSUMER, access_point=_endpoints(port),
            request_timeout=_duration(3),
            subscription=pb.Subscription(
                group=pb.Resource(name=ORDERLY_GROUP), long_polling_timeout=_duration(5),
                subscriptions=[pb.SubscriptionEntry(
                    topic=pb.Resource(name=FIFO_TOPIC),
                    expression=pb.FilterExpression(type=pb.TAG, expression="*"))])))
    finally:
        client.close()


def connect(port: int) -> tuple[Clients, dict[str, Any], dict[str, Any]]:
    """Both clients connected and announced (their Telemetry answers, flattened)."""
    producer = H2Client(port, metadata=_metadata("proxy-oracle-producer"))
    consumer = H2Client(port, metadata=_metadata("proxy-oracle-consumer"))
    orderly = H2Client(port, metadata=_metadata("proxy-oracle-orderly-consumer"))
    endpoints = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=port)])
    pub = pb.Settings(
        client_type=pb.PRODUCER, access_point=endpoints, request_timeout=_duration(3),
        publishing=pb.Publishing(topics=[pb.Resource(name=t)
                                         for t in (TOPIC, FIFO_TOPIC, DELAY_TOPIC)]))
    sub = pb.Settings(
        client_type=pb.SIMPLE_CONSUMER, access_point=endpoints, request_timeout=_duration(3),
        subscription=pb.Subscription(
            group=pb.Resource(name=GROUP), long_polling_timeout=_duration(5),
            subscriptions=[pb.SubscriptionEntry(
                topic=pb.Resource(name=t),
                expression=pb.FilterExpression(type=pb.TAG, expression="*"))
                for t in (TOPIC, FIFO_TOPIC, DELAY_TOPIC)]))
    fifo_sub = pb.Settings(
        client_type=pb.SIMPLE_CONSUMER, access_point=endpoints, request_timeout=_duration(3),
        subscription=pb.Subscription(
            group=pb.Resource(name=ORDERLY_GROUP), long_polling_timeout=_duration(5),
            subscriptions=[pb.SubscriptionEntry(
                topic=pb.Resource(name=FIFO_TOPIC),
                expression=pb.FilterExpression(type=pb.TAG, expression="*"))]))
    _open_telemetry(orderly, fifo_sub)  # (the same answer as telemetry_orderly's)
    return Clients(producer, consumer, orderly), _open_telemetry(producer, pub), \
        _open_telemetry(consumer, sub)


# --------------------------------------------------------------------------- flattening


def _walk(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _walk(f"{prefix}.{k}" if prefix else k, v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _walk(f"{prefix}[{i}]", v, out)
    else:
        out[prefix] = value


def flatten(msg: PbMessage) -> dict[str, Any]:
    """Every set field of a protobuf answer as ``a.b[i].c``: value (enums by name)."""
    out: dict[str, Any] = {}
    _walk("", json_format.MessageToDict(msg, preserving_proto_field_name=True), out)
    return out


# --------------------------------------------------------------------------- calls


def unary(client: H2Client, method: str, req: PbMessage) -> dict[str, Any]:
    answers, trailers = client.call(method, req.SerializeToString())
    cls = getattr(spb, f"{method}Response")
    view: dict[str, Any] = {"grpc-status": trailers.get("grpc-status", "<none>")}
    if answers:
        view.update(flatten(cls.FromString(answers[0])))
    return view


def receive(client: H2Client, req: spb.ReceiveMessageRequest,
            ctx: Ctx | None = None, key: str = "",
            headers: tuple[tuple[str, str], ...] = (("grpc-timeout", "9S"),)) -> dict[str, Any]:
    """A ReceiveMessage stream's answers, as ``answer[i].…``; the messages' receipt handles
    are kept in ``ctx[key]``. ``headers``: the call's deadline, and any more."""
    sid = client.start_call("ReceiveMessage", headers)
    client.conn.send_data(sid, frame(req.SerializeToString()))
    client.conn.end_stream(sid)
    client.flush()
    answers, trailers = client.responses(sid)
    view: dict[str, Any] = {"grpc-status": trailers.get("grpc-status", "<none>")}
    handles = []
    for i, raw in enumerate(answers):
        resp = spb.ReceiveMessageResponse.FromString(raw)
        if resp.HasField("message"):
            handles.append((resp.message.system_properties.message_id,
                            resp.message.system_properties.receipt_handle))
        for k, v in flatten(resp).items():
            view[f"answer[{i}].{k}"] = v
    if ctx is not None and key:
        ctx[key] = handles
    return view


def message(topic: str, n: int, *, group: str = "", delay_ms: int = 0,
            kind: int = pb.NORMAL) -> pb.Message:
    """A message as an SDK builds it, with a fixed id per ``n`` (both sides get the same)."""
    body = f"proxy oracle message {n}".encode()
    props = pb.SystemProperties(
        tag="TagA", keys=[f"key{n}"], message_id=f"01A0B0C0D0E0F0{n:018X}",
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper()),
        body_encoding=pb.IDENTITY, message_type=kind, born_timestamp=_now(),
        born_host="proxy-oracle-host")
    if group:
        props.message_group = group
    if delay_ms:
        t = timestamp_pb2.Timestamp()
        t.FromMilliseconds(int(time.time() * 1000) + delay_ms)
        props.delivery_timestamp.CopyFrom(t)
    return pb.Message(topic=pb.Resource(name=topic), user_properties={"idx": str(n)},
                      system_properties=props, body=body)


def receive_request(topic: str, broker: str, group: str = GROUP, batch: int = 32
                    ) -> spb.ReceiveMessageRequest:
    """A SimpleConsumer's receive: the whole broker ``broker`` (queue -1), as the SDKs name
    the broker QueryRoute gave them."""
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1,
                                      permission=pb.READ_WRITE,
                                      broker=pb.Broker(name=broker)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=batch, invisible_duration=_duration(INVISIBLE_S), auto_renew=False,
        long_polling_timeout=_duration(5))


def _ack(c: Clients, key: str, *, topic: str = TOPIC) -> dict[str, Any]:
    [(msg_id, handle)] = c.ctx[key]
    return _ack_handle(c, msg_id, handle, topic)


def _ack_handle(c: Clients, msg_id: str, handle: str, topic: str = TOPIC) -> dict[str, Any]:
    req = spb.AckMessageRequest(
        group=pb.Resource(name=GROUP), topic=pb.Resource(name=topic),
        entries=[spb.AckMessageEntry(message_id=msg_id, receipt_handle=handle)])
    return unary(c.consumer, "AckMessage", req)


def _receive_orderly(c: Clients, key: str, wait_s: float) -> dict[str, Any]:
    """ORDERLY_GROUP's receive of FIFO_TOPIC (the FIFO message sent before, from offset 0
    for the new group), retried until it hands a message out or ``wait_s`` passed: the queue's
    batch in flight turns visible again only after its invisible time."""
    req = receive_request(FIFO_TOPIC, c.ctx["broker"], ORDERLY_GROUP)
    req.invisible_duration.CopyFrom(_duration(ORDERLY_INVISIBLE_S))
    deadline = time.monotonic() + wait_s
    while True:
        view = receive(c.orderly, req, c.ctx, key)
        if c.ctx[key] or time.monotonic() > deadline:
            return view


def _ack_orderly(c: Clients, key: str) -> dict[str, Any]:
    [(msg_id, handle)] = c.ctx[key]
    req = spb.AckMessageRequest(
        group=pb.Resource(name=ORDERLY_GROUP), topic=pb.Resource(name=FIFO_TOPIC),
        entries=[spb.AckMessageEntry(message_id=msg_id, receipt_handle=handle)])
    return unary(c.orderly, "AckMessage", req)


def _change_invisible(c: Clients, key: str, topic: str) -> dict[str, Any]:
    msg_id, handle = c.ctx[key][0]
    req = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=GROUP), topic=pb.Resource(name=topic), receipt_handle=handle,
        invisible_duration=_duration(INVISIBLE_S), message_id=msg_id)
    view = unary(c.consumer, "ChangeInvisibleDuration", req)
    if "receipt_handle" in view:  # the new handle replaces the old one
        c.ctx[key] = [(msg_id, view["receipt_handle"])]
    return view


def _receive_until(c: Clients, topic: str, key: str, wait_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    while True:
        view = receive(c.consumer, receive_request(topic, c.ctx["broker"]), c.ctx, key)
        if c.ctx[key] or time.monotonic() > deadline:
            return view


def _send(c: Clients, *msgs: pb.Message) -> dict[str, Any]:
    return unary(c.producer, "SendMessage", spb.SendMessageRequest(messages=list(msgs)))


def _route(c: Clients, topic: str) -> dict[str, Any]:
    view = unary(c.producer, "QueryRoute", spb.QueryRouteRequest(
        topic=pb.Resource(name=topic), endpoints=c.ctx["endpoints"]))
    c.ctx.setdefault("broker", view.get("message_queues[0].broker.name", "?"))
    return view


def _receive(c: Clients, topic: str, key: str = "", *, group: str = GROUP,
             broker: str | None = None) -> dict[str, Any]:
    req = receive_request(topic, c.ctx["broker"] if broker is None else broker, group)
    return receive(c.consumer, req, c.ctx, key)


def _receive_short_deadline(c: Clients, version: str) -> dict[str, Any]:
    """A receive whose deadline (4 s) leaves less than the shortest long poll (5 s), from a
    client of ``version`` (a second ``x-mq-client-version``, after the connection's 5.0.0: the
    last one counts, on grpc-java's side as on ours; "": the connection's)."""
    headers = (("grpc-timeout", "4S"),)
    if version:
        headers += (("x-mq-client-version", version),)
    return receive(c.consumer, receive_request(TOPIC, c.ctx["broker"]), headers=headers)


def _receive_invisible(c: Clients, invisible: duration_pb2.Duration | None, *,
                       auto_renew: bool = False) -> dict[str, Any]:
    """A receive of TOPIC (empty by then) asking ``invisible`` (None: no invisible time)."""
    req = receive_request(TOPIC, c.ctx["broker"])
    req.ClearField("invisible_duration")
    if invisible is not None:
        req.invisible_duration.CopyFrom(invisible)
    req.auto_renew = auto_renew
    return receive(c.consumer, req)


def _change_invisible_to(c: Clients, invisible: duration_pb2.Duration) -> dict[str, Any]:
    """A ChangeInvisibleDuration to ``invisible`` with a handle no broker made: the invisible
    time is checked before the handle is read."""
    return unary(c.consumer, "ChangeInvisibleDuration", spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC),
        receipt_handle="not-a-handle", invisible_duration=invisible,
        message_id="01A0B0C0D0E0F0"))


CallStep = Callable[[Clients], dict[str, Any]]

#: (name, call, what it shows), in order: later steps use what earlier ones received.
STEPS: Final[tuple[tuple[str, CallStep, str], ...]] = (
    ("query_route", lambda c: _route(c, TOPIC), "a topic's queues"),
    ("query_route_fifo", lambda c: _route(c, FIFO_TOPIC), "accepted message types"),
    ("query_route_missing_topic", lambda c: _route(c, MISSING_TOPIC), "TOPIC_NOT_FOUND"),
    ("heartbeat_producer", lambda c: unary(c.producer, "Heartbeat", spb.HeartbeatRequest(
        client_type=pb.PRODUCER)), ""),
    ("heartbeat_consumer", lambda c: unary(c.consumer, "Heartbeat", spb.HeartbeatRequest(
        group=pb.Resource(name=GROUP), client_type=pb.SIMPLE_CONSUMER)), ""),
    ("query_assignment", lambda c: unary(c.consumer, "QueryAssignment",
                                         spb.QueryAssignmentRequest(
        topic=pb.Resource(name=TOPIC), group=pb.Resource(name=GROUP),
        endpoints=c.ctx["endpoints"])), "who reads which queue"),
    ("query_assignment_orderly", lambda c: unary(c.consumer, "QueryAssignment",
                                                 spb.QueryAssignmentRequest(
        topic=pb.Resource(name=FIFO_TOPIC), group=pb.Resource(name=ORDERLY_GROUP),
        endpoints=c.ctx["endpoints"])), "an orderly group: each queue"),
    ("send_normal", lambda c: _send(c, message(TOPIC, 1)), ""),
    ("send_fifo", lambda c: _send(c, message(FIFO_TOPIC, 2, group="g1", kind=pb.FIFO)), ""),
    ("send_delay", lambda c: _send(c, message(DELAY_TOPIC, 3, delay_ms=DELAY_MS,
                                              kind=pb.DELAY)), ""),
    ("send_missing_topic", lambda c: _send(c, message(MISSING_TOPIC, 4)), "TOPIC_NOT_FOUND"),
    ("send_wrong_type", lambda c: _send(c, message(TOPIC, 5, group="g1", kind=pb.FIFO)),
     "a FIFO message to a NORMAL topic"),
    ("receive_normal", lambda c: _receive(c, TOPIC, "normal"),
     "the message sent, with its system properties"),
    ("ack_normal", lambda c: _ack(c, "normal"), ""),
    ("receive_fifo", lambda c: _receive(c, FIFO_TOPIC, "fifo"), ""),
    ("change_invisible_fifo", lambda c: _change_invisible(c, "fifo", FIFO_TOPIC), ""),
    ("ack_fifo", lambda c: _ack(c, "fifo", topic=FIFO_TOPIC), "acked by the new handle"),
    ("receive_orderly", lambda c: _receive_orderly(c, "orderly", 0.0),
     "an orderly group's receive: delivery attempt 1"),
    ("receive_orderly_again", lambda c: _receive_orderly(c, "orderly", REDELIVERY_WAIT_S),
     "left unacked, the message again once its invisible time passed: delivery attempt 2 "
     "(the broker's orderCountInfo)"),
    ("ack_orderly", lambda c: _ack_orderly(c, "orderly"), ""),
    ("ack_bad_receipt_handle", lambda c: _ack_handle(c, "01A0B0C0D0E0F0", "not-a-handle"), ""),
    ("receive_bad_group", lambda c: _receive(c, TOPIC, group="bad group!"),
     "an invalid group name"),
    ("receive_missing_topic", lambda c: _receive(c, UNKNOWN_TOPIC), ""),
    ("receive_no_broker", lambda c: _receive(c, TOPIC, broker=""),
     "a receive that names no broker (the SDKs always name one)"),
    ("receive_short_deadline", lambda c: _receive_short_deadline(c, "5.1.2"),
     "a deadline too short for the shortest long poll: ILLEGAL_POLLING_TIME"),
    ("receive_short_deadline_old_client", lambda c: _receive_short_deadline(c, ""),
     "the same from a client older than 5.0.3: BAD_REQUEST"),
    ("receive_invisible_too_short",
     lambda c: _receive_invisible(c, _duration(TOO_SHORT_INVISIBLE_S)),
     "an invisible time below minInvisibleTimeMillsForRecv: ILLEGAL_INVISIBLE_TIME"),
    ("receive_invisible_too_long", lambda c: _receive_invisible(c, _duration(TOO_LONG_INVISIBLE_S)),
     "an invisible time past maxInvisibleTimeMills: ILLEGAL_INVISIBLE_TIME"),
    ("receive_no_invisible_time", lambda c: _receive_invisible(c, None),
     "no invisible time (read as 0): ILLEGAL_INVISIBLE_TIME"),
    ("receive_invisible_not_a_duration",
     lambda c: _receive_invisible(c, duration_pb2.Duration(seconds=1, nanos=-1)),
     "seconds and nanos of opposite signs: no valid Duration"),
    ("receive_auto_renew", lambda c: _receive_invisible(c, None, auto_renew=True),
     "auto_renew (a PushConsumer's receive) asks no invisible time: not refused"),
    ("change_invisible_too_long",
     lambda c: _change_invisible_to(c, _duration(TOO_LONG_INVISIBLE_S)),
     "a change past maxInvisibleTimeMills: ILLEGAL_INVISIBLE_TIME, before the handle is read"),
    ("change_invisible_negative", lambda c: _change_invisible_to(c, _duration(-1)),
     "a change below 0: ILLEGAL_INVISIBLE_TIME"),
    ("receive_delay", lambda c: _receive_until(c, DELAY_TOPIC, "delay", DELAY_WAIT_S),
     "the delayed message once due"),
    ("ack_delay", lambda c: _ack(c, "delay", topic=DELAY_TOPIC), ""),
    ("notify_termination", lambda c: unary(c.consumer, "NotifyClientTermination",
                                           spb.NotifyClientTerminationRequest(
        group=pb.Resource(name=GROUP))), ""),
)


def replay(port: int) -> dict[str, dict[str, Any]]:
    """Every step against the proxy on ``port``: {step: flat answer}."""
    clients, pub, sub = connect(port)
    views: dict[str, dict[str, Any]] = {"telemetry_producer": pub, "telemetry_consumer": sub,
                                        "telemetry_orderly": orderly_telemetry(port)}
    clients.ctx["endpoints"] = pb.Endpoints(
        scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=port)])
    try:
        for name, call, _doc in STEPS:
            try:
                views[name] = call(clients)
            except (TimeoutError, ConnectionError, KeyError, IndexError) as exc:
                views[name] = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        clients.close()
    return views
