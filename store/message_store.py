"""MessageStore: the facade the Broker, HA and DLedger use.

    from rmq_cluster.store import flush as store_services
    store = MessageStore.open(config)            # lock, load, recover, dispatch, write `abort`
    async with trio.open_nursery() as n:
        await n.start(store_services.run, store)  # flush / reput / allocate / clean tasks
        result = await store.put_message(msg)     # PutMessageResult
        n.cancel_scope.cancel()                   # stop the services before closing
    store.close()                                 # flush everything, delete `abort`, unlock

A put appends synchronously (the event loop is the put lock); ``put_wait(end)`` then says which
watermark (``store/watermark.py``) it must pass before it is answered: the flush under
SYNC_FLUSH (group commit), the slaves' ack under SYNC_MASTER (``replicas``, which the HA service
attaches), their minimum under both, none otherwise. The broker's send calls ``append_marked``
(the append, and the watermark with the key its answer waits for: the backend's, so DLedger's
commit too) and holds the encoded answer on it; ``put_message`` (a task's put) waits on it.
Reads return memoryviews of the mmap; copy them once into the response and drop them (a view
keeps its file mapped).
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import os
from collections.abc import Awaitable, Callable
from typing import Protocol

import attrs
import structlog
import trio

from ..cluster.clock import now_ms
from ..cluster.protocol.message import (
    Message,
    MessageConst,
    RecordError,
    StoredMessage,
    decode_offset_msg_id,
    decode_record,
)
from ..cluster.remoting.codec import RemotingCommand
from .backend import BackendHost, CommitLogBackend, MarkedPut
from .checkpoint import StoreCheckpoint
from .commitlog import (
    AppendMessageResult,
    CommitLog,
    PutMessageResult,
    PutMessageStatus,
)
from .config import (
    MAX_DISPATCH_BYTES_PER_ROUND,
    OS_PAGE_SIZE_BYTES,
    BrokerRole,
    FlushDiskType,
    MessageStoreConfig,
)
from .consume_queue import CQ_UNIT, FILLER_SIZE, UNIT, ConsumeQueue
from .dispatcher import (
    LAG_HISTOGRAM_BUCKETS,
    ArrivalListener,
    ConsumeQueueTable,
    Dispatcher,
)
from .index_file import IndexFile, IndexService
from .mapped_file import FlushPlan, run_flush_plan
from .paths import StorePathError
from .recovery import RecoveryResult, rebuild_topic_queue_table, recover
from .retention import CleanResult, DiskUsageProbe, Retention, default_disk_usage
from .watermark import ExpiredAnswer, Watermark, keep_answer

log = structlog.get_logger(component="message_store")

MAX_FILTER_MESSAGE_COUNT = 16000  # CQ units examined per pull
DEFAULT_PULL_MAX_BYTES = 256 * 1024  # maxTransferBytesOnMessageInMemory
MAX_QUERY_RESULTS = 64
LOCK_FILE_CONTENT = b"lock"


#: Dispatch a single put inline when the reput is caught up (saves the reput task's wake-up, a
#: scheduler round per send). Off: inline dispatch puts the dispatch on the critical path before
#: the answer is sent (bench/produce.py measured it slower); the reput task dispatches while the
#: client handles the answer.
INLINE_DISPATCH = False
INLINE_DISPATCH_MAX_BYTES = 64 * 1024


class StoreLockedError(RuntimeError):
    """Another process holds this store's ``lock`` file."""


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@attrs.define
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] = attrs.field(factory=list)
    buffer_total_size: int = 0
    queue_offsets: list[int] = attrs.field(factory=list)
    suggest_pulling_from_slave: bool = False

    @property
    def message_count(self) -> int:
        return len(self.buffers)

    def copy_body(self) -> bytes:
        """One copy of every record into a response body; releases the views."""
        body = b"".join(self.buffers)
        self.release()
        return body

    def release(self) -> None:
        for b in self.buffers:
            b.release()
        self.buffers = []


@attrs.define
class QueryMessageResult:
    buffers: list[memoryview]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int

    def copy_body(self) -> bytes:
        body = b"".join(self.buffers)
        for b in self.buffers:
            b.release()
        self.buffers = []
        return body


MessageFilter = Callable[[int], bool]  # tagsCode -> match
#: How a held send answer reads once its wait timed out under a status (the broker's answers).
TimeoutAnswer = Callable[[PutMessageStatus], ExpiredAnswer]


class ReplicaGate(Protocol):
    """What a SYNC_MASTER put waits on (the HA service): the slaves' ack watermark, and the
    answer when it need not wait (SLAVE_NOT_AVAILABLE, or PUT_OK when already acked)."""

    @property
    def ack_watermark(self) -> Watermark: ...

    def sync_status_nowait(self, end_offset: int) -> PutMessageStatus | None: ...


_PUT_OK = PutMessageStatus.PUT_OK


