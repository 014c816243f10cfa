"""The Trio shell of a remoting client pool: one connection per address, (re)connected on
demand; its connections lend their reading to lone calls (see connection.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import trio

from ..logging import get_logger
from .address import parse_address
from .codec import RemotingCommand
from .connection import (
    DEFAULT_CALL_TIMEOUT_S,
    Connection,
)
from .errors import (
    RemotingClosedError,
    RemotingConnectError,
    RemotingTimeoutError,
    RemotingUnsentError,
)
from .processors import Processor, ProcessorTable
from .sockets import InputShare, connect_socket

DEFAULT_CONNECT_TIMEOUT_S: Final = 3.0
#: Run on every connection the pool opens, before its first request (peer authentication:
#: ``peer_auth.peer_handshake``); raising refuses the connection.
Handshake = Callable[[Connection], Awaitable[None]]


class RemotingClient:
    """A pool with one connection per address, (re)connected on demand.

    Make one with ``open_remoting_client``; requests the peers send to us (server -> client calls)
    go to ``table``.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        table: ProcessorTable,
        *,
        node: str = "client",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        rpc_hook: Callable[[RemotingCommand], RemotingCommand] | None = None,
        handshake: Handshake | None = None,
    ) -> None:
        self._nursery = nursery
        self.table = table
        self.node = node
        self.connect_timeout = connect_timeout
        #: Applied to every request this pool sends (RocketMQ's client RPCHook: ACL signing).
        self.rpc_hook = rpc_hook
        self.handshake = handshake
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, trio.Event] = {}
        self._closed = False
        self._input = InputShare()  # the one read buffer of the pool's connections
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
                    sock = await connect_socket(host, port)
                except OSError as exc:
                    raise RemotingConnectError(f"cannot connect to {addr}: {exc}") from exc
            if scope.cancelled_caught:
                raise RemotingConnectError(
                    f"cannot connect to {addr}: no answer in {self.connect_timeout:g}s"
                )
            if self._closed:
                sock.close()
                raise RemotingClosedError("client is closed")
            try:
                conn = Connection(
                    sock, self.table, node=self.node, lend_reading=True,
                    input_share=self._input,
                )
            except OSError as exc:
                sock.close()
                raise RemotingConnectError(f"cannot connect to {addr}: {exc}") from exc
            try:
                await self._nursery.start(self._run_connection, addr, conn)
                if self.handshake is not None:
                    await self._shake(addr, conn, self.handshake)
            except BaseException:
                await conn.aclose()
                raise
            self._connections[addr] = conn
            return conn
        finally:
            del self._connecting[addr]
            done.set()

    async def _shake(self, addr: str, conn: Connection, handshake: Handshake) -> None:
        """The handshake within the connect timeout; the connection is nobody's until then."""
        with trio.move_on_after(self.connect_timeout) as scope:
            await handshake(conn)
        if scope.cancelled_caught:
            raise RemotingConnectError(
                f"cannot connect to {addr}: no handshake in {self.connect_timeout:g}s")

    async def _run_connection(
        self,
        addr: str,
        conn: Connection,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            await conn.run(task_status=task_status)
        except Exception:  # contained: the next call to addr reconnects
            conn.log.exception("connection failed")
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
        if self.rpc_hook is not None:
            request = self.rpc_hook(request)
        try:
            return await conn.invoke(request, remaining)
        except RemotingUnsentError:  # found closed before sending: once more, newly connected
            with trio.move_on_at(scope.deadline) as again:
                conn = await self.connection(addr)
            if again.cancelled_caught:
                raise
            return await conn.invoke(request, max(0.0, scope.deadline - trio.current_time()))

    async def invoke_oneway(self, addr: str, request: RemotingCommand) -> None:
        conn = await self.connection(addr)
        if self.rpc_hook is not None:
            request = self.rpc_hook(request)
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
    rpc_hook: Callable[[RemotingCommand], RemotingCommand] | None = None,
    handshake: Handshake | None = None,
) -> AsyncIterator[RemotingClient]:
    """A ``RemotingClient`` whose connections live as long as this context.

    An exception raised in the body comes out as itself, not wrapped in an ExceptionGroup.
    """
    try:
        async with trio.open_nursery() as nursery:
            client = RemotingClient(
                nursery,
                ProcessorTable(dict(processors or {}), default),
                node=node,
                connect_timeout=connect_timeout,
                rpc_hook=rpc_hook,
                handshake=handshake,
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
