"""Lending: a lone call reads its own answer (Trio shell of one remoting connection's reading).

A connection reads with one reader task, so a call's round trip wakes two tasks: the reader
when the answer arrives, then the caller. On a connection this end opened, whose calls have all
been answered and whose peer sent no request lately (``ConnectionState.may_lend``), the reader
parks instead: it lends its reading. The next call made alone sends, then reads the socket in
its own task until its answer, handling whatever else arrives as the reader would (responses,
the peer's requests: answered inline or spawned in the reader's nursery). A round trip then
wakes one task instead of two.

Invariants:

1. One task reads the socket at a time: the reader, or the one lone call (``reading_call``)
   while the reader is parked (``lender``). A call reads only when the reader is parked, no
   call reads and it is the only call pending (the connection checks all three before
   ``call``); ``lend`` returns only when no call reads.
2. The reader goes back to the socket when a lone call ends and the connection no longer
   qualifies (``lone_call_keeps_lending``), when a lone call hands the reading back, when a
   whole ``LEND_IDLE_S`` passes without a lone call (a request the peer sends between calls,
   or its close, is seen within about twice that), and on close (``wake``).
3. A lone call waits for nothing but the socket and the scheduler: when something has to be
   waited for (room for a request under way, the ``stash``; the send side past its limit) it
   hands the reading back and waits as any call does. ``lend`` returns the stash to the
   reader, which waits for its room.
4. A lone call reads what is already there before it sends: a peer that closed meanwhile fails
   the call with ``RemotingUnsentError`` (nothing was sent). It ends its own call, unless it
   handed the reading back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import trio

from .codec import RemotingCommand
from .connection_state import Blocked, CallSlot, ConnectionState
from .errors import RemotingUnsentError
from .input_budget import READ_CHUNK_BYTES
from .sockets import Socket
from .writer import Writer

#: While the reader lends its reading, it goes back to the socket once a whole period this long
#: passes without a lone call.
LEND_IDLE_S: Final = 0.05

#: Decode and account one read: its frames, or None when the connection must close.
Ingest = Callable[[memoryview], "list[RemotingCommand] | None"]
#: Carry out one read's frames (``lone``: without waiting): (spawned, answered, the stash).
Take = Callable[
    [list[RemotingCommand], trio.Nursery, bool], Awaitable[tuple[bool, bool, Blocked | None]]
]


class LoneSlot(CallSlot, Protocol):
    """A pending call that may read for itself: ``done`` once it ended."""

    done: bool


class Lending:
    """See the module docstring. The connection gives it its state, socket and writer, and how
    it decodes a read (``ingest``), carries out its frames (``take``) and closes (``abort``)."""

    __slots__ = (
        "_abort", "_ingest", "_nursery", "_sock", "_state", "_take", "_wanted", "_writer",
        "lender", "lone_calls", "reading_call", "stash",
    )

    def __init__(
        self, state: ConnectionState, sock: Socket, writer: Writer, *, ingest: Ingest,
        take: Take, abort: Callable[[str], Awaitable[None]],
    ) -> None:
        self._state = state
        self._sock = sock
        self._writer = writer
        self._ingest = ingest
        self._take = take
        self._abort = abort
        self._nursery: trio.Nursery | None = None  # the reader's, from its first lend
        self._wanted = False  # a call ended that needs the reader back on the socket
        self.lender: trio.lowlevel.Task | None = None  # the reader, parked while lending
        self.reading_call: LoneSlot | None = None  # the lone call reading now
        self.stash: Blocked | None = None  # what a lone call could not take without waiting
        self.lone_calls = 0  # calls that read their own response

    async def lend(self, nursery: trio.Nursery) -> Blocked | None:
        """The reader parks while lone calls read their own responses (spawning in
        ``nursery``); back when a lone call wakes it, when a whole ``LEND_IDLE_S`` passes
        without a lone call, or on close. (Oneway requests do not count: they never read.)
        Returns the stash, if a lone call left one: the reader waits for its room."""
        st = self._state
        self._nursery = nursery
        self._wanted = False
        while True:
            calls = self.lone_calls
            woken = False
            with trio.move_on_after(LEND_IDLE_S):
                self.lender = trio.lowlevel.current_task()

                def abort(_: Any) -> trio.lowlevel.Abort:
                    self.lender = None
                    return trio.lowlevel.Abort.SUCCEEDED

                await trio.lowlevel.wait_task_rescheduled(abort)
                woken = True
            self.lender = None
            if st.closed:
                break
            if self.reading_call is not None:
                continue  # a call took the reading just after the wake; ask again later
            if woken or self._wanted or st.pending or self.lone_calls == calls:
                self._wanted = False
                break
        stash, self.stash = self.stash, None
        return stash

    def wake(self) -> None:
        """Put the reader back on the socket (now, or as soon as it runs if it is waking)."""
        task, self.lender = self.lender, None
        if task is not None:
            trio.lowlevel.reschedule(task)
        else:
            self._wanted = True

    async def call(self, request: RemotingCommand, opaque: int, slot: LoneSlot) -> bool:
        """A lone call: send, then read in this task until the response (or the deadline, or
        close). True if it handed the reading back: the caller then waits as any call does."""
        st, sock = self._state, self._sock
        self.reading_call = slot
        slot.reading = True
        self.lone_calls += 1
        sent = handed_back = False
        try:
            drained = not sock.readable_now()
            while not slot.done:
                if drained and not sent:
                    if st.closed:
                        break
                    st.queue_request(request, opaque)
                    sent = True
                    if not st.flush_soon:
                        self._writer.send_queued()
                    if st.queued_bytes > self._writer.limit:
                        handed_back = True  # the reader applies the backpressure
                        break
                try:
                    data, _ = await sock.receive(drained)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    if not (st.closed or slot.done):  # (done: its deadline interrupted the wait)
                        st.close_reason = st.close_reason or f"read failed: {exc}"
                        await self._abort(st.close_reason)
                    break
                commands = self._ingest(data)
                if commands is None:
                    await self._abort(st.close_reason or "closed")
                    break
                drained = len(data) < READ_CHUNK_BYTES
                nursery = self._nursery
                if st.closed or nursery is None:
                    break
                _, _, self.stash = await self._take(commands, nursery, True)
                if self.stash is not None:
                    handed_back = True
                    break
                if not drained:
                    await trio.lowlevel.checkpoint()  # (everything read is handled)
        finally:
            slot.reading = False
            self.reading_call = None
            if not handed_back:
                st.end_call(opaque)
            if not st.lone_call_keeps_lending(slot):
                self.wake()  # not a lone call any more: the reader reads again
        if handed_back and not sent:  # the reader took over before this call's turn to send
            await self._writer.write(request, opaque)
        if not sent and not handed_back and st.closed:
            slot.error = RemotingUnsentError(f"connection to {st.peer} closed: {st.close_reason}")
        return handed_back
