"""The Trio shell of one remoting connection: its calls, its reader and its close.

What the connection knows (pending calls, opaques, requests in flight, what to send and when) is
``ConnectionState`` (pure, connection_state.py); what its reads may hold is ``InputBudget``
(pure, input_budget.py). The shell only moves bytes and parks and wakes tasks, in four pieces,
each holding what it is given and nothing more:

* ``Socket`` (sockets.py): plain non-blocking stdlib sockets driven with trio's
  ``wait_readable`` / ``wait_writable``: what can complete at once does so without a trip
  through the scheduler;
* ``Writer`` (writer.py): the send side, one coalescing writer (a frame ready alone goes at
  once; frames ready together go in one ``send`` at the end of the scheduling batch);
* ``Lending`` (lending.py): lone calls read their own answers while the reader is parked;
* ``Connection`` (here): calls and their timer, the reader (frames to the state machine, one
  task per request that must wait, so a long poll never blocks the others), and close.

A ``Connection`` is symmetric: either end calls, and either end serves the other's requests.

Invariants kept here (the pieces state theirs):

1. Exactly one task reads the socket at a time: the reader, or a lone call while the reader is
   parked in ``Lending.lend`` (the reader reads only once ``lend`` returned).
2. A call ends exactly once (``ConnectionState``); its caller forgets it (``end_call``) on every
   way out of ``invoke``, cancellation included.
3. ``run`` ends with the connection closed: every pending call failed, the socket closed, the
   input budget released, ``closed`` set; nothing it started outlives it.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Awaitable
from typing import Any, Final

import attrs
import trio

from ..logging import get_logger
from .address import format_address
from .codec import FrameDecoder, ProtocolError, RemotingCommand
from .codes import FLAG_ONEWAY, ResponseCode
from .connection_state import (
    MAX_IN_FLIGHT_REQUESTS,
    Blocked,
    ConnectionState,
)
from .errors import (
    RemotingError,
    RemotingTimeoutError,
    error_response,
    exception_remark,
)
from .input_budget import READ_CHUNK_BYTES
from .lending import Lending
from .processors import ProcessorTable
from .sockets import InputShare, Socket
from .writer import Writer

#: RocketMQ's default client call timeout.
DEFAULT_CALL_TIMEOUT_S: Final = 3.0
#: Encoded frames waiting for the socket; past this, writers wait for the peer to read.
MAX_OUTBOUND_BUFFER_BYTES: Final = 32 * 1024 * 1024
#: Frames of one read served in one step of the event loop; a read holding more is served in
#: steps of this many, the loop serving the other connections (and tasks) between them, so a
#: connection flooding small frames does not hold the loop while another's request waits. A
#: quiet interleaved A/B of the Consumer case (bench/consumer_window.py) priced a step of 16
#: at 5-21 % more CPU per message and 4-19 % fewer sends (the reput's rounds split with it),
#: for half the offset-query latency of another connection; 128 leaves a client's usual reads
#: (up to a few dozen frames) whole and still bounds a flood.
MAX_FRAMES_PER_READ_STEP: Final = 128


class _Pending:
    """One call's waiter: the caller parks and is rescheduled by whoever ends the call."""

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
    """One TCP connection speaking remoting frames, usable from either end (see the module
    docstring). Writing never blocks a caller; call timeouts are kept by one timer task."""

    def __init__(
        self, sock: socket.socket, table: ProcessorTable, *, node: str,
        max_in_flight: int = MAX_IN_FLIGHT_REQUESTS, lend_reading: bool = False,
        input_share: InputShare | None = None, frames_per_step: int = MAX_FRAMES_PER_READ_STEP,
    ) -> None:
        if frames_per_step < 1:
            raise ValueError(f"frames_per_step must be at least 1, got {frames_per_step}")
        self._frames_per_step = frames_per_step
        self._sock = Socket(sock, input_share)
        try:
            peer = sock.getpeername()
            self.peer = format_address(peer[0], peer[1])
        except OSError:
            self.peer = "?"
        local = sock.getsockname()
        self.local = format_address(local[0], local[1])
        self.log = get_logger(node=node, remote=self.peer, local=self.local)
        self._state = ConnectionState(
            self, table, max_in_flight=max_in_flight, peer=self.peer, log=self.log)
        self._state.last_read = trio.current_time()
        self._decoder = FrameDecoder()
        self._writer = Writer(self._state, self._sock, self._abort, limit=MAX_OUTBOUND_BUFFER_BYTES)
        self._lending = Lending(self._state, self._sock, self._writer, ingest=self._ingest,
                                take=self._take, abort=self._abort)
        self._lends = lend_reading  # only connections this end opened lend their reading
        self._timer_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._room: trio.Event | None = None  # the reader waits on it for a request to end
        self.closed = trio.Event()
        self._released = False  # (``_abort`` let go of the socket and buffers)

    def __repr__(self) -> str:
        return f"<Connection {self.local}->{self.peer}>"

    is_closed = property(lambda self: self._state.closed)
    #: when this end last read from the peer (trio time)
    last_read = property(lambda self: self._state.last_read)
    pending_calls = property(lambda self: len(self._state.pending))
    #: requests answered SYSTEM_BUSY because max_in_flight were already running
    busy_refusals = property(lambda self: self._state.busy_refusals)
    #: calls that read their own response
    lone_calls = property(lambda self: self._lending.lone_calls)
    _running = property(lambda self: self._state.running)  # (tests look)
    _lender = property(lambda self: self._lending.lender)  # (tests look)

    @property
    def close_reason(self) -> str | None:
        return self._state.close_reason

    @close_reason.setter
    def close_reason(self, reason: str | None) -> None:
        self._state.close_reason = reason

    @property
    def _max_in_flight(self) -> int:
        return self._state.max_in_flight

    @_max_in_flight.setter
    def _max_in_flight(self, n: int) -> None:
        self._state.max_in_flight = n

    # ---------------------------------------------------------------- calls from this end

    async def invoke(
        self, request: RemotingCommand, timeout: float = DEFAULT_CALL_TIMEOUT_S
    ) -> RemotingCommand:
        """Send ``request`` and wait for its response (matched by a fresh opaque). A call alone
        on a connection whose reader lent its reading reads its own response."""
        st = self._state
        slot = _Pending(trio.current_time() + timeout)
        opaque, rearm = st.start_call(slot)
        if rearm and self._timer_scope is not None:
            self._timer_scope.deadline = slot.deadline
        lending = self._lending
        try:  # alone, with the reader parked and no call reading: this call reads for itself
            if lending.lender is not None and lending.reading_call is None and len(st.pending) == 1:
                if await lending.call(request, opaque, slot):  # handed back to the reader
                    await slot.wait()
            else:
                await self._writer.write(request, opaque, len(st.pending) > 1)
                await slot.wait()
        finally:
            st.end_call(opaque)
        if slot.response is not None:
            return slot.response
        if slot.error is not None:
            raise slot.error
        raise RemotingTimeoutError(
            f"no response to request code {request.code} from {self.peer} in {timeout:g}s")

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send ``request`` with the oneway bit; nothing comes back."""
        if not request.is_oneway:
            request = attrs.evolve(request, flag=request.flag | FLAG_ONEWAY)
        await self._writer.write(request, self._state.next_opaque())

    async def _expire_calls(self) -> None:
        """Fail calls whose deadline passed; sleeps until the earliest deadline."""
        while True:
            with trio.CancelScope(deadline=self._state.timer_deadline) as scope:
                self._timer_scope = scope
                await trio.sleep_forever()
            self._timer_scope = None
            if self._state.expire(trio.current_time()):
                self._sock.interrupt()  # a lone call waits on the socket itself: wake it

    # ---------------------------------------------------------------- reading and serving

    async def run(
        self, *, idle_timeout: float | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Read and dispatch until the peer closes, a frame is malformed, or it idles."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = self._writer.nursery = nursery
                nursery.start_soon(self._expire_calls)
                if idle_timeout is not None:
                    nursery.start_soon(self._close_when_idle, idle_timeout)
                task_status.started()
                try:
                    await self._read_frames(nursery)
                finally:
                    # no call starts on it while the tasks below wind down: one written now
                    # would fail "peer closed"; refused unsent, the pool sends it anew
                    self._state.close(self.close_reason or "closed")
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self._abort(self.close_reason or "closed")

    async def _close_when_idle(self, idle_timeout: float) -> None:
        """Close once nothing was read for ``idle_timeout`` and nothing is under way."""
        st = self._state
        while True:
            await trio.sleep_until(st.last_read + idle_timeout)
            quiet = trio.current_time() - st.last_read >= idle_timeout
            if quiet and not st.busy():
                self.close_reason = f"idle for {idle_timeout:g}s"
                self.log.info("closing idle connection", idle_s=idle_timeout)
                await self._abort(self.close_reason)
                return
            if quiet:  # busy with requests: look again a full period from now
                st.last_read = trio.current_time()

    def _ingest(self, data: memoryview) -> list[RemotingCommand] | None:
        """Decode and account one read; None: the reading ends and the connection must close
        (the peer closed, or a frame is malformed: what came before it is answered)."""
        st, sock = self._state, self._sock
        now = st.last_read = trio.current_time()
        if not data:
            self.close_reason = self.close_reason or "peer closed"
            return None
        try:
            commands = self._decoder.feed(data)
        except ProtocolError as exc:
            st.malformed(exc)
            self._writer.send_queued()
            return None
        if (sock.charge or self._decoder.buffered) and not st.closed:  # a partial frame
            sock.share.account(sock, self, now, data, bool(commands), self._decoder.buffered)
        return commands

    async def _read_frames(self, nursery: trio.Nursery) -> None:
        st, sock = self._state, self._sock
        drained = False
        while True:
            try:
                data, waited = await sock.receive(drained)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                if not st.closed:  # (no lone call reads while the reader does: a real failure)
                    self.close_reason = self.close_reason or f"read failed: {exc}"
                return
            commands = self._ingest(data)
            if commands is None:
                return
            drained = len(data) < READ_CHUNK_BYTES
            if len(commands) > self._frames_per_step:
                spawned, answered = await self._take_in_steps(commands, nursery)
                if st.closed:
                    return
            else:
                spawned, answered, _ = await self._take(commands, nursery)
            if answered and self._lends and st.may_lend(answered, drained):
                blocked = await self._lending.lend(nursery)  # lone calls read their responses
                if st.closed:
                    return
                if blocked is not None:  # a lone call's stash
                    await self._unblock(blocked, nursery)
                drained = False
            elif not drained and (spawned or commands or not waited):
                # let the tasks just spawned or woken run before reading again (also keeps a
                # busy connection from starving the others)
                await trio.lowlevel.checkpoint()

    async def _take(
        self, commands: list[RemotingCommand], nursery: trio.Nursery, lone: bool = False
    ) -> tuple[bool, bool, Blocked | None]:
        """Hand one read's frames to the state machine and carry out its actions: spawn, send,
        wait for room (``lone``: a lone call reads and must not wait in its task, so a request
        that needs room is returned, for the reader). Whether it spawned, whether it answered
        a call, and (``lone``) where it stopped."""
        writer = self._writer
        spawns, answered, blocked = self._state.take(commands)
        if spawns is not None:
            gather = len(commands) > 1
            for cmd, work in spawns:
                nursery.start_soon(self._serve_request, cmd, work, gather)
        writer.send_queued()  # every inline answer of this read in one send
        if lone:
            return spawns is not None, answered, blocked
        if blocked is not None:
            await self._unblock(blocked, nursery)
        if self._state.queued_bytes > writer.limit:
            await writer.backpressure()  # stop reading until the peer reads its answers
        return spawns is not None, answered, None

    async def _take_in_steps(
        self, commands: list[RemotingCommand], nursery: trio.Nursery
    ) -> tuple[bool, bool]:
        """``_take`` of one read's frames ``frames_per_step`` at a time, yielding to the loop
        between steps (``MAX_FRAMES_PER_READ_STEP``); each step's inline answers go out at its
        end. Stops once the connection closed (what is left is neither run nor answered).
        Whether it spawned, whether it answered a call."""
        step = self._frames_per_step
        spawned = answered = False
        for start in range(0, len(commands), step):
            if start:
                await trio.lowlevel.checkpoint()
                if self._state.closed:
                    break
            s, a, _ = await self._take(commands[start : start + step], nursery)
            spawned, answered = spawned or s, answered or a
        return spawned, answered

    async def _unblock(self, blocked: Blocked, nursery: trio.Nursery) -> None:
        while self._state.running > blocked.limit:
            if self._room is None:
                self._room = trio.Event()
            await self._room.wait()
        if blocked.rest:
            await self._take(blocked.rest, nursery)

    async def _serve_request(
        self, request: RemotingCommand, work: Awaitable[RemotingCommand | None], gather: bool
    ) -> None:
        """Await a ``Later``'s work (its processor's reply: ``processors.py``) and answer."""
        try:
            response: RemotingCommand | None
            try:
                response = await work
            except Exception as exc:
                self.log.warning("processor failed", code=request.code, error=repr(exc),
                                 exc_info=True)
                response = error_response(request, ResponseCode.SYSTEM_ERROR,
                                          exception_remark(exc))
            st = self._state
            if st.task_answer(request, response):
                if gather and not st.flush_soon and not st.flushing:
                    await self._writer.gather()
                if not st.flush_soon:
                    self._writer.send_queued()
        finally:
            self._request_ended()

    def answer_later(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        """The answer of a request whose processor replied ``LATER`` and kept it (a parked
        pull), given once from any task of this Trio run; one task sends all answers of
        this batch."""
        flush = self._state.answer_later(request, response)
        room = self._room
        if room is not None:
            self._room = None
            room.set()
        if flush and self._nursery is not None:
            try:
                self._nursery.start_soon(self._flush_later)
            except RuntimeError:  # the connection is shutting down: nothing more goes out
                self._state.later_flush = False
        elif flush:
            self._state.later_flush = False

    async def _flush_later(self) -> None:
        self._state.later_flush = False
        self._writer.send_queued()

    def queue_later(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        """``answer_later`` without its send: the answer is queued (in order) and goes out with
        the caller's ``send_later`` at the end of its batch (a batch of woken pulls: one send per
        connection and no task), or with this connection's next send, whichever comes first."""
        if self._state.answer_later(request, response):
            self._state.later_flush = False  # (no task was started to send it)
        room = self._room
        if room is not None:
            self._room = None
            room.set()

    def queue_later_frame(self, request: RemotingCommand, head: bytes, body: bytes) -> None:
        """``queue_later`` of an answer encoded already (``ConnectionState.answer_later_frame``):
        a parked pull's, through ``codec.FixedAnswer``."""
        self._state.answer_later_frame(request, head, body)
        room = self._room
        if room is not None:
            self._room = None
            room.set()

    def send_later(self) -> None:
        """Send what ``queue_later`` queued (from any task of this Trio run)."""
        with contextlib.suppress(RuntimeError):  # shutting down: nothing more goes out
            self._writer.send_queued()
    def _held_released(self, frames: bytearray, n: int) -> None:
        """``HeldAnswers`` released ``n`` answers of this connection: one send."""
        send = self._state.held_released(frames, n)
        self._request_ended(0)  # (counted down above: wakes a reader waiting for room)
        if send:
            with contextlib.suppress(RuntimeError):  # shutting down: nothing more goes out
                self._writer.send_queued()

    def _request_ended(self, n: int = 1) -> None:
        self._state.running -= n
        room = self._room
        if room is not None:
            self._room = None
            room.set()

    # ---------------------------------------------------------------- closing

    async def _abort(self, reason: str) -> None:
        self._state.close(reason)
        if self._released:
            return
        self._released = True
        self._writer.release()
        self._sock.close()
        self._sock.share.release(self._sock, self)
        self._decoder.release()  # a closed connection keeps no input buffer (others hold it)
        self._lending.wake()  # a parked reader ends (run() returns)
        self.closed.set()
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        """Close from this end; the reader stops and every pending call fails."""
        self.close_reason = self.close_reason or "closed locally"
        await self._abort(self.close_reason)

