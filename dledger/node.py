"""The Trio driver for the pure DLedger core, and its remoting transport.

One task owns the core's Ready loop: it takes ticks and received messages from a single memory
channel, steps them all into the core, then handles the Ready exactly as ``dledger/core.py``
prescribes — sync the log and save term/vote, then send, then apply, then ``advance``.  The core
is the only decision maker; this file moves bytes and time.

Proposals: :meth:`DLedgerNode.propose_now` appends synchronously (the event loop is the put lock:
the CommitLog adapter computes an entry's position and then proposes it with no ``await`` in
between), wakes the driver and returns the entry's index and term.  The quorum commit is one
:class:`~rmq_cluster.store.watermark.Watermark`, :attr:`DLedgerNode.commit` (its mark: the
number of committed entries): the broker's sends hold their encoded answers on it (key = index
+ 1: no task or object per send), :meth:`DLedgerNode.wait_committed` waits on it and then
checks the entry's term.  Each Ready raises it once (group commit), *before* its entries are
applied: the driver yields once in between so the answers leave while it applies (the store
applies on demand for a read that comes first).  A term change answers everything held on it
TERM_CHANGED first (``Watermark.settle``): from then on the indexes it passes may hold a new
leader's entries.  Its sweeper answers what waited past ``maxWaitAckMs``
(WAIT_QUORUM_ACK_TIMEOUT).  When the storage fsyncs in a worker thread (``offload_io``),
``propose_now`` refuses while that sync runs (``append`` waits for it), so a write never races
an msync.

Network (:class:`RemotingTransport`, :func:`serve_peers`): every DLedger message is a **oneway**
remoting request on the peer's dLegerPeers port, with DLedger's request codes
(:class:`DLedgerRequestCode`: VOTE 51001, HEART_BEAT 51002, PUSH 51004, LEADERSHIP_TRANSFER 51005);
the body is ``dledger.messages.encode``.  Answers (vote/push/heartbeat responses) travel the same
way back, as oneway requests with the same code, because the core is message-driven.  Per peer,
one sender task drains a bounded queue over one connection of ``cluster/remoting/connection.py``
(pipelined: the connection coalesces every frame queued in a scheduling round into one send);
the core bounds what is in flight (``max_inflight_pushes``), the queue bound
(``MAX_OUTBOUND_MESSAGES_PER_PEER``) drops the excess, and a dead peer's queue is dropped and
the connection retried after ``RECONNECT_BACKOFF_S`` (doubling up to
``RECONNECT_MAX_BACKOFF_S``) — the core resends what was lost.

Broker mode (:func:`run_store_node`): the node of a ``DLedgerCommitLog`` with its peer server,
transport, a 1 s msync/checkpoint/ConsumeQueue flush, a prefault task for the data file and the
store's retention round (``store/flush.py``'s clean service over the DLedger data files).

Admin (:func:`peer_table`): a *two-way* LEADERSHIP_TRANSFER on the peer port is DLedger's
admin request (``dledger/admin.py``, :meth:`DLedgerNode.admin_transfer`).

Peer authentication (stricter than DLedger, whose peer port is open): with a cluster secret
(the broker's ``clusterSecret``; the controller passes its own) :func:`serve_peers` serves only
connections that completed ``cluster/remoting/peer_auth.py``'s challenge-response, and the
transport (and the admin client) authenticate every connection they open with it; any frame
on an unauthenticated connection closes it unanswered, logged and counted
(``DLedgerNode.peer_gate.refused``).  An empty secret keeps the port open (Apache-compatible).
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import functools
import math
import random
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

import attrs
import trio

from ..cluster.logging import get_logger
from ..cluster.remoting.client_pool import RemotingClient, open_remoting_client
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.codes import ResponseCode as RemotingResponseCode
from ..cluster.remoting.connection import Connection
from ..cluster.remoting.errors import RemotingError
from ..cluster.remoting.peer_auth import PeerAuthGate, peer_handshake
from ..cluster.remoting.processors import Later, ProcessorTable, Reply
from ..cluster.remoting.server import RemotingServer
from ..store.flush import clean_service
from ..store.mapped_file import MADV_POPULATE_WRITE, MS_SYNC, _madvise
from ..store.mapped_file import libc_msync as _msync
from ..store.watermark import ExpiredAnswer, Watermark
from .admin import (
    DEFAULT_TRANSFER_TIMEOUT_S,
    AdminRequestError,
    TransferAnswer,
    TransferCommand,
    parse_transfer_request,
)
from .core import DEFAULT_TICK_MS, CoreConfig, DLedgerCore, Ready, Role
from .log_storage import LogStorage
from .messages import (
    DecodeError,
    Entry,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    Message,
    PushEntryRequest,
    PushEntryResponse,
    ResponseCode,
    VoteRequest,
    VoteResponse,
    decode,
    encode,
    encode_entries,
)

if TYPE_CHECKING:
    from ..store.config import MessageStoreConfig
    from ..store.retention import CleanResult
    from .config import DLedgerConfig
    from .log_storage import FileLogStorage


class StoreMember(Protocol):
    """What ``run_store_node`` drives of a broker's DLedger CommitLog (``DLedgerCommitLog``,
    which imports this module): config and log, the apply and role callbacks, the flush, the
    checkpoint and retention."""

    dcfg: DLedgerConfig
    storage: FileLogStorage | None
    applied_index: int

    @property
    def config(self) -> MessageStoreConfig: ...

    def attach(self, node: DLedgerNode) -> None: ...

    def apply_committed_range(self, lo: int, hi: int) -> None: ...

    def applied_batch_done(self) -> None: ...

    def node_role_changed(self, role: Role, term: int, leader_id: str) -> None: ...

    def dledger_flush_plan(self) -> list[tuple[Any, int, int]]: ...

    def write_dledger_checkpoint(self) -> None: ...

    async def flush_logics(self) -> None: ...

    def clean_once(self, now_ms: int | None = None) -> CleanResult: ...

_log = get_logger(component="dledger_node")

MAX_INBOUND_QUEUE: Final = 10_000
REJECTION_LOG_PER_S: Final = 20
"""Refused-message warnings logged per second at most (the rest are only counted)."""
"""Received messages waiting for the driver; beyond this, messages are dropped."""
MAX_WAIT_ACK_S: Final = 2.5
"""DLedger's maxWaitAckTimeMs: an append not committed by then answers WAIT_QUORUM_ACK_TIMEOUT."""
MAX_OUTBOUND_MESSAGES_PER_PEER: Final = 4096
"""Messages queued for one peer; past this they are dropped (the core resends)."""
RECONNECT_BACKOFF_S: Final = 0.1
"""First pause before reconnecting to a peer whose connection failed; it doubles per quick
failure (a peer that resets every connection) up to RECONNECT_MAX_BACKOFF_S."""
RECONNECT_MAX_BACKOFF_S: Final = 1.0
PEER_CONNECT_TIMEOUT_S: Final = 1.0
STORE_FLUSH_INTERVAL_S: Final = 1.0
"""How often a broker's DLedger member msyncs what it wrote, writes its checkpoint and flushes
ConsumeQueues (DLedger: flushFileInterval 10 ms, checkpoint 3 s; an ack means "in the page cache
of a majority" either way)."""
WARM_AHEAD_BYTES: Final = 16 * 1024 * 1024
"""DLedger data bytes kept prefaulted past the write position."""
WARM_STEP_BYTES: Final = 4 * 1024 * 1024
WARM_CHECK_INTERVAL_S: Final = 0.05
STORE_MAX_INFLIGHT_PUSHES: Final = 64
"""A broker's pushes in flight per follower (each up to STORE_MAX_BATCH_PUSH_BYTES)."""
STORE_MAX_BATCH_PUSH_BYTES: Final = 256 * 1024
"""Entry bytes per push for a broker (DLedger's batch push packs 4 KiB; bigger batches keep the
per-push cost in Python off the per-message path: bench/dledger.py)."""


