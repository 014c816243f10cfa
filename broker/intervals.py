"""The waits of a background loop whose period is a config key that may change while it runs.

``LiveInterval.wait()`` sleeps one period, read when the wait starts; ``changed()`` (installed as
a config listener, ``BrokerContext.config_listeners``) moves the end of the wait in progress to
its start plus the period read now: a period shortened from 60 s to 1 s ends the current wait
a second after it began (at once if that is past), instead of up to a minute later.
"""

from __future__ import annotations

from collections.abc import Callable

import trio


class LiveInterval:
    def __init__(self, period_s: Callable[[], float]) -> None:
        self._period_s = period_s
        self._started = 0.0
        self._scope: trio.CancelScope | None = None

    async def wait(self) -> None:
        """Return one period (as it is when it ends) after the call."""
        self._started = trio.current_time()
        with trio.CancelScope(deadline=self._started + self._period_s()) as scope:
            self._scope = scope
            try:
                await trio.sleep_forever()
            finally:
                self._scope = None

    def changed(self) -> None:
        """The period may have changed: re-time the wait in progress."""
        if self._scope is not None:
            self._scope.deadline = self._started + self._period_s()
