"""Long polling for POP_MESSAGE and NOTIFICATION: a request that found nothing waits (at most
its pollTime) until a message arrives for one of its topics, then tries once more.

One ``trio.Event`` per parked request, registered under each topic it reads (the topic and its
pop retry topic); the store's arrival callback sets those of the arriving topic. At most
``max_parked`` requests wait at once; more are answered POLLING_FULL at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio


class PopPolling:
    def __init__(self, max_parked: int) -> None:
        self.max_parked = max_parked
        #: topic -> the events of the requests parked on it (a topic is a key only while one
        #: is parked: the arrival of a message elsewhere asks no more than ``in``)
        self.parked_by_topic: dict[str, set[trio.Event]] = {}
        self.parked = 0
        #: parked requests per (topic, group): POLLING_INFO answers it
        self._per_key: dict[tuple[str, str], int] = {}

    def full(self) -> bool:
        return self.parked >= self.max_parked

    def polling_num(self, topic: str, group: str) -> int:
        return self._per_key.get((topic, group), 0)

    def notify(self, topic: str) -> None:
        for event in self.parked_by_topic.get(topic, ()):
            event.set()

    async def wait(self, topics: Sequence[str], key: tuple[str, str], timeout_s: float) -> None:
        """Wait until a message arrives in one of ``topics`` or ``timeout_s`` passes."""
        event = trio.Event()
        for topic in topics:
            self.parked_by_topic.setdefault(topic, set()).add(event)
        self.parked += 1
        self._per_key[key] = self._per_key.get(key, 0) + 1
        try:
            with trio.move_on_after(timeout_s):
                await event.wait()
        finally:
            self.parked -= 1
            left = self._per_key[key] - 1
            if left:
                self._per_key[key] = left
            else:
                del self._per_key[key]
            for topic in topics:
                waiting = self.parked_by_topic.get(topic)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self.parked_by_topic[topic]
