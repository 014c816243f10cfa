"""The gRPC server on Trio: one task per HTTP/2 connection driving the sans-IO ``h2`` state
machine (the shape of our remoting layer: bytes in, events out), one task per call.

Every limit is a named ``ProxyConfig`` setting: HTTP/2 frame size and header list (h2 refuses
larger ones: a connection error, GOAWAY), streams per connection, one gRPC message's size (checked
from its length prefix, before it is buffered), the bytes a connection may have buffered across
its streams, connections per proxy and per peer address (at the proxy's limit a newcomer from
an address holding fewer takes the place of the idlest connection of the address holding the
most, as on the remoting port), the time to finish the TLS handshake and then to send the
preface, to complete a frame or request once started, and a connection's time without a call.
With TLS (``tls_context``) a connection is served only once its handshake is done and
it chose ``h2`` by ALPN; the handshake holds a connection slot, so stalled ones count against
``max_connections`` until their deadline."""

from __future__ import annotations

import contextlib
import math
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol, cast

import attrs
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import trio

from ..cluster.acl.address import peer_ip
from ..cluster.logging import get_logger
from ..cluster.remoting.admission import ConnectionAdmission, Refused
from .config import ProxyConfig
from .grpc_wire import (
    RESPONSE_HEADERS,
    TIMEOUT_HEADER,
    FrameLengthGuard,
    GrpcStatus,
    GrpcWireError,
    MessageReader,
    frame,
    is_grpc_request,
    method_of,
    parse_timeout,
    trailers,
)
from .tls import ALPN_H2

log = get_logger(node="proxy", component="grpc")
READ_CHUNK = 64 * 1024
#: refusals and evictions are logged at most once per this long (as on the remoting port)
REFUSED_LOG_INTERVAL_S: Final = 10.0
#: the metadata key the connection's peer address rides under: a pseudo-header name, which h2
#: refuses from a client, so no request can forge it
PEER_KEY = ":peer"
#: the metadata key a call's deadline rides under (from its ``grpc-timeout``, counted from
#: when its headers came in; Trio's clock, as text): a pseudo-header name, like ``PEER_KEY``
DEADLINE_KEY = ":deadline"


def time_left_ms(metadata: dict[str, str]) -> int | None:
    """Milliseconds left before the call's deadline (0 once past it; None: the client set
    none), whole ones as gRPC-Java's ``Deadline.timeRemaining`` gives them to Apache's proxy."""
    deadline = metadata.get(DEADLINE_KEY)
    if deadline is None:
        return None
    return max(0, math.floor((float(deadline) - trio.current_time()) * 1000))

Send = Callable[[bytes], Awaitable[None]]


class GrpcService(Protocol):
    def kind(self, method: str) -> str | None:
        """``"unary"``, ``"server_stream"``, ``"bidi"`` or None (unknown method)."""

    async def unary(self, method: str, request: bytes, metadata: dict[str, str]) -> bytes: ...

    async def stream(self, method: str, request: bytes, metadata: dict[str, str],
                     send: Send) -> None: ...

    async def bidi(self, method: str, inbound: trio.MemoryReceiveChannel[bytes],
                   metadata: dict[str, str], send: Send) -> None: ...


@attrs.define
class _Stream:
    method: str
    kind: str
    metadata: dict[str, str]
    reader: MessageReader
    requests: list[bytes] = attrs.field(factory=list)
    inbound: trio.MemorySendChannel[bytes] | None = None
    cancel: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    done: bool = False
    #: the client has half-closed the stream (its request is complete)
    ended: bool = False


@attrs.define(eq=False)
class _Slot:
    """One admitted connection (from accept, TLS handshake included): its peer address, the
    scope that closes it when it is evicted, and when it last read anything."""

    ip: str
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    last_read: float = attrs.field(factory=trio.current_time)