class MessageStore:
    """One store over a CommitLog ``backend`` (``store/backend.py``): the file CommitLog by
    default, or DLedger's (``rmq_cluster.dledger.commitlog_adapter.DLedgerCommitLog``)."""

    def __init__(
        self,
        config: MessageStoreConfig,
        *,
        backend: CommitLogBackend | None = None,
        clock_ms: Callable[[], int] = now_ms,
        disk_usage: DiskUsageProbe = default_disk_usage,
        on_arrival: ArrivalListener | None = None,
    ) -> None:
        self.config = config
        self.clock_ms = clock_ms
        if backend is None:
            backend = FileCommitLog(config, clock_ms=clock_ms)
        self.backend = backend
        #: the broker's send, ``append_marked(msg, batch, wait)``: append now, and the watermark
        #: (its held answers) and key the answer must wait for (``store/backend.py``:
        #: ``MarkedPut``). The backend's own bound method, bound once here: no delegation per send
        self.append_marked: Callable[[Message, bool, bool], MarkedPut] = backend.append_marked
        #: the CommitLog as reads, dispatch and retention see it (the backend's)
        self.commitlog: CommitLog = backend.commitlog
        self.cqs = ConsumeQueueTable(config)
        self.index: IndexService | None = (
            IndexService(
                self.cqs.store_root.child("index"), config.max_hash_slot_num,
                config.max_index_num,
                clock_ms=clock_ms,
            )
            if config.message_index_enable
            else None
        )
        self.dispatcher = Dispatcher(self.commitlog, self.cqs, self.index, on_arrival=on_arrival)
        self._index_flushed: IndexFile | None = None  # the last full IndexFile flush_logics did
        if config.broker_role is BrokerRole.SLAVE:  # replication lag, per replicated message
            self.dispatcher.lag_histogram = [0] * LAG_HISTOGRAM_BUCKETS
        self.checkpoint: StoreCheckpoint | None = None
        self.retention = Retention(
            config, self.commitlog, self.cqs, self.index, disk_usage=disk_usage,
            safe_offset=lambda: min(self.commitlog.flushed_offset, self.dispatcher.reput_from),
        )
        self.role = config.broker_role
        self.sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self.sync_flush_timeout_s = config.sync_flush_timeout_ms / 1000
        #: the flushed CommitLog end: SYNC_FLUSH answers wait here (FLUSH_DISK_TIMEOUT)
        self.flush_watermark = Watermark(0, timeout_s=self.sync_flush_timeout_s)
        #: SYNC_MASTER: the slaves' ack (``attach_replicas``); with SYNC_FLUSH as well, answers
        #: wait on ``both_watermark``, the lower of the flush and the ack
        self.replicas: ReplicaGate | None = None
        #: a put must wait for the slaves (SYNC_MASTER) after its append: ``replicas`` is set
        #: (a plain flag: every send asks)
        self.waits_for_replicas = False
        self.both_watermark: Watermark | None = (
            Watermark(0, timeout_s=self.sync_flush_timeout_s)
            if self.sync_flush and config.broker_role is BrokerRole.SYNC_MASTER
            else None
        )
        self._timeout_answer: TimeoutAnswer = lambda _status: keep_answer
        self.flush_requested = trio.Event()
        self._appended: trio.Event | None = None  # exists only while someone waits
        self._reput_wake: trio.Event | None = None  # exists only while the reput task waits
        #: the warm-up service (store/flush.py) waits on ``warm_wake`` until an append reaches
        #: ``warm_at``
        self.warm_wake: trio.Event | None = None
        self.warm_at = 0
        # GET_BROKER_RUNTIME_INFO figures (RocketMQ StoreStatsService): counted off the hot path
        # (a failed put, a pull) or derived (bytes put = CommitLog end - its end at boot)
        self.boot_max_offset = 0
        self.put_failed_times = 0
        self.get_found_times = 0
        self.get_miss_times = 0
        #: dispatch a single message right after its append when the reput is caught up
        self.inline_dispatch = INLINE_DISPATCH
        self.file_created = trio.Event()
        self.preallocated = Watermark(-1)  # start offset of the newest preallocated file
        self.commitlog.queue.on_create = lambda _mf: self.file_created.set()
        self.services_running = False
        self.recovery: RecoveryResult | None = None
        self.shutdown = True
        self._lock_fd: int | None = None
        backend.bind(self)

    # ================================================================== lifecycle

    @classmethod
    def open(
        cls,
        config: MessageStoreConfig,
        *,
        backend: CommitLogBackend | None = None,
        clock_ms: Callable[[], int] = now_ms,
        disk_usage: DiskUsageProbe = default_disk_usage,
        on_arrival: ArrivalListener | None = None,
    ) -> MessageStore:
        """Lock, load and recover the store at ``config.store_path_root_dir`` over ``backend``
        (the file CommitLog when None). Blocking: call it via ``trio.to_thread.run_sync`` when
        a loop is already serving others."""
        store = cls(
            config, backend=backend, clock_ms=clock_ms, disk_usage=disk_usage,
            on_arrival=on_arrival,
        )
        store._open()
        return store

    def _open(self) -> None:
        cfg = self.config
        os.makedirs(cfg.store_path_root_dir, exist_ok=True)
        self._take_lock()
        try:
            last_exit_ok = not os.path.exists(cfg.abort_path)
            self.cqs.load()
            self.checkpoint = StoreCheckpoint(cfg.checkpoint_path)
            if self.index is not None:
                self.index.load()
            self.backend.open(last_exit_ok=last_exit_ok)
            self.commitlog = self.backend.commitlog
            with open(cfg.abort_path, "wb") as f:
                os.fsync(f.fileno())
            self.shutdown = False
            self.backend.opened()
        except BaseException:
            self._close_files()
            self._release_lock()
            raise

    def _take_lock(self) -> None:
        path = self.config.lock_path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreLockedError(
                f"store {self.config.store_path_root_dir} is in use by another process "
                f"(lock on {path})"
            ) from None
        os.pwrite(fd, LOCK_FILE_CONTENT, 0)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def close(self) -> None:
        """Dispatch the backlog, flush everything, delete ``abort`` (clean exit) and unlock."""
        if self.shutdown and self._lock_fd is None:
            return
        self.shutdown = True
        try:
            self.backend.close()
        finally:
            self._close_files()
            self._release_lock()

    def _close_files(self) -> None:
        self.backend.close_files()
        self.cqs.close()
        if self.index is not None:
            self.index.close()
        if self.checkpoint is not None:
            self.checkpoint.close()
            self.checkpoint = None

    # ================================================================== writes

    def _check_writable(self) -> PutMessageResult | None:
        return self.backend.refusal()

    def append_message(self, msg: Message) -> PutMessageResult:
        """Append without waiting until the message is stored (the synchronous half of a put)."""
        return self.backend.append_message(msg)

    def append_messages(self, batch: Message) -> PutMessageResult:
        return self.backend.append_messages(batch)

    def put_message(self, msg: Message) -> Awaitable[PutMessageResult]:
        """Append, then wait until the message is stored (flush and replicas, or the commit)."""
        return self.backend.put_message(msg)

    def put_messages(self, batch: Message) -> Awaitable[PutMessageResult]:
        return self.backend.put_messages(batch)

    def appended(self, at: int, *, reput: bool = True) -> None:
        """A backend's news that the CommitLog grew (the seam: ``BackendHost.appended``)."""
        if reput and self._reput_wake is not None:
            self._wake_reput()
        if self._appended is not None:
            self._notify_appended()
        if self.warm_wake is not None and at >= self.warm_at:
            self._wake_warm()

    def _notify_appended(self) -> None:
        event, self._appended = self._appended, None
        if event is not None:
            event.set()

    def _wake_warm(self) -> None:
        event, self.warm_wake = self.warm_wake, None
        if event is not None:
            event.set()

    def wake_reput(self) -> None:
        """Wake the reput service (dispatch stopped for a ConsumeQueue segment to make)."""
        self._wake_reput()

    def _wake_reput(self) -> None:
        event, self._reput_wake = self._reput_wake, None
        if event is not None:
            event.set()

    async def wait_reput_work(self, offset: int) -> None:
        """The reput service's own wait: return once the CommitLog's end passes ``offset``.
        Separate from ``wait_appended_beyond`` so that an append dispatched inline does not
        wake the reput task (others waiting for appended bytes are still woken)."""
        while self.commitlog.max_offset <= offset:
            if self._reput_wake is None:
                self._reput_wake = trio.Event()
            await self._reput_wake.wait()

    async def wait_appended_beyond(self, offset: int) -> None:
        """Return once the CommitLog's end passes ``offset`` (an HA writer waits here; the
        reput service has ``wait_reput_work``). A put costs nothing extra while nobody waits."""
        while self.commitlog.max_offset <= offset:
            if self._appended is None:
                self._appended = trio.Event()
            await self._appended.wait()

    def put_wait(self, end: int) -> tuple[PutMessageStatus, Watermark | None]:
        """What a put ending at ``end`` whose producer waits (WAIT is not "false") must pass
        before it is answered: the status to answer with and the watermark to hold the answer
        on until it reaches ``end`` (None: answer now)."""
        flush = None
        if self.sync_flush and self.flush_watermark.held.mark < end:
            flush = self.flush_watermark
            self.flush_requested.set()
        replicas = self.replicas
        if replicas is None:
            return _PUT_OK, flush
        status = replicas.sync_status_nowait(end)
        if status is not None:  # decided now (SLAVE_NOT_AVAILABLE still waits for the flush)
            return status, flush
        both = self.both_watermark
        return _PUT_OK, replicas.ack_watermark if flush is None or both is None else both

    def timeout_status(self, mark: Watermark, end: int) -> PutMessageStatus:
        """Why a put held on ``mark`` (from ``put_wait``) was not answered PUT_OK in time."""
        replicas = self.replicas
        if mark is self.flush_watermark or replicas is None:
            return PutMessageStatus.FLUSH_DISK_TIMEOUT
        if replicas.ack_watermark.value < end:
            return PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        return PutMessageStatus.FLUSH_DISK_TIMEOUT

    def answer_timeouts_with(self, timeout_answer: TimeoutAnswer) -> None:
        """How held answers read once their wait timed out (the broker's send answers):
        ``timeout_answer(status)`` rewrites an answer under ``status``."""
        self._timeout_answer = timeout_answer
        self.flush_watermark.held.expired_answer = timeout_answer(
            PutMessageStatus.FLUSH_DISK_TIMEOUT)
        if self.replicas is not None:
            self._wire_replicas(self.replicas)

    def attach_replicas(self, gate: ReplicaGate) -> None:
        """SYNC_MASTER: waiting puts wait for ``gate``'s ack watermark from now on (and stay
        wired to it: with no slave left it answers SLAVE_NOT_AVAILABLE)."""
        self.replicas = gate
        self.waits_for_replicas = True
        if self.sync_flush and self.both_watermark is None:  # (no sweeper: SYNC_MASTER's has)
            self.both_watermark = Watermark(0, timeout_s=self.sync_flush_timeout_s)
        self._wire_replicas(gate)
        if self.both_watermark is not None:
            both, flush, acks = self.both_watermark, self.flush_watermark, gate.ack_watermark

            def follow() -> None:
                both.advance(min(flush.value, acks.value))

            flush.followers.append(follow)
            acks.followers.append(follow)
            follow()

    def _wire_replicas(self, gate: ReplicaGate) -> None:
        timeout_answer = self._timeout_answer
        slave_timeout = timeout_answer(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        gate.ack_watermark.held.expired_answer = slave_timeout
        both = self.both_watermark
        if both is None:
            return
        disk_timeout = timeout_answer(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        acks = gate.ack_watermark

        def both_expired(answer: RemotingCommand, key: int) -> RemotingCommand:
            late = slave_timeout if acks.value < key else disk_timeout
            return late(answer, key)

        both.held.expired_answer = both_expired
        # one deadline for both waits: the longer timeout (a put waited for the flush, then
        # for the slave: at most the sum; the answer's code is the same either way)
        both.held.timeout_s = max(self.sync_flush_timeout_s, acks.held.timeout_s)

    async def wait_stored(self, result: PutMessageResult, wait: bool) -> PutMessageResult:
        """A task's put: wait as ``put_wait`` says (the sweeper of the watermark times it
        out), then the result under the status its wait ended with."""
        if result.result is None or not wait:
            return result
        end = result.result.end_offset
        status, mark = self.put_wait(end)
        passed = mark is None or await mark.wait_for(end, mark.held.timeout_s)
        if not passed and mark is not None and status is _PUT_OK:
            status = self.timeout_status(mark, end)
        if status is _PUT_OK:
            return result
        return PutMessageResult(status, result.result, result.remark)

    async def flush_commitlog(self) -> int:
        """msync every written byte off the event loop, then advance the flush watermark.

        The durability rule of a SYNC_FLUSH answer: the flush watermark passes a byte only once
        that byte is msynced AND the name of the file holding it (new files' directory
        entries, ``DirSyncLedger``) is fsynced -- both here, in the worker thread, before
        ``advance``; files are created without a directory fsync on the event loop."""
        cl = self.commitlog
        queue = cl.queue
        target = cl.max_offset
        ts = cl.last_store_timestamp
        plan = queue.flush_plan(target)

        def work() -> None:
            queue.sync_dirs()  # (the names of the files the plan covers, among others)
            run_flush_plan(plan)

        if plan or (queue.ledger is not None and queue.ledger.pending):
            await trio.to_thread.run_sync(work)
        queue.mark_flushed(plan, target)
        if self.checkpoint is not None and self.role is not BrokerRole.SLAVE and ts:
            self.checkpoint.physic_msg_timestamp = ts
        self.flush_watermark.advance(cl.flushed_offset)
        return cl.flushed_offset

    def flush_commitlog_sync(self) -> int:
        self.commitlog.queue.flush()
        if self.checkpoint is not None and self.commitlog.last_store_timestamp:
            self.checkpoint.physic_msg_timestamp = self.commitlog.last_store_timestamp
        self.flush_watermark.advance(self.commitlog.flushed_offset)
        return self.commitlog.flushed_offset

    def _logics_flush_plan(
        self, least_pages: int = 0,
    ) -> tuple[list[tuple[ConsumeQueue, FlushPlan, int]], int]:
        """The ConsumeQueues to flush: with ``least_pages`` > 0 only those whose written end is
        that many OS pages past their flushed end (RocketMQ's flushConsumeQueueLeastPages)."""
        plans: list[tuple[ConsumeQueue, FlushPlan, int]] = []
        for cq in list(self.cqs.queues.values()):
            queue = cq.queue
            if least_pages > 0 and (queue.max_offset // OS_PAGE_SIZE_BYTES
                                    - queue.flushed_where // OS_PAGE_SIZE_BYTES) < least_pages:
                continue
            plan = queue.flush_plan()
            if plan:
                plans.append((cq, plan, queue.max_offset))
        return plans, self.dispatcher.last_store_timestamp

    async def flush_logics(self, least_pages: int = 0) -> None:
        """Flush ConsumeQueues, a newly full IndexFile and the checkpoint (off the event loop).

        ``least_pages`` > 0 (the periodic flush between thorough ones, as RocketMQ's
        FlushConsumeQueueService): only ConsumeQueues with that many new pages are flushed, and
        the checkpoint's ``logicsMsgTimestamp`` does not move (not every queue is flushed up to
        it). A page written back is write-protected again: the next unit written into it takes
        a page fault on the event loop (~20 us here, more while the disk is busy), so a topic of
        1024 queues flushed every second paid one per queue per second.

        The IndexFile being written is not flushed on this timer (RocketMQ flushes one when it
        is full, and every file at shutdown): its hash slots are written all over the file, so a
        periodic msync wrote back most of it every time and walked its whole mapping.
        ``indexMsgTimestamp`` is the end of the last flushed file; after a crash, recovery
        drops the files past it and rebuilds them from the CommitLog (``truncate_beyond``)."""
        plans, ts = self._logics_flush_plan(least_pages)
        if least_pages > 0:
            ts = 0  # (the checkpoint's logics time moves on a thorough flush only)
        files = self.index.files if self.index is not None else []
        full = files[-2] if len(files) >= 2 and files[-2] is not self._index_flushed else None
        checkpoint = self.checkpoint
        ledger = self.cqs.ledger

        def work() -> None:
            # new ConsumeQueue segments' names before the checkpoint below covers their units
            # (recovery re-dispatches only what came after logicsMsgTimestamp)
            ledger.sync()
            for _cq, plan, _upto in plans:
                run_flush_plan(plan)
            if full is not None:
                with contextlib.suppress(ValueError, OSError):
                    full.flush()

        await trio.to_thread.run_sync(work)
        for cq, plan, upto in plans:
            cq.queue.mark_flushed(plan, upto)
        index_ts = 0
        if full is not None:
            self._index_flushed = full
            index_ts = full.end_ts
        if checkpoint is not None and checkpoint is self.checkpoint and (ts or index_ts):
            if ts:
                checkpoint.logics_msg_timestamp = ts
                if self.role is BrokerRole.SLAVE:
                    checkpoint.physic_msg_timestamp = ts
            if index_ts:
                checkpoint.index_msg_timestamp = index_ts
            await trio.to_thread.run_sync(checkpoint.flush)

    def flush_all_sync(self) -> None:
        """Dispatch the backlog and flush CommitLog, ConsumeQueues, index and checkpoint
        (blocking: tests, tools and shutdown paths)."""
        self.dispatch_all()
        self.flush_commitlog_sync()
        self.flush_logics_sync()
        if self.checkpoint is not None:
            self.checkpoint.flush()

    def flush_logics_sync(self) -> None:
        plans, ts = self._logics_flush_plan()
        self.cqs.ledger.sync()
        for cq, plan, upto in plans:
            run_flush_plan(plan)
            cq.queue.mark_flushed(plan, upto)
        if self.index is not None:
            self.index.flush()
        if self.checkpoint is not None:
            if ts:
                self.checkpoint.logics_msg_timestamp = ts
            if self.index is not None and self.index.files:
                self.checkpoint.index_msg_timestamp = self.index.files[-1].end_ts

    # ================================================================== replication (slave side)

    def append_raw(self, phys_offset: int, data: bytes | memoryview) -> None:
        """Append raw CommitLog bytes from a master at ``phys_offset`` (file CommitLog only;
        raises ValueError on a mismatch)."""
        self.backend.append_raw(phys_offset, data)

    def read_raw(self, phys_offset: int, max_bytes: int) -> memoryview | None:
        """Up to ``max_bytes`` readable CommitLog bytes at ``phys_offset`` (one file at most)."""
        return self.backend.read_raw(phys_offset, max_bytes)

    def rebuild_queue_offsets(self) -> None:
        """After a role change to master: queue offsets continue from the ConsumeQueues."""
        self.backend.rebuild_queue_offsets()

    @property
    def max_phys_offset(self) -> int:
        return self.backend.max_offset

    @property
    def min_phys_offset(self) -> int:
        return self.backend.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.backend.flushed_offset

    @property
    def confirm_offset(self) -> int:
        """Offset readers may trust (file CommitLog: everything written; DLedger: committed)."""
        return self.backend.confirm_offset

    # ================================================================== dispatch

    def dispatch(self, max_bytes: int = MAX_DISPATCH_BYTES_PER_ROUND) -> int:
        """One reput round (about ``max_bytes``); returns the records dispatched."""
        return self.backend.dispatch(max_bytes)

    async def make_wanted_files(self) -> int:
        """Create the ConsumeQueue segments dispatch stopped for (``Dispatcher.wants_file``)
        in a worker thread, each with its first page prefaulted; returns how many were asked.
        One that could not be made is left to the next dispatch to create inline, where its
        error surfaces as it did before."""
        dispatcher = self.dispatcher
        wanted = dispatcher.take_wanted_files()
        if not wanted:
            dispatcher.files_pending = False
            return 0

        def work() -> list[tuple[str, int, int]]:
            failed: list[tuple[str, int, int]] = []
            for key, cq in wanted:
                try:
                    cq.prepare_file(key[2])
                except OSError as exc:
                    log.warning("consume_queue_prepare_failed", topic=key[0][:200],
                                queue_id=key[1], start=key[2], error=str(exc))
                    failed.append(key)
                    continue
                if not cq.queue.is_prepared(key[2]):
                    failed.append(key)  # (a stray file in the way, a queue closed meanwhile)
            return failed

        try:
            failed = await trio.to_thread.run_sync(work)
        finally:
            dispatcher.files_pending = False
        dispatcher.inline_files.update(failed)
        return len(wanted)

    def dispatch_all(self) -> int:
        """Dispatch until caught up (or stopped before an incomplete/corrupt record)."""
        return self.backend.dispatch_all()

    @property
    def dispatch_behind_bytes(self) -> int:
        return self.backend.dispatch_behind_bytes

    def runtime_info(self) -> dict[str, str]:
        """The backend's GET_BROKER_RUNTIME_INFO keys (DLedger: role, term, commit, ...)."""
        return self.backend.runtime_info()

    # ================================================================== reads

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        max_bytes: int = DEFAULT_PULL_MAX_BYTES,
        message_filter: MessageFilter | None = None,
        record_filter: Callable[[memoryview], bool] | None = None,
    ) -> GetMessageResult:
        """Messages of one queue from ``offset`` (RocketMQ DefaultMessageStore.getMessage).
        ``message_filter`` sees each ConsumeQueue unit's tags code; ``record_filter`` the
        CommitLog record itself (SQL92 on its properties: isMatchedByCommitLog)."""
        cq = self.cqs.find(topic, queue_id)
        s = GetMessageStatus
        if cq is None:
            self.get_miss_times += 1
            return GetMessageResult(s.NO_MATCHED_LOGIC_QUEUE, self._correct(offset, 0), 0, 0)
        min_off = cq.min_offset_in_queue
        max_off = cq.max_offset_in_queue
        status, nxt = self._offset_status(offset, min_off, max_off)
        if status is not s.FOUND:
            self.get_miss_times += 1
            return GetMessageResult(status, nxt, min_off, max_off)
        buf = cq.get_index_buffer(offset)
        if buf is None:
            self.get_miss_times += 1
            return GetMessageResult(
                GetMessageStatus.OFFSET_FOUND_NULL,
                self._correct(offset, cq.roll_next_file(offset)), min_off, max_off,
            )
        result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_off, max_off)
        buffers = result.buffers
        qoffs = result.queue_offsets
        total = 0
        next_file_start = -1
        limit = min(len(buf), max(MAX_FILTER_MESSAGE_COUNT, max_count * UNIT) // UNIT * UNIT)
        cl_queue = self.commitlog.queue
        i = 0
        while i < limit:
            phys, size, code = CQ_UNIT.unpack_from(buf, i)
            i += UNIT
            if size == FILLER_SIZE:
                continue
            if next_file_start >= 0 and phys < next_file_start:
                continue
            if buffers and (len(buffers) >= max_count or total + size > max_bytes):
                i -= UNIT
                break
            if message_filter is not None and not message_filter(code):
                continue
            view = cl_queue.read(phys, size)
            if view is None:
                if not buffers:
                    result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_file_start = self.commitlog.roll_next_file(phys)
                continue
            if record_filter is not None and not record_filter(view):
                view.release()
                continue
            buffers.append(view)
            qoffs.append(offset + (i - UNIT) // UNIT)
            total += size
            result.status = GetMessageStatus.FOUND
            next_file_start = -1
        buf.release()
        result.buffer_total_size = total
        result.next_begin_offset = offset + i // UNIT
        if buffers:
            self.get_found_times += 1
        else:
            self.get_miss_times += 1
        return result

    def at_queue_end(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether ``get_message`` from ``offset`` would answer OFFSET_OVERFLOW_ONE (the queue
        holds messages and ``offset`` is one past its last): a miss, counted as that read
        counts it, found without building a read. A long-polling pull that caught up with its
        queue parks on this."""
        cq = self.cqs.find(topic, queue_id)
        if cq is None:
            return False
        max_off = cq.max_offset_in_queue
        if offset != max_off or max_off == 0 or offset < cq.min_offset_in_queue:
            return False
        self.get_miss_times += 1
        return True

    def _offset_status(
        self, offset: int, min_off: int, max_off: int
    ) -> tuple[GetMessageStatus, int]:
        """Where ``offset`` lies in a queue of ``[min_off, max_off)``: FOUND inside, else the
        miss and the offset to pull from next (a slave keeps the asked one)."""
        s = GetMessageStatus
        if max_off == 0:
            return s.NO_MESSAGE_IN_QUEUE, self._correct(offset, 0)
        if offset < min_off:
            return s.OFFSET_TOO_SMALL, self._correct(offset, min_off)
        if offset == max_off:
            return s.OFFSET_OVERFLOW_ONE, self._correct(offset, offset)
        if offset > max_off:
            # RocketMQ 4.9.7: back to the queue's end (older 4.x chose 0 while min was 0)
            return s.OFFSET_OVERFLOW_BADLY, self._correct(offset, max_off)
        return s.FOUND, offset

    def _correct(self, old: int, new: int) -> int:
        return old if self.role is BrokerRole.SLAVE else new

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.find(topic, queue_id)
        return cq.min_offset_in_queue if cq is not None else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.find(topic, queue_id)
        return cq.max_offset_in_queue if cq is not None else 0

    def get_commitlog_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.cqs.find(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        return unit[0] if unit is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """RocketMQ 4.9's ``ConsumeQueue.getOffsetInQueueByTime``: a message stored at
        ``timestamp`` if there is one, else the nearer of its two neighbours (the older one on
        a tie); past the last message that last message (max - 1), before the first the
        first."""
        cq = self.cqs.find(topic, queue_id)
        if cq is None:
            return 0
        store_time = self.commitlog.pickup_store_timestamp
        first_at_or_after = cq.offset_by_time(timestamp, store_time)
        lo, end = cq.min_offset_in_queue, cq.max_offset_in_queue
        if end <= lo or first_at_or_after <= lo:
            return first_at_or_after
        if first_at_or_after >= end:
            return end - 1
        right = cq.get_unit(first_at_or_after)
        left = cq.get_unit(first_at_or_after - 1)
        if right is None or left is None:
            return first_at_or_after
        right_ts = store_time(right[0], right[1])
        if right_ts == timestamp:
            return first_at_or_after
        left_ts = store_time(left[0], left[1])
        if left_ts < 0 or right_ts < 0:
            return first_at_or_after
        return first_at_or_after if abs(timestamp - left_ts) > abs(timestamp - right_ts) else (
            first_at_or_after - 1
        )

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.cqs.find(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        if unit is None:
            return -1
        return self.commitlog.pickup_store_timestamp(unit[0], unit[1])

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int:
        """Store time of a queue's first message, or of the CommitLog's first record."""
        if topic is not None:
            cq = self.cqs.find(topic, queue_id)
            if cq is None:
                return -1
            return self.get_message_store_timestamp(topic, queue_id, cq.min_offset_in_queue)
        return self.backend.earliest_store_time()

    def read_record(self, phys_offset: int) -> memoryview | None:
        """The raw record at ``phys_offset`` (a view), or None."""
        head = self.commitlog.get_message(phys_offset, 8)
        if head is None:
            return None
        size = int.from_bytes(head[:4], "big", signed=True)
        head.release()
        if size <= 0:
            return None
        return self.commitlog.get_message(phys_offset, size)

    def lookup_message_by_offset(self, phys_offset: int) -> StoredMessage | None:
        view = self.read_record(phys_offset)
        if view is None:
            return None
        try:
            return decode_record(view, check_crc=False)
        except RecordError:
            return None
        finally:
            view.release()

    def look_message_by_msg_id(self, msg_id: str) -> StoredMessage | None:
        try:
            _host, phys = decode_offset_msg_id(msg_id)
        except ValueError:
            return None
        return self.lookup_message_by_offset(phys)

    def query_message(
        self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int
    ) -> QueryMessageResult:
        """Records indexed under ``topic#key`` stored within [begin_ts, end_ts]: the newest
        ``max_num`` matches, answered in ascending CommitLog order as RocketMQ sorts them; the
        key is checked against each record. The index's last update (timestamp, physical
        offset) is reported only when something was found (RocketMQ answers 0 otherwise)."""
        out = QueryMessageResult([], 0, 0)
        if self.index is None:
            return out
        found = sorted(
            self.index.query(topic, key, min(max_num, MAX_QUERY_RESULTS), begin_ts, end_ts)
        )
        if found and self.index.files:
            out.index_last_update_timestamp = self.index.files[-1].end_ts
            out.index_last_update_phyoffset = self.index.files[-1].end_phy
        for phys in found:
            view = self.read_record(phys)
            if view is None:
                continue
            try:
                msg = decode_record(view, check_crc=False)
            except RecordError:
                view.release()
                continue
            keys = (msg.properties.get(MessageConst.PROPERTY_KEYS) or "").split(" ")
            uniq = msg.properties.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if msg.topic == topic and (key in keys or key == uniq):
                out.buffers.append(view)
            else:
                view.release()
        return out

    # ================================================================== maintenance

    def check_disk_space(self) -> float:
        return self.retention.check_disk()

    def delete_topic(self, topic: str) -> int:
        """Drop ``topic``'s ConsumeQueues and queue offsets (RocketMQ ``cleanUnusedTopic`` for
        one deleted topic); its CommitLog records stay until retention removes them. A topic
        created again with the same name starts at queue offset 0. Returns the queues dropped.
        A topic that names no directory inside the store (``../x``, an absolute path, a
        symlink) deletes nothing: it is logged and answers 0."""
        try:
            gone = self.cqs.delete_topic(topic)
        except StorePathError as exc:
            log.warning("delete_topic_refused", topic=topic[:200], error=str(exc))
            return 0
        table = self.commitlog.topic_queue_table
        for key in [k for k in table if k[0] == topic]:
            del table[key]
        if gone:
            log.info("topic_queues_deleted", topic=topic, queues=gone)
        return len(gone)

    def clean_once(self, now_ms: int | None = None) -> CleanResult:
        return self.retention.clean_once(now_ms)

    def is_writable(self) -> bool:
        return self._check_writable() is None


class FileCommitLog:
    """The file CommitLog (``store/commitlog.py``) as a store's backend: records are visible as
    soon as they are appended; a put waits for the flush (SYNC_FLUSH) and the slaves
    (``store.replicas``) as configured (``MessageStore.put_wait``)."""

    def __init__(
        self, config: MessageStoreConfig, *, clock_ms: Callable[[], int] = now_ms
    ) -> None:
        self.config = config
        self.commitlog = CommitLog(config, clock_ms=clock_ms)
        self.store: BackendHost

    def bind(self, store: BackendHost) -> None:
        self.store = store
        self.dispatcher = store.dispatcher

    # ================================================================== lifecycle

    def open(self, *, last_exit_ok: bool) -> None:
        store = self.store
        cfg = self.config
        os.makedirs(cfg.commit_log_dir, exist_ok=True)
        commitlog = self.commitlog
        commitlog.queue.load()
        assert store.checkpoint is not None
        store.recovery = recover(
            cfg, commitlog, store.cqs, store.index, store.checkpoint, last_exit_ok=last_exit_ok,
        )
        self.dispatcher.reput_from = store.recovery.reput_from
        while self.dispatcher.dispatch() > 0:
            pass
        rebuild_topic_queue_table(commitlog, store.cqs)
        store.boot_max_offset = commitlog.max_offset
        for cq in store.cqs.queues.values():
            cq.correct_min_offset(commitlog.min_offset)
        store.flush_watermark.advance(commitlog.flushed_offset)

    def opened(self) -> None:
        self.store.retention.check_disk()

    def close(self) -> None:
        store = self.store
        while self.dispatcher.dispatch() > 0:
            pass
        clean = self.dispatcher.behind == 0
        self.commitlog.queue.flush()
        store.flush_logics_sync()
        checkpoint = store.checkpoint
        if checkpoint is not None:
            checkpoint.physic_msg_timestamp = max(
                checkpoint.physic_msg_timestamp, self.commitlog.last_store_timestamp
            )
            checkpoint.flush()
        if clean:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.config.abort_path)

    def close_files(self) -> None:
        self.commitlog.close()

    # ================================================================== writes

    def refusal(self) -> PutMessageResult | None:
        store = self.store
        if store.shutdown:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, None, "store is shut down"
            )
        if store.role is BrokerRole.SLAVE:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, None, "the broker role is SLAVE"
            )
        # the flag is refreshed by the clean service every cleanResourceInterval; while it is
        # set, each refused put probes again (one statvfs) so writes resume as soon as space
        # is freed
        retention = store.retention
        if retention.disk_full:
            retention.check_disk()
        if retention.disk_full:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, None, "the broker's disk is full"
            )
        return None

    def append_message(self, msg: Message) -> PutMessageResult:
        """Append without waiting for flush or replication (the synchronous half of a put)."""
        return self.append_marked(msg, False, False)[0]

    def append_messages(self, batch: Message) -> PutMessageResult:
        store = self.store
        refused = self.refusal()
        if refused is not None:
            return refused
        # the reput has dispatched everything so far: the batch is dispatched from the put
        caught_up = self.dispatcher.reput_from == self.commitlog.max_offset
        result = self.commitlog.append_batch(batch, keys=caught_up)
        appended = result.result
        if appended is None:
            store.put_failed_times += 1
        else:
            inline = caught_up and self._batch_dispatched(batch, appended)
            store.appended(appended.end_offset, reput=not inline)
        return result

    def _batch_dispatched(self, batch: Message, appended: AppendMessageResult) -> bool:
        """Whether the batch just appended was dispatched now (``Dispatcher.dispatch_batch``);
        a failure leaves it to the reput service (which rewrites nothing already written)."""
        try:
            return self.dispatcher.dispatch_batch(batch.topic, batch.queue_id, appended)
        except Exception:  # the put stands: leave the failure to the reput service
            log.exception("batch_dispatch_failed", offset=appended.wrote_offset)
            return False

    def append_marked(self, msg: Message, batch: bool, wait: bool) -> MarkedPut:
        """Append (a single message's append is written out here: a send's one call into the
        backend); when the producer waits and the store makes it (SYNC_FLUSH, SYNC_MASTER):
        the watermark ``put_wait`` names, keyed by the record's end offset, and the status it
        decided (SLAVE_NOT_AVAILABLE still waits for the flush)."""
        store = self.store
        if batch:
            result = self.append_messages(msg)
            appended = result.result
        else:
            if store.shutdown or store.role is BrokerRole.SLAVE or store.retention.disk_full:
                refused = self.refusal()
                if refused is not None:
                    return refused, None, 0
            result = self.commitlog.append(msg)
            appended = result.result
            if appended is None:
                store.put_failed_times += 1
            else:
                inline = store.inline_dispatch and self._dispatched_inline(appended)
                store.appended(appended.wrote_offset, reput=not inline)
        if appended is None or not wait or not (store.sync_flush or store.waits_for_replicas):
            return result, None, 0
        end = appended.end_offset
        status, mark = store.put_wait(end)
        if status is not _PUT_OK:
            result = PutMessageResult(status, appended, result.remark)
        return result, None if mark is None else mark.held, end

    def _dispatched_inline(self, appended: AppendMessageResult) -> bool:
        """Whether the record just appended was dispatched now (``INLINE_DISPATCH``): when the
        reput was caught up, instead of paying a scheduler round to wake the reput task (long
        polling is notified at once)."""
        store = self.store
        if not (
            store.services_running
            and self.dispatcher.reput_from == appended.wrote_offset
            and appended.wrote_bytes <= INLINE_DISPATCH_MAX_BYTES
        ):
            return False
        try:
            self.dispatcher.dispatch()
        except Exception:  # the put stands: leave the failure to the reput service
            log.exception("inline_dispatch_failed", offset=appended.wrote_offset)
            store.inline_dispatch = False
            return False
        return True

    async def put_message(self, msg: Message) -> PutMessageResult:
        result = self.append_message(msg)
        store = self.store
        if result.result is None or (not store.sync_flush and not store.waits_for_replicas):
            return result
        wait = msg.properties.get(MessageConst.PROPERTY_WAIT_STORE_MSG_OK) != "false"
        return await store.wait_stored(result, wait)

    async def put_messages(self, batch: Message) -> PutMessageResult:
        result = self.append_messages(batch)
        store = self.store
        if result.result is None or (not store.sync_flush and not store.waits_for_replicas):
            return result
        wait = batch.properties.get(MessageConst.PROPERTY_WAIT_STORE_MSG_OK) != "false"
        return await store.wait_stored(result, wait)

    # ================================================================== replication (slave side)

    def append_raw(self, phys_offset: int, data: bytes | memoryview) -> None:
        """Append raw CommitLog bytes from a master at ``phys_offset`` (our max offset, or a file
        boundary when empty). The CommitLog stays a byte-identical prefix of the master's;
        dispatch builds ConsumeQueue and Index from it. Raises ValueError on a mismatch."""
        store = self.store
        if store.shutdown:
            raise ValueError("store is shut down")
        self.commitlog.append_raw(phys_offset, data)
        store.appended(self.commitlog.max_offset)

    def read_raw(self, phys_offset: int, max_bytes: int) -> memoryview | None:
        """Up to ``max_bytes`` readable CommitLog bytes at ``phys_offset`` (one file at most)."""
        return self.commitlog.read_raw(phys_offset, max_bytes)

    # ================================================================== positions and dispatch

    @property
    def max_offset(self) -> int:
        return self.commitlog.max_offset

    @property
    def min_offset(self) -> int:
        return self.commitlog.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.commitlog.flushed_offset

    @property
    def confirm_offset(self) -> int:
        """Offset readers may trust: everything written."""
        return self.commitlog.max_offset

    def dispatch(self, max_bytes: int) -> int:
        return self.dispatcher.dispatch(max_bytes)

    def dispatch_all(self) -> int:
        total = 0
        while (count := self.dispatcher.dispatch()) > 0:
            total += count
        return total

    @property
    def dispatch_behind_bytes(self) -> int:
        return self.dispatcher.behind

    def rebuild_queue_offsets(self) -> None:
        self.dispatch_all()
        rebuild_topic_queue_table(self.commitlog, self.store.cqs)

    def earliest_store_time(self) -> int:
        files = self.commitlog.queue.files
        return self.commitlog.first_store_timestamp(files[0]) if files else -1

    def runtime_info(self) -> dict[str, str]:
        return {}
