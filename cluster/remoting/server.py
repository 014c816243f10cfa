"""The Trio shell of a remoting server: accept loop, connection limit, partial-frame sweeper.

A server keeps at most ``max_connections`` open, and at most ``max_connections_per_address``
from one peer address; at the node's limit a newcomer from an address holding fewer takes the
place of the connection idle longest of the address holding the most (admission.py). A refused
connection is closed at once; refusals and evictions are counted and logged at a limited rate.
Its connections share one ``InputShare`` (``serverMaxBufferedInputBytes``, see
input_budget.py), and a frame still incomplete ``partial_frame_timeout`` seconds after it
started closes its connection (a slow sender holds the budget no longer).
"""

from __future__ import annotations

import errno
import math
import socket
from collections.abc import Callable
from typing import Any, Final

import trio

from ..logging import get_logger
from .address import format_address
from .admission import ConnectionAdmission, Refused
from .connection import Connection
from .connection_state import MAX_IN_FLIGHT_REQUESTS
from .input_budget import (
    INPUT_RESERVE_BYTES,
    MIN_MAX_BUFFERED_INPUT_BYTES,
)
from .processors import ProcessorTable
from .sockets import (
    InputShare,
    close_socket,
    listen_socket,
    try_accept,
)

#: Connections a server keeps open at once (``serverMaxConnections``).
DEFAULT_MAX_CONNECTIONS: Final = 10_000
#: Connections one peer address may hold open at once (``serverMaxConnectionsPerAddress``):
#: a tenth of the node's, so one address cannot fill it, and far more than one machine's
#: clients use (a client instance opens one connection per NameServer and at most two per
#: broker; every node and client of ``rmq-cluster up`` connects from 127.0.0.1).
DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: Final = 1_000
#: Bytes a server's connections may hold in partial frames (``serverMaxBufferedInputBytes``).
DEFAULT_MAX_BUFFERED_INPUT_BYTES: Final = 256 * 1024 * 1024
#: A frame must be complete this long after its first bytes arrived
#: (``serverPartialFrameTimeoutSeconds``).
DEFAULT_PARTIAL_FRAME_TIMEOUT_S: Final = 30.0
#: Refused connections are logged at most once per this long (with the count so far).
REFUSED_LOG_INTERVAL_S: Final = 10.0
#: RocketMQ closes server-side connections idle this long (clients heartbeat every 30 s).
DEFAULT_IDLE_TIMEOUT_S: Final = 120.0
#: Pending connections the kernel queues for accept.
LISTEN_BACKLOG: Final = 1024
#: Pause after accept fails for lack of file descriptors or memory.
ACCEPT_BACKOFF_S: Final = 0.1