@attrs.define
class _Admission:
    """What every connection of the server holds together: the open connections, in all and
    per peer address, as the remoting port counts them (cluster/remoting/admission.py:
    ``max_connections``, ``max_connections_per_address``, fair shares at the limit), and
    request bytes buffered across all connections (``max_total_input_bytes``)."""

    config: ProxyConfig
    limits: ConnectionAdmission = attrs.field(init=False)
    #: the admitted connections of each address (an evicted one leaves at once)
    slots: dict[str, set[_Slot]] = attrs.field(factory=dict)
    input_used: int = 0
    #: per event (a refusal reason, or "evicted"): when it was last logged
    logged_at: dict[Refused | str, float] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        self.limits = ConnectionAdmission(self.config.max_connections,
                                          self.config.max_connections_per_address)

    def enter(self, ip: str) -> _Slot | Refused:
        """A slot for a newcomer from ``ip`` (closing, at the limit, the connection idle
        longest of the address holding the most, if it holds at least two more than ``ip``),
        or why it is refused."""
        victim = None
        if self.limits.open >= self.limits.max_connections:
            heaviest = self.limits.fair_share_victim(ip)
            if heaviest is not None:
                victim = min(self.slots.get(heaviest, ()), key=lambda s: s.last_read,
                             default=None)
        refused = self.limits.admit(ip, evicting=victim is not None)
        if refused is not None:
            self.log_limited(refused, "grpc connection refused", peer=ip, limit=refused.value)
            return refused
        if victim is not None:
            self._forget(victim)
            victim.scope.cancel()
            self.log_limited("evicted", "grpc connection limit reached: closed the connection "
                             "idle longest of the address holding the most",
                             victim=victim.ip, peer=ip)
        slot = _Slot(ip)
        self.slots.setdefault(ip, set()).add(slot)
        return slot

    def leave(self, slot: _Slot) -> None:
        self._forget(slot)
        self.limits.closed(slot.ip)

    def _forget(self, slot: _Slot) -> None:
        held = self.slots.get(slot.ip)
        if held is not None:
            held.discard(slot)
            if not held:
                del self.slots[slot.ip]

    def log_limited(self, what: Refused | str, message: str, **fields: Any) -> None:
        """Log ``message`` at most every REFUSED_LOG_INTERVAL_S per ``what`` (with counts)."""
        now = trio.current_time()
        if now - self.logged_at.get(what, -math.inf) < REFUSED_LOG_INTERVAL_S:
            return
        self.logged_at[what] = now
        log.warning(message, refused=sum(self.limits.refused.values()),
                    evicted=self.limits.evictions, **fields)


