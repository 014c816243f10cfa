"""Long polling (RocketMQ ``PullRequestHoldService``): pulls parked until a message arrives.

A parked pull is an object (``Parked``), not a task: it sits in its queue's list and in one
deadline heap. The store's arrival callback moves the pulls a message for their queue wakes
(dispatched past the pull's offset, its tagsCode matching the pull's filter) to a ready list;
the service's one task (``run``) then calls each one's ``wake`` -- the pull processor queues
its answer on its connection -- and wakes the pulls whose own deadline (suspendTimeoutMillis)
passed; after each batch of wakes, the batch-end callback (``on_batch_end``: the pull
processor sends each connection's queued answers, one send per connection, no task).
Nothing polls on a 5 s tick, and a thousand parked pulls cost a thousand small objects, not a
thousand tasks, Events and cancel scopes.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import trio

from ..cluster.logging import get_logger

TagsFilter = Callable[[int], bool]
log = get_logger(role="long_polling")

#: Woken pulls answered in one step of the service's task: each one reads its queue and encodes
#: its answer (~0.1-0.3 ms), so a dispatch round that wakes a thousand parked pulls (a topic of
#: 1024 queues, one message each) would hold the event loop for a third of a second, and every
#: other request (an offset query, a send) waits for it; the rest is answered after a yield.
WAKES_PER_STEP = 32

#: The heap is rebuilt from the pulls still parked when it holds this many more entries than
#: twice their number (pulls woken by a message leave their entry behind until then).
_COMPACT_SLACK = 1024


class Parked:
    """One parked pull: its queue's offset to pass, its tags filter, and ``wake()``, called
    once, from the service's task, when a message arrived or its deadline (Trio clock, set by
    ``park``) passed. Subclass it (the pull processor does) or pass ``on_wake``."""

    __slots__ = ("deadline", "done", "filter", "key", "offset", "on_wake")

    def __init__(
        self, offset: int, tags_filter: TagsFilter | None = None,
        on_wake: Callable[[], None] | None = None,
    ) -> None:
        self.offset = offset
        self.deadline = math.inf
        self.filter = tags_filter
        self.on_wake = on_wake
        self.key: tuple[str, int] | None = None
        self.done = False

    def wake(self) -> None:
        on_wake, self.on_wake = self.on_wake, None
        if on_wake is not None:
            on_wake()


class PullRequestHoldService:
    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self._waiters: dict[tuple[str, int], list[Parked]] = {}
        self._count = 0
        self._heap: list[tuple[float, int, Parked]] = []
        self._seq = 0
        self._ready: list[Parked] = []
        self._kick: trio.Event | None = None  # set to wake ``run`` (None: it is not asleep)
        self._armed = math.inf  # the deadline ``run`` sleeps until
        self._on_change = on_change
        self._batch_end: Callable[[], None] | None = None

    def on_batch_end(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after each batch of ``wake()`` calls (the pull processor sends the
        answers its woken pulls queued: one send per connection per batch, no task)."""
        self._batch_end = callback

    @property
    def parked(self) -> int:
        return self._count

    def park(self, topic: str, queue_id: int, waiter: Parked, timeout_s: float) -> None:
        """Hold ``waiter`` until a matching message past its offset arrives or ``timeout_s``
        passes; then its ``wake()`` runs in ``run``'s task."""
        waiter.deadline = trio.current_time() + timeout_s
        key = waiter.key = (topic, queue_id)
        ws = self._waiters.get(key)
        if ws is None:
            self._waiters[key] = [waiter]
        else:
            ws.append(waiter)
        self._count += 1
        heap = self._heap
        self._seq += 1
        heapq.heappush(heap, (waiter.deadline, self._seq, waiter))
        if len(heap) > 2 * self._count + _COMPACT_SLACK:
            self._heap = [e for e in heap if not e[2].done]
            heapq.heapify(self._heap)
        if waiter.deadline < self._armed:
            self._wake_run()
        if self._on_change is not None:
            self._on_change()

    def notify_message_arriving(
        self, topic: str, queue_id: int, max_offset: int, tags_code: int, _store_ts: int = 0
    ) -> None:
        """The store's arrival callback: ``max_offset`` is the queue's next offset."""
        if not self._count:
            return
        key = (topic, queue_id)
        waiters = self._waiters.get(key)
        if not waiters:
            return
        keep = None
        ready = self._ready
        woke = False
        for w in waiters:
            if max_offset > w.offset and (w.filter is None or w.filter(tags_code)):
                w.done = True
                ready.append(w)
                woke = True
            elif keep is None:
                keep = [w]
            else:
                keep.append(w)
        if not woke:
            return
        self._count -= len(waiters) - (len(keep) if keep else 0)
        if keep:
            self._waiters[key] = keep
        else:
            del self._waiters[key]
        self._wake_run()

    def _wake_run(self) -> None:
        kick = self._kick
        if kick is not None:
            self._kick = None
            kick.set()

    def _unpark(self, w: Parked) -> None:
        w.done = True
        ws = self._waiters.get(w.key)  # type: ignore[arg-type]
        if ws is not None:
            ws.remove(w)
            if not ws:
                del self._waiters[w.key]  # type: ignore[arg-type]
        self._count -= 1

    def _due(self, now: float) -> list[Parked]:
        """The pulls to wake now, at most ``WAKES_PER_STEP``: those a message woke, then those
        whose deadline passed."""
        ready = self._ready
        if len(ready) >= WAKES_PER_STEP:
            due, self._ready = ready[:WAKES_PER_STEP], ready[WAKES_PER_STEP:]
            return due
        due, self._ready = ready, []
        heap = self._heap
        while heap and heap[0][0] <= now and len(due) < WAKES_PER_STEP:
            w = heapq.heappop(heap)[2]
            if not w.done:
                self._unpark(w)
                due.append(w)
        return due

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The service's one task: wakes the parked pulls that are due, as they come due."""
        task_status.started()
        try:
            while True:
                due = self._due(trio.current_time())
                for w in due:
                    _wake(w)
                if due:
                    self._end_batch()
                if self._ready or len(due) >= WAKES_PER_STEP:  # (more may be due: look again)
                    await trio.lowlevel.checkpoint()
                    continue
                self._armed = self._heap[0][0] if self._heap else math.inf
                kick = self._kick = trio.Event()
                with trio.move_on_at(self._armed):
                    await kick.wait()
                self._kick = None
                self._armed = math.inf
        finally:
            self._kick = None

    def wake_all(self) -> None:
        """Answer every parked pull now (shutdown)."""
        due, self._ready = self._ready, []
        for ws in self._waiters.values():
            for w in ws:
                w.done = True
                due.append(w)
        self._waiters.clear()
        self._heap.clear()
        self._count = 0
        for w in due:
            _wake(w)
        if due:
            self._end_batch(changed=False)

    def _end_batch(self, changed: bool = True) -> None:
        """After a batch of wakes: the batch-end callback, then (``changed``) ``on_change``."""
        if self._batch_end is not None:
            try:
                self._batch_end()
            except Exception:  # the answers' send must not end the service
                log.exception("parked_pull_batch_end_failed")
        if changed and self._on_change is not None:
            self._on_change()


def _wake(w: Parked) -> None:
    try:
        w.wake()
    except Exception:  # one pull's answer must not end the service
        log.exception("parked_pull_wake_failed")
