"""``Watermark``: a monotonically rising offset tasks wait on (the group-commit primitive).

One ``trio.Event`` per advance wakes every waiter whose target the new value reaches: SYNC_FLUSH
puts wait on the store's flush watermark, SYNC_MASTER puts on the HA ack watermark. Its own
module (below ``message_store.py`` and ``flush.py``) so the store facade and its Trio services
do not import each other.
"""

from __future__ import annotations

import trio


class Watermark:
    """A monotonically rising offset that tasks can wait on."""

    __slots__ = ("_event", "value")

    def __init__(self, value: int = 0) -> None:
        self.value = value
        self._event = trio.Event()

    def advance(self, value: int) -> None:
        if value > self.value:
            self.value = value
            event, self._event = self._event, trio.Event()
            event.set()

    async def wait_for(self, target: int) -> None:
        while self.value < target:
            await self._event.wait()