class _Connection:
    def __init__(self, stream: trio.abc.Stream, service: GrpcService, config: ProxyConfig,
                 nursery: trio.Nursery, peer: str = "", admission: _Admission | None = None,
                 slot: _Slot | None = None) -> None:
        self.sock = stream
        self.peer = peer
        self.admission = admission or _Admission(config)
        self.slot = slot or _Slot(peer_ip(peer))
        #: when the connection was served; when a call last started or ended; since when
        #: the bytes read end inside a frame or a request (None: they do not)
        self.started = self.last_call = trio.current_time()
        self.partial_since: float | None = None
        #: the read in progress, its deadline the earliest of the timeouts above
        self.read_scope: trio.CancelScope | None = None
        #: this connection's part of ``admission.input_used``
        self.charged = 0
        self.service = service
        self.config = config
        self.nursery = nursery
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: config.max_streams_per_connection,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: config.max_header_list_bytes,
            h2.settings.SettingCodes.MAX_FRAME_SIZE: config.max_frame_bytes,
        })
        self.h2.max_inbound_frame_size = config.max_frame_bytes
        # the settings above are h2's from the start (no ACK changes them), so its HPACK
        # decoder must be told the header list limit itself
        self.h2.decoder.max_header_list_size = config.max_header_list_bytes
        self.streams: dict[int, _Stream] = {}
        self.guard = FrameLengthGuard(config.max_frame_bytes, config.max_header_list_bytes)
        self.send_lock = trio.Lock()
        self.window = trio.Event()
        #: set when h2 has bytes to send: the writer task sends everything queued by then in
        #: one write (the answers of the calls that finished together, the window updates)
        self.dirty = trio.Event()
        self.closed = False

    def kick(self) -> None:
        self.dirty.set()

    async def write_loop(self) -> None:
        while not self.closed:
            await self.dirty.wait()
            self.dirty = trio.Event()
            await self.flush()

    async def flush(self) -> None:
        async with self.send_lock:
            data = self.h2.data_to_send()
            if data and not self.closed:
                try:
                    await self.sock.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self.closed = True

    async def run(self) -> None:
        self.h2.initiate_connection()
        await self.flush()
        self.nursery.start_soon(self.write_loop)
        while not self.closed:
            with trio.CancelScope(deadline=self.due()) as scope:
                self.read_scope = scope
                data = await self.sock.receive_some(READ_CHUNK)
            self.read_scope = None
            if scope.cancelled_caught:
                await self.expire()
                return
            if not data:
                return
            self.slot.last_read = trio.current_time()
            if not await self.ingest(data):
                return

    def due(self) -> float:
        """When the connection must be closed if nothing more comes: its preface, a partial
        frame or request, or idleness (no call open) past their timeouts."""
        config = self.config
        due = math.inf
        if not self.guard.preface_done:
            due = self.started + config.handshake_timeout_s
        if self.partial_since is not None:
            due = min(due, self.partial_since + config.partial_frame_timeout_s)
        if not self.streams:
            due = min(due, self.last_call + config.idle_timeout_s)
        return due

    def calls_changed(self) -> None:
        """A call started or ended: the idle clock starts again (the read's deadline moves)."""
        self.last_call = trio.current_time()
        if self.read_scope is not None:
            self.read_scope.deadline = self.due()

    async def expire(self) -> None:
        """The read's deadline passed: close, saying why (GOAWAY: NO_ERROR when idle)."""
        if not self.guard.preface_done:
            log.info("grpc connection closed: no preface in time", peer=self.peer,
                     limit_s=self.config.handshake_timeout_s)
            return
        if self.partial_since is not None:
            log.info("grpc connection closed: frame or request incomplete in time",
                     peer=self.peer, limit_s=self.config.partial_frame_timeout_s)
            self.h2.close_connection(error_code=h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        else:
            log.info("grpc connection closed: idle", peer=self.peer,
                     limit_s=self.config.idle_timeout_s)
            self.h2.close_connection(error_code=h2.errors.ErrorCodes.NO_ERROR)
        await self.flush()

    async def ingest(self, data: bytes | bytearray) -> bool:
        """Hand one read to h2 and act on its events; False: the connection must close."""
        if not self.guard.check(data):
            log.info("grpc frame over the limit", reason=self.guard.reason)
            self.h2.close_connection(error_code=h2.errors.ErrorCodes.FRAME_SIZE_ERROR)
            await self.flush()
            return False
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:  # h2 has queued its GOAWAY
            log.info("grpc connection protocol error", error=str(exc)[:200])
            await self.flush()
            return False
        for event in events:
            self.on_event(event)
        over = self.over_budget()
        if over:
            log.warning("grpc connection over an input budget", budget=over, peer=self.peer)
            self.h2.close_connection(error_code=h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            await self.flush()
            return False
        if not self.partial():
            self.partial_since = None
        elif self.partial_since is None:
            self.partial_since = trio.current_time()
        self.kick()
        return True

    def partial(self) -> bool:
        """The bytes read end inside a frame or a header block, inside a gRPC message, or
        inside a unary request (its message may be whole, its end has not come)."""
        return self.guard.partial or any(
            st.reader.buffered or (st.inbound is None and not st.ended)
            for st in self.streams.values())

    def over_budget(self) -> str:
        """Re-charge what this connection buffers; the name of the budget it breaks, or ""."""
        held = self.buffered()
        self.recharge(held)
        if held > self.config.max_connection_input_bytes:
            return "max_connection_input_bytes"
        if self.admission.input_used > self.config.max_total_input_bytes:
            return "max_total_input_bytes"
        return ""

    def recharge(self, held: int) -> None:
        self.admission.input_used += held - self.charged
        self.charged = held

    def buffered(self) -> int:
        return sum(s.reader.buffered + sum(map(len, s.requests)) for s in self.streams.values())

    # ------------------------------------------------------------------ inbound events

    def on_event(self, event: Any) -> None:
        if isinstance(event, h2.events.RequestReceived):
            # header_encoding="utf-8": h2 hands names and values over as str
            headers = cast("list[tuple[str, str]]", event.headers)
            self.on_request(event.stream_id, dict(headers), event.stream_ended is not None)
        elif isinstance(event, h2.events.DataReceived):
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            self.on_data(event.stream_id, event.data)
        elif isinstance(event, h2.events.StreamEnded):
            self.on_end(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            st = self.streams.pop(event.stream_id, None)
            if st is not None:
                st.cancel.cancel()
                self.calls_changed()
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self.window.set()
            self.window = trio.Event()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed = True

    def on_request(self, sid: int, headers: dict[str, str], ended: bool) -> None:
        headers[PEER_KEY] = self.peer
        method = method_of(headers.get(":path", ""))
        kind = self.service.kind(method) if method else None
        if not is_grpc_request(headers) or method is None or kind is None:
            self.fail(sid, GrpcStatus.UNIMPLEMENTED, f"unknown method {headers.get(':path')!r}")
            return
        if TIMEOUT_HEADER in headers:
            try:
                timeout_s = parse_timeout(headers[TIMEOUT_HEADER])
            except GrpcWireError as exc:
                self.fail(sid, exc.status, exc.message)
                return
            headers[DEADLINE_KEY] = repr(trio.current_time() + timeout_s)
        st = _Stream(method, kind, headers, MessageReader(self.config.max_grpc_message_bytes))
        self.streams[sid] = st
        self.calls_changed()
        if kind == "bidi":
            send, receive = trio.open_memory_channel[bytes](self.config.max_telemetry_backlog)
            st.inbound = send
            self.nursery.start_soon(self.call_bidi, sid, st, receive)
        if ended:
            self.on_end(sid)

    def on_data(self, sid: int, data: bytes) -> None:
        st = self.streams.get(sid)
        if st is None or st.done:
            return
        try:
            messages = st.reader.feed(data)
        except GrpcWireError as exc:
            self.fail(sid, exc.status, exc.message)
            return
        if st.inbound is None:
            st.requests += messages
            if len(st.requests) > 1:
                self.fail(sid, GrpcStatus.INVALID_ARGUMENT, "more than one request message")
            return
        for msg in messages:
            try:
                st.inbound.send_nowait(msg)
            except trio.WouldBlock:
                self.fail(sid, GrpcStatus.RESOURCE_EXHAUSTED, "too many commands queued")
                return

    def on_end(self, sid: int) -> None:
        st = self.streams.get(sid)
        if st is None or st.done or st.ended:
            return
        st.ended = True
        if st.inbound is not None:
            st.inbound.close()
            return
        if len(st.requests) != 1 or st.reader.buffered:
            self.fail(sid, GrpcStatus.INVALID_ARGUMENT, "a call takes exactly one message")
            return
        self.nursery.start_soon(self.call_unary, sid, st, st.requests.pop())

    def fail(self, sid: int, status: GrpcStatus, message: str) -> None:
        """Answer a call with a trailers-only response (and forget the stream)."""
        st = self.streams.pop(sid, None)
        if st is not None:
            st.done = True
            st.cancel.cancel()
            if st.inbound is not None:
                st.inbound.close()
            self.calls_changed()
        try:
            self.h2.send_headers(sid, [*RESPONSE_HEADERS, *trailers(status, message)],
                                 end_stream=True)
        except h2.exceptions.H2Error:
            with contextlib.suppress(h2.exceptions.H2Error):
                self.h2.reset_stream(sid)

    # ------------------------------------------------------------------ calls

    async def call_unary(self, sid: int, st: _Stream, request: bytes) -> None:
        async def send(payload: bytes) -> None:
            await self.send_message(sid, payload)

        await self.guarded(sid, st, lambda: self._unary(st, request, send))

    async def _unary(self, st: _Stream, request: bytes, send: Send) -> None:
        if st.kind == "server_stream":
            await self.service.stream(st.method, request, st.metadata, send)
        else:
            await send(await self.service.unary(st.method, request, st.metadata))

    async def call_bidi(self, sid: int, st: _Stream,
                        receive: trio.MemoryReceiveChannel[bytes]) -> None:
        async def send(payload: bytes) -> None:
            await self.send_message(sid, payload)

        async with receive:
            await self.guarded(
                sid, st, lambda: self.service.bidi(st.method, receive, st.metadata, send)
            )

    async def guarded(self, sid: int, st: _Stream, call: Callable[[], Awaitable[None]]) -> None:
        status, message = GrpcStatus.OK, ""
        with st.cancel:
            try:
                await call()
            except GrpcWireError as exc:
                status, message = exc.status, exc.message
            except h2.exceptions.H2Error:
                return  # the stream went away under us
            except Exception as exc:  # a handler bug must not take the connection down
                log.exception("grpc call failed", method=st.method)
                status, message = GrpcStatus.INTERNAL, type(exc).__name__
            if self.streams.get(sid) is not st:
                return
            del self.streams[sid]
            st.done = True
            self.calls_changed()
            try:
                if self.h2.streams.get(sid) is not None and _headers_sent(self.h2, sid):
                    self.h2.send_headers(sid, trailers(status, message), end_stream=True)
                else:
                    self.h2.send_headers(sid, [*RESPONSE_HEADERS, *trailers(status, message)],
                                         end_stream=True)
            except h2.exceptions.H2Error:
                return
            self.kick()

    async def send_message(self, sid: int, payload: bytes) -> None:
        if not _headers_sent(self.h2, sid):
            self.h2.send_headers(sid, RESPONSE_HEADERS)
        data = frame(payload)
        while data:
            size = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
            if size <= 0:
                self.kick()
                await self.window.wait()
                continue
            self.h2.send_data(sid, data[:size])
            data = data[size:]
        self.kick()


def _headers_sent(conn: h2.connection.H2Connection, sid: int) -> bool:
    stream = conn.streams.get(sid)
    return stream is not None and bool(stream.state_machine.headers_sent)


Started = trio.TaskStatus[list[trio.SocketListener]]


def _peer_of(sock: trio.SocketStream) -> str:
    try:
        host, port = sock.socket.getpeername()[:2]
    except OSError:
        return ""
    return f"{host}:{port}"


async def _tls_handshake(sock: trio.SocketStream, ctx: ssl.SSLContext, timeout_s: float,
                         peer: str) -> trio.SSLStream[trio.SocketStream] | None:
    """The TLS stream once its handshake is done within ``timeout_s`` and ``h2`` was chosen;
    None (logged) otherwise."""
    stream = trio.SSLStream(sock, ctx, server_side=True)
    with trio.move_on_after(timeout_s) as scope:
        try:
            await stream.do_handshake()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.info("grpc TLS handshake failed", peer=peer, error=str(exc.__cause__ or exc)[:200])
            return None
    if scope.cancelled_caught:
        log.info("grpc TLS handshake timed out", peer=peer, limit_s=timeout_s)
        return None
    if stream.selected_alpn_protocol() != ALPN_H2:
        log.info("grpc TLS connection without ALPN h2", peer=peer)
        return None
    return stream


async def serve_grpc(config: ProxyConfig, service: GrpcService, *,
                     tls_context: ssl.SSLContext | None = None,
                     task_status: Started = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``service`` on ``config.grpc_port`` until cancelled (TLS with ``tls_context``,
    else plain text); started, reports the listeners (their bound ports)."""
    listeners = await trio.open_tcp_listeners(config.grpc_port, host=config.bind_address)
    admission = _Admission(config)

    async def serve(stream: trio.abc.Stream, peer: str, slot: _Slot) -> None:
        async with trio.open_nursery() as nursery:
            conn = _Connection(stream, service, config, nursery, peer, admission, slot)
            try:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await conn.run()
            finally:
                conn.recharge(0)
            nursery.cancel_scope.cancel()

    async def handle(sock: trio.SocketStream) -> None:
        async with sock:
            peer = _peer_of(sock)
            slot = admission.enter(peer_ip(peer))
            if isinstance(slot, Refused):
                return
            try:
                with slot.scope:  # cancelled: evicted for a newcomer
                    if tls_context is None:
                        await serve(sock, peer, slot)
                        return
                    tls = await _tls_handshake(sock, tls_context, config.handshake_timeout_s,
                                               peer)
                    if tls is not None:
                        await serve(tls, peer, slot)
            finally:
                admission.leave(slot)

    task_status.started(listeners)
    await trio.serve_listeners(handle, listeners)
