"""Long polling (RocketMQ ``PullRequestHoldService``): pulls parked until a message arrives.

A parked pull waits on an Event that the store's arrival callback sets when a message for its
queue is dispatched past the pull's offset and its tagsCode matches the pull's filter. The wait
has the pull's own deadline (suspendTimeoutMillis): nothing polls on a 5 s tick.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

TagsFilter = Callable[[int], bool]


class _Waiter:
    __slots__ = ("event", "filter", "offset")

    def __init__(self, offset: int, tags_filter: TagsFilter | None) -> None:
        self.offset = offset
        self.filter = tags_filter
        self.event = trio.Event()


class PullRequestHoldService:
    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self._waiters: dict[tuple[str, int], list[_Waiter]] = {}
        self._on_change = on_change

    @property
    def parked(self) -> int:
        return sum(len(ws) for ws in self._waiters.values())

    def notify_message_arriving(
        self, topic: str, queue_id: int, max_offset: int, tags_code: int, _store_ts: int = 0
    ) -> None:
        """The store's arrival callback: ``max_offset`` is the queue's next offset."""
        if not self._waiters:
            return
        key = (topic, queue_id)
        waiters = self._waiters.get(key)
        if not waiters:
            return
        keep = []
        for w in waiters:
            if max_offset > w.offset and (w.filter is None or w.filter(tags_code)):
                w.event.set()
            else:
                keep.append(w)
        if keep:
            self._waiters[key] = keep
        else:
            del self._waiters[key]

    async def hold(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        timeout_s: float,
        tags_filter: TagsFilter | None = None,
    ) -> bool:
        """Park until a matching message past ``offset`` arrives (True) or ``timeout_s`` (False)."""
        waiter = _Waiter(offset, tags_filter)
        key = (topic, queue_id)
        self._waiters.setdefault(key, []).append(waiter)
        if self._on_change is not None:
            self._on_change()
        try:
            with trio.move_on_after(timeout_s):
                await waiter.event.wait()
                return True
            return False
        finally:
            ws = self._waiters.get(key)
            if ws and waiter in ws:
                ws.remove(waiter)
                if not ws:
                    del self._waiters[key]

    def wake_all(self) -> None:
        """Answer every parked pull now (shutdown)."""
        for ws in self._waiters.values():
            for w in ws:
                w.event.set()
        self._waiters.clear()
