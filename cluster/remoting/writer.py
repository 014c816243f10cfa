"""The send side of one remoting connection: a coalescing writer over its ``Socket`` (Trio shell).

Frames are encoded into the connection state's ``out`` (``ConnectionState.queue_request`` and
the answers the state machine queues); the writer sees them onto the socket:

* what is queued goes out in one ``send``, or one ``sendmsg`` when bodies are queued as
  buffers of their own (``ConnectionState.take_outbound``: scatter-gather, no copy);
* a frame ready alone is sent at once, in the task that queued it (``send_queued``): when the
  kernel takes it all, no trip through the scheduler;
* a task that expects more frames in this scheduling batch (``gather``) lets them queue behind
  its own with one checkpoint, then sends them all with one ``send``;
* what the kernel does not take at once is sent by one flusher task, which owns the send side
  until ``out`` is empty;
* writers (and the connection's reader) wait in ``backpressure`` while more than ``limit``
  bytes are queued.

Invariants:

1. At most one flusher runs, exactly while ``state.flushing``; meanwhile nothing else sends
   (``take_outbound`` returns None) and frames queue behind it: bytes go out in queued order.
2. ``state.flush_soon`` is set only while one gathering task is at its checkpoint, which is
   shielded from cancellation: that task sends what queued behind it (its frame is owed a send).
3. A task waiting for room is woken once ``out`` is at most ``limit`` again, or on close
   (``release``); nothing starts waiting for room once the connection is closed.
4. A failed send, or a peer that takes nothing for ``WRITE_TIMEOUT_S``, closes the connection
   (``abort``, the connection's close), never fails the task that queued the frame.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Final

import trio

from .codec import RemotingCommand
from .connection_state import ConnectionState
from .errors import RemotingClosedError
from .sockets import WRITE_TIMEOUT_S as SOCKET_WRITE_TIMEOUT_S
from .sockets import Socket

#: A send that cannot complete in this long means the peer stopped reading: the connection closes
#: (the socket layer's one figure).
WRITE_TIMEOUT_S: Final = SOCKET_WRITE_TIMEOUT_S


class Writer:
    """See the module docstring. ``abort(reason)`` closes the connection; ``nursery`` (the
    connection's, set once it runs) is where the flusher and a failed send's close run."""

    __slots__ = ("_abort", "_drained", "_sock", "_state", "limit", "nursery")

    def __init__(
        self, state: ConnectionState, sock: Socket, abort: Callable[[str], Awaitable[None]],
        *, limit: int,
    ) -> None:
        self._state = state
        self._sock = sock
        self._abort = abort
        self.limit = limit  # bytes queued past which writers wait for the peer to read
        self.nursery: trio.Nursery | None = None
        self._drained: trio.Event | None = None  # set when ``out`` is back within ``limit``

    async def write(self, cmd: RemotingCommand, opaque: int, gather: bool = False) -> None:
        """Queue one frame and see it on its way. ``gather``: more frames are likely in this
        scheduling batch: let them queue (one checkpoint) and send them in one go."""
        st = self._state
        if st.closed:
            raise RemotingClosedError(f"connection to {st.peer} is closed")
        st.queue_request(cmd, opaque)
        if gather and not st.flush_soon and not st.flushing:
            await self.gather()
        if not st.flush_soon:
            self.send_queued()
        if st.queued_bytes > self.limit:
            await self.backpressure()

    async def gather(self) -> None:
        """Let this scheduling batch's other frames queue (the caller sends them all)."""
        st = self._state
        st.flush_soon = True
        try:  # not cancellable: the frame is queued and this task owes it a send
            await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            st.flush_soon = False

    async def backpressure(self) -> None:
        """Wait for the peer to read while more than ``limit`` bytes are queued."""
        if self._state.queued_bytes > self.limit and not self._state.closed:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()

    def send_queued(self) -> None:
        """Send what is queued as far as the kernel takes it now; a flusher task does the rest.
        Raises RuntimeError if a flusher is needed before the connection runs."""
        chunk = self._state.take_outbound()
        if chunk is None:
            return
        try:
            if isinstance(chunk, list):
                sent = self._sock.try_sendmsg(chunk)
                total = sum(map(len, chunk))
            else:
                sent = self._sock.try_send(chunk)
                total = len(chunk)
        except trio.BrokenResourceError as exc:
            self._fail_soon(f"send failed: {exc}")
            return
        if sent == total:
            if self._drained is not None:
                self._drained.set()
                self._drained = None
            return
        if self.nursery is None:
            raise RuntimeError("connection is not running")
        # the rest in one buffer (a peer that reads slowly is not worth avoiding the copy)
        rest = bytearray().join(chunk) if isinstance(chunk, list) else chunk
        self._state.flushing = True
        self.nursery.start_soon(self._flusher, memoryview(rest)[sent:])

    def release(self) -> None:
        """The connection closed: whoever waits for room goes on (and finds it closed)."""
        if self._drained is not None:
            self._drained.set()

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
                        st.close_reason = f"peer took nothing for {WRITE_TIMEOUT_S:g}s"
                        await self._abort(st.close_reason)
                        return
                    view = view[self._sock.try_send(view) :]
                if self._drained is not None and st.queued_bytes <= self.limit:
                    self._drained.set()
                    self._drained = None
                if not st.queued_bytes:
                    return
                view = memoryview(st.take_all())
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ValueError) as exc:
            await self._abort(f"send failed: {exc}")  # ValueError: fd -1 (closed meanwhile)
        finally:
            st.flushing = False

    def _fail_soon(self, reason: str) -> None:
        """A send failed in a task that must not wait: close in a task of its own."""
        st = self._state
        st.close_reason = st.close_reason or reason
        if self.nursery is not None:  # RuntimeError: run() is ending (it aborts on its way)
            with contextlib.suppress(RuntimeError):
                self.nursery.start_soon(self._abort, reason)
