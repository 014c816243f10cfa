"""Trio shell for the remoting protocol: the server, the client pool, and the connection both share.

A ``Connection`` is symmetric: it reads frames, hands requests to a ``Dispatcher`` (one task per
request, so a held request such as a long poll never blocks the others), matches responses to
pending calls by opaque (in any order), and writes frames through one coalescing writer.

Sockets are plain non-blocking stdlib sockets driven with ``trio.lowlevel.wait_readable`` /
``wait_writable``: a send or receive that can complete at once does so without a trip through the
scheduler (trio's SocketStream yields after every operation, which doubles the cost of a small
request). Writes coalesce: a frame is sent at once when it is the only one ready; when several are
ready (many requests in flight), they are gathered and flushed by one ``send`` at the end of the
scheduling batch.

Both sides can call the other: a broker uses the server-side connection of a client to send it
NOTIFY_CONSUMER_IDS_CHANGED or CHECK_TRANSACTION_STATE exactly as the client calls the broker.

Calls made one at a time (a sync producer) read their own responses: a connection this end
opened, whose calls have all been answered and whose peer sent no request lately, parks its
reader and lends the socket to lone calls: the next call made alone sends, then reads in its own
task until its answer, handling whatever else arrives as the reader would (and handing the
reading back to the reader when something has to be waited for). A round trip then wakes one task,
not two (the reader, then the caller).

Memory is bounded per server (``RemotingServer``): a connection owns no read buffer (every
connection of a server, or of a client pool, receives into the one buffer of their
``_InputShare`` and the decoder copies what it keeps), the server accepts at most
``max_connections`` (more are closed at once, counted and logged at a limited rate), and the
bytes its connections hold in partial frames stay under ``max_buffered_input_bytes``. A frame
longer than ``SMALL_FRAME_BYTES`` is admitted whole before it is read past its first chunk (its
size, with the decoder buffer's growth, is reserved): an admitted frame always has room to
complete, one that does not fit waits unread in the kernel (TCP backpressure, nothing lost)
until frames complete. Small frames and the first chunk of any frame read from the whole cap,
big frames only from the cap less ``INPUT_RESERVE_BYTES``, so big partial frames never starve
the small requests of other connections. A frame that is still incomplete
``partial_frame_timeout`` seconds after it started closes its connection (a slow sender, or one
that sends a frame's start and stops, holds the budget no longer).
"""

from __future__ import annotations

import array
import bisect
import contextlib
import errno
import inspect
import math
import select
import socket
import struct
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final, cast

import attrs
import trio

from rmq_cluster.cluster.logging import get_logger
from rmq_cluster.cluster.remoting.codec import (
    MAX_FRAME_BYTES,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    encode_into,
)
from rmq_cluster.cluster.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode

#: Bytes asked of the socket per receive; every complete frame in them is decoded at once. Big
#: enough to batch (~60 1 KiB requests), small enough that both peers work in parallel: with
#: 256 KiB reads two processes took turns on whole 256-request batches (measured: 36k vs 74k req/s).
READ_CHUNK_BYTES: Final = 64 * 1024
#: Connections a server keeps open at once (``serverMaxConnections``); one more is closed as
#: soon as it is accepted (a client sees its connection closed, as when RocketMQ's server
#: drops a channel), counted in ``RemotingServer.refused_connections``.
DEFAULT_MAX_CONNECTIONS: Final = 10_000
#: Bytes a server's connections may hold in partial frames, all together
#: (``serverMaxBufferedInputBytes``); over it, reads pause (see the module docstring).
DEFAULT_MAX_BUFFERED_INPUT_BYTES: Final = 256 * 1024 * 1024
#: Part of the input cap that frames longer than ``SMALL_FRAME_BYTES`` never use: small
#: requests keep being read while big frames fill the rest.
INPUT_RESERVE_BYTES: Final = 4 * 1024 * 1024
#: A frame up to this long is read without admission (it fits in one read).
SMALL_FRAME_BYTES: Final = READ_CHUNK_BYTES
#: What an admitted frame of ``size`` bytes reserves beyond its size: the decoder buffer's
#: growth (CPython over-allocates a growing bytearray by 1/8) and the read that completes it.
_GRANT_SLACK_BYTES: Final = 4 * READ_CHUNK_BYTES
#: The smallest input cap: one frame of the largest size admitted beside the reserve.
MIN_MAX_BUFFERED_INPUT_BYTES: Final = (
    MAX_FRAME_BYTES + MAX_FRAME_BYTES // 8 + _GRANT_SLACK_BYTES + INPUT_RESERVE_BYTES
)
#: A frame must be complete this long after its first bytes arrived, or its connection closes
#: (``serverPartialFrameTimeoutSeconds``).
DEFAULT_PARTIAL_FRAME_TIMEOUT_S: Final = 30.0
#: Refused connections are logged at most once per this long (with the count so far).
REFUSED_LOG_INTERVAL_S: Final = 10.0
#: Room the input budget must have for a full read of a connection holding no admitted frame:
#: a read of n bytes grows its charge by at most 2n (see ``_Socket.charge``).
_ROOM_FOR_A_CHUNK: Final = 2 * READ_CHUNK_BYTES + 64
_FRAME_LENGTH = struct.Struct(">I")
#: Requests of one connection being processed at once (waiting ones: long polls, flushes,
#: replica acks); past this, requests are answered SYSTEM_BUSY (RocketMQ: a rejected executor).
MAX_IN_FLIGHT_REQUESTS: Final = 65_536
#: RocketMQ's remark when its request executor rejects a request.
OVERLOAD_REMARK: Final = "[OVERLOAD]system busy, start flow control for a while"
#: A busy connection logs its first refusal and then every this many.
BUSY_LOG_EVERY: Final = 1000
#: RocketMQ closes server-side connections idle this long (clients heartbeat every 30 s).
DEFAULT_IDLE_TIMEOUT_S: Final = 120.0
#: RocketMQ's default client call timeout.
DEFAULT_CALL_TIMEOUT_S: Final = 3.0
DEFAULT_CONNECT_TIMEOUT_S: Final = 3.0
#: A send that cannot complete in this long means the peer stopped reading: the connection closes.
WRITE_TIMEOUT_S: Final = 30.0
#: Pending connections the kernel queues for accept.
LISTEN_BACKLOG: Final = 1024
#: Pause after accept fails for lack of file descriptors or memory.
ACCEPT_BACKOFF_S: Final = 0.1
#: Encoded frames waiting for the socket; past this, writers wait for the peer to read.
MAX_OUTBOUND_BUFFER_BYTES: Final = 32 * 1024 * 1024
#: While a connection lends its reading to lone calls (see ``Connection.invoke``), its reader
#: goes back to the socket once a whole period this long passes without a lone call: a request
#: the peer sends between calls (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE) waits at
#: most about twice this long (a lone call meanwhile reads it at once), and so does noticing
#: that the peer closed an idle connection.
LEND_IDLE_S: Final = 0.05
#: A connection lends its reading only when the peer sent no request for this long (a peer that
#: calls us keeps the reader on the socket, so its requests are never held back).
LEND_QUIET_S: Final = 1.0

