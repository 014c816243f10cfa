"""The one non-blocking socket layer of the nodes (remoting and HA): plain stdlib sockets driven
with trio waits, the only place their bytes hit the kernel.

A send or receive that can complete at once does so without a trip through the scheduler (trio's
SocketStream yields after every operation, which doubles the cost of a small request); only
when the kernel has nothing (or no room) does a task park in ``wait_readable`` /
``wait_writable``.

The primitives are written once, here: ``StreamSocket`` (socket options, the reader
``read``, ``try_send``, ``try_sendmsg``, ``send_all`` with a write timeout, ``interrupt`` /
``close``) and the functions ``connect_socket``, ``listen_socket``, ``try_accept`` / ``accept`` and
``close_socket``. A socket reads into the buffer of its ``InputShare`` and under its input
budget (the pure ``InputBudget`` with the buffer and the events readers wait on for room):

* remoting's ``Socket``: the connections of a server (or client pool) share one share, so one
  64 KiB buffer (each decoder copies what it keeps before the next receive of any of them) and
  the budget ``serverMaxBufferedInputBytes``;
* HA's ``HASocket`` (ha/net.py): a share of its own with a 256 KiB buffer and no cap (its frames
  are bounded by the HA protocol), bigger kernel buffers, its own write timeout, and a
  checkpoint after a read that did not wait.

Nothing here knows frames.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import sys
from typing import ClassVar, Final

import trio

from .input_budget import READ_CHUNK_BYTES, InputBudget, InputCharge

#: A ``send_all`` that cannot progress this long means the peer stopped reading.
WRITE_TIMEOUT_S: Final = 30.0


class InputShare(InputBudget):
    """An ``InputBudget`` with the one receive buffer its sockets share (each reader copies what
    it keeps before the next receive of any of them) and the events its waiters park on."""

    __slots__ = ("buf", "partial_added", "room", "view")

    def __init__(
        self, cap: int = sys.maxsize, reserve: int = 0, read_bytes: int = READ_CHUNK_BYTES
    ) -> None:
        super().__init__(cap, reserve)
        self.buf = bytearray(read_bytes)  # a read asks for all of it unless the budget is tight
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


def configure_socket(sock: socket.socket, kernel_buffer_bytes: int = 0) -> None:
    """Non-blocking, TCP_NODELAY (TCP only), and ``kernel_buffer_bytes`` asked for SO_SNDBUF and
    SO_RCVBUF when given (a kernel that refuses keeps its own)."""
    sock.setblocking(False)
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if kernel_buffer_bytes:
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, opt, kernel_buffer_bytes)


def close_socket(sock: socket.socket) -> None:
    """Close ``sock`` (once), waking the tasks parked in ``wait_*`` on it first."""
    if sock.fileno() >= 0:
        trio.lowlevel.notify_closing(sock)
        sock.close()


class StreamSocket(InputCharge):
    """A connected non-blocking stream socket with trio waits, and its charge in its share's
    input budget. ``write_timeout_s``: how long ``send_all`` waits for the peer to take more."""

    __slots__ = ("_buf", "_poll", "_view", "share", "sock")

    write_timeout_s: ClassVar[float] = WRITE_TIMEOUT_S

    def __init__(
        self, sock: socket.socket, share: InputShare | None = None, *,
        kernel_buffer_bytes: int = 0,
    ) -> None:
        super().__init__()
        configure_socket(sock, kernel_buffer_bytes)
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

    async def read(self, wait_first: bool = False) -> tuple[memoryview, bool]:
        """The next bytes (a view of the share's buffer, valid until its next read; empty at
        EOF), and whether it waited (for bytes or for room). ``wait_first``: the last read
        drained the socket (wait before reading). The hot path of every node: keep it flat."""
        waited = False
        if wait_first:
            try:
                await trio.lowlevel.wait_readable(self.sock)
            except (OSError, ValueError) as exc:  # closed under us (fd -1)
                raise trio.ClosedResourceError(str(exc)) from exc
            waited = True
        share = self.share
        while True:
            limit = 0  # the whole buffer; the budget is checked right before the read
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

    def try_sendmsg(self, buffers: list[bytes | bytearray | memoryview]) -> int:
        """``try_send`` of ``buffers`` in order, in one scatter-gather ``sendmsg`` (no copy
        into one buffer); the number of bytes taken (0 if it would block)."""
        try:
            return self.sock.sendmsg(buffers)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send all of ``data``, waiting for room as needed; ``trio.TooSlowError`` when the
        peer takes nothing for ``write_timeout_s``."""
        view = memoryview(data)
        sock = self.sock
        while view:
            try:
                n = sock.send(view)
            except BlockingIOError:
                n = 0
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from exc
            view = view[n:]
            if view:
                with trio.fail_after(self.write_timeout_s):
                    await trio.lowlevel.wait_writable(sock)

    def interrupt(self) -> None:
        """Wake the tasks waiting on this socket with ``ClosedResourceError`` without closing it
        (a timed-out lone call). Relies on trio's ``notify_closing`` leaving an fd that stays
        open usable (trio 0.35; tests/integration/test_net_lending.py checks it)."""
        if self.sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self.sock)

    def close(self) -> None:
        close_socket(self.sock)


class Socket(StreamSocket):
    """A remoting connection's socket: reads into the buffer its server's (or client pool's)
    connections share, under their input budget."""

    __slots__ = ()

    receive = StreamSocket.read  # the same function: no call layer on the hot path


async def connect_socket(host: str, port: int) -> socket.socket:
    """A connected non-blocking socket to ``host:port``: every address getaddrinfo gives, in
    turn, until one connects (the last error otherwise)."""
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


def listen_socket(family: int, address: tuple[object, ...], backlog: int) -> socket.socket:
    """A non-blocking TCP listener bound to ``address`` (SO_REUSEADDR); closed again if any
    step fails."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def try_accept(listener: socket.socket) -> socket.socket | None:
    """A connection the kernel has ready, or None (raises what ``accept`` raises otherwise)."""
    try:
        return listener.accept()[0]
    except BlockingIOError:
        return None


async def accept(listener: socket.socket) -> socket.socket:
    """The next connection, waiting for one as needed."""
    while (sock := try_accept(listener)) is None:
        await trio.lowlevel.wait_readable(listener)
    return sock
