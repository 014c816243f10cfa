"""The CommitLog backend a ``MessageStore`` holds: what the file CommitLog and DLedger differ in.

``MessageStore`` (``store/message_store.py``) owns what every broker store has: the lock and
``abort`` files, ConsumeQueues, IndexFiles, the checkpoint, the dispatcher, retention, the pull
and query paths. The CommitLog itself, and everything that follows from where its records live
and when they become visible, is the backend's:

* **open / close**: recovery of the log (and of the ConsumeQueues and index against it), the
  flush at a clean shutdown, closing its files;
* **writes**: ``append_message(s)`` (the synchronous half of a put); ``append_marked`` (the
  broker's send: the same append, and the watermark its answer must wait for with its key
  there -- the flush, the slaves' ack or both at the record's end offset for the file
  CommitLog, the quorum's commit at the last entry's index + 1 for DLedger -- see
  ``MarkedPut``); ``put_message(s)`` (a task's put, waiting until the message is stored);
  ``append_raw`` (master/slave replication, file only);
* **positions**: max / min / flushed / confirm offsets, ``read_raw``;
* **dispatch source**: ``dispatch`` / ``dispatch_all`` / ``dispatch_behind_bytes`` (the file
  CommitLog's reput, DLedger's apply of committed entries), ``rebuild_queue_offsets``;
* **retention view and runtime info**: ``commitlog`` is the CommitLog as the read paths,
  dispatcher and retention see it; ``earliest_store_time`` and ``runtime_info`` feed
  GET_BROKER_RUNTIME_INFO.

A backend reaches its store only through ``BackendHost`` (what ``bind`` hands it); mypy checks
both sides of the seam. ``message_store.FileCommitLog`` is the plain backend (RocketMQ
``CommitLog``); the DLedger one is
``rmq_cluster.dledger.commitlog_adapter.DLedgerCommitLog``, which also carries the Raft-specific
parts (attach the node, role changes, apply committed entries, propose with a pending sink)
that the broker's DLedger role reaches through it. The store never imports ``dledger``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from ..cluster.protocol.message import Message
from ..cluster.remoting.held import HeldAnswers
from .checkpoint import StoreCheckpoint
from .commitlog import CommitLog, PutMessageResult, PutMessageStatus
from .config import BrokerRole, MessageStoreConfig
from .dispatcher import ConsumeQueueTable, Dispatcher
from .index_file import IndexService
from .recovery import RecoveryResult
from .retention import CleanResult, Retention

#: What ``append_marked`` returns: the put's result (its status already the answer's: e.g.
#: SLAVE_NOT_AVAILABLE), the watermark's held answers its answer must wait on (None: answer
#: now) and the key there, the point the watermark must reach (a CommitLog end offset, or a
#: DLedger entry index + 1: each watermark counts in its own unit; within one connection the
#: keys on one watermark rise). A plain tuple: built once per send.
MarkedPut = tuple[PutMessageResult, HeldAnswers | None, int]


class AnswerMark(Protocol):
    """A watermark answers are held on (``store/watermark.py``'s ``Watermark``), as a backend
    sees it: its pure core."""

    @property
    def held(self) -> HeldAnswers: ...


class RisingMark(Protocol):
    """What a backend does with the store's flush watermark (``store/watermark.py``): raise
    it to what recovery found flushed."""

    def advance(self, value: int) -> None: ...


class BackendHost(Protocol):
    """What a backend may use of the ``MessageStore`` it serves (``bind``), and nothing else:
    the parts every store has, the counters a backend feeds, and three calls."""

    config: MessageStoreConfig
    clock_ms: Callable[[], int]
    cqs: ConsumeQueueTable
    index: IndexService | None
    dispatcher: Dispatcher
    retention: Retention
    checkpoint: StoreCheckpoint | None
    #: the broker role; a DLedger member sets it as its Raft role changes
    role: BrokerRole
    shutdown: bool
    #: the store's services (``store/flush.py``) run: an append may dispatch inline
    services_running: bool
    inline_dispatch: bool
    sync_flush: bool
    #: set by ``open``: what recovery found, the CommitLog's end at boot, the flushed offset
    recovery: RecoveryResult | None
    boot_max_offset: int
    put_failed_times: int

    @property
    def flush_watermark(self) -> RisingMark: ...

    #: a put must wait for the slaves (SYNC_MASTER) after its append
    waits_for_replicas: bool

    def appended(self, at: int, *, reput: bool = True) -> None:
        """The CommitLog grew (``at``: the offset the warm-up service compares with where it
        wants waking): wake the reput service (``reput`` False: the append was dispatched
        inline), whoever waits for appended bytes, and the warm-up service."""

    def put_wait(self, end: int) -> tuple[PutMessageStatus, AnswerMark | None]:
        """What an append ending at ``end`` whose producer waits must pass before it is
        answered: the status to answer with, and the watermark (None: answer now)."""

    def wait_stored(self, result: PutMessageResult, wait: bool) -> Awaitable[PutMessageResult]:
        """After an append: wait for the flush (SYNC_FLUSH) and the slaves (``wait``)."""

    def flush_logics(self) -> Awaitable[None]: ...

    def flush_logics_sync(self) -> None: ...

    def clean_once(self, now_ms: int | None = None) -> CleanResult: ...


class CommitLogBackend(Protocol):
    """What a ``MessageStore`` asks of its CommitLog (see the module docstring)."""

    #: the CommitLog as the read paths, the dispatcher and retention see it (DLedger's
    #: backend: a view of its files with the same read interface)
    commitlog: CommitLog

    def bind(self, store: BackendHost) -> None:
        """Called once by the store's constructor, before anything else."""

    def open(self, *, last_exit_ok: bool) -> None:
        """Load and recover the log, and the store's ConsumeQueues and index against it (the
        store holds the lock and has loaded its ConsumeQueues, checkpoint and index)."""

    def opened(self) -> None:
        """Called once the store is open (its ``abort`` marker written)."""

    def close(self) -> None:
        """A clean shutdown's flush (the store closes the files and unlocks after)."""

    def close_files(self) -> None: ...

    def append_message(self, msg: Message) -> PutMessageResult: ...

    def append_messages(self, batch: Message) -> PutMessageResult: ...

    def append_marked(self, msg: Message, batch: bool, wait: bool) -> MarkedPut:
        """A send's put: ``msg`` (``batch``: a SEND_BATCH_MESSAGE body) appended now, and what
        its answer must wait for (``MarkedPut``). ``wait``: the producer waits for the store
        (its WAIT property is not "false"); a backend may wait regardless (DLedger: always the
        quorum, as RocketMQ's)."""

    def put_message(self, msg: Message) -> Awaitable[PutMessageResult]: ...

    def put_messages(self, batch: Message) -> Awaitable[PutMessageResult]: ...

    def refusal(self) -> PutMessageResult | None:
        """Why a put would be refused now (None: writable)."""

    def append_raw(self, phys_offset: int, data: bytes | memoryview) -> None: ...

    def read_raw(self, phys_offset: int, max_bytes: int) -> memoryview | None: ...

    @property
    def max_offset(self) -> int: ...

    @property
    def min_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    @property
    def confirm_offset(self) -> int: ...

    def dispatch(self, max_bytes: int) -> int: ...

    def dispatch_all(self) -> int: ...

    @property
    def dispatch_behind_bytes(self) -> int: ...

    def rebuild_queue_offsets(self) -> None: ...

    def earliest_store_time(self) -> int:
        """Store time of the log's first record (-1: none)."""

    def runtime_info(self) -> dict[str, str]:
        """The backend's own GET_BROKER_RUNTIME_INFO keys."""