#: A request processor. ``async def`` processors run in a task of their own (they may wait: long
#: polling, a flush, a call back to the peer); plain ``def`` processors must not block and run
#: inline in the connection's reader, their responses batched into one send per read. A plain
#: ``def`` processor may also return an awaitable (a coroutine) when it finds it must wait after
#: all: the answer is then awaited in a task of its own (a pull with nothing to return yet), or a
#: ``Deferred`` that another task resolves later (no task per request), or ``HELD`` when it put
#: its answer in ``HeldAnswers`` (sent once a watermark passes its key: SYNC_MASTER sends).
AsyncProcessor = Callable[["Connection", RemotingCommand], Awaitable[RemotingCommand | None]]
SyncProcessor = Callable[
    ["Connection", RemotingCommand],
    "RemotingCommand | Awaitable[RemotingCommand | None] | Deferred | Held | None",
]
Processor = AsyncProcessor | SyncProcessor
#: A check run before a processor: None lets the request through, a response refuses it.
ProcessorCheck = Callable[["Connection", RemotingCommand], "RemotingCommand | None"]


def checked(processor: Processor, check: ProcessorCheck) -> Processor:
    """``processor`` behind ``check`` (the ACL guard, the name gate): when ``check`` answers, that
    answer is the response and the processor does not run. A plain processor stays plain (the
    inline fast path), an ``async def`` one stays async."""
    target = getattr(processor, "__call__", processor)  # noqa: B004
    if inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(target):
        async_p = cast(AsyncProcessor, processor)

        async def checked_async(conn: Connection, request: RemotingCommand) -> Any:
            refusal = check(conn, request)
            if refusal is not None:
                return refusal
            return await async_p(conn, request)

        return checked_async
    sync_p = processor

    def checked_sync(conn: Connection, request: RemotingCommand) -> Any:
        refusal = check(conn, request)
        if refusal is not None:
            return refusal
        return sync_p(conn, request)

    return checked_sync


class Deferred:
    """An answer a plain ``def`` processor promises for later, without a task of its own.

    A processor that must wait on something another task will finish (a SYNC_MASTER send
    waiting for a slave's ack) returns a ``Deferred`` and arranges for ``resolve(response)`` to
    be called once from any task of the same Trio run; the connection then queues the response
    and flushes every answer resolved in the same scheduling batch in one send. Costs an object
    and a callback instead of a task per request.
    """

    __slots__ = ("_conn", "_conn_code", "_conn_flag", "_conn_opaque", "_on_done", "done",
                 "response")

    def __init__(self) -> None:
        self._on_done: Callable[[RemotingCommand | None], None] | None = None
        self._conn: Connection | None = None  # the connection to answer on (no callback object)
        # the request's opaque, flag and code: all the answer needs of it (the request itself,
        # its header fields and body, is freed at once, not kept until the answer)
        self._conn_opaque = self._conn_flag = self._conn_code = 0
        self.done = False
        self.response: RemotingCommand | None = None

    def resolve(self, response: RemotingCommand | None) -> None:
        """Deliver the answer (later calls are ignored)."""
        if self.done:
            return
        self.done = True
        self.response = response
        conn = self._conn
        if conn is not None:
            self._conn = None
            conn._deferred_done(self._conn_opaque, self._conn_flag, self._conn_code, response)
            return
        callback, self._on_done = self._on_done, None
        if callback is not None:
            callback(response)

    def _attach(self, callback: Callable[[RemotingCommand | None], None]) -> None:
        if self.done:
            callback(self.response)
        else:
            self._on_done = callback

    def _attach_connection(self, conn: Connection, request: RemotingCommand) -> None:
        """``_attach(partial(conn._deferred_done, ...request))`` without the partial."""
        if self.done:
            conn._deferred_done(request.opaque, request.flag, request.code, self.response)
        else:
            self._conn = conn
            self._conn_opaque = request.opaque
            self._conn_flag = request.flag
            self._conn_code = request.code


class Held:
    """What a processor returns when it put its answer in ``HeldAnswers``: the connection
    counts the request as running until the answer is released."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "HELD"


#: A plain ``def`` processor's answer is in ``HeldAnswers`` (see there).
HELD: Final = Held()


class _HeldQueue:
    """One connection's held answers, oldest first: their encoded frames back to back in
    ``data`` and, per answer, its key, where its frame ends and its deadline (parallel arrays:
    four numbers per answer, no object). ``base``: bytes already taken from the front."""

    __slots__ = ("base", "cuts", "data", "deadlines", "keys")

    def __init__(self) -> None:
        self.data = bytearray()
        self.base = 0
        self.keys = array.array("q")
        self.cuts = array.array("q")
        self.deadlines = array.array("d")

    def take(self, n: int) -> bytearray:
        """The frames of the first ``n`` answers, removed."""
        cut = self.cuts[n - 1] - self.base
        if n == len(self.keys):
            out, self.data = self.data, bytearray()
        else:
            out = self.data[:cut]
            del self.data[:cut]
        self.base += cut
        del self.keys[:n], self.cuts[:n], self.deadlines[:n]
        return out


class HeldAnswers:
    """Answers held back until a watermark reaches their key, or their deadline passes: a
    SYNC_MASTER send's answer waits until a slave acked past the message's end offset.

    ``hold`` encodes the answer at once (as an inline answer is encoded) into its connection's
    queue with its key and deadline; ``release_upto(mark)`` moves every answer whose key is at
    most ``mark`` to its connection's outbound buffer and sends them in one ``send``;
    ``expire(now)`` answers those whose deadline passed with ``expired_answer(answer)`` instead
    (decoded again from the held frame: a rare path keeps nothing per answer). Keys and
    deadlines rise within a connection (a connection's requests are handled in order and their
    keys are assigned in that order), so each release or expiry takes a prefix.

    A held send costs four array appends beside its encoding: no object, callback or task per
    request, and the kept state is bytes and numbers, nothing for the garbage collector.
    """

    def __init__(
        self,
        expired_answer: Callable[[RemotingCommand], RemotingCommand],
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._expired_answer = expired_answer
        self.timeout_s = timeout_s
        #: the clock of deadlines, ``next_deadline`` and ``expire`` (a plain C call per hold:
        #: trio's clock is a Python method, ~0.3 us a send more)
        self.clock = clock
        self._queues: dict[Connection, _HeldQueue] = {}
        #: the smallest key held (inf: none): an ack below it releases nothing, at no cost
        self._min_key: float = math.inf
        self.waiting = 0  # answers held now
        self.held_total = 0  # answers ever held
        self.released_total = 0  # answers released by ``release_upto``
        self.expired_total = 0  # answers ``expire`` rewrote
        #: called when an answer is held while none was (a sweeper that waits for work)
        self.on_busy: Callable[[], None] | None = None
        self.log = get_logger(component="held_answers")

    def hold(self, conn: Connection, opaque: int, response: RemotingCommand, key: int) -> Held:
        """Hold ``response`` (the answer to the request ``opaque`` on ``conn``) until a
        watermark reaches ``key``; return ``HELD`` for the processor to return."""
        if not response.flag & FLAG_RESPONSE:
            response = attrs.evolve(response, flag=response.flag | FLAG_RESPONSE)
        q = self._queues.get(conn)
        if q is None:  # (registered only once its first answer is encoded: never empty)
            q = _HeldQueue()
            encode_into(q.data, response, opaque)
            self._queues[conn] = q
            if key < self._min_key:
                self._min_key = key
        else:  # (its first key is at most this one: the smallest first key stays)
            encode_into(q.data, response, opaque)
        data = q.data
        q.keys.append(key)
        q.cuts.append(q.base + len(data))
        q.deadlines.append(self.clock() + self.timeout_s)
        self.held_total += 1
        self.waiting += 1
        if self.waiting == 1 and self.on_busy is not None:
            self.on_busy()
        return HELD

    def release_upto(self, mark: int) -> int:
        """Send every held answer whose key is at most ``mark``; how many."""
        if mark < self._min_key:
            return 0
        released = 0
        for conn, q in list(self._queues.items()):
            keys = q.keys
            if keys[0] > mark:
                continue
            n = len(keys) if keys[-1] <= mark else bisect.bisect_right(keys, mark)
            frames = q.take(n)
            if not keys:
                del self._queues[conn]
            released += n
            self.waiting -= n
            self.released_total += n
            conn._held_released(frames, n)
        self._reset_min_key()
        return released

    def _reset_min_key(self) -> None:
        self._min_key = min((q.keys[0] for q in self._queues.values()), default=math.inf)

    def expire(self, now: float) -> int:
        """Answer every held answer whose deadline is at most ``now`` with its expired form;
        how many."""
        expired = 0
        for conn, q in list(self._queues.items()):
            deadlines = q.deadlines
            if deadlines[0] > now:
                continue
            n = bisect.bisect_right(deadlines, now)
            frames = q.take(n)
            if not q.keys:
                del self._queues[conn]
            expired += n
            self.waiting -= n
            self.expired_total += n
            out = bytearray()
            try:
                for held in FrameDecoder().feed(frames):
                    encode_into(out, self._expired_answer(held), held.opaque)
            except Exception:  # the caller (a sweeper) must go on: these calls time out
                self.log.exception("held answers not rewritable", answers=n)
                out = bytearray()
            conn._held_released(out, n)
        self._reset_min_key()
        return expired

    def expire_all(self) -> int:
        """Every held answer in its expired form (the watermark will not move again)."""
        return self.expire(math.inf)

    def next_deadline(self) -> float | None:
        """The earliest deadline of a held answer (None: nothing held)."""
        if not self._queues:
            return None
        return min(q.deadlines[0] for q in self._queues.values())


class RemotingError(Exception):
    """Base of the errors a call can raise."""


class RemotingTimeoutError(RemotingError):
    """No response within the call's timeout."""


