"""Transactions over gRPC, on the broker's 4.x transaction machinery (broker/transaction.py).

* A 5.x producer's half message (message type TRANSACTION) is sent as a 4.x one: ``TRAN_MSG``
  set and the producer group (``PGROUP``) the message's topic, as Apache's proxy names it. The
  broker stores it in its half topic.
* The transaction id a client gets back names the half message itself (``TransactionRef``):
  its broker, its half-queue offset and its CommitLog offset. EndTransaction needs nothing else,
  so it works after a proxy restart and through any proxy in front of the cluster. The id is
  client input like any other: parsed in full, and the broker checks the producer group and the
  half-queue offset against the message it finds at that CommitLog offset.
* The broker's check (CHECK_TRANSACTION_STATE) goes to a producer connection of the group: the
  proxy heartbeats every topic its producers publish to as a producer group, and relays a check
  to one of that topic's producers over its Telemetry stream (RecoverOrphanedTransactionCommand);
  the producer answers with EndTransaction, source SOURCE_SERVER_CHECK.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

import attrs
import trio

from ..client.errors import MQBrokerError
from ..client.frames import request
from ..client.instance import ClientInstance
from ..cluster.logging import get_logger
from ..cluster.protocol.message import iter_records
from ..cluster.protocol.names import validate_topic
from ..cluster.protocol.route import TopicRouteData
from ..cluster.remoting.codes import RequestCode, ResponseCode
from ..cluster.remoting.connection import Connection
from ..cluster.remoting.headers import CheckTransactionStateRequestHeader
from . import convert
from .config import ProxyConfig
from .consume import to_pb
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb
from .routes import MasterRoutes

log = get_logger(node="proxy", component="transaction")
Send = Callable[[bytes], Awaitable[None]]
#: the first field of every transaction id we hand out (its format's version)
TX_ID_TAG: Final = "TX1"
#: the longest transaction id accepted (a broker name is at most 255 characters)
MAX_TRANSACTION_ID_CHARS: Final = 320
#: topics one producer may publish to (its Settings.publishing.topics): each is a producer
#: group the proxy heartbeats to the brokers
MAX_TOPICS_PER_PRODUCER: Final = 256
#: producer groups (topics) the proxy announces at once, over all its producers
MAX_PRODUCER_GROUPS: Final = 4096
#: 4.x sysFlag values END_TRANSACTION takes
COMMIT_TYPE: Final = 8
ROLLBACK_TYPE: Final = 12
NOT_TYPE: Final = 0


@attrs.frozen
class TransactionRef:
    """Which half message a transaction id names."""

    broker_name: str
    tran_state_table_offset: int
    commitlog_offset: int

    def encode(self) -> str:
        return f"{TX_ID_TAG}:{self.commitlog_offset}:{self.tran_state_table_offset}:" \
               f"{self.broker_name}"

    @classmethod
    def parse(cls, text: str) -> TransactionRef:
        """A transaction id of ours; ProxyError INVALID_TRANSACTION_ID for anything else."""
        if not text or len(text) > MAX_TRANSACTION_ID_CHARS:
            raise convert.ProxyError(pb.INVALID_TRANSACTION_ID, "bad transaction id length")
        parts = text.split(":", 3)
        if len(parts) != 4 or parts[0] != TX_ID_TAG or not parts[3]:
            raise convert.ProxyError(pb.INVALID_TRANSACTION_ID, "not a transaction id of ours")
        offsets = parts[1:3]
        if not all(p.isascii() and p.isdigit() and len(p) <= 19 for p in offsets):
            raise convert.ProxyError(pb.INVALID_TRANSACTION_ID, "bad offsets in transaction id")
        if not parts[3].isprintable():
            raise convert.ProxyError(pb.INVALID_TRANSACTION_ID, "bad broker in transaction id")
        return cls(parts[3], int(parts[2]), int(parts[1]))


@attrs.define(eq=False)
class TelemetrySession:
    """One client's Telemetry stream: whoever writes on it (the settings answer, a relayed
    check) takes the lock, so two commands never interleave their frames."""

    client_id: str
    send_raw: Send
    lock: trio.Lock = attrs.field(factory=trio.Lock)

    async def send(self, command: spb.TelemetryCommand, timeout_s: float) -> bool:
        with trio.move_on_after(timeout_s):
            async with self.lock:
                await self.send_raw(command.SerializeToString())
                return True
        return False


@attrs.define(eq=False)
class _GroupHook:
    """The proxy's producer group for one topic, as the client instance sees a producer."""

    group: str
    bridge: TransactionBridge

    def publish_topics(self) -> Iterable[str]:
        return (self.group,)

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        pass

    def on_new_master(self, broker_name: str) -> None:
        pass

    async def check_transaction(self, conn: Connection,
                                header: CheckTransactionStateRequestHeader, body: bytes) -> None:
        await self.bridge.relay_check(self.group, conn, header, body)


