"""The Trio shell of one remoting connection: its socket and its tasks.

What the connection knows (pending calls, opaques, requests in flight, what to send and when) is
``ConnectionState`` (pure, connection_state.py); what its reads may hold is ``InputBudget``
(pure, input_budget.py). This module only moves bytes and parks and wakes tasks.

A ``Connection`` is symmetric: it reads frames, hands requests to a ``Dispatcher`` (one task per
request that must wait, so a long poll never blocks the others), matches responses to pending
calls by opaque, and writes frames through one coalescing writer: a frame is sent at once when
it is the only one ready; when several are ready they are gathered and sent by one ``send`` at
the end of the scheduling batch. Sockets are plain non-blocking stdlib sockets driven with
``trio.lowlevel.wait_readable`` / ``wait_writable``: an operation that can complete at once does
so without a trip through the scheduler.

Lone calls read their own answers ("lending"): a connection this end opened, whose calls have
all been answered and whose peer sent no request lately, parks its reader; the next call made
alone sends, then reads in its own task until its answer, handling whatever else arrives as the
reader would, and hands the reading back when something has to be waited for. A round trip then
wakes one task instead of two.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Awaitable
from typing import Any, Final, cast

import attrs
import trio

from rmq_cluster.cluster.logging import get_logger
from rmq_cluster.cluster.remoting.address import format_address
from rmq_cluster.cluster.remoting.codec import FrameDecoder, ProtocolError, RemotingCommand
from rmq_cluster.cluster.remoting.codes import FLAG_ONEWAY, ResponseCode
from rmq_cluster.cluster.remoting.connection_state import (
    MAX_IN_FLIGHT_REQUESTS,
    Blocked,
    ConnectionState,
)
from rmq_cluster.cluster.remoting.dispatch import AsyncProcessor, Dispatcher, Processor
from rmq_cluster.cluster.remoting.errors import (
    RemotingClosedError,
    RemotingError,
    RemotingTimeoutError,
    RemotingUnsentError,
    error_response,
    exception_remark,
)
from rmq_cluster.cluster.remoting.input_budget import READ_CHUNK_BYTES
from rmq_cluster.cluster.remoting.sockets import InputShare, Socket

#: RocketMQ's default client call timeout.
DEFAULT_CALL_TIMEOUT_S: Final = 3.0
#: A send that cannot complete in this long means the peer stopped reading: the connection closes.
WRITE_TIMEOUT_S: Final = 30.0
#: Encoded frames waiting for the socket; past this, writers wait for the peer to read.
MAX_OUTBOUND_BUFFER_BYTES: Final = 32 * 1024 * 1024
#: While the reader lends its reading, it goes back to the socket once a whole period this long
#: passes without a lone call (a request the peer sends between calls, or its close, is seen
#: within about twice this).
LEND_IDLE_S: Final = 0.05


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
        self, sock: socket.socket, dispatcher: Dispatcher, *, node: str,
        max_in_flight: int = MAX_IN_FLIGHT_REQUESTS, lend_reading: bool = False,
        input_share: InputShare | None = None,
    ) -> None:
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
            self, dispatcher, max_in_flight=max_in_flight, peer=self.peer, log=self.log)
        self._state.last_read = trio.current_time()
        self._decoder = FrameDecoder()
        self._timer_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._drained: trio.Event | None = None
        self._room: trio.Event | None = None  # the reader waits on it for a request to end
        self._lends = lend_reading  # only connections this end opened lend their reading
        self._lender: trio.lowlevel.Task | None = None  # the reader, parked while lending
        self._reading_call: _Pending | None = None  # the lone call reading now
        self._reader_wanted = False  # a call ended that needs the reader back on the socket
        self._stash: Blocked | None = None  # what a lone call could not take without waiting
        self.lone_calls = 0  # calls that read their own response
        self.closed = trio.Event()

    def __repr__(self) -> str:
        return f"<Connection {self.local}->{self.peer}>"

    is_closed = property(lambda self: self._state.closed)
    pending_calls = property(lambda self: len(self._state.pending))
    #: requests answered SYSTEM_BUSY because max_in_flight were already running
    busy_refusals = property(lambda self: self._state.busy_refusals)
    _running = property(lambda self: self._state.running)  # (tests look)

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
        try:
            if self._lender is not None and self._reading_call is None and len(st.pending) == 1:
                if await self._call_reading(request, opaque, slot):  # handed to the reader
                    await slot.wait()
            else:
                await self._write(request, opaque, len(st.pending) > 1)
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
        await self._write(request, self._state.next_opaque())

    async def _expire_calls(self) -> None:
        """Fail calls whose deadline passed; sleeps until the earliest deadline."""
        while True:
            with trio.CancelScope(deadline=self._state.timer_deadline) as scope:
                self._timer_scope = scope
                await trio.sleep_forever()
            self._timer_scope = None
            if self._state.expire(trio.current_time()):
                self._sock.interrupt()  # a lone call waits on the socket itself: wake it

    # ---------------------------------------------------------------- writing

    async def _write(self, cmd: RemotingCommand, opaque: int, gather: bool = False) -> None:
        """Queue one frame and see it on its way. ``gather``: more frames are likely in this
        scheduling batch: let them queue (one checkpoint) and send them in one go."""
        st = self._state
        if st.closed:
            raise RemotingClosedError(f"connection to {self.peer} is closed")
        st.queue_request(cmd, opaque)
        if gather and not st.flush_soon and not st.flushing:
            await self._gather()
        if not st.flush_soon:
            self._send_queued()
        if len(st.out) > MAX_OUTBOUND_BUFFER_BYTES:
            await self._backpressure()

    async def _gather(self) -> None:
        """Let this scheduling batch's other frames queue (the caller sends them all)."""
        st = self._state
        st.flush_soon = True
        try:  # not cancellable: the frame is queued and this task owes it a send
            await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            st.flush_soon = False

    async def _backpressure(self) -> None:
        """Wait for the peer to read while more than ``MAX_OUTBOUND_BUFFER_BYTES`` is queued."""
        if len(self._state.out) > MAX_OUTBOUND_BUFFER_BYTES and not self._state.closed:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()

    def _send_queued(self) -> None:
        """Send what is queued as far as the kernel takes it now; a flusher task does the rest."""
        chunk = self._state.take_outbound()
        if chunk is None:
            return
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
        self._state.flushing = True
        self._nursery.start_soon(self._flusher, memoryview(chunk)[sent:])

    async def _flusher(self, view: memoryview) -> None:
        """Send ``view`` and whatever queues behind it, as the peer makes room."""
        st = self._state
        try:
            while not st.closed:
                while view:
                    with trio.move_on_after(WRITE_TIMEOUT_S) as scope:
                        try:
                            await trio.lowlevel.wait_writable(self._sock.sock)
                        except trio.ClosedResourceError:
                            if st.closed:
                                raise
                            continue  # a timed-out call's interrupt, not a close: wait again
                    if scope.cancelled_caught:
                        self.close_reason = f"peer took nothing for {WRITE_TIMEOUT_S:g}s"
                        await self._abort(self.close_reason)
                        return
                    view = view[self._sock.try_send(view) :]
                if self._drained is not None and len(st.out) <= MAX_OUTBOUND_BUFFER_BYTES:
                    self._drained.set()
                    self._drained = None
                if not st.out:
                    return
                chunk, st.out = st.out, bytearray()
                view = memoryview(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ValueError) as exc:
            await self._abort(f"send failed: {exc}")  # ValueError: fd -1 (closed meanwhile)
        finally:
            st.flushing = False

    def _fail_soon(self, reason: str) -> None:
        self.close_reason = self.close_reason or reason
        if self._nursery is not None:  # RuntimeError: run() is ending (it aborts on its way)
            with contextlib.suppress(RuntimeError):
                self._nursery.start_soon(self._abort, reason)

    # ---------------------------------------------------------------- reading and serving

    async def run(
        self, *, idle_timeout: float | None = None,
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

    def _read_failed(self, exc: Exception) -> bool:
        """A read raised: whether the connection must close (not when it is closed already, or
        when a lone call's wait was interrupted at its deadline)."""
        if self._state.closed or (self._reading_call is not None and self._reading_call.done):
            return False
        self.close_reason = self.close_reason or f"read failed: {exc}"
        return True

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
            self._send_queued()
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
                self._read_failed(exc)
                return
            commands = self._ingest(data)
            if commands is None:
                return
            drained = len(data) < READ_CHUNK_BYTES
            spawned, answered = await self._take(commands, nursery)
            if answered and self._lends and st.may_lend(answered, drained):
                await self._lend_reading()  # the next lone call reads its own response
                if st.closed:
                    return
                if self._stash is not None:
                    blocked, self._stash = self._stash, None
                    await self._unblock(blocked, nursery)
                drained = False
            elif not drained and (spawned or commands or not waited):
                # let the tasks just spawned or woken run before reading again (also keeps a
                # busy connection from starving the others)
                await trio.lowlevel.checkpoint()

    async def _take(
        self, commands: list[RemotingCommand], nursery: trio.Nursery, lone: bool = False
    ) -> tuple[bool, bool]:
        """Hand one read's frames to the state machine and carry out its actions: spawn, send,
        wait for room (``lone``: a lone call reads and must not wait in its task, so a request
        that needs room is stashed for the reader). Whether it spawned, and answered a call."""
        spawns, answered, blocked = self._state.take(commands)
        if spawns is not None:
            gather = len(commands) > 1
            for processor, cmd, awaitable in spawns:
                nursery.start_soon(self._serve_request, processor, cmd, gather, awaitable)
        self._send_queued()  # every inline answer of this read in one send
        if blocked is not None:
            if lone:
                self._stash = blocked
            else:
                await self._unblock(blocked, nursery)
        if not lone and len(self._state.out) > MAX_OUTBOUND_BUFFER_BYTES:
            await self._backpressure()  # stop reading until the peer reads its answers
        return spawns is not None, answered

    async def _unblock(self, blocked: Blocked, nursery: trio.Nursery) -> None:
        while self._state.running > blocked.limit:
            if self._room is None:
                self._room = trio.Event()
            await self._room.wait()
        self._state.resume(blocked)
        if blocked.rest:
            await self._take(blocked.rest, nursery)

    async def _serve_request(
        self, processor: Processor | None, request: RemotingCommand, gather: bool,
        awaitable: Awaitable[RemotingCommand | None] | None = None,
    ) -> None:
        try:
            response: RemotingCommand | None
            try:
                if awaitable is not None:
                    response = await awaitable
                elif processor is None:
                    response = self._state.unsupported(request)
                else:
                    response = await cast(AsyncProcessor, processor)(self, request)
            except Exception as exc:
                self.log.warning("processor failed", code=request.code, error=repr(exc),
                                 exc_info=True)
                response = error_response(request, ResponseCode.SYSTEM_ERROR,
                                          exception_remark(exc))
            st = self._state
            if st.task_answer(request, response):
                if gather and not st.flush_soon and not st.flushing:
                    await self._gather()
                if not st.flush_soon:
                    self._send_queued()
        finally:
            self._request_ended()

    def _deferred_done(
        self, opaque: int, flag: int, code: int, response: RemotingCommand | None
    ) -> None:
        """A ``Deferred`` answer arrived; one task sends all answers of this batch."""
        flush = self._state.deferred_done(opaque, flag, code, response)
        room = self._room
        if room is not None:
            self._room = None
            room.set()
        if flush and self._nursery is not None:
            try:
                self._nursery.start_soon(self._flush_deferred)
            except RuntimeError:  # the connection is shutting down: nothing more goes out
                self._state.deferred_flush = False
        elif flush:
            self._state.deferred_flush = False

    async def _flush_deferred(self) -> None:
        self._state.deferred_flush = False
        self._send_queued()

    def _held_released(self, frames: bytearray, n: int) -> None:
        """``HeldAnswers`` released ``n`` answers of this connection: one send."""
        send = self._state.held_released(frames, n)
        self._request_ended(0)  # (counted down above: wakes a reader waiting for room)
        if send:
            with contextlib.suppress(RuntimeError):  # shutting down: nothing more goes out
                self._send_queued()

    def _request_ended(self, n: int = 1) -> None:
        self._state.running -= n
        room = self._room
        if room is not None:
            self._room = None
            room.set()

    # ---------------------------------------------------------------- lending the reading

    async def _lend_reading(self) -> None:
        """Park the reader while lone calls read their own responses; back on the socket when a
        lone call wakes it, when a whole ``LEND_IDLE_S`` passes without a lone call, or on
        close. (Oneway requests do not count: they never read.)"""
        st = self._state
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
            if st.closed:
                return
            if self._reading_call is not None:
                continue  # a call took the reading just after the wake; ask again later
            if woken or self._reader_wanted or st.pending or self.lone_calls == calls:
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
        """A lone call: send, then read in this task until the response (or the deadline, or
        close), handling other frames as the reader would. True if it handed the reading back
        (something must be waited for): the caller then waits as any call does. It reads what
        is already there before sending: a peer that closed meanwhile fails the call with
        ``RemotingUnsentError`` (nothing was sent)."""
        st = self._state
        self._reading_call = slot
        slot.reading = True
        self.lone_calls += 1
        sent = handed_back = False
        try:
            drained = not self._sock.readable_now()
            while not slot.done:
                if drained and not sent:
                    if st.closed:
                        break
                    st.queue_request(request, opaque)
                    sent = True
                    if not st.flush_soon:
                        self._send_queued()
                    if len(st.out) > MAX_OUTBOUND_BUFFER_BYTES:
                        handed_back = True  # the reader applies the backpressure
                        break
                try:
                    data, _ = await self._sock.receive(drained)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    if self._read_failed(exc):
                        await self._abort(self.close_reason or "closed")
                    break
                commands = self._ingest(data)
                if commands is None:
                    await self._abort(self.close_reason or "closed")
                    break
                drained = len(data) < READ_CHUNK_BYTES
                if st.closed or self._nursery is None:
                    break
                await self._take(commands, self._nursery, lone=True)
                if self._stash is not None:
                    handed_back = True
                    break
                if not drained:
                    await trio.lowlevel.checkpoint()  # (everything read is handled)
        finally:
            slot.reading = False
            self._reading_call = None
            if not handed_back:
                st.end_call(opaque)
            if not st.lone_call_keeps_lending(slot):
                self._wake_lender()  # not a lone call any more: the reader reads again
        if handed_back and not sent:  # the reader took over before this call's turn to send
            await self._write(request, opaque)
        if not sent and not handed_back and st.closed:
            slot.error = RemotingUnsentError(
                f"connection to {self.peer} closed: {self.close_reason}")
        return handed_back

    # ---------------------------------------------------------------- closing

    async def _abort(self, reason: str) -> None:
        if not self._state.close(reason):
            return
        if self._drained is not None:
            self._drained.set()
        self._sock.close()
        self._sock.share.release(self._sock, self)
        self._wake_lender()  # a parked reader ends (run() returns)
        self.closed.set()
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        """Close from this end; the reader stops and every pending call fails."""
        self.close_reason = self.close_reason or "closed locally"
        await self._abort(self.close_reason)

