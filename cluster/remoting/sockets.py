"""The non-blocking socket layer of remoting: plain stdlib sockets driven with trio waits.

A send or receive that can complete at once does so without a trip through the scheduler (trio's
SocketStream yields after every operation, which doubles the cost of a small request); only
when the kernel has nothing (or no room) does a task park in ``wait_readable`` /
``wait_writable``. ``InputShare`` adds to the pure ``InputBudget`` the one receive buffer the
connections of a server (or client pool) share and the events readers wait on for room.

Nothing here knows frames: the HA channel (ha/connection.py) could sit on ``Socket`` as well
(its reads are framed by the HA protocol, its budget a separate ``InputShare``).
"""

from __future__ import annotations

import errno
import select
import socket
import sys

import trio

from rmq_cluster.cluster.remoting.input_budget import READ_CHUNK_BYTES, InputBudget, InputCharge


class InputShare(InputBudget):
    """An ``InputBudget`` with the one receive buffer its connections share (each decoder copies
    what it keeps before the next receive of any of them) and the events its waiters park on."""

    __slots__ = ("buf", "partial_added", "room", "view")

    def __init__(self, cap: int = sys.maxsize, reserve: int = 0) -> None:
        super().__init__(cap, reserve)
        self.buf = bytearray(READ_CHUNK_BYTES)
        self.view = memoryview(self.buf)
        self.partial_added: trio.Event | None = None  # a sweeper waits for a first partial
        self.room: trio.Event | None = None  # readers wait on it for room

    def freed(self) -> None:
        room = self.room
        if room is not None:
            self.room = None
            room.set()

    def partial_started(self) -> None:
        if self.partial_added is not None:
            self.partial_added.set()
            self.partial_added = None

    async def wait_room(self) -> None:
        self.pauses += 1
        if self.room is None:
            self.room = trio.Event()
        await self.room.wait()


class Socket(InputCharge):
    """A connected non-blocking TCP socket with trio waits (the only place bytes hit the
    kernel), and its connection's charge in the input budget."""

    __slots__ = ("_buf", "_poll", "_view", "share", "sock")

    def __init__(self, sock: socket.socket, share: InputShare | None = None) -> None:
        super().__init__()
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.share = share = share if share is not None else InputShare()
        self._buf, self._view = share.buf, share.view
        self._poll: select.poll | None = None

    def readable_now(self) -> bool:
        """Whether a read would return at once (bytes, EOF or an error are waiting)."""
        if self._poll is None:
            self._poll = select.poll()
            self._poll.register(self.sock.fileno(), select.POLLIN)
        return bool(self._poll.poll(0))

    async def receive(self, wait_first: bool = False) -> tuple[memoryview, bool]:
        """The next bytes (a view valid until the next call; empty at EOF), and whether it
        waited. ``wait_first``: the last read drained the socket (wait before reading)."""
        waited = False
        if wait_first:
            try:
                await trio.lowlevel.wait_readable(self.sock)
            except (OSError, ValueError) as exc:  # closed under us (fd -1)
                raise trio.ClosedResourceError(str(exc)) from exc
            waited = True
        share = self.share
        while True:
            limit = READ_CHUNK_BYTES  # the budget is checked right before the read
            if (share.used > share.tight_above or self.want) and not self.grant:
                while not (limit := share.room_for_read(self)):
                    if self.sock.fileno() < 0:
                        raise trio.ClosedResourceError("socket closed while waiting for room")
                    await share.wait_room()
                waited = True
            try:
                n = self.sock.recv_into(self._buf, limit)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)
                waited = True
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from exc
            return self._view[:n], waited

    def try_send(self, data: bytes | bytearray | memoryview) -> int:
        """Send what the kernel takes now; the number of bytes taken (0 if it would block)."""
        try:
            return self.sock.send(data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc

    def interrupt(self) -> None:
        """Wake the tasks waiting on this socket with ``ClosedResourceError`` without closing it
        (a timed-out lone call). Relies on trio's ``notify_closing`` leaving an fd that stays
        open usable (trio 0.35; tests/integration/test_net_lending.py checks it)."""
        if self.sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self.sock)

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self.sock)  # wakes a task parked in wait_* on it
            self.sock.close()


async def connect_socket(host: str, port: int) -> socket.socket:
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    last: OSError | None = None
    for family, type_, proto, _canon, sockaddr in infos:
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            try:
                sock.connect(sockaddr)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    raise OSError(err, f"{errno.errorcode.get(err, err)}: connect failed") from None
            return sock
        except OSError as exc:
            sock.close()
            last = exc
        except BaseException:
            sock.close()
            raise
    raise last or OSError(f"no address for {host}")