class RemotingServer:
    """Serves a ``ProcessorTable`` on one or more ports (a broker: its listen and fast ports)."""

    def __init__(
        self,
        table: ProcessorTable,
        *,
        node: str = "server",
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT_S,
        on_connect: Callable[[Connection], None] | None = None,
        on_close: Callable[[Connection], None] | None = None,
        max_in_flight: int = MAX_IN_FLIGHT_REQUESTS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_connections_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
        max_buffered_input_bytes: int = DEFAULT_MAX_BUFFERED_INPUT_BYTES,
        partial_frame_timeout: float = DEFAULT_PARTIAL_FRAME_TIMEOUT_S,
    ) -> None:
        if not partial_frame_timeout > 0:
            raise ValueError(f"partial_frame_timeout must be positive, got {partial_frame_timeout}")
        self.table = table
        self.node = node
        self.idle_timeout = idle_timeout
        self.max_in_flight = max_in_flight
        self._admission = ConnectionAdmission(max_connections, max_connections_per_address)
        self.partial_frame_timeout = partial_frame_timeout
        self.log = get_logger(node=node)
        if max_buffered_input_bytes < MIN_MAX_BUFFERED_INPUT_BYTES:
            self.log.warning(
                "input cap raised to its minimum (one frame of the largest size beside the "
                "reserve for small frames)",
                asked=max_buffered_input_bytes, minimum=MIN_MAX_BUFFERED_INPUT_BYTES,
            )
            max_buffered_input_bytes = MIN_MAX_BUFFERED_INPUT_BYTES
        self.max_buffered_input_bytes = max_buffered_input_bytes
        self._input = InputShare(max_buffered_input_bytes, INPUT_RESERVE_BYTES)
        self._on_connect = on_connect
        self._on_close = on_close
        self._connections: set[Connection] = set()
        self._by_host: dict[str, set[Connection]] = {}  # the open connections of each address
        #: per event (a refusal reason, or an eviction): its count when it was last logged, and
        #: when
        self._logged: dict[Refused | str, int] = {}
        self._logged_at: dict[Refused | str, float] = {}
        #: Connections closed because a frame stayed incomplete ``partial_frame_timeout``.
        self.partial_frame_timeouts = 0

    @property
    def connections(self) -> frozenset[Connection]:
        return frozenset(self._connections)

    @property
    def max_connections(self) -> int:
        return self._admission.max_connections

    @property
    def max_connections_per_address(self) -> int:
        return self._admission.max_per_address

    @property
    def refused_connections(self) -> int:
        """Connections closed at once because ``max_connections`` were open."""
        return self._admission.refused[Refused.NODE_FULL]

    @property
    def refused_connections_per_address(self) -> int:
        """Connections closed at once because their address held ``max_connections_per_address``."""
        return self._admission.refused[Refused.ADDRESS_FULL]

    @property
    def evicted_connections(self) -> int:
        """Connections closed at the node's limit to let in one from an address holding fewer."""
        return self._admission.evictions

    @property
    def buffered_input_bytes(self) -> int:
        """Bytes charged now for the partial frames of this server's connections."""
        return self._input.used

    @property
    def buffered_input_peak_bytes(self) -> int:
        """The most ever charged at once (never above ``max_buffered_input_bytes``)."""
        return self._input.peak

    @property
    def input_pauses(self) -> int:
        """Reads that waited for room in the input budget."""
        return self._input.pauses

    def runtime_info(self) -> dict[str, str]:
        """The remoting figures for a broker's runtime info (our keys, not RocketMQ's)."""
        return {
            "remotingConnections": str(len(self._connections)),
            "remotingMaxConnections": str(self.max_connections),
            "remotingRefusedConnections": str(self.refused_connections),
            "remotingMaxConnectionsPerAddress": str(self.max_connections_per_address),
            "remotingRefusedConnectionsPerAddress": str(self.refused_connections_per_address),
            "remotingEvictedConnections": str(self.evicted_connections),
            "remotingBufferedInputBytes": str(self._input.used),
            "remotingBufferedInputPeakBytes": str(self._input.peak),
            "remotingMaxBufferedInputBytes": str(self.max_buffered_input_bytes),
            "remotingInputPauses": str(self._input.pauses),
            "remotingPartialFrameTimeouts": str(self.partial_frame_timeouts),
        }

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
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, _type, _proto, _canon, sockaddr = infos[0]
        try:
            lsock = listen_socket(family, sockaddr, LISTEN_BACKLOG)
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot listen on {format_address(host, port)}: {exc.strerror}"
            ) from None
        sockname = lsock.getsockname()
        bound = (sockname[0], sockname[1])
        self.log.info("listening", address=format_address(*bound))
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._close_stale_partial_frames)
                task_status.started(bound)
                await self._accept_loop(lsock, nursery)
        finally:
            close_socket(lsock)

    async def _accept_loop(self, lsock: socket.socket, nursery: trio.Nursery) -> None:
        while True:
            await trio.lowlevel.wait_readable(lsock)
            while True:
                try:
                    sock = try_accept(lsock)
                except OSError as exc:
                    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        self.log.error("accept failed, backing off", error=str(exc))
                        await trio.sleep(ACCEPT_BACKOFF_S)  # a pause, not a wait on a condition
                        break
                    if exc.errno in (errno.EBADF, errno.EINVAL, errno.ENOTSOCK):
                        raise  # the listening socket itself is gone
                    # errors pending on that one new connection (reset, timed out, ...)
                    self.log.debug("accept skipped a failed connection", error=str(exc))
                    continue
                if sock is None:  # none left: wait for more
                    break
                await self._admit(sock, nursery)

    async def _admit(self, sock: socket.socket, nursery: trio.Nursery) -> None:
        """Serve ``sock``, or close it at once when a connection limit refuses its address (a
        frame would be of no use: a client matches answers to its requests, and has sent none
        yet). At the node's limit, make room by closing a connection of an address that holds
        at least two more."""
        try:
            host = str(sock.getpeername()[0])
        except OSError:  # the peer already vanished
            sock.close()
            return
        limits = self._admission
        victim = self._fair_share_victim(host) if limits.open >= limits.max_connections else None
        refused = limits.admit(host, evicting=victim is not None)
        if refused is None:
            if victim is not None:
                self._log_limited("evicted", "connection limit reached, closing the connection "
                                  "idle longest of the address holding the most",
                                  limits.evictions, evicted=victim.peer, remote_host=host)
                victim.close_reason = "evicted: the node is full and its address holds the most"
                await victim.aclose()
            nursery.start_soon(self._handle_socket, sock, host)
            return
        sock.close()
        self._log_limited(refused, "connection limit reached, refusing connections",
                          limits.refused[refused], limit=refused.value, remote_host=host)

    def _fair_share_victim(self, host: str) -> Connection | None:
        """The open connection idle longest of the address holding the most, if that address
        holds at least two more than ``host``."""
        heaviest = self._admission.fair_share_victim(host)
        if heaviest is None:
            return None
        live = [c for c in self._by_host.get(heaviest, ()) if not c.is_closed]
        return min(live, key=lambda c: c.last_read, default=None)

    def _log_limited(self, what: Refused | str, message: str, count: int, **fields: Any) -> None:
        """Log ``message`` at most every REFUSED_LOG_INTERVAL_S per ``what`` (with its count)."""
        now = trio.current_time()
        if now - self._logged_at.get(what, -math.inf) < REFUSED_LOG_INTERVAL_S:
            return
        limits = self._admission
        self.log.warning(
            message, max_connections=limits.max_connections,
            max_connections_per_address=limits.max_per_address, count=count,
            since_last_log=count - self._logged.get(what, 0), **fields,
        )
        self._logged_at[what] = now
        self._logged[what] = count

    async def _close_stale_partial_frames(self) -> None:
        """Close the connections whose frame is still incomplete ``partial_frame_timeout``
        after it started. Looks when the oldest partial frame is due, at most 8 times per
        timeout (a connection goes at most 1/8 of the timeout late)."""
        share = self._input
        timeout = self.partial_frame_timeout
        while True:
            partial = share.partial
            if not partial:
                if share.partial_added is None:
                    share.partial_added = trio.Event()
                await share.partial_added.wait()
                continue
            now = trio.current_time()
            due = min(partial.values()) + timeout
            if due > now:
                await trio.sleep_until(max(due, now + timeout / 8))
                continue
            stale = [conn for conn, since in partial.items() if since + timeout <= now]
            for conn in stale:
                partial.pop(conn, None)  # (whatever happens next: this loop moves on)
                if conn.is_closed:
                    continue
                self.partial_frame_timeouts += 1
                reason = f"frame incomplete for {timeout:g}s"
                conn.close_reason = conn.close_reason or reason
                conn.log.warning(
                    "closing connection: frame incomplete in time",
                    timeout_s=timeout, buffered=conn._decoder.buffered,
                )
                await conn._abort(reason)
            await trio.lowlevel.checkpoint()

    async def _handle_socket(self, sock: socket.socket, host: str) -> None:
        try:
            await self._serve_socket(sock, host)
        finally:
            self._admission.closed(host)

    async def _serve_socket(self, sock: socket.socket, host: str) -> None:
        try:
            conn = Connection(
                sock, self.table, node=self.node, max_in_flight=self.max_in_flight,
                input_share=self._input,
            )
        except OSError:  # the peer vanished between accept and getpeername
            sock.close()
            return
        self._connections.add(conn)
        peers = self._by_host.setdefault(host, set())
        peers.add(conn)
        conn.log.debug("connection accepted")
        try:
            if self._on_connect is not None:
                self._on_connect(conn)
            await conn.run(idle_timeout=self.idle_timeout)
        except Exception:  # a bug in one connection must not take the server down
            conn.log.exception("connection failed")
        finally:
            with trio.CancelScope(shield=True):
                await conn.aclose()  # a no-op after run(); closes it if run() never started
            self._connections.discard(conn)
            peers.discard(conn)
            if not peers:
                self._by_host.pop(host, None)
            conn.log.debug("connection closed", reason=conn.close_reason)
            if self._on_close is not None:
                try:
                    self._on_close(conn)
                except Exception:
                    conn.log.exception("on_close callback failed")


async def serve_table(
    table: ProcessorTable,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    node: str = "server",
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
    **kwargs: Any,
) -> None:
    """Convenience: ``RemotingServer(table, ...).serve(host, port)``."""
    server = RemotingServer(table, node=node, **kwargs)
    await server.serve(host, port, task_status=task_status)
