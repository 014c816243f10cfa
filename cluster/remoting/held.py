"""The one way work waits for an offset: a watermark and the answers held until it passes them
(SYNC_FLUSH, SYNC_MASTER and DLedger sends, and tasks that wait through ``store/watermark.py``).
Pure: no trio."""

from __future__ import annotations

import array
import bisect
import math
import time
from collections.abc import Callable
from typing import Protocol

import attrs

from ..logging import get_logger
from .codec import FrameDecoder, RemotingCommand, encode_into
from .codes import FLAG_RESPONSE
from .processors import LATER, Later


class HeldReceiver(Protocol):
    """What held answers are released to: a connection (its answers' frames), or a task's
    wakeup (``store/watermark.py``: no frames)."""

    def _held_released(self, frames: bytearray, n: int) -> None: ...


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


#: Rewrites a held answer whose deadline passed (the answer as held, its key).
ExpiredAnswer = Callable[[RemotingCommand, int], RemotingCommand]


class HeldAnswers:
    """A watermark (``mark``: a rising offset, never going back) and the answers held until it
    reaches their key, or their deadline passes: a SYNC_FLUSH send's answer waits until the
    flush passed the message's end offset, a SYNC_MASTER one until a slave acked past it, a
    DLedger one until the group committed its entry.

    ``hold`` encodes the answer at once (as an inline answer is encoded) into its receiver's
    queue with its key and deadline; ``advance(mark)`` raises the mark and moves every answer
    whose key is at most ``mark`` to its receiver in one call; ``expire(now)`` answers those
    whose deadline passed with ``expired_answer(answer, key)`` instead (decoded again from the
    held frame: a rare path keeps nothing per answer). ``wait`` holds an empty frame for a
    task's wakeup. Keys and deadlines rise within a receiver (a connection's requests are
    handled in order and their keys are assigned in that order), so each release or expiry
    takes a prefix.

    A held send costs four array appends beside its encoding: no object, callback or task per
    request, and the kept state is bytes and numbers, nothing for the garbage collector.
    """

    def __init__(
        self,
        expired_answer: ExpiredAnswer,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        mark: int = 0,
    ) -> None:
        self.expired_answer = expired_answer
        self.timeout_s = timeout_s
        #: the clock of deadlines, ``next_deadline`` and ``expire`` (a plain C call per hold:
        #: trio's clock is a Python method, ~0.3 us a send more)
        self.clock = clock
        #: the watermark: every key at most this has been released
        self.mark = mark
        self._queues: dict[HeldReceiver, _HeldQueue] = {}
        #: the smallest key held (inf: none): an advance below it releases nothing, at no cost
        self._min_key: float = math.inf
        self.waiting = 0  # answers held now
        self.held_total = 0  # answers ever held
        self.released_total = 0  # answers released by ``advance``
        self.expired_total = 0  # answers ``expire`` rewrote
        #: called when an answer is held whose deadline comes before ``wake_before`` (the
        #: deadline a sweeper sleeps until; inf while it waits for one)
        self.on_busy: Callable[[], None] | None = None
        self.wake_before = math.inf
        self.log = get_logger(component="held_answers")

    def hold(self, conn: HeldReceiver, opaque: int, response: RemotingCommand, key: int) -> Later:
        """Hold ``response`` (the answer to the request ``opaque`` on ``conn``) until the mark
        reaches ``key`` (the caller answers at once when it already did: ``mark >= key``);
        return ``LATER`` for the processor to return."""
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
            if key < q.keys[-1]:
                key = q.keys[-1]  # keys rise within a receiver (released no earlier)
        # (``_append`` inlined: once per held send)
        deadline = self.clock() + self.timeout_s
        q.keys.append(key)
        q.cuts.append(q.base + len(q.data))
        q.deadlines.append(deadline)
        self.held_total += 1
        self.waiting += 1
        if deadline < self.wake_before and self.on_busy is not None:
            self.wake_before = deadline
            self.on_busy()
        return LATER

    def wait(self, receiver: HeldReceiver, key: int, deadline: float) -> None:
        """Hold an empty answer for ``receiver`` (a task's wakeup) until the mark reaches
        ``key`` or ``deadline`` passes; it then gets ``_held_released(b"", 1)``."""
        q = self._queues.get(receiver)
        if q is None:
            q = self._queues[receiver] = _HeldQueue()
            if key < self._min_key:
                self._min_key = key
        else:
            key = max(key, q.keys[-1])
            deadline = max(deadline, q.deadlines[-1])
        self._append(q, key, deadline)

    def _append(self, q: _HeldQueue, key: int, deadline: float) -> None:
        q.keys.append(key)
        q.cuts.append(q.base + len(q.data))
        q.deadlines.append(deadline)
        self.held_total += 1
        self.waiting += 1
        if deadline < self.wake_before and self.on_busy is not None:
            self.wake_before = deadline
            self.on_busy()

    def advance(self, mark: int) -> int:
        """Raise the watermark to ``mark`` (a lower one changes nothing) and send every held
        answer whose key it reaches; how many."""
        if mark <= self.mark:
            return 0
        self.mark = mark
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

    def settle(self, mark: int, term_ended: bool, rewrite: ExpiredAnswer) -> int:
        """One step of a watermark over a replicated log whose uncommitted tail a new leader
        may overwrite (DLedger's quorum commit: keys are entry index + 1, held in the term
        their entries were proposed in): when that term ended, everything held is answered
        with ``rewrite`` first (its entries may be gone, and the indexes the mark passes may
        now hold other entries), then the mark rises to ``mark``; how many went out."""
        out = self.expire_all(rewrite) if term_ended else 0
        return out + self.advance(mark)

    def drop(self, receiver: HeldReceiver) -> int:
        """Forget what ``receiver`` holds, unanswered (a waiting task that gave up: its own
        timeout, or cancelled); how many, counted as expired."""
        q = self._queues.pop(receiver, None)
        if q is None:
            return 0
        n = len(q.keys)
        self.waiting -= n
        self.expired_total += n
        self._reset_min_key()
        return n

    def _reset_min_key(self) -> None:
        self._min_key = min((q.keys[0] for q in self._queues.values()), default=math.inf)

    def expire(self, now: float, rewrite: ExpiredAnswer | None = None) -> int:
        """Answer every held answer whose deadline is at most ``now`` with its expired form
        (``rewrite``'s instead when given: a DLedger term change); how many."""
        rewrite = self.expired_answer if rewrite is None else rewrite
        expired = 0
        for conn, q in list(self._queues.items()):
            deadlines = q.deadlines
            if deadlines[0] > now:
                continue
            n = bisect.bisect_right(deadlines, now)
            keys = q.keys[:n]
            frames = q.take(n)
            if not q.keys:
                del self._queues[conn]
            expired += n
            self.waiting -= n
            self.expired_total += n
            out = bytearray()
            try:
                for held, key in zip(FrameDecoder().feed(frames), keys, strict=False):
                    encode_into(out, rewrite(held, key), held.opaque)
            except Exception:  # the caller (a sweeper) must go on: these calls time out
                self.log.exception("held answers not rewritable", answers=n)
                out = bytearray()
            conn._held_released(out, n)
        self._reset_min_key()
        return expired

    def expire_all(self, rewrite: ExpiredAnswer | None = None) -> int:
        """Every held answer in its expired form, or as ``rewrite`` makes it (nothing held now
        may be released by a later ``advance``: the mark stopped, or what it counts changed
        meaning, as a DLedger log's tail does when its leader's term ends)."""
        return self.expire(math.inf, rewrite)

    def next_deadline(self) -> float | None:
        """The earliest deadline of a held answer (None: nothing held)."""
        if not self._queues:
            return None
        return min(q.deadlines[0] for q in self._queues.values())
