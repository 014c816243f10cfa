"""The Trio driver for the pure DLedger core (first cut: no remoting wiring yet).

One task owns the core and its storage: it takes ticks, received messages and proposals from a
single memory channel, steps them all into the core, then handles the Ready exactly as
``dledger/core.py`` prescribes — fsync the log and save term/vote (in a worker thread, since
nothing else touches the storage meanwhile), then send, then apply, then ``advance``.  Because
only this task mutates the core, there is no locking and the persist-before-send order holds.

The network is a :class:`Transport` (``send(peer, bytes)``, fire-and-forget like DLedger's
oneway-ish pushes; it may drop).  Whatever receives bytes for this node calls
:meth:`DLedgerNode.deliver`.  ``node.py`` does not know about remoting frames yet: a later change
maps DLedger's request codes onto ``cluster/remoting`` and calls ``deliver`` from a processor.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Protocol

import attrs
import trio

from dledger.core import DEFAULT_TICK_MS, CoreConfig, DLedgerCore, Ready, Role
from dledger.log_storage import LogStorage
from dledger.messages import DecodeError, Entry, ResponseCode, decode, encode

MAX_INBOUND_QUEUE = 10_000
"""Received messages/proposals waiting for the driver; beyond this, messages are dropped."""
MAX_WAIT_ACK_S = 2.5
"""DLedger's maxWaitAckTimeMs: an append not committed by then answers WAIT_QUORUM_ACK_TIMEOUT."""


class Transport(Protocol):
    def send(self, peer: str, data: bytes) -> None:
        """Queue ``data`` for ``peer``; never blocks, may drop."""
        ...


@attrs.frozen
class AppendResult:
    code: ResponseCode
    index: int = -1
    term: int = 0


class _Waiter:
    __slots__ = ("event", "index", "result", "term")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: AppendResult | None = None
        self.index = -1
        self.term = 0

    def finish(self, result: AppendResult) -> None:
        if self.result is None:
            self.result = result
            self.event.set()


_TICK = object()


class DLedgerNode:
    def __init__(
        self,
        config: CoreConfig,
        storage: LogStorage,
        transport: Transport,
        *,
        rng: random.Random | None = None,
        tick_ms: int = DEFAULT_TICK_MS,
        on_apply: Callable[[Entry], None] | None = None,
        on_role_change: Callable[[Role, int, str], None] | None = None,
        applied: int = -1,
        offload_io: bool = True,
    ) -> None:
        """``offload_io=False`` runs ``sync``/``save_hard_state`` on the event loop: for the
        memory store (nothing blocks) and for tests under an autojump MockClock, which would
        otherwise jump time while a worker thread runs."""
        self.storage = storage
        self.offload_io = offload_io
        self.transport = transport
        self.core = DLedgerCore(config, storage, rng or random.Random(), applied=applied)
        self.tick_s = tick_ms / 1000
        self.on_apply = on_apply
        self.on_role_change = on_role_change
        self._send_ch, self._recv_ch = trio.open_memory_channel[Any](MAX_INBOUND_QUEUE)
        self._pending: dict[int, _Waiter] = {}
        self._role = (self.core.role, self.core.term, self.core.leader_id)
        self._changed = trio.Event()
        self.dropped_inbound = 0

    # -- public
    @property
    def role(self) -> Role:
        return self._role[0]

    @property
    def term(self) -> int:
        return self._role[1]

    @property
    def leader_id(self) -> str:
        return self._role[2]

    def deliver(self, data: bytes) -> None:
        """Bytes received from a peer (drops malformed messages and overflow)."""
        try:
            msg = decode(data)
        except DecodeError:
            self.dropped_inbound += 1
            return
        try:
            self._send_ch.send_nowait(msg)
        except trio.WouldBlock:
            self.dropped_inbound += 1

    async def append(self, body: bytes, timeout_s: float = MAX_WAIT_ACK_S) -> AppendResult:
        """Propose ``body``; returns once it is committed (SUCCESS), or why not."""
        waiter = _Waiter()
        try:
            self._send_ch.send_nowait((body, waiter))
        except trio.WouldBlock:
            return AppendResult(ResponseCode.LEADER_PENDING_FULL)
        with trio.move_on_after(timeout_s):
            await waiter.event.wait()
        if waiter.result is None:
            waiter.finish(AppendResult(ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, waiter.index,
                                       waiter.term))
            self._pending.pop(waiter.index, None)
        assert waiter.result is not None
        return waiter.result

    async def wait_for(self, predicate: Callable[[DLedgerNode], bool]) -> None:
        """Wait until ``predicate(self)`` holds (re-checked after every processed Ready)."""
        while not predicate(self):
            await self._changed.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._ticker)
            task_status.started()
            await self._drive()

    # -- internals
    async def _ticker(self) -> None:
        while True:
            await trio.sleep(self.tick_s)
            await self._send_ch.send(_TICK)

    async def _drive(self) -> None:
        core = self.core
        while True:
            item = await self._recv_ch.receive()
            while True:
                self._handle(item)
                try:
                    item = self._recv_ch.receive_nowait()
                except trio.WouldBlock:
                    break
            while core.has_ready():
                await self._process(core.ready())

    def _handle(self, item: Any) -> None:
        core = self.core
        if item is _TICK:
            core.tick()
        elif isinstance(item, tuple):
            body, waiter = item
            if waiter.result is not None:
                return  # timed out before we got to it
            res = core.propose(body)
            if res.code is not ResponseCode.SUCCESS:
                waiter.finish(AppendResult(res.code))
            else:
                waiter.index, waiter.term = res.index, res.term
                self._pending[res.index] = waiter
        else:
            core.step(item)

    async def _process(self, rd: Ready) -> None:
        if self.offload_io:
            if rd.must_sync:
                await trio.to_thread.run_sync(self.storage.sync)
            if rd.hard_state is not None:
                await trio.to_thread.run_sync(self.storage.save_hard_state, rd.hard_state)
        else:
            if rd.must_sync:
                self.storage.sync()
            if rd.hard_state is not None:
                self.storage.save_hard_state(rd.hard_state)
        for msg in rd.messages:
            self.transport.send(msg.remote_id, encode(msg))
        for entry in rd.committed_entries:
            if self.on_apply is not None:
                self.on_apply(entry)
            waiter = self._pending.pop(entry.index, None)
            if waiter is not None:
                ok = entry.term == waiter.term
                code = ResponseCode.SUCCESS if ok else ResponseCode.TERM_CHANGED
                waiter.finish(AppendResult(code, entry.index, entry.term))
        self.core.advance(rd)
        role = (rd.role, rd.term, rd.leader_id)
        if role != self._role:
            if self._pending and (rd.role is not Role.LEADER or rd.term != self._role[1]):
                # DLedger completes older-term futures with TERM_CHANGED (they may still commit)
                for waiter in self._pending.values():
                    waiter.finish(AppendResult(ResponseCode.TERM_CHANGED, waiter.index,
                                               waiter.term))
                self._pending.clear()
            self._role = role
            if self.on_role_change is not None:
                self.on_role_change(*role)
        self._changed.set()
        self._changed = trio.Event()
