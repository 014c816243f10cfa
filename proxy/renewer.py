"""The Trio shell of the proxy's renewals of ``auto_renew`` receives' receipt handles
(proxy/renewal.py decides): a scan every ``renewSchedulePeriodMillis`` whose renewals and
give-backs are CHANGE_MESSAGE_INVISIBLETIME calls to the broker (``change``, PopBridge's own
call path), each within ``call_timeout_s``, at most ``concurrency`` at once. A failed call is
logged and tried again at a next scan; nothing here fails the proxy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Final

import trio

from ..client.errors import MQBrokerError
from ..cluster.clock import now_ms
from ..cluster.logging import get_logger
from ..cluster.remoting.codes import ResponseCode
from .convert import ProxyError
from .pb import definition_pb2 as pb
from .renewal import Busy, GiveBack, HandleKey, Held, Renew, RenewalBook, RenewSettings, Step

log = get_logger(node="proxy", component="renewer")

#: change(group, topic, handle, invisible ms) -> the broker's new handle and when it turns
#: visible (epoch ms)
Change = Callable[[str, str, str, int], Awaitable[tuple[str, int]]]
#: broker answers that say the handle is no more: not tried again (Apache stops on an invalid
#: handle or broker name)
_FINAL_CODES: Final = frozenset({ResponseCode.NO_MESSAGE, ResponseCode.MESSAGE_ILLEGAL,
                                 ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                 ResponseCode.TOPIC_NOT_EXIST})


def _retry(exc: Exception) -> bool:
    """A failed renewal worth trying again at the next scan."""
    if isinstance(exc, ProxyError):
        return exc.code not in (pb.INVALID_RECEIPT_HANDLE, pb.BAD_REQUEST)
    if isinstance(exc, MQBrokerError):
        return exc.code not in _FINAL_CODES
    return True


class HandleRenewer:
    def __init__(self, settings: RenewSettings, change: Change, *, period_s: float,
                 call_timeout_s: float, concurrency: int = 4,
                 clock_ms: Callable[[], int] = now_ms) -> None:
        self.book = RenewalBook(settings)
        self._change = change
        self._period_s = period_s
        self._call_timeout_s = call_timeout_s
        self._limiter = trio.CapacityLimiter(max(1, concurrency))
        self._clock_ms = clock_ms
        #: a renewal under way -> set when it ends (a take waits for it)
        self._ends: dict[tuple[tuple[str, str], HandleKey], trio.Event] = {}
        self._nursery: trio.Nursery | None = None

    # ------------------------------------------------------------------ the RPCs' hooks

    def keep(self, held: Iterable[Held]) -> None:
        """Renew these handles a receive hands out (before it hands them out)."""
        now = self._clock_ms()
        for h in held:
            if not self.book.add(h, now):
                log.warning("receipt handle not renewed: too many kept, or its ids too long",
                            group=h.group, topic=h.topic, kept=len(self.book))

    def drop(self, client: str, group: str, handles: Iterable[tuple[HandleKey, str]]) -> None:
        """Renew these no more (a receive that could not hand them out gives them back)."""
        for key, handle in handles:
            self.book.take(client, group, key, handle)

    def seen(self, client: str, group: str) -> None:
        if client:
            self.book.seen(client, group, self._clock_ms())

    async def take(self, client: str, group: str, key: HandleKey | None, handle: str) -> str:
        """The newest handle of the message a client acks, changes or forwards with ``handle``
        (``handle`` itself when none is kept), renewed no more; a renewal under way is waited
        for (within the call deadline), so its new handle is the one acted on."""
        with trio.move_on_after(2 * self._call_timeout_s):
            while True:
                got = self.book.take(client, group, key, handle)
                if not isinstance(got, Busy):
                    return got.current if got is not None else handle
                end = self._ends.get(got.where)
                if end is None:
                    break
                await end.wait()
        return handle

    def gone(self, client: str) -> None:
        """``client`` went away: its handles are given back (in the background)."""
        steps = self.book.gone(client)
        if steps and self._nursery is not None:
            log.info("client gone: its renewed messages given back", client=client,
                     messages=len(steps))
            for step in steps:
                self._start(step)

    # ------------------------------------------------------------------ the loop

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Scan every period until cancelled; then give back what is kept (within the call
        deadline), as Apache's proxy does when it shuts down."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    for step in self.book.due(self._clock_ms()):
                        self._start(step)
                    await trio.sleep(self._period_s)  # the schedule's period, not a wait
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True), trio.move_on_after(self._call_timeout_s):
                await self._give_back_all()

    async def _give_back_all(self) -> None:
        steps = self.book.everything()
        async with trio.open_nursery() as nursery:
            for step in steps:
                nursery.start_soon(self._give_back, step)

    def _start(self, step: Step) -> None:
        if self._nursery is None:  # (the loop is not running: nothing is renewed)
            return
        self._ends.setdefault(step.held.where, trio.Event())
        if isinstance(step, Renew):
            self._nursery.start_soon(self._renew, step)
        else:
            self._nursery.start_soon(self._give_back, step)

    def _ended(self, held: Held) -> None:
        end = self._ends.pop(held.where, None)
        if end is not None:
            end.set()

    async def _renew(self, step: Renew) -> None:
        held = step.held
        after: GiveBack | None = None
        try:
            new, visible_at = await self._call(held, step.invisible_ms)
        except Exception as exc:
            retry = _retry(exc)
            log.info("renewal failed", group=held.group, topic=held.topic,
                     msg_id=held.key.msg_id, retry=retry, error=str(exc)[:200])
            after = self.book.failed(held, retry=retry)
        else:
            after = self.book.renewed(held, new, visible_at)
        finally:
            self._ended(held)
        if after is not None:
            await self._give_back(after)

    async def _give_back(self, step: GiveBack) -> None:
        held = step.held
        try:
            await self._call(held, step.invisible_ms)
        except Exception as exc:  # it turns visible at its invisible time instead
            log.info("renewed message not given back", group=held.group, topic=held.topic,
                     msg_id=held.key.msg_id, why=step.why, error=str(exc)[:200])
        else:
            log.info("renewed message given back", group=held.group, topic=held.topic,
                     msg_id=held.key.msg_id, why=step.why, invisible_ms=step.invisible_ms)
        finally:
            self.book.finished(held)
            self._ended(held)

    async def _call(self, held: Held, invisible_ms: int) -> tuple[str, int]:
        with trio.fail_after(self._call_timeout_s):
            async with self._limiter:
                return await self._change(held.group, held.topic, held.current, invisible_ms)
