"""The HA streams on the one socket layer (``cluster/remoting/sockets.py``): a receive or send
that can complete at once costs no scheduler trip. What HA sets differently from remoting: a
256 KiB receive buffer per socket (the slave decodes every frame in it at once) and no input
budget, bigger kernel buffers, its own write timeout, and a checkpoint after every read that did
not wait.
"""

from __future__ import annotations

import socket
from typing import Final

import trio

from ..cluster.remoting.sockets import (
    InputShare,
    StreamSocket,
    accept,
    connect_socket,
    listen_socket,
)

#: Bytes asked of the socket per receive (the slave decodes every frame in them at once).
HA_READ_CHUNK_BYTES: Final = 256 * 1024
#: A master's read buffer per connection: it reads a 32-byte handshake answer and 8-byte
#: offset reports only (a 256 KiB buffer apiece let each unanswered handshake hold 256 KiB).
HA_REPORT_READ_CHUNK_BYTES: Final = 4 * 1024
#: A send that cannot progress this long means the peer stopped reading.
HA_WRITE_TIMEOUT_S: Final = 30.0
HA_CONNECT_TIMEOUT_S: Final = 3.0
HA_LISTEN_BACKLOG: Final = 128
#: Kernel socket buffers for the replication stream.
HA_SOCKET_BUFFER_BYTES: Final = 1024 * 1024

#: Errors that end one HA connection (and only it): socket failures, timeouts, bad bytes
#: (HAProtocolError is a ValueError), and a slave's append_raw refusing an offset (ValueError).
CONNECTION_ERRORS: Final = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
    OSError,
    ValueError,
)

__all__ = [
    "CONNECTION_ERRORS", "HA_CONNECT_TIMEOUT_S", "HA_LISTEN_BACKLOG", "HA_READ_CHUNK_BYTES",
    "HA_REPORT_READ_CHUNK_BYTES",
    "HA_SOCKET_BUFFER_BYTES", "HA_WRITE_TIMEOUT_S", "HASocket", "accept", "connect", "listen",
]


class HASocket(StreamSocket):
    """One HA stream: reads into a buffer of its own (an uncapped share nobody else reads
    into: the reader never waits for room), sends with ``HA_WRITE_TIMEOUT_S``."""

    __slots__ = ("peer",)

    write_timeout_s = HA_WRITE_TIMEOUT_S

    def __init__(self, sock: socket.socket, read_chunk: int = HA_READ_CHUNK_BYTES) -> None:
        super().__init__(
            sock, InputShare(read_bytes=read_chunk), kernel_buffer_bytes=HA_SOCKET_BUFFER_BYTES
        )
        try:
            host, port = sock.getpeername()[:2]
            self.peer = f"{host}:{port}"
        except OSError:
            self.peer = "?"

    async def receive(self) -> memoryview:
        """The next bytes (a view valid until the next call); empty at EOF. Always a
        checkpoint: a peer that keeps the socket full cannot starve the other tasks."""
        data, waited = await self.read()
        if not waited:
            await trio.lowlevel.checkpoint()
        return data


async def connect(host: str, port: int) -> HASocket:
    """Connect as the remoting layer does (``connect_socket``: every address getaddrinfo gives,
    non-blocking), bounded by HA_CONNECT_TIMEOUT_S."""
    try:
        with trio.fail_after(HA_CONNECT_TIMEOUT_S):
            return HASocket(await connect_socket(host, port))
    except trio.TooSlowError:
        raise OSError(f"connect to {host}:{port} timed out") from None


def listen(host: str, port: int) -> socket.socket:
    """The HA listener on ``host:port`` (an IPv6 literal binds IPv6)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return listen_socket(family, (host, port), HA_LISTEN_BACKLOG)
