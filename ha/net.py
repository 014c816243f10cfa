"""Raw non-blocking sockets with trio waits for the HA streams (the same approach as
``cluster/remoting/sockets.py``: a receive or send that can complete at once costs no scheduler
trip).
"""

from __future__ import annotations

import contextlib
import socket
from typing import Final

import trio

from rmq_cluster.cluster.remoting.sockets import connect_socket

#: Bytes asked of the socket per receive (the slave decodes every frame in them at once).
HA_READ_CHUNK_BYTES: Final = 256 * 1024
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


class HASocket:
    __slots__ = ("_buf", "_view", "peer", "sock")

    def __init__(self, sock: socket.socket, read_chunk: int = HA_READ_CHUNK_BYTES) -> None:
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, opt, HA_SOCKET_BUFFER_BYTES)
        self.sock = sock
        try:
            host, port = sock.getpeername()[:2]
            self.peer = f"{host}:{port}"
        except OSError:
            self.peer = "?"
        self._buf = bytearray(read_chunk)
        self._view = memoryview(self._buf)

    async def receive(self) -> memoryview:
        """The next bytes (a view valid until the next call); empty at EOF. Always a
        checkpoint: a peer that keeps the socket full cannot starve the other tasks."""
        waited = False
        while True:
            try:
                n = self.sock.recv_into(self._buf)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)
                waited = True
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from exc
            if not waited:
                await trio.lowlevel.checkpoint()
            return self._view[:n]

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            try:
                n = self.sock.send(view)
            except BlockingIOError:
                n = 0
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from exc
            view = view[n:]
            if view:
                with trio.fail_after(HA_WRITE_TIMEOUT_S):
                    await trio.lowlevel.wait_writable(self.sock)

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()


async def connect(host: str, port: int) -> HASocket:
    """Connect as the remoting layer does (``cluster/remoting/sockets.connect_socket``: every
    address getaddrinfo gives, non-blocking), bounded by HA_CONNECT_TIMEOUT_S."""
    try:
        with trio.fail_after(HA_CONNECT_TIMEOUT_S):
            return HASocket(await connect_socket(host, port))
    except trio.TooSlowError:
        raise OSError(f"connect to {host}:{port} timed out") from None


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(HA_LISTEN_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def accept(listener: socket.socket) -> socket.socket:
    while True:
        try:
            conn, _addr = listener.accept()
            return conn
        except BlockingIOError:
            await trio.lowlevel.wait_readable(listener)
