"""Trio shell for the remoting protocol: the server, the client pool, and the connection both share.

A ``Connection`` is symmetric: it reads frames, hands requests to a ``Dispatcher`` (one task per
request, so a held request such as a long poll never blocks the others), matches responses to
pending calls by opaque (in any order), and writes frames through one coalescing writer: frames
that become ready while a send is in progress go out together in the next ``send_all``.

Both sides can call the other: a broker uses the server-side connection of a client to send it
NOTIFY_CONSUMER_IDS_CHANGED or CHECK_TRANSACTION_STATE exactly as the client calls the broker.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from cluster.logging import get_logger
from cluster.remoting.codec import FrameDecoder, ProtocolError, RemotingCommand, encode_into
from cluster.remoting.codes import FLAG_RESPONSE, ResponseCode

#: Bytes asked of the socket per receive: read big, decode every complete frame in it.
READ_CHUNK_BYTES: Final = 256 * 1024
#: Requests of one connection being processed at once; past this the reader stops reading.
MAX_IN_FLIGHT_REQUESTS: Final = 65_536
#: RocketMQ closes server-side connections idle this long (clients heartbeat every 30 s).
DEFAULT_IDLE_TIMEOUT_S: Final = 120.0
#: RocketMQ's default client call timeout.
DEFAULT_CALL_TIMEOUT_S: Final = 3.0
DEFAULT_CONNECT_TIMEOUT_S: Final = 3.0
#: A send that cannot complete in this long means the peer stopped reading: the connection is closed.
WRITE_TIMEOUT_S: Final = 30.0

Processor = Callable[["Connection", RemotingCommand], Awaitable[RemotingCommand | None]]


class RemotingError(Exception):
    """Base of the errors a call can raise."""


class RemotingTimeoutError(RemotingError):
    """No response within the call's timeout."""


class RemotingConnectError(RemotingError):
    """The address could not be connected to."""


class RemotingClosedError(RemotingError):
    """The connection closed before the call completed."""