class DLedgerRequestCode(enum.IntEnum):
    """DLedger's ``DLedgerRequestCode`` numbers."""

    METADATA = 50000
    APPEND = 50001
    GET = 50002
    VOTE = 51001
    HEART_BEAT = 51002
    PULL = 51003
    PUSH = 51004
    LEADERSHIP_TRANSFER = 51005


_CODE_OF: Final[dict[type[Any], DLedgerRequestCode]] = {
    VoteRequest: DLedgerRequestCode.VOTE,
    VoteResponse: DLedgerRequestCode.VOTE,
    HeartBeatRequest: DLedgerRequestCode.HEART_BEAT,
    HeartBeatResponse: DLedgerRequestCode.HEART_BEAT,
    PushEntryRequest: DLedgerRequestCode.PUSH,
    PushEntryResponse: DLedgerRequestCode.PUSH,
    LeadershipTransferRequest: DLedgerRequestCode.LEADERSHIP_TRANSFER,
}


def request_code_of(msg: Message) -> DLedgerRequestCode:
    return _CODE_OF[type(msg)]


class Transport(Protocol):
    def send(self, peer: str, data: bytes, code: int) -> None:
        """Queue ``data`` (a DLedger message of request ``code``) for ``peer``; never blocks,
        may drop."""
        ...


