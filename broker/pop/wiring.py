"""POP as one part of a broker: its processors, its config file, its revive loop and its
arrival hook, so the controller wires it in a few lines."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ...cluster.logging import get_logger
from ...cluster.protocol.route import TopicRouteData
from ...cluster.remoting.codes import RequestCode
from .modes import MODE_FILE, RequestModeTable
from .polling import PopPolling
from .processors import PopProcessors
from .service import PopService
from .state import ORDER_INFO_FILE

if TYPE_CHECKING:
    from ..context import BrokerContext

log = get_logger(role="pop")
#: (topic) -> the topic's route from the NameServers, or None.
RouteLookup = Callable[[str], Awaitable[TopicRouteData | None]]


class BrokerPop:
    def __init__(self, ctrl: BrokerContext, route_lookup: RouteLookup | None = None) -> None:
        self.ctrl = ctrl
        self.modes = RequestModeTable()
        self.polling = PopPolling(ctrl.bcfg.max_pop_polling_size)
        self.service = PopService(ctrl)
        #: set when a revive log record is dispatched (the revive loop waits on it)
        self._revive_wake = trio.Event()
        self._revive_topic = self.service.revive_topic
        self._route_lookup = route_lookup
        self.processors = PopProcessors(ctrl, self.service, self.polling, self.modes,
                                        self._route_queues if route_lookup else None)

    def table(self) -> dict[int, Any]:
        p = self.processors
        rc = RequestCode
        return {
            rc.POP_MESSAGE: p.pop,
            rc.ACK_MESSAGE: p.ack,
            rc.BATCH_ACK_MESSAGE: p.batch_ack,
            rc.CHANGE_MESSAGE_INVISIBLETIME: p.change_invisible_time,
            rc.NOTIFICATION: p.notification,
            rc.POLLING_INFO: p.polling_info,
            rc.QUERY_ASSIGNMENT: p.query_assignment,
            rc.SET_MESSAGE_REQUEST_MODE: p.set_message_request_mode,
        }

    async def _route_queues(self, topic: str) -> list[tuple[str, int, int]]:
        assert self._route_lookup is not None
        route = await self._route_lookup(topic)
        if route is None:
            return []
        return [(q.broker_name, q.read_queue_nums, q.perm) for q in route.queue_datas]

    # ------------------------------------------------------------------ config files

    @staticmethod
    def file_names() -> tuple[str, ...]:
        """The config files POP keeps: the request modes and the orderly pops in flight."""
        return (MODE_FILE, ORDER_INFO_FILE)

    def load(self, name: str, data: bytes) -> None:
        """Blocking callers' half: one of ``file_names()`` read back at boot."""
        try:
            if name == MODE_FILE:
                self.modes.load(data)
            elif name == ORDER_INFO_FILE:
                skipped = self.service.order.load(data)
                if skipped:
                    log.warning("order info entries skipped", file=name, skipped=skipped)
        except ValueError as exc:
            log.error("unreadable pop config file", file=name, error=str(exc))

    def take_changes(self, everything: bool) -> list[tuple[str, bytes]]:
        """(file name, content) of each file whose table changed (every one with
        ``everything``)."""
        out: list[tuple[str, bytes]] = []
        if everything or self.modes.changed:
            self.modes.changed = False
            out.append((MODE_FILE, self.modes.encode()))
        order = self.service.order
        if everything or order.changed:
            order.changed = False
            out.append((ORDER_INFO_FILE, order.encode()))
        return out

    # ------------------------------------------------------------------ services

    def message_arrived(self, topic: str) -> None:
        """The store dispatched a message of ``topic``: wake pops parked on it (a pop parks
        under its topic and its pop retry topic); wake the revive loop for a revive log
        record."""
        if topic in self.polling.parked_by_topic:
            self.polling.notify(topic)
        if topic == self._revive_topic:
            self._revive_wake.set()

    async def revive_loop(self) -> None:
        """The revive scan: a round at most every reviveInterval ms, and only when it has work
        (new revive log records, a revive time reached, a recovery; a slave's rounds do
        nothing but wait to be promoted). No POP consumer: no round at all."""
        service = self.service
        while True:
            await trio.sleep(self.ctrl.bcfg.revive_interval_ms / 1000.0)
            if self.ctrl.store_or_none is None:
                continue
            self._revive_topic = service.revive_topic
            wake_at = service.next_round_ms()
            wait_s = (wake_at - self.ctrl.now_ms()) / 1000.0 if wake_at is not None else None
            if wait_s is None or wait_s > 0:
                with trio.move_on_after(wait_s if wait_s is not None else math.inf):
                    await self._revive_wake.wait()
            self._revive_wake = trio.Event()
            try:
                moved = service.revive_once()
            except Exception as exc:  # a bad record or a refused put must not stop revival
                log.error("revive round failed", error=repr(exc))
                continue
            if moved:
                log.info("revived", messages=moved, revived=service.revived,
                         dead_lettered=service.dead_lettered)
                self.ctrl.mark_dirty()
                self.ctrl.state_changed()  # wakes wait_until (tests, tools)
