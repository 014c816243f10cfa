"""Which receipt handles of ``auto_renew`` receives the proxy renews, when, and when it stops, as
Apache's proxy (5.3.1, ``DefaultReceiptHandleManager``, ``ReceiptHandleGroup``,
``MessageReceiptHandle``) decides it (docs/protocol/grpc.md, "A receive's invisible time").

Handles are kept per client and group (Apache's ``ReceiptHandleGroupKey``: the client's channel
and the group), then per message id and the message's broker, queue and offset (its
``HandleKey``). Every ``renewSchedulePeriodMillis`` a scan renews each handle whose invisible
time ends within ``renewAheadTimeMillis``: its n-th renewal asks the n-th invisible time of
``RenewStrategyPolicy`` (1 m, 3 m, 5 m, 10 m, 30 m, then 1 h) and the broker's new handle
replaces the one kept. A handle kept ``renewMaxTimeMillis`` since its pop is renewed no more: it
is given back with the group's retry delay (the default ``CustomizedRetryPolicy``, by its
reconsume times). A renewal that fails is tried again at the next scans, up to
``maxRenewRetryTimes`` (none for a handle the broker calls invalid). The client's ack, change
of invisible time or DLQ forward takes the handle out (and acts on the newest one kept); a
client gone (it said so, or was not seen for ``channelExpiredTimeout``) has all its handles
given back with ``invisibleTimeMillisWhenClear``.

Pure: values and times (milliseconds) in, steps out; the Trio shell (proxy/renewer.py) makes
the calls. At most ``max_handles`` are kept and ``max_in_flight`` renewals are under way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import attrs

#: Apache's ``RenewStrategyPolicy``: the invisible time of a handle's first, second, ...
#: renewal (the last one for every renewal after)
#: the longest client id and message id a kept handle may carry (the SDKs' are under 100
#: characters; a longer one is not renewed, so that ``max_handles`` bounds the memory kept)
MAX_ID_CHARS: Final = 256
RENEW_POLICY_MS: Final = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
#: Apache's ``CustomizedRetryPolicy`` (a group's retry policy when it sets none, as ours never
#: do): a message renewed for ``renewMaxTimeMillis`` turns visible after
#: ``next[reconsumeTimes + 2]`` (1 s 5 s 10 s 30 s 1 m 2 m ... 10 m 20 m 30 m 1 h 2 h)
RETRY_POLICY_MS: Final = (
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
    420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
)


def retry_delay_ms(reconsume_times: int) -> int:
    """``CustomizedRetryPolicy.nextDelayDuration``: the delay of a message consumed
    ``reconsume_times`` times before."""
    return RETRY_POLICY_MS[min(max(reconsume_times, 0) + 2, len(RETRY_POLICY_MS) - 1)]


@attrs.frozen
class RenewSettings:
    """Apache's ProxyConfig names: ``renewAheadTimeMillis``, ``renewMaxTimeMillis``,
    ``maxRenewRetryTimes``, ``invisibleTimeMillisWhenClear``, ``channelExpiredTimeout``; and
    ours: how many handles are kept at most, how many renewals may be under way at once
    (Apache's renew pool queues 300: ``renewThreadPoolQueueCapacity``), the renewals'
    invisible times (``RenewStrategyPolicy``)."""

    ahead_ms: int = 10_000
    max_time_ms: int = 3 * 3600 * 1000
    max_retry_times: int = 3
    clear_invisible_ms: int = 1_000
    channel_expired_ms: int = 120_000
    max_handles: int = 100_000
    max_in_flight: int = 300
    policy_ms: tuple[int, ...] = RENEW_POLICY_MS


#: whose handles: (client id, consumer group)
GroupKey = tuple[str, str]


@attrs.frozen
class HandleKey:
    """One message of a group key: its id and where it is (Apache dedups by broker, queue
    and offset under the message id)."""

    msg_id: str
    broker: str
    queue_id: int
    offset: int


@attrs.frozen
class Held:
    """A handle kept: ``original`` is the one the client got, ``current`` the newest the broker
    gave (``visible_at_ms``: when it turns visible); ``first_pop_ms`` when it was popped."""

    client: str
    group: str
    topic: str
    key: HandleKey
    original: str
    current: str
    visible_at_ms: int
    first_pop_ms: int
    reconsume_times: int = 0
    renew_times: int = 0
    retry_times: int = 0

    @property
    def where(self) -> tuple[GroupKey, HandleKey]:
        return (self.client, self.group), self.key


@attrs.frozen
class Renew:
    """Change ``held.current``'s invisible time to ``invisible_ms`` and keep renewing."""

    held: Held
    invisible_ms: int


@attrs.frozen
class GiveBack:
    """Change ``held.current``'s invisible time to ``invisible_ms`` and renew it no more
    (``why``: "max renew time" or "client gone")."""

    held: Held
    invisible_ms: int
    why: str


Step = Renew | GiveBack


@attrs.frozen
class Busy:
    """``take``'s answer while a renewal of the handle (at ``where``) is under way: wait for
    it, then take again."""

    where: tuple[GroupKey, HandleKey]


class RenewalBook:
    """The handles kept and their renewals under way (one per handle at most)."""

    def __init__(self, settings: RenewSettings) -> None:
        self.settings = settings
        self._held: dict[GroupKey, dict[HandleKey, Held]] = {}
        #: when each group key's client was last seen (only group keys holding handles)
        self._seen: dict[GroupKey, int] = {}
        #: (group, original handle) -> where: an ack quoting it from any client finds it
        self._by_original: dict[tuple[str, str], tuple[GroupKey, HandleKey]] = {}
        #: renewals under way, and those whose client went away meanwhile (given back after)
        self._busy: set[tuple[GroupKey, HandleKey]] = set()
        self._orphans: set[tuple[GroupKey, HandleKey]] = set()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def in_flight(self) -> int:
        return len(self._busy)

    def add(self, held: Held, now_ms: int) -> bool:
        """Keep ``held`` (in place of one of the same key); False when ``max_handles`` are
        kept already, or its client or message id is longer than ``MAX_ID_CHARS`` (it is not
        renewed)."""
        if len(held.client) > MAX_ID_CHARS or len(held.key.msg_id) > MAX_ID_CHARS:
            return False
        gk, hk = held.where
        group = self._held.get(gk)
        old = group.get(hk) if group is not None else None
        if old is None and self._count >= self.settings.max_handles:
            return False
        if old is not None:
            self._by_original.pop((old.group, old.original), None)
        else:
            self._count += 1
        self._held.setdefault(gk, {})[hk] = held
        self._seen[gk] = now_ms
        self._by_original[(held.group, held.original)] = held.where
        return True

    def seen(self, client: str, group: str, now_ms: int) -> None:
        """The client showed it is alive in ``group`` (a heartbeat, its settings, a receive)."""
        if (client, group) in self._seen:
            self._seen[(client, group)] = now_ms

    def take(self, client: str, group: str, key: HandleKey | None, handle: str
             ) -> Held | Busy | None:
        """Stop renewing the handle a client acks, changes or forwards: the one ``client``
        keeps under ``key``, else (another client, or no key) the one whose original is
        ``handle``; None when none is kept; ``BUSY`` while its renewal is under way."""
        where = ((client, group), key) if key is not None else None
        if where is None or where[1] not in self._held.get(where[0], {}):
            where = self._by_original.get((group, handle))
        if where is None:
            return None
        if where in self._busy:
            return Busy(where)
        return self._forget(where)

    def _forget(self, where: tuple[GroupKey, HandleKey]) -> Held | None:
        gk, hk = where
        group = self._held.get(gk)
        held = group.pop(hk, None) if group is not None else None
        if held is None:
            return None
        self._count -= 1
        self._by_original.pop((held.group, held.original), None)
        if not group:
            del self._held[gk]
            self._seen.pop(gk, None)
        return held

    def due(self, now_ms: int) -> list[Step]:
        """The scan: every client gone given back, then the renewals due (each marked under
        way until ``renewed``/``failed``/``finished``), up to ``max_in_flight`` under way."""
        steps: list[Step] = []
        expired = [gk for gk, at in self._seen.items()
                   if now_ms - at > self.settings.channel_expired_ms]
        for gk in expired:
            steps += self.gone(gk[0], gk[1])
        for held in self._scan():
            if len(self._busy) >= self.settings.max_in_flight:
                break
            step = self._step(held, now_ms)
            if step is not None:
                self._busy.add(held.where)
                steps.append(step)
        return steps

    def _scan(self) -> Iterator[Held]:
        for group in self._held.values():
            yield from (h for h in group.values() if h.where not in self._busy)

    def _step(self, held: Held, now_ms: int) -> Step | None:
        s = self.settings
        if held.visible_at_ms - now_ms > s.ahead_ms:
            return None
        if now_ms - held.first_pop_ms >= s.max_time_ms:
            return GiveBack(held, retry_delay_ms(held.reconsume_times), "max renew time")
        return Renew(held, s.policy_ms[min(held.renew_times, len(s.policy_ms) - 1)])

    def renewed(self, held: Held, current: str, visible_at_ms: int) -> GiveBack | None:
        """The broker renewed ``held`` with the new handle ``current``: kept in its place
        (its client gone meanwhile: a GiveBack of the new one to make)."""
        changed = attrs.evolve(held, current=current, visible_at_ms=visible_at_ms,
                               renew_times=held.renew_times + 1, retry_times=0)
        if self._end(held.where):
            return GiveBack(changed, self.settings.clear_invisible_ms, "client gone")
        self._replace(changed)
        return None

    def failed(self, held: Held, *, retry: bool) -> GiveBack | None:
        """The renewal failed: tried again at a next scan (``retry``, up to
        ``max_retry_times``), else renewed no more."""
        orphan = self._end(held.where)
        if orphan:
            return GiveBack(held, self.settings.clear_invisible_ms, "client gone")
        if retry and held.retry_times + 1 < self.settings.max_retry_times:
            self._replace(attrs.evolve(held, retry_times=held.retry_times + 1))
        else:
            self._forget(held.where)
        return None

    def finished(self, held: Held) -> None:
        """A GiveBack was made (or failed): the handle is kept no more."""
        self._end(held.where)
        self._forget(held.where)

    def _end(self, where: tuple[GroupKey, HandleKey]) -> bool:
        """The renewal at ``where`` is over; True when its client went away meanwhile."""
        self._busy.discard(where)
        if where in self._orphans:
            self._orphans.discard(where)
            return True
        return False

    def _replace(self, held: Held) -> None:
        gk, hk = held.where
        group = self._held.get(gk)
        if group is not None and hk in group:  # (not taken meanwhile)
            group[hk] = held

    def gone(self, client: str, group: str | None = None) -> list[GiveBack]:
        """``client`` went away (from ``group``; None: from all): its handles, to give back with
        ``clear_invisible_ms``; those under renewal are given back when it ends."""
        keys = [gk for gk in self._held if gk[0] == client and group in (None, gk[1])]
        out = []
        for gk in keys:
            for held in list(self._held[gk].values()):
                self._forget(held.where)
                if held.where in self._busy:
                    self._orphans.add(held.where)
                else:
                    out.append(GiveBack(held, self.settings.clear_invisible_ms, "client gone"))
        return out

    def everything(self) -> list[GiveBack]:
        """At shutdown: every handle not under renewal, to give back (Apache's
        ``clearAllHandle``)."""
        clients = {gk[0] for gk in self._held}
        return [step for client in clients for step in self.gone(client)]