@attrs.frozen
class AppendResult:
    code: ResponseCode
    index: int = -1
    term: int = 0


def failed_answer(why: ResponseCode) -> ExpiredAnswer:
    """How an answer held on :attr:`DLedgerNode.commit` reads when its entry did not commit
    (``why``: TERM_CHANGED, WAIT_QUORUM_ACK_TIMEOUT) unless its holder says otherwise (the
    broker's send does: ``DLedgerCommitLog.answer_failures_with``): never a success."""
    remark = f"DLedger append: {why.name}"

    def failed(answer: RemotingCommand, key: int) -> RemotingCommand:
        return answer.response(RemotingResponseCode.SYSTEM_ERROR, remark)

    return failed


_TICK = object()
_WAKE = object()


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
        on_apply_range: Callable[[int, int], None] | None = None,
        on_applied: Callable[[], None] | None = None,
        on_role_change: Callable[[Role, int, str], None] | None = None,
        applied: int = -1,
        offload_io: bool = True,
    ) -> None:
        """``offload_io=False`` runs ``sync``/``save_hard_state`` on the event loop: for the
        memory store and a file store without fsync (nothing blocks), and for tests under an
        autojump MockClock, which would otherwise jump time while a worker thread runs.
        ``on_applied`` runs once after each Ready whose committed entries went to ``on_apply``.
        ``on_apply_range(lo, hi)`` replaces ``on_apply``: the committed indexes ``[lo, hi)`` in
        one call, read from the storage by the callee (no Entry object per message)."""
        self.storage = storage
        self.offload_io = offload_io
        self.transport = transport
        self.core = DLedgerCore(config, storage, rng or random.Random(), applied=applied)
        self.tick_s = tick_ms / 1000
        self.on_apply = on_apply
        self.on_apply_range = on_apply_range
        self.on_applied = on_applied
        self.on_role_change = on_role_change
        self._send_ch, self._recv_ch = trio.open_memory_channel[Any](MAX_INBOUND_QUEUE)
        #: the quorum commit as a watermark: its mark is the number of committed entries
        #: (commit index + 1), so an entry at index i is committed once it reaches i + 1.
        #: Answers held on it (the broker's sends) go out as it rises; those whose deadline
        #: passes first get its expired form; a term change answers them all with
        #: ``term_changed`` (before the commit moves again: the tail may be overwritten).
        self.commit = Watermark(
            max(0, self.core.commit + 1), timeout_s=MAX_WAIT_ACK_S,
            expired_answer=failed_answer(ResponseCode.WAIT_QUORUM_ACK_TIMEOUT),
        )
        self.term_changed = failed_answer(ResponseCode.TERM_CHANGED)
        self._role = (self.core.role, self.core.term, self.core.leader_id)
        self._changed = trio.Event()
        self._io_busy = False
        self._wake_queued = False
        self.dropped_inbound = 0
        #: the peer port's authentication gate while served with a secret (serve_peers)
        self.peer_gate: PeerAuthGate | None = None
        self._log = _log.bind(node=config.self_id, group=config.group)
        self._rejection_window = (-math.inf, 0)  # (window start, warnings logged in it)
        #: batching counters (how many messages one cycle carries; per Ready, not per message)
        self.readies = 0
        self.pushes = 0
        self.pushed_entries = 0

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

    @property
    def rejected(self) -> int:
        """Well-formed messages the core refused as impossible (see ``dledger/core.py``)."""
        return self.core.rejected

    def deliver(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes received from a peer (drops malformed messages and overflow)."""
        try:
            msg = decode(data)
        except DecodeError as exc:
            self.dropped_inbound += 1
            self._warn_refused(f"undecodable message: {exc}")
            return
        try:
            self._send_ch.send_nowait(msg)
        except trio.WouldBlock:
            self.dropped_inbound += 1

    def propose_now(self, body: bytes) -> tuple[ResponseCode, int, int]:
        """Append ``body`` now (leader only): (SUCCESS, its index, its term), or (why not,
        -1, 0). It is committed once :attr:`commit` reaches index + 1 in that same term (a
        term change first answers everything held on :attr:`commit`: see there)."""
        if self._io_busy:
            return ResponseCode.LEADER_NOT_READY, -1, 0
        core = self.core
        index = core.propose_index(body)
        if index < 0:
            return ResponseCode(-index), -1, 0
        if not self._wake_queued:
            self._wake()
        return ResponseCode.SUCCESS, index, core.term

    async def wait_committed(
        self, index: int, term: int, timeout_s: float = MAX_WAIT_ACK_S
    ) -> AppendResult:
        """Wait until the entry ``index`` proposed in ``term`` is committed: SUCCESS, or
        TERM_CHANGED (another term's entry holds that index now, or the term ended first),
        or WAIT_QUORUM_ACK_TIMEOUT after ``timeout_s``."""
        committed = await self.commit.wait_for(index + 1, timeout_s)
        if committed and self.storage.term_at(index) == term:
            return AppendResult(ResponseCode.SUCCESS, index, term)
        if committed or self._role[1] != term or self._role[0] is not Role.LEADER:
            return AppendResult(ResponseCode.TERM_CHANGED, index, term)
        return AppendResult(ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, index, term)

    async def append(self, body: bytes, timeout_s: float = MAX_WAIT_ACK_S) -> AppendResult:
        """Propose ``body``; returns once it is committed (SUCCESS), or why not. While the
        storage syncs in a worker thread it waits for the sync (within ``timeout_s``)."""
        deadline = trio.current_time() + timeout_s
        with trio.move_on_at(deadline):
            while self._io_busy:
                await self._changed.wait()
        if self._io_busy:
            return AppendResult(ResponseCode.LEADER_PENDING_FULL)
        code, index, term = self.propose_now(body)
        if code is not ResponseCode.SUCCESS:
            return AppendResult(code)
        return await self.wait_committed(index, term, max(0.0, deadline - trio.current_time()))

    async def wait_for(self, predicate: Callable[[DLedgerNode], bool]) -> None:
        """Wait until ``predicate(self)`` holds (re-checked after every processed Ready)."""
        while not predicate(self):
            await self._changed.wait()

    def transfer_leadership(self, peer: str) -> ResponseCode:
        code = self.core.transfer_leadership(peer)
        self._wake()
        return code

    async def admin_transfer(
        self, cmd: TransferCommand, timeout_s: float = DEFAULT_TRANSFER_TIMEOUT_S
    ) -> TransferAnswer:
        """DLedger's admin LEADERSHIP_TRANSFER on this peer: the leader hands leadership to
        ``cmd.transferee_id`` (retrying when the core aborts a hand-over whose transferee did
        not catch up in time) and answers once the transferee leads, or TAKE_LEADERSHIP_FAILED
        after ``timeout_s``; a follower answers NOT_LEADER naming the leader (ask it there)."""
        cfg = self.core.cfg
        me = cfg.self_id

        def answer(code: ResponseCode, remark: str = "") -> TransferAnswer:
            return TransferAnswer(code, cfg.group, self.core.leader_id, self.core.term,
                                  me, cmd.local_id, remark)

        if cmd.group != cfg.group:
            return answer(ResponseCode.UNKNOWN_GROUP, f"this peer serves group {cfg.group!r}")
        if cmd.transferee_id not in cfg.peers:
            return answer(ResponseCode.UNKNOWN_MEMBER,
                          f"{cmd.transferee_id!r} is not among {', '.join(cfg.peers)}")
        if cmd.transfer_id and cmd.transfer_id not in cfg.peers:
            return answer(ResponseCode.UNKNOWN_MEMBER, f"{cmd.transfer_id!r} is not a member")
        if self.core.leader_id == cmd.transferee_id:
            return answer(ResponseCode.SUCCESS, "already the leader")
        if self.core.role is not Role.LEADER:
            return answer(ResponseCode.NOT_LEADER, "send it to the leader (leaderId)")
        log = _log.bind(node=me, group=cfg.group, transferee=cmd.transferee_id)
        log.info("leadership transfer requested", term=self.core.term)
        with trio.move_on_after(timeout_s):
            while True:
                core = self.core
                if core.leader_id == cmd.transferee_id:
                    log.info("leadership transferred", term=core.term)
                    return answer(ResponseCode.SUCCESS)
                if core.role is not Role.LEADER and core.leader_id:
                    # another member leads now (a preferred-leader hand-over won the race)
                    return answer(ResponseCode.TAKE_LEADERSHIP_FAILED,
                                  f"{core.leader_id} took leadership instead")
                if core.role is Role.LEADER and not core.transferee:
                    code = self.transfer_leadership(cmd.transferee_id)
                    if code not in (ResponseCode.SUCCESS, ResponseCode.LEADER_TRANSFERRING):
                        return answer(code)
                with trio.move_on_after(self.tick_s * 2):
                    await self.wait_for(lambda n: n.core.leader_id == cmd.transferee_id)
        log.warning("leadership transfer timed out", term=self.core.term,
                    leader=self.core.leader_id)
        return answer(ResponseCode.TAKE_LEADERSHIP_FAILED,
                      f"{cmd.transferee_id} did not take leadership within {timeout_s:g} s")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._ticker)
            nursery.start_soon(self.commit.run)  # expires held answers on their deadline
            task_status.started()
            await self._drive()

    # -- internals
    def _warn_refused(self, reason: str) -> None:
        """Log a refused message, at most REJECTION_LOG_PER_S a second (all are counted)."""
        now = trio.current_time()
        start, logged = self._rejection_window
        if now - start >= 1.0:
            start, logged = now, 0
        if logged < REJECTION_LOG_PER_S:
            self._log.warning("dledger message refused", reason=reason,
                              rejected=self.core.rejected, undecodable=self.dropped_inbound)
        self._rejection_window = (start, logged + 1)

    def _wake(self) -> None:
        if not self._wake_queued:
            try:
                self._send_ch.send_nowait(_WAKE)
                self._wake_queued = True
            except trio.WouldBlock:
                pass  # the driver has plenty to do and will see the core's Ready anyway

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
            for note in core.take_rejections():
                self._warn_refused(note)
            while core.has_ready():
                await self._process(core.ready())

    def _handle(self, item: Any) -> None:
        core = self.core
        if item is _TICK:
            core.tick()
        elif item is _WAKE:
            self._wake_queued = False
        else:
            core.step(item)

    async def _process(self, rd: Ready) -> None:
        if self.offload_io and (rd.must_sync or rd.hard_state is not None):
            self._io_busy = True
            try:
                if rd.must_sync:
                    await trio.to_thread.run_sync(self.storage.sync)
                if rd.hard_state is not None:
                    await trio.to_thread.run_sync(self.storage.save_hard_state, rd.hard_state)
            finally:
                self._io_busy = False
        else:
            if rd.must_sync:
                self.storage.sync()
            if rd.hard_state is not None:
                self.storage.save_hard_state(rd.hard_state)
        send = self.transport.send
        blobs: dict[tuple[int, int], bytes] = {}
        self.readies += 1
        for msg in rd.messages:
            if type(msg) is PushEntryRequest and msg.entries:
                # the same entries usually go to every follower: encode them once (every push
                # of one Ready was cut from the same log, so first index + count name them)
                ents = msg.entries
                self.pushes += 1
                self.pushed_entries += len(ents)
                key = (ents[0].index, len(ents))
                blob = blobs.get(key)
                if blob is None:
                    blob = blobs[key] = encode_entries(ents)
                send(msg.remote_id, encode(msg, blob), _CODE_OF[PushEntryRequest])
            else:
                send(msg.remote_id, encode(msg), _CODE_OF[type(msg)])
        role = (rd.role, rd.term, rd.leader_id)
        commit = self.commit
        lo, hi = rd.committed
        if commit.held.waiting:
            # the term this node led in ended: what it proposed then may be overwritten, so
            # what waits is answered TERM_CHANGED before the commit moves on (DLedger does
            # the same; those entries may still commit)
            ended = rd.role is not Role.LEADER or rd.term != self._role[1]
            commit.settle(hi, ended, self.term_changed)
            if lo < hi:
                await trio.lowlevel.checkpoint()  # the answers leave while we apply
        if lo < hi:
            commit.advance(hi)
            if self.on_apply_range is not None:
                self.on_apply_range(lo, hi)
            elif self.on_apply is not None:
                for entry in rd.committed_entries:
                    self.on_apply(entry)
            if self.on_applied is not None:
                self.on_applied()
        self.core.advance(rd)
        if role != self._role:
            self._role = role
            if self.on_role_change is not None:
                self.on_role_change(*role)
        self._changed.set()
        self._changed = trio.Event()


# =============================================================================== remoting


class _PeerLink:
    __slots__ = ("addr", "dropped", "queue", "wake")

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.queue: deque[tuple[bytes, int]] = deque()
        self.wake = trio.Event()
        self.dropped = 0


class RemotingTransport:
    """Sends DLedger messages to peers as oneway remoting requests (one sender task per peer).

    Make it, then ``await nursery.start(transport.run)``; ``send`` works before ``run`` (the
    messages wait in the queue)."""

    def __init__(self, peers: dict[str, str], *, node: str = "dledger", secret: str = "") -> None:
        """``secret``: the cluster secret every connection proves before its first message
        (``peer_auth.peer_handshake``); "" connects unauthenticated (an open peer port)."""
        self.links = {pid: _PeerLink(addr) for pid, addr in peers.items()}
        self.node = node
        self.secret = secret
        self.log = get_logger(node=node, role="dledger-transport")

    def send(self, peer: str, data: bytes, code: int) -> None:
        link = self.links.get(peer)
        if link is None:
            return
        if len(link.queue) >= MAX_OUTBOUND_MESSAGES_PER_PEER:
            link.dropped += 1
            return
        link.queue.append((data, code))
        link.wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with open_remoting_client(
            node=f"{self.node}-dledger", connect_timeout=PEER_CONNECT_TIMEOUT_S,
            handshake=peer_handshake(self.secret) if self.secret else None,
        ) as client, trio.open_nursery() as nursery:
            for link in self.links.values():
                nursery.start_soon(self._sender, client, link)
            task_status.started()

    async def _sender(self, client: RemotingClient, link: _PeerLink) -> None:
        conn: Connection | None = None
        backoff = RECONNECT_BACKOFF_S
        opened = 0.0

        async def failed() -> None:
            nonlocal backoff, conn
            link.dropped += len(link.queue)
            link.queue.clear()  # the core resends on its next heartbeat/probe
            conn = None
            if trio.current_time() - opened > RECONNECT_MAX_BACKOFF_S:
                backoff = RECONNECT_BACKOFF_S  # it worked for a while: retry soon
            await trio.sleep(backoff)
            backoff = min(backoff * 2, RECONNECT_MAX_BACKOFF_S)

        while True:
            if not link.queue:
                link.wake = trio.Event()
                await link.wake.wait()
                continue
            if conn is None or conn.is_closed:
                try:
                    conn = await client.connection(link.addr)
                    opened = trio.current_time()
                except (RemotingError, OSError) as exc:
                    self.log.debug("dledger peer unreachable", peer=link.addr, error=str(exc))
                    await failed()
                    continue
            try:
                while link.queue:
                    data, code = link.queue.popleft()
                    await conn.invoke_oneway(
                        RemotingCommand.request(code, {}, data, oneway=True)
                    )
            except (RemotingError, OSError, trio.BrokenResourceError, RuntimeError) as exc:
                # RuntimeError: the connection's own tasks already ended (closing under us)
                self.log.debug("dledger peer send failed", peer=link.addr, error=str(exc))
                await failed()


def peer_table(
    node: DLedgerNode, *, transfer_timeout_s: float = DEFAULT_TRANSFER_TIMEOUT_S
) -> ProcessorTable:
    """Processors for DLedger's request codes: every oneway frame's body goes to
    ``node.deliver``; a two-way LEADERSHIP_TRANSFER is DLedger's admin request
    (``dledger/admin.py``), answered when the transfer is done."""

    def on_message(conn: Any, request: RemotingCommand) -> Reply:
        if request.is_oneway:
            node.deliver(request.body)
            return None
        if request.code != DLedgerRequestCode.LEADERSHIP_TRANSFER:
            return request.response(
                int(ResponseCode.UNSUPPORTED),
                f"request code {request.code} is peer-to-peer (oneway) only",
            )
        try:
            cmd = parse_transfer_request(request.body)
        except AdminRequestError as exc:
            bad = TransferAnswer(ResponseCode.UNEXPECTED_ARGUMENT, node.core.cfg.group,
                                 node.core.leader_id, node.core.term, node.core.cfg.self_id,
                                 remark=str(exc))
            return _admin_response(request, bad)
        return Later(_admin_answer(node, request, cmd, transfer_timeout_s))

    codes = (
        DLedgerRequestCode.VOTE,
        DLedgerRequestCode.HEART_BEAT,
        DLedgerRequestCode.PUSH,
        DLedgerRequestCode.LEADERSHIP_TRANSFER,
    )
    return ProcessorTable({int(c): on_message for c in codes}, None)


def _admin_response(request: RemotingCommand, answer: TransferAnswer) -> RemotingCommand:
    """DLedger answers every request with remoting code 200 and the outcome in the body."""
    return request.response(int(ResponseCode.SUCCESS), answer.remark or None,
                            body=answer.to_json())


async def _admin_answer(
    node: DLedgerNode, request: RemotingCommand, cmd: TransferCommand, timeout_s: float
) -> RemotingCommand:
    return _admin_response(request, await node.admin_transfer(cmd, timeout_s))


async def serve_peers(
    node: DLedgerNode,
    host: str,
    port: int,
    *,
    name: str = "dledger",
    secret: str = "",
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The DLedger server on this node's dLegerPeers port; with ``secret`` behind a
    :class:`PeerAuthGate` (``node.peer_gate``), else open."""
    table = peer_table(node)
    if secret:
        node.peer_gate = PeerAuthGate(secret, node=name, port="dledger")
        table = node.peer_gate.wrap(table)
    server = RemotingServer(table, node=f"{name}-dledger")
    await server.serve(host, port, task_status=task_status)


# =============================================================================== broker store


async def run_store_node(
    store: StoreMember,
    *,
    host: str = "0.0.0.0",
    rng: random.Random | None = None,
    secret: str = "",
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a broker's DLedger member until cancelled: the peer server on its dLegerPeers port,
    the transport to the other peers, the core's driver wired to ``store`` (a store's DLedger
    CommitLog: apply -> dispatch, role changes -> the broker), the ConsumeQueue flush and the
    DLedger flush/checkpoint.  ``task_status`` gets the bound peer address.  ``secret`` (the
    broker's clusterSecret) authenticates the peer port both ways; "" leaves it open.  The
    owner closes the store after."""
    dcfg = store.dcfg
    peers = dcfg.peer_map()
    others = {pid: addr for pid, addr in peers.items() if pid != dcfg.self_id}
    tick = dcfg.tick_ms
    config = CoreConfig(
        dcfg.group,
        dcfg.self_id,
        tuple(peers),
        preferred_leader_id=dcfg.preferred_leader_id,
        heartbeat_interval=max(1, dcfg.heartbeat_interval_ms // tick),
        election_timeout=max(2, dcfg.heartbeat_interval_ms * dcfg.max_heartbeat_leak // tick),
        vote_jitter_min=dcfg.min_vote_interval_ms // tick,
        vote_jitter_max=max(dcfg.min_vote_interval_ms // tick + 1,
                            dcfg.max_vote_interval_ms // tick),
        max_inflight_pushes=STORE_MAX_INFLIGHT_PUSHES,
        max_batch_push_bytes=STORE_MAX_BATCH_PUSH_BYTES,
    )
    if store.storage is None:
        raise RuntimeError("run_store_node needs an opened DLedger store")
    transport = RemotingTransport(others, node=dcfg.self_id, secret=secret)
    node = DLedgerNode(
        config,
        store.storage,
        transport,
        rng=rng,
        tick_ms=tick,
        on_apply_range=store.apply_committed_range,
        on_applied=store.applied_batch_done,
        on_role_change=store.node_role_changed,
        applied=store.applied_index,
        offload_io=False,  # fsync=False storage: sync() only moves a watermark
    )
    store.attach(node)
    _h, _sep, port = peers[dcfg.self_id].rpartition(":")
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(
            functools.partial(serve_peers, node, host, int(port), name=dcfg.self_id,
                              secret=secret)
        )
        await nursery.start(transport.run)
        await nursery.start(node.run)
        nursery.start_soon(_store_flush_loop, store, STORE_FLUSH_INTERVAL_S)
        nursery.start_soon(_warm_loop, store)
        # retention of DLedger data files: the store's policy (cleanResourceInterval)
        nursery.start_soon(clean_service, store)
        task_status.started(bound)


async def _store_flush_loop(store: StoreMember, interval_s: float) -> None:
    log = get_logger(node=store.dcfg.self_id, role="dledger-flush")
    while True:
        await trio.sleep(interval_s)
        try:
            plan = store.dledger_flush_plan()
            if plan:
                await trio.to_thread.run_sync(_msync_ranges, plan)
            store.write_dledger_checkpoint()
            await store.flush_logics()
        except (OSError, ValueError) as exc:
            log.error("dledger flush failed", error=str(exc))


def _msync_ranges(plan: list[tuple[Any, int, int]]) -> None:
    """msync each (map, page-aligned offset, length) range, in a worker thread.  Through libc
    (ctypes releases the GIL for the call) rather than ``mmap.flush``, which holds the GIL
    while the kernel writes the pages back: the event loop kept running only between ranges
    (a whole second of writes at a time).  The map's address is taken from a buffer export
    released at once, so a truncation on the event loop may still close the map meanwhile:
    msync then fails with ENOMEM, harmlessly (what is gone needs no flush)."""
    for m, offset, length in plan:
        if _msync is None:
            with contextlib.suppress(ValueError, OSError):  # closed by a truncation meanwhile
                m.flush(offset, length)
            continue
        try:
            probe = ctypes.c_char.from_buffer(m, offset)
            address = ctypes.addressof(probe)
            del probe
        except (ValueError, TypeError, BufferError):
            continue  # closed by a truncation meanwhile
        _msync(address, length, MS_SYNC)


async def _warm_loop(store: StoreMember) -> None:
    """Keep the DLedger data pages just past the write position prefaulted (in a worker
    thread), so appends on the event loop do not page-fault on a fresh sparse file."""
    storage = store.storage
    if storage is None:
        return
    warmed = storage.write_pos
    while True:
        target = storage.write_pos + WARM_AHEAD_BYTES
        if target - warmed >= WARM_STEP_BYTES:
            pieces = storage.data.ranges(max(warmed, storage.write_pos), target)
            ok = await trio.to_thread.run_sync(_populate, pieces)
            if not ok:
                return  # not supported here (old kernel): appends fault pages in as before
            warmed = target
        await trio.sleep(WARM_CHECK_INTERVAL_S)


def _populate(pieces: list[tuple[Any, int, int]]) -> bool:
    if _madvise is None:
        return False
    for m, offset, length in pieces:
        try:
            probe = ctypes.c_char.from_buffer(m, offset)
            address = ctypes.addressof(probe)
            del probe
        except (ValueError, TypeError, BufferError):
            return False
        if _madvise(address, length, MADV_POPULATE_WRITE) != 0:
            return False
    return True