class RemotingConnectError(RemotingError):
    """The address could not be connected to."""


class RemotingClosedError(RemotingError):
    """The connection closed before the call completed."""


class RemotingUnsentError(RemotingClosedError):
    """The connection was found closed before the request went out: nothing reached the peer,
    so the call may be made again on a new connection (the pools do so once)."""


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


class _InputShare:
    """What the connections of one server (or one client pool) share on the read side: the one
    buffer every socket receives into (a connection's decoder copies what it keeps before the
    next receive of any of them: one 64 KiB buffer instead of one per idle connection), and
    the budget of bytes their partial frames hold (``cap``; a client pool's has none).

    Each connection is charged (``_Socket.charge``) an upper bound of what its decoder holds:
    an admitted big frame its whole grant, any other partial frame twice its length (a
    bytearray's capacity is at most that: CPython shrinks it to size once more than half is
    freed, and grows it by 1/8), nothing once its frames are complete (the decoder's buffer
    is then freed too).
    """

    __slots__ = ("buf", "cap", "partial", "partial_added", "pauses", "peak", "reserve", "room",
                 "tight_above", "used", "view")

    def __init__(self, cap: int = sys.maxsize, reserve: int = 0) -> None:
        self.buf = bytearray(READ_CHUNK_BYTES)
        self.view = memoryview(self.buf)
        self.cap = cap
        #: charged past this, a full read no longer fits: reads look closer (``_room_for_read``)
        self.tight_above = cap - _ROOM_FOR_A_CHUNK
        self.reserve = reserve  # what big frames leave to small ones
        self.used = 0  # bytes charged now, all connections
        self.peak = 0  # the most ever charged at once
        self.pauses = 0  # reads that waited for room
        #: connections holding a partial frame -> when that frame started (trio time)
        self.partial: dict[Connection, float] = {}
        self.partial_added: trio.Event | None = None  # a sweeper waits for a first partial
        self.room: trio.Event | None = None  # readers wait on it for room

    def freed(self) -> None:
        """Charges went down: the readers waiting for room look again."""
        room = self.room
        if room is not None:
            self.room = None
            room.set()

    async def wait_room(self) -> None:
        self.pauses += 1
        if self.room is None:
            self.room = trio.Event()
        await self.room.wait()

    def admit(self, sock: _Socket) -> bool:
        """Reserve the grant ``sock`` waits for, if it fits beside the reserve."""
        grant = sock.want
        used = self.used - sock.charge + grant
        if used > self.cap - self.reserve:
            return False
        self.used = used
        if used > self.peak:
            self.peak = used
        sock.charge = sock.grant = grant
        sock.want = 0
        return True


class _Socket:
    """A connected non-blocking TCP socket with trio waits (the only place bytes hit the kernel).

    Also the read side's share of the input budget (see ``_InputShare``): ``charge`` (bytes
    counted for this connection's partial frame), ``grant`` (what its admitted big frame
    reserved; reads are then unchecked), ``want`` (the grant a big frame waits for: no read
    until admitted), ``frame`` (the partial frame's length with its length word; 0: not known
    yet) and ``head`` (the first bytes of a frame whose length word is incomplete)."""

    __slots__ = ("_buf", "_poll", "_view", "charge", "frame", "grant", "head", "share", "sock",
                 "want")

    def __init__(self, sock: socket.socket, share: _InputShare | None = None) -> None:
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.share = share = share if share is not None else _InputShare()
        self._buf = share.buf  # (shared: see ``_InputShare``)
        self._view = share.view
        self.charge = self.grant = self.want = self.frame = 0
        self.head = b""
        self._poll: select.poll | None = None

    def readable_now(self) -> bool:
        """Whether a read would return at once (bytes, EOF or an error are waiting): one
        ``poll`` with no timeout, no exception when there is nothing."""
        if self._poll is None:
            self._poll = select.poll()
            self._poll.register(self.sock.fileno(), select.POLLIN)
        return bool(self._poll.poll(0))

    async def receive(self, wait_first: bool = False) -> tuple[memoryview, bool]:
        """The next bytes received (a view valid until the next call; empty at EOF), and whether
        it had to wait for them. ``wait_first``: the last read drained the socket, so wait for
        readiness before reading instead of trying a read that would fail (a call answered
        while one response was expected: saves a failing ``recv`` and a trip through the
        scheduler per round trip)."""
        waited = False
        if wait_first:
            try:
                await trio.lowlevel.wait_readable(self.sock)
            except (OSError, ValueError) as exc:  # closed under us (fd -1)
                raise trio.ClosedResourceError(str(exc)) from exc
            waited = True
        share = self.share
        while True:
            # the input budget, checked right before the read (nothing runs in between): a
            # read takes a full chunk unless the budget is tight or a big frame waits for its
            # admission (an admitted one has its room reserved)
            limit = READ_CHUNK_BYTES
            if (share.used > share.tight_above or self.want) and not self.grant:
                limit = await self._room_for_read()
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

    async def _room_for_read(self) -> int:
        """How much the next read may take (> 0), once the budget has room: a big frame waits
        for its admission, anything else for room for a read of at least a byte."""
        share = self.share
        while True:
            if self.sock.fileno() < 0:
                raise trio.ClosedResourceError("socket closed while waiting for input room")
            if self.want:
                if share.admit(self):
                    return READ_CHUNK_BYTES
            else:
                room = share.cap - share.used
                if room >= _ROOM_FOR_A_CHUNK:
                    return READ_CHUNK_BYTES
                limit = (room - 64) >> 1  # a read of n bytes adds at most 2n + 64
                if limit > 0:
                    return limit
            await share.wait_room()

    def try_send(self, data: bytes | bytearray | memoryview) -> int:
        """Send what the kernel takes now; the number of bytes taken (0 if it would block)."""
        try:
            return self.sock.send(data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc

    async def wait_writable(self) -> None:
        await trio.lowlevel.wait_writable(self.sock)

    def interrupt(self) -> None:
        """Wake the tasks waiting on this socket with ``ClosedResourceError`` without closing it.
        Used to end a call whose own task waits on the socket when its deadline passes: a cancel
        scope per call would cost ~5 us, the interrupt costs nothing until it is needed. Trio
        documents ``notify_closing`` as the step before a close; that it works on an fd that
        stays open (waiters woken, the fd unregistered, the next wait registers it again) is
        its epoll/kqueue code as of trio 0.35, which tests/integration/test_net_lending.py
        checks (a timed-out lone call, and a flusher woken mid-send that goes on)."""
        if self.sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self.sock)

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self.sock)  # wakes a task parked in wait_* on it
            self.sock.close()


