"""``Watermark``: a rising offset and everything that waits for it to pass a point -- the Trio
shell of the one waiting primitive, ``HeldAnswers`` (``cluster/remoting/held.py``).

A send's answer waits as bytes held in it (SYNC_FLUSH: the store's flush watermark; SYNC_MASTER:
the slaves' ack watermark; both: their minimum); a task waits with ``wait_for`` (a wakeup held
the same way). ``advance`` releases both kinds in one pass; ``run``, the one task a watermark
with deadlines needs, answers what waited past its deadline (its expired form). Its own module
(below ``message_store.py`` and ``flush.py``) so the store facade and its Trio services do not
import each other.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import trio
import trio.testing

from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.held import ExpiredAnswer, HeldAnswers, HeldReceiver
from ..cluster.remoting.processors import Later


def keep_answer(answer: RemotingCommand, key: int) -> RemotingCommand:
    """The expired form of a watermark that nothing times out: the answer as held."""
    return answer


class _Wakeup:
    """A task waiting in ``Watermark.wait_for``: released (or expired) once, sets its event."""

    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = trio.Event()

    def _held_released(self, frames: bytearray, n: int) -> None:
        self.event.set()


class Watermark:
    """A monotonically rising offset; answers are held on it and tasks wait for it."""

    __slots__ = ("_work", "followers", "held")

    def __init__(
        self,
        value: int = 0,
        *,
        expired_answer: ExpiredAnswer = keep_answer,
        timeout_s: float = math.inf,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.held = HeldAnswers(expired_answer, timeout_s, clock, mark=value)
        #: called after each rise (a watermark derived from this one: ``MessageStore``)
        self.followers: list[Callable[[], None]] = []
        self._work: trio.Event | None = None  # set to wake the sweeper (``run``)
        self.held.on_busy = self._wake_sweeper

    @property
    def value(self) -> int:
        return self.held.mark

    def advance(self, value: int) -> None:
        """Raise the watermark (a lower ``value`` changes nothing): what it passes goes out."""
        held = self.held
        if value > held.mark:
            held.advance(value)
            for follow in self.followers:
                follow()

    def settle(self, value: int, term_ended: bool, rewrite: ExpiredAnswer) -> None:
        """``HeldAnswers.settle``: a term change answers what is held, then the rise."""
        held = self.held
        rose = value > held.mark
        held.settle(value, term_ended, rewrite)
        if rose:
            for follow in self.followers:
                follow()

    def hold(self, conn: HeldReceiver, opaque: int, response: RemotingCommand, key: int) -> Later:
        """Hold an encoded answer until the watermark reaches ``key`` (see ``HeldAnswers``)."""
        return self.held.hold(conn, opaque, response, key)

    async def wait_for(self, target: int, timeout_s: float | None = None) -> bool:
        """Wait until the watermark reaches ``target``: True, or False once ``timeout_s``
        (default: none) passed first, or the watermark was expired (it stopped)."""
        held = self.held
        if held.mark >= target:
            return True
        wakeup = _Wakeup()
        held.wait(wakeup, target, math.inf)  # (its own timeout, below: no sweeper needed)
        try:
            with trio.move_on_after(math.inf if timeout_s is None else timeout_s):
                await wakeup.event.wait()
        finally:
            if not wakeup.event.is_set():  # timed out or cancelled: nothing waits any more
                held.drop(wakeup)
        return held.mark >= target

    def expire_all(self, rewrite: ExpiredAnswer | None = None) -> int:
        """Answer everything waiting in its expired form (the watermark stops moving), or as
        ``rewrite`` makes it (what waited may never pass: a DLedger term change)."""
        return self.held.expire_all(rewrite)

    def _wake_sweeper(self) -> None:
        if self._work is not None:
            self._work.set()

    async def run(self) -> None:
        """Expire what waited past its deadline, until cancelled (then expire the rest). The
        deadlines follow trio's clock under a ``MockClock``, else the monotonic clock."""
        held = self.held
        clock = trio.lowlevel.current_clock()
        if isinstance(clock, trio.testing.MockClock):
            held.clock = clock.current_time
        try:
            while True:
                first = held.next_deadline()
                self._work = trio.Event()
                if first is None or first == math.inf:
                    held.wake_before = math.inf
                    await self._work.wait()
                    continue
                held.wake_before = first
                with trio.move_on_after(max(0.0, first - held.clock())):
                    await self._work.wait()  # (an earlier deadline came)
                held.expire(held.clock())
        finally:
            self._work = None
            held.wake_before = math.inf
            held.expire_all()
