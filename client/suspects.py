"""Routes to re-read after a broker failed: which topics, how often, until when (pure, no trio).

Apache's client re-reads a topic's route only on its poll (``pollNameServerInterval``, 30 s), so
after a master dies it keeps sending to the dead address, or to none, until the next poll, even
when a new master took over within a second. Ours marks the topic *suspect* for that broker when
a broker serving it fails (no answer, "not available", or it is gone from the route) and the
client instance re-reads the route at once, then every ``poll_s``, until the route names a
master for that broker other than the one that failed, or ``window_s`` has passed (by then the
regular poll has taken over). Times are the caller's monotonic clock, in seconds.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs


@attrs.frozen
class Suspect:
    """A broker of a topic's route that failed at ``failed_addr`` (None: it had no master)."""

    failed_addr: str | None
    until: float


class SuspectRoutes:
    def __init__(self, poll_s: float, window_s: float) -> None:
        self.poll_s = poll_s
        self.window_s = window_s
        self._marks: dict[tuple[str, str], Suspect] = {}
        self._fetched: dict[str, float] = {}

    def mark(self, topic: str, broker_name: str, failed_addr: str | None, now: float) -> None:
        """``broker_name`` failed for ``topic``; a later failure extends the window."""
        self._marks[(topic, broker_name)] = Suspect(failed_addr, now + self.window_s)

    def topics(self, now: float) -> list[str]:
        """The topics still to watch (marks past their window are dropped)."""
        for key, mark in list(self._marks.items()):
            if now >= mark.until:
                del self._marks[key]
        live = {topic for topic, _ in self._marks}
        for topic in list(self._fetched):
            if topic not in live:
                del self._fetched[topic]
        return sorted(live)

    def fetch_due(self, topic: str, now: float) -> bool:
        """True if ``topic``'s route was not re-read in the last ``poll_s`` (bounds the
        NameServer calls many failing sends would make)."""
        last = self._fetched.get(topic)
        return last is None or now - last >= self.poll_s

    def fetched(self, topic: str, now: float) -> None:
        self._fetched[topic] = now

    def settle(self, topic: str, master_addr: Callable[[str], str | None]) -> list[str]:
        """Clear ``topic``'s marks whose broker has a new master now; returns those brokers."""
        settled = []
        for (t, broker), mark in list(self._marks.items()):
            if t != topic:
                continue
            addr = master_addr(broker)
            if addr is not None and addr != mark.failed_addr:
                del self._marks[(t, broker)]
                settled.append(broker)
        return settled

    def __len__(self) -> int:
        return len(self._marks)