async def _connect(host: str, port: int) -> socket.socket:
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


@attrs.frozen
class Dispatcher:
    """The processor table keyed by request code, and the processor for any other code."""

    processors: Mapping[int, Processor] = attrs.field(factory=dict)
    default: Processor | None = None
    _is_async: Mapping[int, bool] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        flags = {code: _is_async(p) for code, p in self.processors.items()}
        object.__setattr__(self, "_is_async", flags)

    def lookup(self, code: int) -> tuple[Processor | None, bool]:
        """The processor for ``code`` and whether it is ``async`` (needs a task of its own)."""
        processor = self.processors.get(code)
        if processor is not None:
            return processor, self._is_async[code]
        if self.default is not None:
            return self.default, _is_async(self.default)
        return None, False


def _is_async(processor: Processor) -> bool:
    target = getattr(processor, "__call__", processor)  # noqa: B004 - callables with async __call__
    return inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(target)


class _Pending:
    """One call waiting for its response. The caller parks itself and is rescheduled directly
    by whoever ends the call (response, timeout or close): no Event per call."""

    __slots__ = ("deadline", "done", "error", "reading", "response", "task")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.response: RemotingCommand | None = None
        self.error: RemotingError | None = None
        self.done = False
        self.task: trio.lowlevel.Task | None = None  # set while the caller is parked
        self.reading = False  # the caller reads the socket itself (a lone call)

    def finish(self) -> None:
        self.done = True
        task, self.task = self.task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        if self.done:
            return
        self.task = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self.task = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