def parse_address(addr: str) -> tuple[str, int]:
    """``"ip:port"`` (or ``"[v6]:port"``) -> (host, port)."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"address {addr!r} is not host:port")
    try:
        port_num = int(port)
    except ValueError:
        raise ValueError(f"address {addr!r} has a non-numeric port") from None
    if not 0 < port_num < 65536:
        raise ValueError(f"address {addr!r} has port out of range")
    return host.strip("[]"), port_num


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@attrs.frozen
class Dispatcher:
    """The processor table keyed by request code, and the processor for any other code."""

    processors: Mapping[int, Processor] = attrs.field(factory=dict)
    default: Processor | None = None

    def lookup(self, code: int) -> Processor | None:
        return self.processors.get(code, self.default)


class _Pending:
    __slots__ = ("error", "event", "response")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.response: RemotingCommand | None = None
        self.error: RemotingError | None = None


_connection_ids = itertools.count(1)


class Connection:
    """One TCP connection speaking remoting frames, usable from either end."""

    def __init__(
        self,
        stream: trio.SocketStream,
        dispatcher: Dispatcher,
        *,
        node: str,
        max_in_flight: int = MAX_IN_FLIGHT_REQUESTS,
    ) -> None:
        self.id = next(_connection_ids)
        self._stream = stream
        self._dispatcher = dispatcher
        try:
            peer = stream.socket.getpeername()
            self.peer = format_address(peer[0], peer[1])
        except OSError:
            self.peer = "?"
        local = stream.socket.getsockname()
        self.local = format_address(local[0], local[1])
        self.log = get_logger(node=node, remote=self.peer, conn=self.id)
        self._decoder = FrameDecoder()
        self._pending: dict[int, _Pending] = {}
        self._opaque = 0
        self._out = bytearray()
        self._sending = False
        self._slots = trio.Semaphore(max_in_flight, max_value=max_in_flight)
        self._closed = False
        self.closed = trio.Event()
        self.close_reason: str | None = None

    def __repr__(self) -> str:
        return f"<Connection #{self.id} {self.local}->{self.peer}>"

    @property
    def is_closed(self) -> bool:
        return self._closed

    # ---------------------------------------------------------------- calls from this end

    def _next_opaque(self) -> int:
        self._opaque = (self._opaque + 1) & 0x7FFFFFFF
        return self._opaque

    async def invoke(
        self, request: RemotingCommand, timeout: float = DEFAULT_CALL_TIMEOUT_S
    ) -> RemotingCommand:
        """Send ``request`` and wait for its response (matched by a fresh opaque)."""
        if self._closed:
            raise RemotingClosedError(f"connection to {self.peer} is closed")
        opaque = self._next_opaque()
        slot = _Pending()
        self._pending[opaque] = slot
        try:
            with trio.move_on_after(timeout) as scope:
                await self._write(request, opaque)
                await slot.event.wait()
        finally:
            self._pending.pop(opaque, None)
        if slot.error is not None:
            raise slot.error
        if scope.cancelled_caught or slot.response is None:
            raise RemotingTimeoutError(
                f"no response to request code {request.code} from {self.peer} in {timeout:g}s"
            )
        return slot.response

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send ``request`` with the oneway bit; nothing comes back."""
        if self._closed:
            raise RemotingClosedError(f"connection to {self.peer} is closed")
        if not request.is_oneway:
            request = attrs.evolve(request, flag=request.flag | 0x2)
        await self._write(request, self._next_opaque())

    # ---------------------------------------------------------------- writing

    async def _write(self, cmd: RemotingCommand, opaque: int) -> None:
        if self._closed:
            raise RemotingClosedError(f"connection to {self.peer} is closed")
        encode_into(self._out, cmd, opaque)
        if self._sending:
            return  # the task already sending flushes this frame with its next send_all
        self._sending = True
        try:
            while self._out:
                chunk, self._out = self._out, bytearray()
                # Shielded: a caller's timeout must not cut a frame in half. A stuck peer is
                # handled by the write timeout, after which the connection is closed.
                with trio.CancelScope(shield=True), trio.move_on_after(WRITE_TIMEOUT_S) as wscope:
                    await self._stream.send_all(chunk)
                if wscope.cancelled_caught:
                    await self._abort(f"send stalled for {WRITE_TIMEOUT_S:g}s")
                    raise RemotingClosedError(f"send to {self.peer} stalled")
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            await self._abort(f"send failed: {exc!r}")
            raise RemotingClosedError(f"connection to {self.peer} broke while sending") from exc
        finally:
            self._sending = False

    # ---------------------------------------------------------------- reading and serving

    async def run(self, *, idle_timeout: float | None = None) -> None:
        """Read and dispatch until the peer closes, a frame is malformed, or the connection idles."""
        try:
            async with trio.open_nursery() as nursery:
                try:
                    await self._read_loop(nursery, idle_timeout)
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self._abort(self.close_reason or "closed")

    async def _read_loop(self, nursery: trio.Nursery, idle_timeout: float | None) -> None:
        stream = self._stream
        idle = math.inf if idle_timeout is None else idle_timeout
        while True:
            with trio.move_on_after(idle) as scope:
                try:
                    data = await stream.receive_some(READ_CHUNK_BYTES)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    self.close_reason = self.close_reason or f"read failed: {exc!r}"
                    return
            if scope.cancelled_caught:
                if not self._pending and self._slots.value == self._slots.max_value:
                    self.close_reason = f"idle for {idle:g}s"
                    self.log.info("closing idle connection", idle_s=idle)
                    return
                continue
            if not data:
                self.close_reason = self.close_reason or "peer closed"
                return
            try:
                commands = self._decoder.feed(data)
            except ProtocolError as exc:
                self.close_reason = f"malformed frame: {exc}"
                self.log.warning("malformed frame, closing connection", reason=str(exc))
                return
            for cmd in commands:
                if cmd.flag & FLAG_RESPONSE:
                    self._complete(cmd)
                    continue
                try:
                    self._slots.acquire_nowait()
                except trio.WouldBlock:
                    await self._slots.acquire()
                nursery.start_soon(self._serve_request, cmd)

    def _complete(self, response: RemotingCommand) -> None:
        slot = self._pending.pop(response.opaque, None)
        if slot is None:
            self.log.debug("response for no pending call", opaque=response.opaque, code=response.code)
            return
        slot.response = response
        slot.event.set()

    async def _serve_request(self, request: RemotingCommand) -> None:
        try:
            processor = self._dispatcher.lookup(request.code)
            response: RemotingCommand | None
            if processor is None:
                response = request.response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    f" request type {request.code} not supported",
                )
            else:
                try:
                    response = await processor(self, request)
                except Exception as exc:
                    self.log.warning(
                        "processor failed", code=request.code, error=repr(exc), exc_info=True
                    )
                    response = request.response(ResponseCode.SYSTEM_ERROR, _exception_remark(exc))
            if request.is_oneway:
                return
            if response is None:
                response = request.response(
                    ResponseCode.SYSTEM_ERROR, f"no response for request code {request.code}"
                )
            elif not response.flag & FLAG_RESPONSE:
                response = attrs.evolve(response, flag=response.flag | FLAG_RESPONSE)
            try:
                await self._write(response, request.opaque)
            except ProtocolError as exc:  # e.g. a body over the frame limit: say so instead
                await self._write(
                    request.response(ResponseCode.SYSTEM_ERROR, f"response not sendable: {exc}"),
                    request.opaque,
                )
        except RemotingClosedError:
            pass
        finally:
            self._slots.release()

    # ---------------------------------------------------------------- closing

    async def _abort(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        self.close_reason = self.close_reason or reason
        for slot in self._pending.values():
            slot.error = RemotingClosedError(f"connection to {self.peer} closed: {self.close_reason}")
            slot.event.set()
        self._pending.clear()
        await trio.aclose_forcefully(self._stream)
        self.closed.set()

    async def aclose(self) -> None:
        """Close from this end; the reader stops and every pending call fails."""
        self.close_reason = self.close_reason or "closed locally"
        await self._abort(self.close_reason)


def _exception_remark(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# =========================================================================== server


class RemotingServer:
    """Serves a ``Dispatcher`` on one or more ports (a broker serves its listen and fast ports)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        node: str = "server",
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT_S,
        on_connect: Callable[[Connection], None] | None = None,
        on_close: Callable[[Connection], None] | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.node = node
        self.idle_timeout = idle_timeout
        self._on_connect = on_connect
        self._on_close = on_close
        self._connections: set[Connection] = set()
        self.log = get_logger(node=node)

    @property
    def connections(self) -> frozenset[Connection]:
        return frozenset(self._connections)

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``host:port`` (0 = ephemeral) and serve until cancelled.

        ``task_status.started((host, port))`` reports the bound address.
        """
        listeners = await trio.open_tcp_listeners(port, host=host)
        sockname = listeners[0].socket.getsockname()
        bound = (sockname[0], sockname[1])
        self.log.info("listening", address=format_address(*bound))
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._handle_stream, listeners)
            task_status.started(bound)

    async def _handle_stream(self, stream: trio.SocketStream) -> None:
        conn = Connection(stream, self.dispatcher, node=self.node)
        self._connections.add(conn)
        conn.log.debug("connection accepted")
        try:
            if self._on_connect is not None:
                self._on_connect(conn)
            await conn.run(idle_timeout=self.idle_timeout)
        finally:
            self._connections.discard(conn)
            conn.log.debug("connection closed", reason=conn.close_reason)
            if self._on_close is not None:
                self._on_close(conn)


# =========================================================================== client


class RemotingClient:
    """A pool with one connection per address, (re)connected on demand.

    Make one with ``open_remoting_client``; requests the peers send to us (server -> client calls)
    go to ``dispatcher``.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        dispatcher: Dispatcher,
        *,
        node: str = "client",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        self._nursery = nursery
        self.dispatcher = dispatcher
        self.node = node
        self.connect_timeout = connect_timeout
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, trio.Event] = {}
        self._closed = False
        self.log = get_logger(node=node)

    async def connection(self, addr: str) -> Connection:
        """The live connection to ``addr``, connecting if there is none."""
        while True:
            if self._closed:
                raise RemotingClosedError("client is closed")
            conn = self._connections.get(addr)
            if conn is not None and not conn.is_closed:
                return conn
            waiting = self._connecting.get(addr)
            if waiting is None:
                break
            await waiting.wait()
        done = trio.Event()
        self._connecting[addr] = done
        try:
            host, port = parse_address(addr)
            with trio.move_on_after(self.connect_timeout) as scope:
                try:
                    stream = await trio.open_tcp_stream(host, port)
                except OSError as exc:
                    raise RemotingConnectError(f"cannot connect to {addr}: {exc}") from exc
            if scope.cancelled_caught:
                raise RemotingConnectError(
                    f"cannot connect to {addr}: no answer in {self.connect_timeout:g}s"
                )
            conn = Connection(stream, self.dispatcher, node=self.node)
            self._connections[addr] = conn
            self._nursery.start_soon(self._run_connection, addr, conn)
            return conn
        finally:
            del self._connecting[addr]
            done.set()

    async def _run_connection(self, addr: str, conn: Connection) -> None:
        try:
            await conn.run()
        finally:
            if self._connections.get(addr) is conn:
                del self._connections[addr]
            conn.log.debug("client connection closed", reason=conn.close_reason)

    async def invoke(
        self, addr: str, request: RemotingCommand, timeout: float = DEFAULT_CALL_TIMEOUT_S
    ) -> RemotingCommand:
        """Call ``addr`` and wait for the response; connecting counts against ``timeout``."""
        with trio.move_on_after(timeout) as scope:
            conn = await self.connection(addr)
        if scope.cancelled_caught:
            raise RemotingTimeoutError(f"connecting to {addr} took longer than {timeout:g}s")
        remaining = max(0.0, scope.deadline - trio.current_time())
        return await conn.invoke(request, remaining)

    async def invoke_oneway(self, addr: str, request: RemotingCommand) -> None:
        conn = await self.connection(addr)
        await conn.invoke_oneway(request)

    async def close_connection(self, addr: str) -> None:
        conn = self._connections.pop(addr, None)
        if conn is not None:
            await conn.aclose()

    async def aclose(self) -> None:
        self._closed = True
        for conn in list(self._connections.values()):
            await conn.aclose()
        self._connections.clear()


@asynccontextmanager
async def open_remoting_client(
    processors: Mapping[int, Processor] | None = None,
    default: Processor | None = None,
    *,
    node: str = "client",
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
) -> AsyncIterator[RemotingClient]:
    """A ``RemotingClient`` whose connections live as long as this context.

    An exception raised in the body comes out as itself, not wrapped in an ExceptionGroup.
    """
    try:
        async with trio.open_nursery() as nursery:
            client = RemotingClient(
                nursery,
                Dispatcher(dict(processors or {}), default),
                node=node,
                connect_timeout=connect_timeout,
            )
            try:
                yield client
            finally:
                with trio.CancelScope(shield=True):
                    await client.aclose()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise sole_exception(group) from None


def sole_exception(group: BaseExceptionGroup[Any]) -> BaseException:
    """The one exception inside (possibly nested) single-member groups, else the group itself."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


async def serve_dispatcher(
    dispatcher: Dispatcher,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    node: str = "server",
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
    **kwargs: Any,
) -> None:
    """Convenience: ``RemotingServer(dispatcher, ...).serve(host, port)``."""
    server = RemotingServer(dispatcher, node=node, **kwargs)
    await server.serve(host, port, task_status=task_status)