class TransactionBridge:
    def __init__(self, config: ProxyConfig, instance: ClientInstance,
                 routes: MasterRoutes | None = None) -> None:
        self.config = config
        self.instance = instance
        self.routes = routes or MasterRoutes(instance)
        #: topic -> the sessions of the producers publishing to it
        self._producers: dict[str, dict[str, TelemetrySession]] = {}
        #: client id -> (its session, its topics)
        self._clients: dict[str, tuple[TelemetrySession, frozenset[str]]] = {}

    # ------------------------------------------------------------------ producers

    def register(self, session: TelemetrySession, topics: Iterable[str]) -> None:
        """A producer's Settings: its topics become producer groups of the proxy (replacing
        what the same client said before)."""
        wanted = frozenset(topics)
        if len(wanted) > MAX_TOPICS_PER_PRODUCER:
            raise convert.ProxyError(pb.BAD_REQUEST,
                                     f"more than {MAX_TOPICS_PER_PRODUCER} publishing topics")
        for topic in wanted:
            problem = validate_topic(topic)
            if problem is not None:
                raise convert.ProxyError(pb.ILLEGAL_TOPIC, problem)
            if topic not in self._producers and topic in self.instance.producers:
                raise convert.ProxyError(pb.ILLEGAL_TOPIC, f"{topic!r} is the proxy's own group")
        new = wanted - self._producers.keys()
        if len(self._producers) + len(new) > MAX_PRODUCER_GROUPS:
            raise convert.ProxyError(pb.TOO_MANY_REQUESTS,
                                     f"the proxy serves {MAX_PRODUCER_GROUPS} producer groups")
        self.unregister(session.client_id)
        self._clients[session.client_id] = (session, wanted)
        for topic in wanted:
            group = self._producers.setdefault(topic, {})
            if not group:
                self.instance.register_producer(_GroupHook(topic, self))
            group[session.client_id] = session
        if new:
            self.instance.spawn(self._announce, sorted(new))

    def unregister(self, client_id: str, session: TelemetrySession | None = None) -> None:
        """The client left (its stream ended, NotifyClientTermination); with ``session``,
        only if that is still the client's current stream."""
        held = self._clients.get(client_id)
        if held is None or (session is not None and held[0] is not session):
            return
        del self._clients[client_id]
        for topic in held[1]:
            group = self._producers.get(topic, {})
            group.pop(client_id, None)
            if not group:
                self._producers.pop(topic, None)
                self.instance.unregister_producer(topic)

    async def _announce(self, topics: list[str]) -> None:
        """Routes for the new groups' topics (the brokers to heartbeat), then a heartbeat."""
        for topic in topics:
            try:
                await self.instance.update_route(topic)
            except Exception as exc:
                log.info("no route for a producer's topic yet", topic=topic, error=str(exc)[:200])
        self.instance.heartbeat_soon()

    # ------------------------------------------------------------------ checks

    def _broker_name(self, conn: Connection) -> str | None:
        for name, addrs in self.instance.broker_addrs.items():
            if conn.peer in addrs.values():
                return name
        return None

    async def relay_check(self, topic: str, conn: Connection,
                          header: CheckTransactionStateRequestHeader, body: bytes) -> None:
        """A broker asks about a half message of ``topic``'s group: one of the topic's producers
        is asked over its Telemetry stream."""
        sessions = list(self._producers.get(topic, {}).values())
        broker = self._broker_name(conn)
        if not sessions or broker is None:
            log.info("transaction check not relayed", topic=topic, broker=broker,
                     producers=len(sessions))
            return
        try:
            stored = next(iter_records(body, check_crc=False))
        except (StopIteration, ValueError) as exc:
            log.info("bad transaction check body", error=str(exc)[:200])
            return
        if len(stored.body) > self.config.max_body_bytes:
            log.info("transaction check body over the limit", topic=topic)
            return
        ref = TransactionRef(broker, header.tran_state_table_offset, header.commit_log_offset)
        command = spb.TelemetryCommand(
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=to_pb(stored, stored.topic, "", 0), transaction_id=ref.encode()))
        session = random.choice(sessions)
        try:
            sent = await session.send(command, self.config.call_timeout_s)
        except Exception as exc:  # the stream went away under us
            log.info("transaction check relay failed", client=session.client_id,
                     error=repr(exc)[:200])
            return
        if not sent:
            log.info("transaction check relay timed out", client=session.client_id)

    # ------------------------------------------------------------------ EndTransaction

    async def end_transaction(self, req: spb.EndTransactionRequest
                              ) -> spb.EndTransactionResponse:
        try:
            await self._end(req)
        except Exception as exc:
            return spb.EndTransactionResponse(status=convert.error_status(exc))
        return spb.EndTransactionResponse(status=convert.ok_status())

    async def _end(self, req: spb.EndTransactionRequest) -> None:
        topic = req.topic.name
        problem = validate_topic(topic)
        if problem is not None:
            raise convert.ProxyError(pb.ILLEGAL_TOPIC, problem)
        ref = TransactionRef.parse(req.transaction_id)
        kind = {pb.COMMIT: COMMIT_TYPE, pb.ROLLBACK: ROLLBACK_TYPE}.get(req.resolution, NOT_TYPE)
        if kind == NOT_TYPE:
            return  # UNKNOWN: the broker asks again later
        ext: dict[str, Any] = {
            "producerGroup": topic,
            "tranStateTableOffset": ref.tran_state_table_offset,
            "commitLogOffset": ref.commitlog_offset,
            "commitOrRollback": kind,
            "fromTransactionCheck": req.source == pb.SOURCE_SERVER_CHECK,
            "msgId": req.message_id or "",
            "transactionId": req.transaction_id,
        }
        addr, resp = await self.routes.invoke(topic, ref.broker_name,
                                              request(RequestCode.END_TRANSACTION, ext))
        if resp.code == ResponseCode.SYSTEM_ERROR:  # no such half message here
            raise convert.ProxyError(pb.INVALID_TRANSACTION_ID, resp.remark or "refused")
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)