class Connection:
    """One TCP connection speaking remoting frames, usable from either end.

    Writing never blocks a caller: frames are encoded into an outbound buffer and sent at once
    when the kernel takes them; what it does not take is sent by a flusher task. Call timeouts
    are kept by one timer task that wakes at the earliest pending deadline (not by a cancel scope
    per call): a call costs a dict entry, and its caller parks itself until the answer.
    """

    def __init__(
        self,
        sock: socket.socket,
        dispatcher: Dispatcher,
        *,
        node: str,
        max_in_flight: int = MAX_IN_FLIGHT_REQUESTS,
        lend_reading: bool = False,
        input_share: _InputShare | None = None,
    ) -> None:
        self._sock = _Socket(sock, input_share)
        self._dispatcher = dispatcher
        try:
            peer = sock.getpeername()
            self.peer = format_address(peer[0], peer[1])
        except OSError:
            self.peer = "?"
        local = sock.getsockname()
        self.local = format_address(local[0], local[1])
        self.log = get_logger(node=node, remote=self.peer, local=self.local)
        self._decoder = FrameDecoder()
        self._pending: dict[int, _Pending] = {}
        self._opaque = 0
        self._timer_deadline = math.inf
        self._timer_scope: trio.CancelScope | None = None
        self._last_read = trio.current_time()
        self._nursery: trio.Nursery | None = None
        self._out = bytearray()
        self._flushing = False  # a flusher task owns the socket's send side
        self._flush_soon = False  # a writer is gathering this batch's frames
        self._deferred_flush = False  # a task will send the answers Deferreds resolved
        self._drained: trio.Event | None = None
        self._max_in_flight = max_in_flight
        self._running = 0  # requests being processed: tasks, unresolved Deferreds, held answers
        self._room: trio.Event | None = None  # the reader waits on it for a request to end
        #: Requests answered SYSTEM_BUSY because max_in_flight were already running.
        self.busy_refusals = 0
        # Lending the reading to lone calls (see invoke): the reader task while it is parked
        # instead of waiting on the socket, the call reading now, and the last read with a
        # request of the peer in it.
        self._lender: trio.lowlevel.Task | None = None
        self._reading_call: _Pending | None = None
        self._reader_wanted = False  # a call ended that needs the reader back on the socket
        # a lone call met a request it could not take without waiting: the request, its
        # Deferred and the rest of that read, for the reader (``_take_stash``)
        # (None, None, rest: a held request took the last room)
        self._stash: (
            tuple[RemotingCommand | None, Deferred | None, list[RemotingCommand]] | None
        ) = None
        #: Lend the reading to lone calls at all: connections this end opened (a server's
        #: connections are there to read its clients' requests without delay).
        self._lends = lend_reading
        self._peer_request_read = -math.inf
        #: Calls that read their own response (lone calls while the reader lent its reading).
        self.lone_calls = 0
        self._closed = False
        self.closed = trio.Event()
        self.close_reason: str | None = None

    def __repr__(self) -> str:
        return f"<Connection {self.local}->{self.peer}>"

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def pending_calls(self) -> int:
        return len(self._pending)

    # ---------------------------------------------------------------- calls from this end

    def _next_opaque(self) -> int:
        self._opaque = (self._opaque + 1) & 0x7FFFFFFF
        return self._opaque

    async def invoke(
        self, request: RemotingCommand, timeout: float = DEFAULT_CALL_TIMEOUT_S
    ) -> RemotingCommand:
        """Send ``request`` and wait for its response (matched by a fresh opaque).

        A call that is alone on a connection whose reader has lent out its reading (only
        connections this end opened do) reads its own response (``_call_reading``): one task
        wakes per round trip instead of the reader and then the caller, which is most of what
        a call costs over a bare socket loop when calls go one at a time (a sync send loop).
        """
        if self._closed:
            raise RemotingUnsentError(f"connection to {self.peer} is closed")
        opaque = self._next_opaque()
        deadline = trio.current_time() + timeout
        slot = _Pending(deadline)
        self._pending[opaque] = slot
        if deadline < self._timer_deadline:
            self._timer_deadline = deadline
            if self._timer_scope is not None:
                self._timer_scope.deadline = deadline
        if self._lender is not None and self._reading_call is None and len(self._pending) == 1:
            try:
                if await self._call_reading(request, opaque, slot):  # handed to the reader
                    await slot.wait()
            finally:
                self._pending.pop(opaque, None)
        else:
            try:
                await self._write(request, opaque, len(self._pending) > 1)
                await slot.wait()
            finally:
                self._pending.pop(opaque, None)
        if slot.response is not None:
            return slot.response
        if slot.error is not None:
            raise slot.error
        raise RemotingTimeoutError(
            f"no response to request code {request.code} from {self.peer} in {timeout:g}s"
        )

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send ``request`` with the oneway bit; nothing comes back."""
        if not request.is_oneway:
            request = attrs.evolve(request, flag=request.flag | FLAG_ONEWAY)
        await self._write(request, self._next_opaque())

    async def _expire_calls(self) -> None:
        """Fail calls whose deadline passed; sleeps until the earliest deadline."""
        while True:
            with trio.CancelScope(deadline=self._timer_deadline) as scope:
                self._timer_scope = scope
                await trio.sleep_forever()
            self._timer_scope = None
            now = trio.current_time()
            earliest = math.inf
            for opaque, slot in list(self._pending.items()):
                if slot.deadline <= now:
                    del self._pending[opaque]
                    slot.finish()  # neither response nor error: the caller reports a timeout
                    if slot.reading:  # its task waits on the socket itself: wake it
                        self._sock.interrupt()
                elif slot.deadline < earliest:
                    earliest = slot.deadline
            self._timer_deadline = earliest

    # ---------------------------------------------------------------- writing

    async def _write(self, cmd: RemotingCommand, opaque: int, gather: bool = False) -> None:
        """Queue one frame and see it on its way.

        ``gather``: more frames are likely to become ready in this scheduling batch (other calls
        or responses in flight), so let them queue up first (one checkpoint) and send them in one
        go. Waits only when the outbound buffer is over its limit (the peer reads too slowly).
        """
        if self._closed:
            raise RemotingClosedError(f"connection to {self.peer} is closed")
        encode_into(self._out, cmd, opaque)
        if gather and not self._flush_soon and not self._flushing:
            self._flush_soon = True
            try:  # not cancellable: the frame is queued and this task owes it a send
                await trio.lowlevel.cancel_shielded_checkpoint()
            finally:
                self._flush_soon = False
        if not self._flush_soon:
            self._send_queued()
        if len(self._out) > MAX_OUTBOUND_BUFFER_BYTES and not self._closed:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()

    def _send_queued(self) -> None:
        """Send what is queued as far as the kernel takes it now; a flusher task does the rest."""
        if self._flushing or not self._out or self._closed:
            return
        chunk, self._out = self._out, bytearray()
        try:
            sent = self._sock.try_send(chunk)
        except trio.BrokenResourceError as exc:
            self._fail_soon(f"send failed: {exc}")
            return
        if sent == len(chunk):
            if self._drained is not None:
                self._drained.set()
                self._drained = None
            return
        if self._nursery is None:
            raise RuntimeError("connection is not running")
        self._flushing = True
        self._nursery.start_soon(self._flusher, memoryview(chunk)[sent:])

    async def _flusher(self, view: memoryview) -> None:
        """Send ``view`` and whatever queues behind it, as the peer makes room."""
        try:
            while not self._closed:
                while view:
                    with trio.move_on_after(WRITE_TIMEOUT_S) as scope:
                        try:
                            await self._sock.wait_writable()
                        except trio.ClosedResourceError:
                            if self._closed:
                                raise
                            continue  # a timed-out call's interrupt, not a close: wait again
                    if scope.cancelled_caught:
                        self.close_reason = f"peer took nothing for {WRITE_TIMEOUT_S:g}s"
                        await self._abort(self.close_reason)
                        return
                    view = view[self._sock.try_send(view) :]
                if self._drained is not None and len(self._out) <= MAX_OUTBOUND_BUFFER_BYTES:
                    self._drained.set()
                    self._drained = None
                if not self._out:
                    return
                chunk, self._out = self._out, bytearray()
                view = memoryview(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ValueError) as exc:
            # ValueError: the socket was closed (fd -1) between scheduling and running
            await self._abort(f"send failed: {exc}")
        finally:
            self._flushing = False

    def _fail_soon(self, reason: str) -> None:
        self.close_reason = self.close_reason or reason
        if self._nursery is not None:
            # RuntimeError: run() is ending, and it aborts the connection on its way out
            with contextlib.suppress(RuntimeError):
                self._nursery.start_soon(self._abort, reason)

    # ---------------------------------------------------------------- reading and serving

    async def run(
        self,
        *,
        idle_timeout: float | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Read and dispatch until the peer closes, a frame is malformed, or it idles."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._expire_calls)
                if idle_timeout is not None:
                    nursery.start_soon(self._close_when_idle, idle_timeout)
                task_status.started()
                try:
                    await self._read_frames(nursery)
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self._abort(self.close_reason or "closed")

    async def _close_when_idle(self, idle_timeout: float) -> None:
        """Close once nothing was read for ``idle_timeout`` and nothing is in flight.

        The reader only stamps ``_last_read``; this task sleeps until that stamp plus the timeout.
        """
        while True:
            await trio.sleep_until(self._last_read + idle_timeout)
            quiet = trio.current_time() - self._last_read >= idle_timeout
            busy = self._pending or self._flushing or self._running
            if quiet and not busy:
                self.close_reason = f"idle for {idle_timeout:g}s"
                self.log.info("closing idle connection", idle_s=idle_timeout)
                await self._abort(self.close_reason)
                return
            if quiet:  # busy with requests: look again a full period from now
                self._last_read = trio.current_time()

    async def _read_frames(self, nursery: trio.Nursery) -> None:
        sock = self._sock
        decoder = self._decoder
        drained = False
        while True:
            try:
                data, waited = await sock.receive(drained)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self.close_reason = self.close_reason or f"read failed: {exc}"
                return
            self._last_read = trio.current_time()
            if not data:
                self.close_reason = self.close_reason or "peer closed"
                return
            try:
                commands = decoder.feed(data)
            except ProtocolError as exc:
                self._malformed(exc)
                return
            if sock.charge or decoder.buffered:  # a partial frame, now or before this read
                self._account_input(data, commands)
            # a read that did not fill the buffer took everything the kernel had: the next
            # read waits for readiness first (no read that would fail, no extra scheduling)
            drained = len(data) < READ_CHUNK_BYTES
            spawned, answered = await self._take(commands, nursery)
            if (
                answered
                and self._lends
                and drained
                and not self._pending
                and not self._running
                and self._last_read - self._peer_request_read > LEND_QUIET_S
            ):
                # A connection this end opened, making calls one at a time, to a quiet peer:
                # the next call reads its own response (``_call_reading``) while this task
                # stays parked.
                await self._lend_reading()
                if self._closed:
                    return
                if self._stash is not None:
                    await self._take_stash(nursery)
                drained = False
            elif not drained and (spawned or commands or not waited):
                # Let the tasks just spawned or woken run (and answer) before this task tries
                # the socket again; also keeps a busy connection from starving the others.
                # (A drained socket is waited on next, which lets them run anyway.)
                await trio.lowlevel.checkpoint()

    async def _take(
        self, commands: list[RemotingCommand], nursery: trio.Nursery, lone: bool = False
    ) -> tuple[bool, bool]:
        """Handle the frames of one read: responses end their calls, requests go to their
        processors (answered inline, deferred, or in a task of their own). Whether a task was
        spawned, and whether a response ended a call.

        ``lone``: a lone call reads (``_call_reading``) and this must not wait in its task (its
        deadline and cancellation would strike mid-batch): a Deferred request that would wait
        for room is left in ``_stash`` with the rest of the batch, and no backpressure wait; the
        call hands the reading back to the reader, which does the waiting."""
        max_in_flight = self._max_in_flight
        lookup = self._dispatcher.lookup
        spawned = answered = False
        for i, cmd in enumerate(commands):
            if cmd.flag & FLAG_RESPONSE:
                self._complete(cmd)
                answered = True
                continue
            self._peer_request_read = self._last_read
            processor, is_async = lookup(cmd.code)
            deferred = None
            if processor is not None and not is_async:
                deferred = self._answer_inline(processor, cmd)
                if deferred is None:
                    continue
                if isinstance(deferred, Held):  # answered when HeldAnswers releases it
                    self._running += 1
                    if self._running > max_in_flight:
                        if lone:  # the reader waits for room, then takes the rest
                            self._stash = (None, None, commands[i + 1 :])
                            break
                        await self._wait_running_at_most(max_in_flight)
                    continue
            if self._running >= max_in_flight:
                # max_in_flight requests of this peer are still running
                if isinstance(deferred, Deferred):
                    if lone:
                        self._stash = (cmd, deferred, commands[i + 1 :])
                        break
                    # already under way elsewhere: wait for room
                    await self._wait_running_at_most(max_in_flight - 1)
                else:
                    close = getattr(deferred, "close", None)
                    if close is not None:
                        close()  # a coroutine that never started
                    self._refuse_busy(cmd)
                    continue
            self._running += 1
            if isinstance(deferred, Deferred):
                deferred._attach_connection(self, cmd)
                continue
            nursery.start_soon(
                self._serve_request, processor, cmd, len(commands) > 1,
                cast("Awaitable[RemotingCommand | None] | None", deferred),
            )
            spawned = True
        self._send_queued()  # every inline answer of this read in one send
        if len(self._out) > MAX_OUTBOUND_BUFFER_BYTES and not self._closed and not lone:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()  # stop reading until the peer reads its answers
        return spawned, answered

    async def _take_stash(self, nursery: trio.Nursery) -> None:
        """The reader takes over what a lone call could not take without waiting."""
        assert self._stash is not None
        cmd, deferred, rest = self._stash
        self._stash = None
        if deferred is None:  # a held request is over the limit: wait until it is not
            await self._wait_running_at_most(self._max_in_flight)
        else:
            await self._wait_running_at_most(self._max_in_flight - 1)
            self._running += 1
            deferred._attach_connection(self, cast(RemotingCommand, cmd))
        if rest:
            await self._take(rest, nursery)

    def _account_input(self, data: memoryview, commands: list[RemotingCommand]) -> None:
        """Charge the input budget for the partial frame the decoder holds after ``data``
        (``commands``: the frames it completed), admitting a big frame when it fits; note when
        the partial frame started (for the partial frame timeout)."""
        if self._closed:  # (its charge was released on close)
            return
        sock = self._sock
        share = sock.share
        old = sock.charge
        held = self._decoder.buffered
        if not held:  # every frame complete: the decoder's buffer is freed too
            sock.charge = sock.grant = sock.want = sock.frame = 0
            sock.head = b""
            share.partial.pop(self, None)
            share.used -= old
            share.freed()
            return
        if commands or not old:  # a frame started in this read: all of it is in ``data``
            sock.grant = sock.want = sock.frame = 0
            start = len(data) - held
            prefix = bytes(data[start : start + 4])
            partial = share.partial
            if not partial and share.partial_added is not None:
                share.partial_added.set()
                share.partial_added = None
            partial[self] = self._last_read
        elif not sock.frame:  # the length word was incomplete: ``data`` continues it
            prefix = sock.head + bytes(data[:4])
        else:
            prefix = b""
        if prefix:
            if len(prefix) >= 4:
                sock.frame = _FRAME_LENGTH.unpack_from(prefix)[0] + 4
                sock.head = b""
            else:
                sock.head = prefix
        if sock.grant:
            charge = sock.grant
        else:
            charge = 2 * held + 64
            frame = sock.frame
            if frame > SMALL_FRAME_BYTES and not sock.want:
                # read no further until the whole frame is admitted (the decoder checked its
                # length against the frame limit, so it fits an empty budget)
                sock.want = frame + frame // 8 + _GRANT_SLACK_BYTES
        sock.charge = charge
        share.used += charge - old
        if sock.want:
            share.admit(sock)  # (or the next read waits for it)
        if share.used > share.peak:
            share.peak = share.used
        if sock.charge < old:
            share.freed()

    def _release_input(self) -> None:
        """The connection closed: its partial frame's charge goes back to the budget."""
        sock = self._sock
        share = sock.share
        share.used -= sock.charge
        sock.charge = sock.grant = sock.want = sock.frame = 0
        share.partial.pop(self, None)
        share.freed()  # (also wakes this connection's reader if it waits for room)

    def _malformed(self, exc: ProtocolError) -> None:
        """A frame could not be decoded: answer what came before it; the connection closes."""
        self.close_reason = f"malformed frame: {exc}"
        self.log.warning("malformed frame, closing connection", reason=str(exc))
        lookup = self._dispatcher.lookup
        for cmd in exc.commands:  # frames before the bad one: answer what can be at once
            if cmd.flag & FLAG_RESPONSE:
                self._complete(cmd)
                continue
            processor, is_async = lookup(cmd.code)
            if (
                processor is not None
                and not is_async
                and isinstance(self._answer_inline(processor, cmd), Held)
            ):
                self._running += 1  # as ``_take`` counts it (its release uncounts it)
        self._send_queued()

    # ---------------------------------------------------------------- lending the reading

    async def _lend_reading(self) -> None:
        """Park the reader while lone calls read their own responses.

        Back on the socket when a lone call ends with other calls or the peer's requests under
        way, hands its reading back or fails (it wakes this task); when a whole ``LEND_IDLE_S``
        passes without a lone call (the peer may send a request or close: this end then
        notices); or on close. (Oneway requests do not count: they never read.)
        """
        self._reader_wanted = False
        while True:
            calls = self.lone_calls
            woken = False
            with trio.move_on_after(LEND_IDLE_S):
                self._lender = trio.lowlevel.current_task()

                def abort(_: Any) -> trio.lowlevel.Abort:
                    self._lender = None
                    return trio.lowlevel.Abort.SUCCEEDED

                await trio.lowlevel.wait_task_rescheduled(abort)
                woken = True
            self._lender = None
            if self._closed:
                return
            if self._reading_call is not None:
                continue  # a call took the reading just after the wake; ask again later
            if woken or self._reader_wanted or self._pending or self.lone_calls == calls:
                self._reader_wanted = False
                return

    def _wake_lender(self) -> None:
        """Put the reader back on the socket (now, or as soon as it runs if it is waking)."""
        task, self._lender = self._lender, None
        if task is not None:
            trio.lowlevel.reschedule(task)
        else:
            self._reader_wanted = True

    async def _call_reading(self, request: RemotingCommand, opaque: int, slot: _Pending) -> bool:
        """A lone call: send, then read the socket in this task until the response (or the
        deadline, or close). Frames for other calls or requests of the peer that arrive
        meanwhile are handled as the reader would (``_take``). True if it handed the reading
        back to the reader instead, because something must be waited for (room for the peer's
        requests, or the outbound buffer over its limit): the caller then waits for its
        response as any call does, still pending.

        Before sending it reads what is already there: a peer that closed while nobody read
        fails the call with ``RemotingUnsentError`` (nothing was sent), as a reader would have
        closed the connection at once and the pool would have opened a new one."""
        self._reading_call = slot
        slot.reading = True
        self.lone_calls += 1
        sock = self._sock
        sent = handed_back = False
        try:
            drained = not sock.readable_now()
            while not slot.done:
                if drained and not sent:
                    if self._closed:
                        break
                    encode_into(self._out, request, opaque)
                    sent = True
                    if not self._flush_soon:
                        self._send_queued()
                    if len(self._out) > MAX_OUTBOUND_BUFFER_BYTES:
                        handed_back = True  # the reader applies the backpressure
                        break
                try:
                    data, _ = await sock.receive(drained)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    if self._closed or slot.done:  # closed, or the deadline interrupted us
                        break
                    self.close_reason = self.close_reason or f"read failed: {exc}"
                    await self._abort(self.close_reason)
                    break
                self._last_read = trio.current_time()
                if not data:
                    self.close_reason = self.close_reason or "peer closed"
                    await self._abort(self.close_reason)
                    break
                try:
                    commands = self._decoder.feed(data)
                except ProtocolError as exc:
                    self._malformed(exc)
                    await self._abort(self.close_reason or "malformed frame")
                    break
                if sock.charge or self._decoder.buffered:
                    self._account_input(data, commands)
                drained = len(data) < READ_CHUNK_BYTES
                if self._closed or self._nursery is None:
                    break
                await self._take(commands, self._nursery, lone=True)
                if self._stash is not None:
                    handed_back = True
                    break
                if not drained:
                    # more is waiting: let other tasks run between 64 KiB reads, as the reader
                    # does (every frame read so far is handled: a cancel here loses nothing)
                    await trio.lowlevel.checkpoint()
        finally:
            slot.reading = False
            self._reading_call = None
            if not handed_back:
                self._pending.pop(opaque, None)
            if (
                slot.response is None
                or self._pending
                or self._running
                or self._closed
                or self._last_read - self._peer_request_read <= LEND_QUIET_S
            ):
                self._wake_lender()  # not a lone call any more: the reader reads again
        if handed_back and not sent:  # the reader took over before this call's turn to send
            await self._write(request, opaque)
        if not sent and not handed_back and self._closed:
            slot.error = RemotingUnsentError(
                f"connection to {self.peer} closed: {self.close_reason}"
            )
        return handed_back

    def _refuse_busy(self, request: RemotingCommand) -> None:
        """Answer SYSTEM_BUSY as RocketMQ does when its request executor rejects a task."""
        self.busy_refusals += 1
        if self.busy_refusals == 1 or self.busy_refusals % BUSY_LOG_EVERY == 0:
            self.log.warning("too many requests in flight, refusing", code=request.code,
                             refused=self.busy_refusals)
        if not request.flag & FLAG_ONEWAY and not self._closed:
            self._queue_response(
                request, _error_response(request, ResponseCode.SYSTEM_BUSY, OVERLOAD_REMARK)
            )

    def _deferred_done(
        self, opaque: int, flag: int, code: int, response: RemotingCommand | None
    ) -> None:
        """A ``Deferred`` answer to the request (``opaque``, ``flag``, ``code``) arrived: queue
        it; one task sends all answers of this batch."""
        self._running -= 1  # _request_ended, inlined (once per deferred answer)
        room = self._room
        if room is not None:
            self._room = None
            room.set()
        if flag & FLAG_ONEWAY or self._closed:
            return
        self._queue_answer(opaque, code, response)
        if not self._deferred_flush and self._nursery is not None:
            self._deferred_flush = True
            try:
                self._nursery.start_soon(self._flush_deferred)
            except RuntimeError:  # the connection is shutting down: nothing more goes out
                self._deferred_flush = False

    async def _flush_deferred(self) -> None:
        self._deferred_flush = False
        self._send_queued()

    def _complete(self, response: RemotingCommand) -> None:
        slot = self._pending.pop(response.opaque, None)
        if slot is None:
            self.log.debug(
                "response for no pending call", opaque=response.opaque, code=response.code
            )
            return
        slot.response = response
        slot.finish()

    def _answer_inline(
        self, processor: SyncProcessor, request: RemotingCommand
    ) -> Awaitable[RemotingCommand | None] | Deferred | Held | None:
        """Run a plain ``def`` processor now. If it hands back an awaitable instead of an answer
        (it must wait: e.g. a pull with nothing to return yet), that is returned to be awaited in
        a task of its own; a ``Deferred`` is returned to be attached (answered when resolved)."""
        try:
            response = processor(self, request)
        except Exception as exc:
            self.log.warning("processor failed", code=request.code, error=repr(exc), exc_info=True)
            response = _error_response(request, ResponseCode.SYSTEM_ERROR, _exception_remark(exc))
        if (
            response is not None
            and type(response) is not RemotingCommand
            and (response is HELD or isinstance(response, Deferred)
                 or inspect.isawaitable(response))
        ):
            return response
        if not request.flag & FLAG_ONEWAY and not self._closed:
            self._queue_response(request, cast("RemotingCommand | None", response))
        return None

    def _queue_response(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        self._queue_answer(request.opaque, request.code, response)

    def _queue_answer(self, opaque: int, code: int, response: RemotingCommand | None) -> None:
        """Encode the answer to the request (``opaque``, ``code``) into the outbound buffer."""
        if response is None:
            response = _error_answer(
                opaque, ResponseCode.SYSTEM_ERROR, f"no response for request code {code}"
            )
        elif not isinstance(response, RemotingCommand):
            response = _error_answer(
                opaque,
                ResponseCode.SYSTEM_ERROR,
                f"processor for code {code} returned {type(response).__name__}",
            )
        elif not response.flag & FLAG_RESPONSE:
            response = attrs.evolve(response, flag=response.flag | FLAG_RESPONSE)
        try:
            encode_into(self._out, response, opaque)
        except Exception as exc:  # e.g. a body over the frame limit: say so instead
            self.log.warning("response not sendable", code=code, error=repr(exc))
            encode_into(
                self._out,
                _error_answer(opaque, ResponseCode.SYSTEM_ERROR, f"response not sendable: {exc}"),
                opaque,
            )

    async def _serve_request(
        self,
        processor: Processor | None,
        request: RemotingCommand,
        gather: bool,
        deferred: Awaitable[RemotingCommand | None] | None = None,
    ) -> None:
        try:
            response: RemotingCommand | None
            if deferred is not None:
                try:
                    response = await deferred
                except Exception as exc:
                    self.log.warning(
                        "processor failed", code=request.code, error=repr(exc), exc_info=True
                    )
                    response = _error_response(
                        request, ResponseCode.SYSTEM_ERROR, _exception_remark(exc)
                    )
            elif processor is None:
                response = _error_response(
                    request,
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    f" request type {request.code} not supported",
                )
            else:
                try:
                    response = await cast(AsyncProcessor, processor)(self, request)
                except Exception as exc:
                    self.log.warning(
                        "processor failed", code=request.code, error=repr(exc), exc_info=True
                    )
                    response = _error_response(
                        request, ResponseCode.SYSTEM_ERROR, _exception_remark(exc)
                    )
            if request.flag & FLAG_ONEWAY or self._closed:
                return
            self._queue_response(request, response)
            if gather and not self._flush_soon and not self._flushing:
                self._flush_soon = True
                try:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                finally:
                    self._flush_soon = False
            if not self._flush_soon:
                self._send_queued()
        finally:
            self._request_ended()

    def _held_released(self, frames: bytearray, n: int) -> None:
        """``HeldAnswers`` released ``n`` answers of this connection's (``frames``, encoded):
        they end their requests and go out in one send."""
        self._request_ended(n)
        if self._closed:
            return
        if self._out:
            self._out += frames
        else:
            self._out = frames
        with contextlib.suppress(RuntimeError):  # shutting down: nothing more goes out
            self._send_queued()

    def _request_ended(self, n: int = 1) -> None:
        self._running -= n
        room = self._room
        if room is not None:
            self._room = None
            room.set()

    async def _wait_running_at_most(self, limit: int) -> None:
        """Until at most ``limit`` requests are running (an ending request sets ``_room``)."""
        while self._running > limit:
            if self._room is None:
                self._room = trio.Event()
            await self._room.wait()

    # ---------------------------------------------------------------- closing

    async def _abort(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        self.close_reason = self.close_reason or reason
        for slot in self._pending.values():
            slot.error = RemotingClosedError(
                f"connection to {self.peer} closed: {self.close_reason}"
            )
            slot.finish()
        self._pending.clear()
        if self._drained is not None:
            self._drained.set()
        self._sock.close()
        self._release_input()
        self._wake_lender()  # a parked reader ends (run() returns)
        self.closed.set()
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        """Close from this end; the reader stops and every pending call fails."""
        self.close_reason = self.close_reason or "closed locally"
        await self._abort(self.close_reason)


def _error_response(request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    """Generic error answers are JSON whatever the request's serialize type (as RocketMQ does)."""
    return _error_answer(request.opaque, code, remark)


def _error_answer(opaque: int, code: int, remark: str) -> RemotingCommand:
    return RemotingCommand(code=int(code), opaque=opaque, flag=FLAG_RESPONSE, remark=remark)


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
        max_in_flight: int = MAX_IN_FLIGHT_REQUESTS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_buffered_input_bytes: int = DEFAULT_MAX_BUFFERED_INPUT_BYTES,
        partial_frame_timeout: float = DEFAULT_PARTIAL_FRAME_TIMEOUT_S,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        if not partial_frame_timeout > 0:
            raise ValueError(f"partial_frame_timeout must be positive, got {partial_frame_timeout}")
        self.dispatcher = dispatcher
        self.node = node
        self.idle_timeout = idle_timeout
        self.max_in_flight = max_in_flight
        self.max_connections = max_connections
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
        self._input = _InputShare(max_buffered_input_bytes, INPUT_RESERVE_BYTES)
        self._on_connect = on_connect
        self._on_close = on_close
        self._connections: set[Connection] = set()
        self._open = 0  # accepted sockets not yet finished (connections, and ones starting)
        #: Connections closed at once because ``max_connections`` were open.
        self.refused_connections = 0
        self._refused_logged = 0  # refusals counted when the last one was logged
        self._refused_logged_at = -math.inf
        #: Connections closed because a frame stayed incomplete ``partial_frame_timeout``.
        self.partial_frame_timeouts = 0

    @property
    def connections(self) -> frozenset[Connection]:
        return frozenset(self._connections)

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
        lsock = socket.socket(family, socket.SOCK_STREAM)
        try:
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            lsock.bind(sockaddr)
            lsock.listen(LISTEN_BACKLOG)
            lsock.setblocking(False)
        except OSError as exc:
            lsock.close()
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
            trio.lowlevel.notify_closing(lsock)
            lsock.close()

    async def _accept_loop(self, lsock: socket.socket, nursery: trio.Nursery) -> None:
        while True:
            await trio.lowlevel.wait_readable(lsock)
            while True:
                try:
                    sock, _addr = lsock.accept()
                except BlockingIOError:
                    break
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
                if self._open >= self.max_connections:
                    self._refuse(sock)
                    continue
                self._open += 1
                nursery.start_soon(self._handle_socket, sock)

    def _refuse(self, sock: socket.socket) -> None:
        """Close a connection over ``max_connections`` at once (a frame would be of no use: a
        client matches answers to its requests, and has sent none yet)."""
        sock.close()
        self.refused_connections += 1
        now = trio.current_time()
        if now - self._refused_logged_at >= REFUSED_LOG_INTERVAL_S:
            self.log.warning(
                "connection limit reached, refusing connections",
                max_connections=self.max_connections,
                refused=self.refused_connections,
                refused_since_last_log=self.refused_connections - self._refused_logged,
            )
            self._refused_logged_at = now
            self._refused_logged = self.refused_connections

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

    async def _handle_socket(self, sock: socket.socket) -> None:
        try:
            await self._serve_socket(sock)
        finally:
            self._open -= 1

    async def _serve_socket(self, sock: socket.socket) -> None:
        try:
            conn = Connection(
                sock, self.dispatcher, node=self.node, max_in_flight=self.max_in_flight,
                input_share=self._input,
            )
        except OSError:  # the peer vanished between accept and getpeername
            sock.close()
            return
        self._connections.add(conn)
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
            conn.log.debug("connection closed", reason=conn.close_reason)
            if self._on_close is not None:
                try:
                    self._on_close(conn)
                except Exception:
                    conn.log.exception("on_close callback failed")


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
        rpc_hook: Callable[[RemotingCommand], RemotingCommand] | None = None,
    ) -> None:
        self._nursery = nursery
        self.dispatcher = dispatcher
        self.node = node
        self.connect_timeout = connect_timeout
        #: Applied to every request this pool sends (RocketMQ's client RPCHook: ACL signing).
        self.rpc_hook = rpc_hook
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, trio.Event] = {}
        self._closed = False
        self._input = _InputShare()  # the one read buffer of the pool's connections
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
                    sock = await _connect(host, port)
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
                    sock, self.dispatcher, node=self.node, lend_reading=True,
                    input_share=self._input,
                )
            except OSError as exc:
                sock.close()
                raise RemotingConnectError(f"cannot connect to {addr}: {exc}") from exc
            self._connections[addr] = conn
            try:
                await self._nursery.start(self._run_connection, addr, conn)
            except BaseException:
                self._connections.pop(addr, None)
                await conn.aclose()
                raise
            return conn
        finally:
            del self._connecting[addr]
            done.set()

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
                rpc_hook=rpc_hook,
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
