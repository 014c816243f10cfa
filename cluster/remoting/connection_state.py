"""The state of one remoting connection, as a pure state machine (h11-style: no trio, no socket).

The Trio shell (``connection.py``) owns the socket and the tasks; it feeds this machine what
happens (frames decoded from a read, a call started, an answer ready, a deadline passed, the
connection closed) and carries out what the machine asks for:

* **send these bytes**: frames are encoded into ``out``; an answer's body of at least
  ``SCATTER_MIN_BODY_BYTES`` is not copied there but queued as a buffer of its own (``parts``:
  what was queued before ``out``, in order) for a scatter-gather send; ``take_outbound()``
  hands the shell the bytes to send now, one buffer or a list of them (None while a flusher
  owns the send side, or nothing is queued);
* **wake this call**: a pending call's slot (any object with ``deadline``, ``response``,
  ``error``, ``reading`` and ``finish()``) is finished by ``complete``/``expire``/``close``;
* **dispatch this request**: ``take`` runs each request's processor inline and acts on its
  ``Reply`` (``processors.py``): an answer is queued, a ``Later`` counts the request as in
  flight -- ``LATER`` (held on a watermark, or kept by a parked pull) until its answer is
  released, ``Later(work)`` until the task that awaits ``work`` answers (returned as a
  ``Spawn``); when a request over the limit is already under way, the ``Blocked`` rest of the
  read;
* **close**: ``close`` fails every pending call; a malformed frame (``malformed``) answers what
  came before it and the shell closes.

Invariants (each method keeps them; the datadriven scripts in tests/unit/remoting check them):

1. ``pending`` maps the opaque of every call started and not yet ended to its slot; a call
   ends exactly once (response, deadline or close) and its slot is finished exactly then.
   ``timer_deadline`` is at most the earliest deadline in ``pending`` (inf: none).
2. Opaques this end allocates are 31-bit, strictly increasing modulo 2**31 (a peer's requests
   carry their own opaques; answers echo them).
3. ``running`` counts the peer's requests being processed: a ``Later``'s task running, a
   ``LATER`` answer not yet released (held, or kept by a parked pull). It rises only in
   ``take`` and ``malformed`` (for a ``LATER`` answer), falls only in ``request_ended`` (task
   ended, held answers released, a later answer given); it never goes below 0. A task is
   started only while ``running < max_in_flight``, else its request is answered SYSTEM_BUSY
   (its work is closed unstarted); a ``LATER`` answer is already under way: it may take
   ``running`` to ``max_in_flight`` + 1 at most, and then the rest of the read is ``Blocked``
   until it is back at ``max_in_flight``.
4. Every non-oneway request gets exactly one answer in ``out`` (or in ``HeldAnswers``), in
   the order the processors produce them; nothing is queued once ``closed``.
5. ``flushing``: a flusher task owns the send side; ``take_outbound`` then returns None and
   frames queue behind it. ``flush_soon``: a writer is gathering this scheduling batch's
   frames, and sends them after its checkpoint. ``later_flush``: one task will send the
   answers given by ``answer_later`` in this batch.
6. ``closed`` is final: ``pending`` is empty from then on.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable
from typing import Any, Final, Protocol

import attrs

from ..logging import get_logger
from .codec import ProtocolError, RemotingCommand, encode_head_into, encode_into
from .codes import FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode
from .errors import (
    OVERLOAD_REMARK,
    RemotingClosedError,
    RemotingError,
    RemotingUnsentError,
    error_answer,
    error_response,
    exception_remark,
)
from .processors import Later, ProcessorTable

#: Requests of one connection being processed at once; past this, SYSTEM_BUSY.
MAX_IN_FLIGHT_REQUESTS: Final = 65_536
#: A busy connection logs its first refusal and then every this many.
BUSY_LOG_EVERY: Final = 1000
#: A connection lends its reading only when the peer sent no request for this long.
LEND_QUIET_S: Final = 1.0
#: An answer body (``bytes``) this long or longer is sent from its own buffer (scatter-gather),
#: not copied behind its header into ``out`` (a pull of many records). Measured in-process
#: (bench/README.md, the pull path): below ~16-32 KiB the copy and one ``send`` cost less than
#: a ``sendmsg`` of separate buffers.
SCATTER_MIN_BODY_BYTES: Final = 16 * 1024
#: Buffers one scatter-gather send hands the kernel at most (Linux's IOV_MAX is 1024); the
#: rest is joined into the last one.
MAX_SEND_BUFFERS: Final = 512

#: What ``take_outbound`` hands the shell: one buffer, or several to send in order.
Outbound = bytearray | list[bytes | bytearray | memoryview]


class CallSlot(Protocol):
    """One pending call as the machine sees it (the shell's waiter)."""

    deadline: float
    response: RemotingCommand | None
    error: RemotingError | None
    reading: bool

    def finish(self) -> None: ...


#: A request whose answer a task gives: (the request, the ``Later``'s work to await).
Spawn = tuple[RemotingCommand, "Awaitable[RemotingCommand | None]"]


@attrs.frozen
class Blocked:
    """``take`` stopped: a ``LATER`` answer took ``running`` past the limit; the shell waits
    for room (``running`` at most ``limit``), then takes ``rest``, what remained of the read."""

    limit: int
    rest: list[RemotingCommand]


class ConnectionState:
    """See the module docstring. ``handle`` is what processors receive as their connection."""

    def __init__(
        self, handle: Any, table: ProcessorTable, *, max_in_flight: int = MAX_IN_FLIGHT_REQUESTS,
        peer: str = "?", log: Any = None,
    ) -> None:
        self.handle = handle
        self.peer = peer
        self.lookup = table.lookup
        self.max_in_flight = max_in_flight
        self.log = log if log is not None else get_logger(component="connection")
        self.pending: dict[int, CallSlot] = {}
        self.opaque = 0
        self.timer_deadline = math.inf
        self.running = 0
        self.busy_refusals = 0
        self.out = bytearray()
        self.parts: list[bytes | bytearray | memoryview] = []  # queued before ``out``
        self.parts_bytes = 0
        self.flushing = False
        self.flush_soon = False
        self.later_flush = False
        self.closed = False
        self.close_reason: str | None = None
        self.last_read = 0.0  # when the shell last read (its clock)
        self.peer_request_read = -math.inf  # the last read with a request of the peer

    # ------------------------------------------------------------------ calls from this end

    def start_call(self, slot: CallSlot) -> tuple[int, bool]:
        """Register a call: its opaque, and whether the timer must be re-armed earlier.
        Raises ``RemotingUnsentError`` once closed (nothing was sent)."""
        if self.closed:
            raise RemotingUnsentError(f"connection to {self.peer} is closed")
        opaque = self.opaque = (self.opaque + 1) & 0x7FFFFFFF
        self.pending[opaque] = slot
        if slot.deadline < self.timer_deadline:
            self.timer_deadline = slot.deadline
            return opaque, True
        return opaque, False

    def end_call(self, opaque: int) -> None:
        """The caller stopped waiting (answered, timed out, cancelled): forget its call."""
        self.pending.pop(opaque, None)

    def next_opaque(self) -> int:
        """An opaque for a oneway request (no call waits for it)."""
        self.opaque = (self.opaque + 1) & 0x7FFFFFFF
        return self.opaque

    def complete(self, response: RemotingCommand) -> None:
        """A response arrived: wake its call (none: logged, dropped)."""
        slot = self.pending.pop(response.opaque, None)
        if slot is None:
            self.log.debug("response for no pending call", opaque=response.opaque,
                           code=response.code)
            return
        slot.response = response
        slot.finish()

    def expire(self, now: float) -> list[CallSlot]:
        """End the calls whose deadline passed (woken with neither response nor error: a
        timeout); re-arm ``timer_deadline``. The expired calls that read the socket themselves
        (the shell must interrupt their wait)."""
        earliest = math.inf
        reading: list[CallSlot] = []
        for opaque, slot in list(self.pending.items()):
            if slot.deadline <= now:
                del self.pending[opaque]
                slot.finish()
                if slot.reading:
                    reading.append(slot)
            elif slot.deadline < earliest:
                earliest = slot.deadline
        self.timer_deadline = earliest
        return reading

    # ------------------------------------------------------------------ the peer's requests

    def take(
        self, commands: list[RemotingCommand]
    ) -> tuple[list[Spawn] | None, bool, Blocked | None]:
        """Handle the frames of one read: responses end their calls, requests go to their
        processors (answered inline into ``out``, later, or returned to be spawned).
        Returns (the requests to spawn, whether a response ended a call, where it stopped)."""
        max_in_flight = self.max_in_flight
        spawns: list[Spawn] | None = None
        answered = False
        for i, cmd in enumerate(commands):
            if cmd.flag & FLAG_RESPONSE:
                self.complete(cmd)
                answered = True
                continue
            self.peer_request_read = self.last_read
            later = self.answer_inline(cmd)
            if later is None:
                continue
            work = later.work
            if work is None:  # under way already: counted until its answer is released
                self.running += 1
                if self.running > max_in_flight:
                    return spawns, answered, Blocked(max_in_flight, commands[i + 1 :])
                continue
            if self.running >= max_in_flight:
                close = getattr(work, "close", None)
                if close is not None:
                    close()  # a coroutine that never started
                self.refuse_busy(cmd)
                continue
            self.running += 1
            if spawns is None:
                spawns = []
            spawns.append((cmd, work))
        return spawns, answered, None

    def answer_inline(self, request: RemotingCommand) -> Later | None:
        """Run ``request``'s processor now and queue its answer; a ``Later`` is returned
        instead (the answer comes later). No processor: REQUEST_CODE_NOT_SUPPORTED."""
        processor = self.lookup(request.code)
        try:
            reply = (
                processor(self.handle, request) if processor is not None
                else self.unsupported(request)
            )
        except Exception as exc:
            self.log.warning("processor failed", code=request.code, error=repr(exc),
                             exc_info=True)
            reply = error_response(request, ResponseCode.SYSTEM_ERROR, exception_remark(exc))
        if type(reply) is Later:
            return reply
        if not request.flag & FLAG_ONEWAY and not self.closed:
            self.queue_answer(request.opaque, request.code, reply)
        elif inspect.iscoroutine(reply):  # (not a Reply: never awaited, say so once)
            reply.close()
        return None

    def refuse_busy(self, request: RemotingCommand) -> None:
        """Answer SYSTEM_BUSY as RocketMQ does when its request executor rejects a task."""
        self.busy_refusals += 1
        if self.busy_refusals == 1 or self.busy_refusals % BUSY_LOG_EVERY == 0:
            self.log.warning("too many requests in flight, refusing", code=request.code,
                             refused=self.busy_refusals)
        if not request.flag & FLAG_ONEWAY and not self.closed:
            self.queue_answer(request.opaque, request.code, error_response(
                request, ResponseCode.SYSTEM_BUSY, OVERLOAD_REMARK))

    def queue_answer(self, opaque: int, code: int, response: Any) -> None:
        """Encode the answer to the request (``opaque``, ``code``) into ``out``."""
        if response is None:
            response = error_answer(
                opaque, ResponseCode.SYSTEM_ERROR, f"no response for request code {code}")
        elif not isinstance(response, RemotingCommand):
            if inspect.iscoroutine(response):
                response.close()  # (a processor returned a coroutine, not a ``Later``)
            response = error_answer(
                opaque, ResponseCode.SYSTEM_ERROR,
                f"processor for code {code} returned {type(response).__name__}")
        elif not response.flag & FLAG_RESPONSE:
            response = attrs.evolve(response, flag=response.flag | FLAG_RESPONSE)
        try:
            body = encode_head_into(self.out, response, opaque)
        except Exception as exc:  # e.g. a body over the frame limit: say so instead
            self.log.warning("response not sendable", code=code, error=repr(exc))
            encode_into(self.out, error_answer(
                opaque, ResponseCode.SYSTEM_ERROR, f"response not sendable: {exc}"), opaque)
            return
        if body:  # (most answers have none: a send's, an offset's)
            self._queue_body(body)

    def _queue_body(self, body: bytes | bytearray | memoryview) -> None:
        """Queue the body of the frame whose head ``out`` ends with: copied behind it, or (a
        long ``bytes``) as a buffer of its own."""
        if len(body) < SCATTER_MIN_BODY_BYTES or type(body) is not bytes:  # (bytes: immutable)
            self.out += body
            return
        head, self.out = self.out, bytearray()  # the body goes out from its own buffer
        self.parts += (head, body)
        self.parts_bytes += len(head) + len(body)

    def unsupported(self, request: RemotingCommand) -> RemotingCommand:
        """The answer to a request no processor takes (RocketMQ's remark)."""
        return error_response(request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                              f" request type {request.code} not supported")

    def task_answer(self, request: RemotingCommand, response: RemotingCommand | None) -> bool:
        """A spawned request's processor answered: queue it; whether anything was queued."""
        if request.flag & FLAG_ONEWAY or self.closed:
            return False
        self.queue_answer(request.opaque, request.code, response)
        return True

    def answer_later(self, request: RemotingCommand, response: RemotingCommand | None) -> bool:
        """The answer of a request that replied ``LATER`` (a parked pull): it ends its request
        and is queued. True: the shell must start the one task that flushes this batch's
        later answers."""
        self.running -= 1
        if request.flag & FLAG_ONEWAY or self.closed:
            return False
        self.queue_answer(request.opaque, request.code, response)
        if self.later_flush:
            return False
        self.later_flush = True
        return True

    def answer_later_frame(self, request: RemotingCommand, head: bytes, body: bytes) -> None:
        """The answer, encoded already, of a request that replied ``LATER``: ``head``, its
        frame's length words and header (``codec.FixedAnswer``), then ``body``. It ends its
        request and is queued (sent with the next send: the shell's caller sends)."""
        self.running -= 1
        if request.flag & FLAG_ONEWAY or self.closed:
            return
        self.out += head
        if body:
            self._queue_body(body)

    def held_released(self, frames: bytearray, n: int) -> bool:
        """``HeldAnswers`` released ``n`` answers (``frames``, encoded): they end their requests
        and are queued; whether to send."""
        self.running -= n
        if self.closed:
            return False
        if self.out:
            self.out += frames
        else:
            self.out = frames
        return True

    def request_ended(self, n: int = 1) -> None:
        self.running -= n

    def malformed(self, exc: ProtocolError) -> None:
        """A frame could not be decoded: answer what came before it (the shell closes)."""
        self.close_reason = f"malformed frame: {exc}"
        self.log.warning("malformed frame, closing connection", reason=str(exc))
        for cmd in exc.commands:
            if cmd.flag & FLAG_RESPONSE:
                self.complete(cmd)
                continue
            later = self.answer_inline(cmd)
            if later is None:
                continue
            if later.work is None:
                self.running += 1  # as ``take`` counts it (its release uncounts it)
            elif inspect.iscoroutine(later.work):
                later.work.close()  # the connection closes: nothing will await it

    # ------------------------------------------------------------------ sending

    def queue_request(self, cmd: RemotingCommand, opaque: int) -> None:
        encode_into(self.out, cmd, opaque)

    def take_outbound(self) -> Outbound | None:
        """The bytes to send now, one buffer or (scatter-gather) a list of at most
        ``MAX_SEND_BUFFERS`` (None: a flusher owns the send side, nothing is queued, or
        closed); nothing is queued after."""
        if self.flushing or self.closed or not (self.out or self.parts):
            return None
        chunk, self.out = self.out, bytearray()
        if not self.parts:
            return chunk
        parts, self.parts, self.parts_bytes = self.parts, [], 0
        if chunk:
            parts.append(chunk)
        if len(parts) > MAX_SEND_BUFFERS:
            parts[MAX_SEND_BUFFERS - 1 :] = [bytearray().join(parts[MAX_SEND_BUFFERS - 1 :])]
        return parts

    def take_all(self) -> bytearray:
        """Everything queued, as one buffer (the flusher's: a peer that reads slowly is not
        worth a scatter-gather send); nothing is queued after."""
        chunk, self.out = self.out, bytearray()
        if self.parts:
            self.parts.append(chunk)
            chunk = bytearray().join(self.parts)
            self.parts, self.parts_bytes = [], 0
        return chunk

    @property
    def queued_bytes(self) -> int:
        """Bytes queued to send (``out`` and the buffers before it)."""
        return len(self.out) + self.parts_bytes

    # ------------------------------------------------------------------ lending, idling

    def may_lend(self, answered: bool, drained: bool) -> bool:
        """After a read: whether the reader may park and let lone calls read (a connection this
        end opened checks it): a call just ended, the socket is drained, nothing is under way,
        and the peer sent no request for ``LEND_QUIET_S``."""
        return (
            answered and drained and not self.pending and not self.running
            and self.last_read - self.peer_request_read > LEND_QUIET_S
        )

    def lone_call_keeps_lending(self, slot: CallSlot) -> bool:
        """A lone call ended: whether the reader may stay parked."""
        return not (
            slot.response is None or self.pending or self.running or self.closed
            or self.last_read - self.peer_request_read <= LEND_QUIET_S
        )

    def busy(self) -> bool:
        """Anything under way (an idle close waits for it)."""
        return bool(self.pending or self.flushing or self.running)

    # ------------------------------------------------------------------ closing

    def close(self, reason: str) -> bool:
        """Close: every pending call fails. False if it was closed already."""
        if self.closed:
            return False
        self.closed = True
        self.close_reason = self.close_reason or reason
        self.parts, self.parts_bytes = [], 0  # (nothing more goes out)
        for slot in self.pending.values():
            slot.error = RemotingClosedError(
                f"connection to {self.peer} closed: {self.close_reason}")
            slot.finish()
        self.pending.clear()
        return True

