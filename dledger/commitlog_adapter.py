"""DLedgerCommitLog: the broker's CommitLog on a DLedger (Raft) log (RocketMQ ``DLedgerCommitLog``).

With ``enableDLegerCommitLog=true`` the broker opens its ``MessageStore`` over a
:class:`DLedgerCommitLog` backend (:func:`open_dledger_store`) instead of the file CommitLog.  The
store keeps its ConsumeQueues, IndexFiles, checkpoint, lock and ``abort`` marker, but the
CommitLog is the DLedger log in ``<storePathRootDir>/dledger-<selfId>/{data,index}``
(``storePathDLedgerCommitLog`` moves it):

* **One entry per message**; the entry body is a complete v1 CommitLog record, a batch becomes
  one entry per message.  The **physical offset** of a message is ``entry pos + 48`` (the entry
  header is 48 bytes); the leader writes it into the record's PHYSICALOFFSET field before the
  append, so every replica holds identical bytes, and ConsumeQueue units, offset msgIds, pulls,
  queries and views all point into the DLedger data files.
* **Visibility**: ConsumeQueue and Index are built only from **committed** entries (the core's
  ``committed_entries``), so ``max_phys_offset`` is the committed position and a reader never sees
  an entry a new leader might truncate.  Empty entries (a new leader's no-op) are skipped.
* **Writes** go through :meth:`DLedgerNode.propose_now` (synchronous: position, queue offset and
  append happen with no ``await`` between them); ``put_message`` then waits for the commit
  (group commit: one Ready wakes every send it commits); the broker's send processor calls
  ``append_marked`` instead and holds its encoded answer on the node's commit watermark.  The
  node answers a commit before it dispatches the entries; a pull or query right after the
  answer finds ``dispatch_behind_bytes > 0`` and ``dispatch()`` applies the committed entries
  on the spot.
  Result mapping (reference §7.7):
  NOT_LEADER / LEADER_NOT_READY / INCONSISTENT_LEADER / DISK_FULL -> SERVICE_NOT_AVAILABLE;
  WAIT_QUORUM_ACK_TIMEOUT / LEADER_PENDING_FULL -> OS_PAGECACHE_BUSY (the client gets
  SYSTEM_ERROR and retries, so a timed-out entry that commits later is a duplicate); others ->
  UNKNOWN_ERROR (TERM_CHANGED: the leader's term ended before the entry committed).
  ``append_message`` (the schedule service, end-transaction, send-back) proposes
  without waiting, as an async master would.
* **Leader readiness** (DLedgerRoleChangeHandler): a new leader accepts writes only once its
  no-op entry committed and every entry up to it was dispatched; then it rebuilds the queue
  offset table from the ConsumeQueues.  Followers refuse writes with SERVICE_NOT_AVAILABLE and
  a remark naming the leader.
* **Recovery**: the DLedger store drops a torn tail; ConsumeQueues are cut to the DLedger
  written end; entries from the ConsumeQueues' end up to the last known commit index (the
  ``checkpoint`` file: ``endIndex``, ``committedIndex``) are dispatched again (idempotent).  A
  follower's divergent tail is never in its ConsumeQueues (only committed entries are), and the
  core truncates it when the leader's pushes conflict with it.
* **Durability** is DLedger's: an ack means "in the page cache of a majority" (data is flushed
  every ``dledger.node.STORE_FLUSH_INTERVAL_S`` and at close), which survives a process crash
  (``kill -9``).

* **Retention** (RocketMQ: DLedgerCommitLog hands ``fileReservedTime``/``deleteWhen``/
  ``diskMaxUsedSpaceRatio`` to DLedger): the store's own policy (``store/retention.py``) runs over
  the DLedger data files through :class:`DLedgerCommitLogView` (``files``,
  ``delete_first_files``, ``min_offset``), every ``cleanResourceInterval``.  A file goes only
  when every entry in it is applied (dispatched) and, on a leader, acknowledged by every
  follower that has acknowledged anything; then ConsumeQueues drop their units below the new
  minimum and their min offsets move up, so a pull below answers OFFSET_TOO_SMALL with the next
  begin offset, as RocketMQ does.  Data files are ``mappedFileSizeCommitLog`` bytes (RocketMQ
  sets DLedger's ``mappedFileSizeForEntryData`` from it); files already on disk keep their size.

* **From master/slave** (RocketMQ's ``dividedCommitlogOffset``): a broker switched to
  ``enableDLegerCommitLog=true`` on a store that holds a CommitLog keeps it, read-only: the
  DLedger log begins at the end of its last file (:attr:`DLedgerCommitLogView.divided_offset`,
  rounded up to a data file boundary), reads below that offset go to the old CommitLog, and the
  existing ConsumeQueues, IndexFiles, topics and consumer offsets go on as they were.  Every
  peer must start from the same old CommitLog (the old master's; a slave that was in sync has
  the same bytes; a new member gets a copy), or their DLedger positions would differ.  The old
  CommitLog's files are not subject to retention.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..cluster.clock import now_ms
from ..cluster.logging import get_logger
from ..cluster.protocol.message import (
    RECORD_FIXED_SIZE,
    RECORD_HEADER_SIZE,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_COMMIT_TYPE,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NOT_TYPE,
    SYSFLAG_TRANSACTION_PREPARED_TYPE,
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
    Message,
    MessageConst,
    decode_batch,
    encode_host,
    encode_properties,
    join_properties,
    pack_record,
    peek_field,
)
from ..store.backend import BackendHost, MarkedPut
from ..store.commitlog import (
    AppendMessageResult,
    CommitLog,
    PutMessageResult,
    PutMessageStatus,
)
from ..store.config import BrokerRole, MessageStoreConfig
from ..store.message_store import MessageStore
from ..store.paths import is_valid_component
from ..store.record import (
    SCAN_SKIP,
    RecordScanner,
    Scanned,
    put_properties,
    record_tags_code,
)
from ..store.recovery import rebuild_topic_queue_table
from ..store.retention import CleanResult
from .config import DLedgerConfig
from .core import Role
from .log_storage import BODY_OFFSET, FileLogStorage
from .messages import Entry, ResponseCode

if TYPE_CHECKING:
    from ..store.watermark import ExpiredAnswer, Watermark
    from .node import DLedgerNode

log = get_logger(component="dledger_commitlog")

CHECKPOINT_FILE: Final = "checkpoint"
KEY_END_INDEX: Final = "endIndex"
KEY_COMMITTED_INDEX: Final = "committedIndex"
TOPIC_CACHE_MAX_ENTRIES: Final = 100_000
MAX_SCANNED_RECORD_BYTES: Final = 0x7FFFFFFF
MAX_TOPIC_BYTES: Final = 127
MAX_PROPERTIES_BYTES: Final = 32767
_NO_ADVANCE_TXN: Final = (SYSFLAG_TRANSACTION_PREPARED_TYPE, SYSFLAG_TRANSACTION_ROLLBACK_TYPE)
_HOST_V6_FLAGS: Final = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
_TOPIC_LEN: Final = tuple(bytes((n,)) for n in range(MAX_TOPIC_BYTES + 1))

_SERVICE_NOT_AVAILABLE_CODES: Final = frozenset({
    ResponseCode.NOT_LEADER,
    ResponseCode.LEADER_NOT_READY,
    ResponseCode.INCONSISTENT_LEADER,
    ResponseCode.DISK_FULL,
    ResponseCode.LEADER_TRANSFERRING,
})
_BUSY_CODES: Final = frozenset({
    ResponseCode.WAIT_QUORUM_ACK_TIMEOUT,
    ResponseCode.LEADER_PENDING_FULL,
})


def put_status_of(code: ResponseCode) -> PutMessageStatus:
    """DLedger's append result -> the store's PutMessageStatus (reference §7.7)."""
    if code is ResponseCode.SUCCESS:
        return PutMessageStatus.PUT_OK
    if code in _SERVICE_NOT_AVAILABLE_CODES:
        return PutMessageStatus.SERVICE_NOT_AVAILABLE
    if code in _BUSY_CODES:
        return PutMessageStatus.OS_PAGECACHE_BUSY
    return PutMessageStatus.UNKNOWN_ERROR


def read_checkpoint(path: str) -> tuple[int, int]:
    """(endIndex, committedIndex) from DLedger's ``checkpoint`` properties file; (-1, -1)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return -1, -1
    props: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    try:
        return int(props.get(KEY_END_INDEX, "-1")), int(props.get(KEY_COMMITTED_INDEX, "-1"))
    except ValueError:
        return -1, -1


def write_checkpoint(path: str, end_index: int, committed_index: int) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{KEY_END_INDEX}={end_index}\n{KEY_COMMITTED_INDEX}={committed_index}\n")
    os.replace(tmp, path)


class _DataFile:
    """One DLedger data file as ``store/retention.py`` sees a CommitLog file."""

    __slots__ = ("file_end", "file_from", "mtime")

    def __init__(self, file_from: int, file_end: int, mtime: float) -> None:
        self.file_from = file_from
        self.file_end = file_end
        self.mtime = mtime

    def last_modified(self) -> float:
        return self.mtime


class DLedgerCommitLogView:
    """What ``MessageStore``'s read paths need of a CommitLog, served from the DLedger data files
    and bounded by the committed position."""

    def __init__(self, storage: FileLogStorage, plain: CommitLog, divided_offset: int = 0) -> None:
        self.storage = storage
        self.plain = plain
        #: below this: the old CommitLog of a group moved from master/slave (read-only)
        self.divided_offset = divided_offset
        self.file_size = storage.data.file_bytes
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.max_record = plain.max_record
        self.committed_end = 0
        self.last_store_timestamp = 0

    # MessageStore reads ``commitlog.queue.read`` and ``commitlog.queue.files``
    @property
    def queue(self) -> DLedgerCommitLogView:
        return self

    @property
    def files(self) -> list[Any]:
        """The data files, oldest first (retention's view of them)."""
        return [_DataFile(*f) for f in self.storage.data_files()]

    #: the highest entry index retention may delete up to (the store sets it: applied index)
    retention_max_index: Callable[[], int] = staticmethod(lambda: -1)

    def delete_first_files(self, count: int) -> list[int]:
        """Retention: delete up to ``count`` oldest data files (never the last, never one
        holding an entry above ``retention_max_index()``)."""
        gone = self.storage.delete_first_data_files(count, max_index=self.retention_max_index())
        if gone:
            log.info("dledger data files deleted", count=len(gone),
                     first_index=self.storage.first_index(), min_offset=self.min_offset)
        return gone

    def retry_destroy(self) -> None:
        pass

    def read(self, phys_offset: int, size: int) -> memoryview | None:
        if phys_offset < self.divided_offset:
            if phys_offset + size > self.divided_offset:
                return None
            return self.plain.queue.read(phys_offset, size)
        if phys_offset + size > self.committed_end:
            return None
        return self.storage.view(phys_offset, size)

    def get_message(self, phys_offset: int, size: int) -> memoryview | None:
        return self.read(phys_offset, size)

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    def pickup_store_timestamp(self, phys_offset: int, size: int) -> int:
        view = self.read(phys_offset, min(size, RECORD_HEADER_SIZE))
        if view is None:
            return -1
        try:
            return peek_field(view, "STORETIMESTAMP")
        except struct.error:
            return -1
        finally:
            view.release()

    @property
    def max_offset(self) -> int:
        return self.committed_end

    @property
    def min_offset(self) -> int:
        if self.divided_offset and self.plain.queue.files:
            return self.plain.min_offset
        return self.storage.min_data_offset

    @property
    def flushed_offset(self) -> int:
        return self.committed_end

    def close(self) -> None:
        pass


def open_dledger_store(
    config: MessageStoreConfig,
    dledger: DLedgerConfig,
    *,
    clock_ms: Callable[[], int] = now_ms,
    **kwargs: Any,
) -> tuple[MessageStore, DLedgerCommitLog]:
    """Lock, load and recover a store over a DLedger CommitLog (blocking: call it from a worker
    thread); the store and its backend (the broker's DLedger role and node use the latter)."""
    backend = DLedgerCommitLog(config, dledger, clock_ms=clock_ms)
    return MessageStore.open(config, backend=backend, clock_ms=clock_ms, **kwargs), backend


class DLedgerCommitLog:
    """A ``MessageStore``'s CommitLog backend (``store/backend.py``) on a DLedger group member
    (see the module docstring); also the broker's handle on the Raft-specific parts."""

    def __init__(
        self,
        config: MessageStoreConfig,
        dledger: DLedgerConfig,
        *,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config
        self.dcfg = dledger
        self.plain_commitlog = CommitLog(config, clock_ms=clock_ms)
        #: the CommitLog as the store's reads see it: the plain one until open() (its
        #: ``queue.on_create`` hook, the dispatcher), then the view of the DLedger files
        self.commitlog: Any = self.plain_commitlog
        self.store: BackendHost
        self.storage: FileLogStorage | None = None
        self.view: DLedgerCommitLogView | None = None
        self.node: DLedgerNode | None = None
        self.dledger_dir = dledger.store_dir(config.store_path_root_dir)
        self.applied_index = -1
        self.leader_ready = False
        self._noop_index = -1
        self.wait_ack_s = dledger.max_wait_ack_ms / 1000
        #: how a held send answer reads when its entry did not commit (``answer_failures_with``)
        self._failed_answer: Callable[[PutMessageStatus, str], ExpiredAnswer] | None = None
        #: called with no arguments whenever the role or the leader's readiness changes
        self.on_role_change: Callable[[], None] | None = None
        self._host_cache: dict[tuple[str, int], bytes] = {}
        self._topic_parts: dict[str, bytes] = {}
        #: the leader's own entries: what dispatch needs, known when the record was encoded
        #: (index -> (term, topic, queue id, queue offset, tagsCode, store time, uniq key, keys,
        #: dispatchable)), so applying them does not parse the record again
        self._stash: dict[int, tuple[int, str, int, int, int, int, str, str, bool]] = {}
        self._flushed_data = 0  # DLedger data/index bytes below these were msync'd
        self._flushed_index = 0
        #: messageDelayLevel, as the file CommitLog has it
        self.delay_levels = self.plain_commitlog.delay_levels
        #: reads followers' (and recovered) records; any size: the entry bounds the record
        self._scanner = RecordScanner(MAX_SCANNED_RECORD_BYTES, self.delay_levels)
        self._scanned: list[Scanned] = []

    def bind(self, store: BackendHost) -> None:
        self.store = store
        self.cqs = store.cqs
        self.index = store.index
        self.dispatcher = store.dispatcher
        self.retention = store.retention
        store.role = BrokerRole.SLAVE  # until this member is the serving leader

    # ================================================================== lifecycle

    def open(self, *, last_exit_ok: bool) -> None:
        """Recover (the store holds the lock and loaded ConsumeQueues, checkpoint and index)."""
        cfg = self.config
        # a CommitLog left by master/slave stays readable below the DLedger log
        divided = self._load_old_commitlog()
        storage = FileLogStorage(
            self.dledger_dir, fsync=False, data_file_bytes=cfg.mapped_file_size_commit_log,
            start_pos=divided,
        )
        self.storage = storage
        divided = storage.origin if divided else 0
        view = DLedgerCommitLogView(storage, self.plain_commitlog, divided)
        view.retention_max_index = self._retention_max_index
        self.view = view
        self.commitlog = view
        # the store's retention policy runs over the DLedger data files
        self.retention.commitlog = view  # type: ignore[assignment]
        self.retention.safe_offset = lambda: view.committed_end
        probe = self.retention.disk_usage  # the disk of the DLedger files, not commitlog/
        self.retention.disk_usage = lambda _path: probe(self.dledger_dir)
        # ConsumeQueues never point past what the DLedger store holds
        written_end = storage.write_pos
        for cq in self.cqs.queues.values():
            cq.recover()
            cq.truncate_dirty(written_end)
        if self.index is not None:
            self.index.truncate_beyond(written_end, None)
        cq_end = max(self.cqs.max_physic_offset(), 0)
        _end, ckpt_commit = read_checkpoint(self._checkpoint_path)
        # CQ units exist only for committed entries: everything up to the CQ end committed
        first_undispatched = storage.index_at_or_after(cq_end)
        applied = min(max(ckpt_commit, first_undispatched - 1), storage.last_index())
        if first_undispatched > 0:
            view.committed_end = storage.entry_end(first_undispatched - 1)
        for entry in storage.entries(first_undispatched, applied + 1):
            self._apply_entry(entry)
        self.applied_index = applied
        view.committed_end = storage.entry_end(applied)
        if self.index is not None:
            self.index.write_headers()
        for cq in self.cqs.queues.values():  # units below deleted data files are gone
            cq.correct_min_offset(view.min_offset)
        rebuild_topic_queue_table(view, self.cqs)  # type: ignore[arg-type]

    def _opened(self) -> tuple[FileLogStorage, DLedgerCommitLogView]:
        """The storage and view of an opened store (the node applies only after open)."""
        if self.storage is None or self.view is None:
            raise RuntimeError(f"DLedger store {self.dledger_dir} is not open")
        return self.storage, self.view

    def opened(self) -> None:
        storage, view = self._opened()
        log.info(
            "dledger store opened", dir=self.dledger_dir, last_index=storage.last_index(),
            applied=self.applied_index, committed_end=view.committed_end,
        )

    def _load_old_commitlog(self) -> int:
        """Map the CommitLog files a master/slave broker left in this store (read-only);
        the end of the last one (0: none)."""
        queue = self.plain_commitlog.queue
        queue.load()
        if not queue.files:
            return 0
        end = queue.files[-1].file_end
        log.info("old commitlog kept below the dledger log", files=len(queue.files),
                 min_offset=queue.min_offset, divided_offset=end)
        return end

    def _retention_max_index(self) -> int:
        """Retention deletes entries up to the applied index only, and on a leader not past
        what a follower that acknowledged anything still needs (no snapshots: a follower
        behind the first kept entry could never catch up)."""
        bound = self.applied_index
        node = self.node
        if node is not None and node.role is Role.LEADER:
            for pr in node.core.progress.values():
                if pr.match >= 0:
                    bound = min(bound, pr.match)
        return bound

    @property
    def _checkpoint_path(self) -> str:
        return os.path.join(self.dledger_dir, CHECKPOINT_FILE)

    async def flush_logics(self) -> None:
        """The store's ConsumeQueue / index / checkpoint flush (the node's 1 s flush loop)."""
        await self.store.flush_logics()

    def clean_once(self, now_ms: int | None = None) -> CleanResult:
        """One retention round of the store over the DLedger data files."""
        return self.store.clean_once(now_ms)

    def write_dledger_checkpoint(self) -> None:
        if self.storage is not None:
            write_checkpoint(self._checkpoint_path, self.storage.last_index(), self.applied_index)

    def dledger_flush_plan(self) -> list[tuple[Any, int, int]]:
        """(map, offset, length) ranges written since the last call (for a background msync:
        only those pages, not the whole 1 GiB mapping)."""
        storage = self.storage
        if storage is None:
            return []
        plan, self._flushed_data, self._flushed_index = storage.flush_ranges(
            self._flushed_data, self._flushed_index
        )
        return plan

    def flush_dledger(self) -> None:
        """msync the DLedger data/index files and write the checkpoint (blocking)."""
        storage = self.storage
        if storage is None:
            return
        storage.data.flush(True)
        storage.index.flush(True)
        self.write_dledger_checkpoint()

    def close(self) -> None:
        self.store.flush_logics_sync()
        if self.store.checkpoint is not None:
            self.store.checkpoint.flush()
        with contextlib.suppress(OSError, ValueError):
            self.flush_dledger()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.config.abort_path)

    def close_files(self) -> None:
        self.plain_commitlog.close()
        if self.storage is not None:
            try:
                self.storage.close()
            except BufferError:  # a read view still exported: the mapping dies with us
                log.warning("dledger storage closed with live views")
            self.storage = None

    # ================================================================== the node's callbacks

    def attach(self, node: DLedgerNode) -> None:
        self.node = node
        self._wire_commit(node)

    @property
    def dledger_role(self) -> Role:
        return self.node.role if self.node is not None else Role.CANDIDATE

    def node_role_changed(self, role: Role, term: int, leader_id: str) -> None:
        self.leader_ready = False
        if role is not Role.LEADER:
            self._stash.clear()  # our uncommitted entries may be replaced by the new leader
        self.store.role = BrokerRole.SLAVE
        if role is Role.LEADER and self.storage is not None:
            self._noop_index = self.storage.last_index()
            self._check_leader_ready()
        log.info("dledger role", role=role.value, term=term, leader=leader_id)
        if self.on_role_change is not None:
            self.on_role_change()

    def _check_leader_ready(self) -> None:
        node = self.node
        if (
            self.leader_ready
            or node is None
            or node.role is not Role.LEADER
            or self.applied_index < self._noop_index
        ):
            return
        # every entry up to the no-op is committed and dispatched: queue offsets continue
        # from the ConsumeQueues (RocketMQ's changeToMaster after the backlog is 0)
        rebuild_topic_queue_table(self._opened()[1], self.cqs)  # type: ignore[arg-type]
        self.leader_ready = True
        self.store.role = BrokerRole.SYNC_MASTER
        log.info("dledger leader ready", term=node.term, applied=self.applied_index)
        if self.on_role_change is not None:
            self.on_role_change()

    def apply_committed(self, entry: Entry) -> None:
        """The node's ``on_apply``: a committed entry goes to ConsumeQueue and Index."""
        if entry.index <= self.applied_index:
            return
        self._apply_entry(entry)
        self.applied_index = entry.index

    def apply_committed_range(self, lo: int, hi: int) -> None:
        """The node's ``on_apply_range``: committed entries ``[lo, hi)`` to ConsumeQueue and
        Index, read from the storage's arrays (no Entry object per message; the leader's own
        entries come from the stash, so their bodies are not even looked at).  Same effects,
        in the same order, as :meth:`apply_committed` per entry."""
        storage, view = self._opened()
        lo = max(lo, self.applied_index + 1)
        if lo >= hi:
            return
        poss, sizes, terms = storage.entry_arrays()
        stash = self._stash
        dispatch_known = self._dispatch_known
        for index in range(lo, hi):
            pos = poss[index]
            phys = pos + BODY_OFFSET
            size = sizes[index] - BODY_OFFSET
            view.committed_end = phys + size
            self.applied_index = index
            if not size:
                continue  # a leader's no-op
            info = stash.pop(index, None) if stash else None
            if info is not None and info[0] == terms[index]:
                dispatch_known(info, phys, size)
            elif not self._dispatch_record(storage.body_at(index), phys):
                log.error("dledger entry is not a CommitLog record", index=index, pos=pos)

    def applied_batch_done(self) -> None:
        """The node's ``on_applied``: once per Ready that applied entries."""
        if self.index is not None:
            self.index.write_headers()
        if not self.leader_ready:
            self._check_leader_ready()

    def _apply_entry(self, entry: Entry) -> None:
        storage, view = self._opened()
        body = entry.body
        pos = storage.entry_pos(entry.index)
        view.committed_end = pos + BODY_OFFSET + len(body)
        if not body:
            return  # a leader's no-op
        stash = self._stash.pop(entry.index, None) if self._stash else None
        if stash is not None and stash[0] == entry.term:
            self._dispatch_known(stash, pos + BODY_OFFSET, len(body))
            return
        if not self._dispatch_record(body, pos + BODY_OFFSET):
            log.error("dledger entry is not a CommitLog record", index=entry.index, pos=pos)

    def _dispatch_known(
        self, info: tuple[int, str, int, int, int, int, str, str, bool], phys: int, size: int
    ) -> None:
        _term, topic, queue_id, queue_offset, code, store_ts, uniq, keys, dispatchable = info
        if dispatchable:
            cq = self.cqs.queues.get((topic, queue_id))
            if cq is None:
                # a topic the path guard refuses: skipped and counted, as the store does
                cq = self.dispatcher.queue_for(topic, queue_id, phys)
                if cq is None:
                    return
            cq.put(queue_offset, phys, size, code)
        if self.index is not None and (uniq or keys):
            self.index.index_keys(topic, uniq, keys, phys, store_ts)
        self.dispatcher.last_store_timestamp = store_ts
        self._opened()[1].last_store_timestamp = store_ts
        listener = self.dispatcher.on_arrival
        if listener is not None and dispatchable:
            listener(topic, queue_id, queue_offset + 1, code, store_ts)

    def _dispatch_record(self, rec: bytes, phys: int) -> bool:
        """ConsumeQueue unit, index keys and the long-polling wake-up for one committed record,
        read by the store's ``RecordScanner`` (as the file CommitLog's dispatcher reads its
        records). False when ``rec`` is not one whole record."""
        scanned = self._scanned
        size = len(rec)
        end, stop, _left = self._scanner.scan(rec, 0, size, 1, scanned, self.index is not None)
        if stop == SCAN_SKIP:
            # a topic the path guard refuses: skipped and counted, as the store does
            skipped, topic, _ts = self._scanner.skipped
            if skipped != size:
                return False
            self.dispatcher._skip(phys, topic, "topic is not a valid path name")
            return True
        if not scanned:
            return False
        (
            _phys, _size, topic, queue_id, queue_offset, sys_flag, store_ts, code, uniq, keys,
        ) = scanned.pop()
        if end != size:
            return False
        txn = sys_flag & SYSFLAG_TRANSACTION_MASK
        dispatchable = txn in (SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT_TYPE)
        if dispatchable:
            cq = self.cqs.queues.get((topic, queue_id))
            if cq is None:
                # a queue the path guard refuses: skipped and counted, as the store does
                cq = self.dispatcher.queue_for(topic, queue_id, phys)
                if cq is None:
                    return True  # handled: skipped
            cq.put(queue_offset, phys, size, code)
        index = self.index
        if (
            index is not None
            and txn != SYSFLAG_TRANSACTION_ROLLBACK_TYPE
            and (uniq is not None or keys is not None)
        ):
            index.index_raw_keys(topic, uniq, keys, phys, store_ts)
        self.dispatcher.last_store_timestamp = store_ts
        self._opened()[1].last_store_timestamp = store_ts
        listener = self.dispatcher.on_arrival
        if listener is not None and dispatchable:
            listener(topic, queue_id, queue_offset + 1, code, store_ts)
        return True

    # ================================================================== writes

    def refusal(self) -> PutMessageResult | None:
        if self.store.shutdown:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, None, "store is shut down"
            )
        if not self.leader_ready or self.node is None:
            node = self.node
            role = node.role.value if node is not None else "CANDIDATE"
            leader = (node.leader_id if node is not None else "") or "unknown"
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, None,
                f"DLedger {role} {self.dcfg.self_id} of group {self.dcfg.group} is not the "
                f"serving leader (leader: {leader}); writes go to the leader",
            )
        if self.retention.disk_full:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, None, "the broker's disk is full"
            )
        return None

    def _host(self, host: tuple[str, int]) -> bytes:
        raw = self._host_cache.get(host)
        if raw is None:
            raw = encode_host(host)
            if len(self._host_cache) < 4096:
                self._host_cache[host] = raw
        return raw

    def _propose(
        self, msg: Message, props: bytes | None = None
    ) -> tuple[PutMessageResult, int, int]:
        """Encode ``msg`` at the next entry's position and append it (leader, ready): the
        result, the entry's index and term ((result, -1, 0) when refused)."""
        refused = self.refusal()
        if refused is not None:
            return refused, -1, 0
        node = self.node
        storage = self.storage
        view = self.view
        if node is None or storage is None or view is None:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, None, "DLedger store is not open"
            ), -1, 0
        topic = msg.topic
        queue_id = msg.queue_id
        sys_flag = msg.sys_flag & ~_HOST_V6_FLAGS
        txn = sys_flag & SYSFLAG_TRANSACTION_MASK
        pmap: Mapping[str, str] | None = None
        if props is None:  # a message (not an item of a batch, whose properties are text)
            topic, queue_id, pmap, props = put_properties(
                msg.properties, topic, queue_id, sys_flag, self.delay_levels
            )
        # (topic length byte + topic bytes), cached per topic: the record's topic part
        topic_part = self._topic_parts.get(topic)
        if topic_part is None:
            made = self._new_topic_part(topic)
            if isinstance(made, PutMessageResult):
                return made, -1, 0
            topic_part = made
        body = msg.body
        body_len = len(body)
        if body_len > self.config.max_message_size:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, None,
                f"message body {body_len} > maxMessageSize {self.config.max_message_size}",
            ), -1, 0
        props_len = len(props)
        if props_len > MAX_PROPERTIES_BYTES:
            return PutMessageResult(
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, None,
                f"properties {props_len} > {MAX_PROPERTIES_BYTES}",
            ), -1, 0
        key = (topic, queue_id)
        table = view.topic_queue_table
        qo = 0 if txn in _NO_ADVANCE_TXN else table.get(key, 0)
        record_len = RECORD_FIXED_SIZE - 1 + body_len + len(topic_part) + props_len
        pos = storage.next_pos(record_len)
        now = self.store.clock_ms()
        hosts = self._host_cache
        try:
            store_host = hosts.get(msg.store_host) or self._host(msg.store_host)
            record = pack_record(
                record_len, queue_id, msg.flag, qo, pos + BODY_OFFSET, sys_flag,
                msg.born_timestamp, hosts.get(msg.born_host) or self._host(msg.born_host), now,
                store_host, msg.reconsume_times, msg.prepared_transaction_offset, body,
                topic_part, props,
            )
        except (OSError, TypeError, ValueError, struct.error) as exc:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, None, f"cannot encode the message: {exc}"
            ), -1, 0
        try:
            code, index, term = node.propose_now(record)
        except OSError as exc:  # the log's files could not reserve room (disk full): nothing
            return PutMessageResult(  # was appended, the log and the Raft core are unchanged
                PutMessageStatus.SERVICE_NOT_AVAILABLE, None, f"DLedger append failed: {exc}"
            ), -1, 0
        if index < 0:
            refused = PutMessageResult(put_status_of(code), None, f"DLedger append: {code.name}")
            return refused, -1, 0
        if txn not in _NO_ADVANCE_TXN:
            table[key] = qo + 1
        if pmap is not None and txn != SYSFLAG_TRANSACTION_ROLLBACK_TYPE:
            self._stash_entry(index, term, topic, queue_id, qo, pmap, now, txn)
        return PutMessageResult(
            PutMessageStatus.PUT_OK,
            AppendMessageResult(pos + BODY_OFFSET, record_len, now, qo, 1, store_host),
        ), index, term

    def _new_topic_part(self, topic: str) -> bytes | PutMessageResult:
        """A record's topic part (length byte and name) for a topic not cached yet, cached
        while the cache has room; the refusal when the name cannot be stored."""
        topic_b = topic.encode()
        if not topic_b or len(topic_b) > MAX_TOPIC_BYTES:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, None,
                f"topic length must be 1..{MAX_TOPIC_BYTES} bytes",
            )
        if not is_valid_component(topic):  # it could never get a ConsumeQueue directory
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, None, "topic is not a valid file name"
            )
        topic_part = _TOPIC_LEN[len(topic_b)] + topic_b
        if len(self._topic_parts) < TOPIC_CACHE_MAX_ENTRIES:
            self._topic_parts[topic] = topic_part
        return topic_part

    def _stash_entry(
        self, index: int, term: int, topic: str, queue_id: int, qo: int,
        pmap: Mapping[str, str], now: int, txn: int,
    ) -> None:
        """Keep what the dispatch of entry ``index`` needs (its queue position, tags, keys),
        so that it need not decode the record again once the entry commits."""
        self._stash[index] = (
            term, topic, queue_id, qo,
            record_tags_code(topic, pmap, now, self.delay_levels), now,
            pmap.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or "",
            pmap.get(MessageConst.PROPERTY_KEYS) or "",
            txn in (SYSFLAG_TRANSACTION_NOT_TYPE, SYSFLAG_TRANSACTION_COMMIT_TYPE),
        )

    def _propose_batch(self, batch: Message) -> tuple[PutMessageResult, int, int]:
        """Each item of ``batch`` appended as its own entry: the result covering them, the
        last one's index and term ((result, -1, 0) when refused)."""
        refused = self.refusal()
        if refused is not None:
            return refused, -1, 0
        if batch.sys_flag & SYSFLAG_TRANSACTION_MASK:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, None, "batch messages cannot be transactional"
            ), -1, 0
        if MessageConst.PROPERTY_DELAY_TIME_LEVEL in batch.properties:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, None, "batch messages cannot be delayed"
            ), -1, 0
        try:
            items = decode_batch(batch.body)
        except ValueError as exc:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, None, f"bad batch body: {exc}"
            ), -1, 0
        if not items:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "empty batch"), -1, 0
        extra = encode_properties(batch.properties)
        offsets: list[int] = []
        first: AppendMessageResult | None = None
        last = (-1, 0)
        total = 0
        for item in items:
            msg = Message(
                batch.topic, item.body, batch.queue_id, item.flag, {}, batch.sys_flag,
                batch.born_timestamp, batch.born_host, batch.store_host, batch.reconsume_times,
            )
            result, index, term = self._propose(msg, join_properties(item.properties, extra))
            if index < 0 or result.result is None:
                if first is None:
                    return result, -1, 0
                break  # the items appended so far stand; the answer covers them
            last = (index, term)
            if first is None:
                first = result.result
            offsets.append(result.result.wrote_offset)
            total += result.result.wrote_bytes
        if first is None:  # (items is not empty: the first one was proposed or returned)
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "empty batch"), -1, 0
        return PutMessageResult(
            PutMessageStatus.PUT_OK,
            AppendMessageResult(
                first.wrote_offset, total, first.store_timestamp, first.logics_offset,
                len(offsets), first.store_host_bytes, tuple(offsets),
            ),
        ), *last

    def append_marked(self, msg: Message, batch: bool, wait: bool) -> MarkedPut:
        """The broker's send: propose now, and hold its answer on :attr:`commit` until it
        reaches the last entry's index + 1 (``wait`` is not asked: a DLedger put always waits
        for its quorum, as RocketMQ's does); a refusal is answered now."""
        result, index, _term = self._propose_batch(msg) if batch else self._propose(msg)
        node = self.node
        if index < 0 or node is None:
            return result, None, 0
        return result, node.commit.held, index + 1

    @property
    def commit(self) -> Watermark:
        """The group's quorum commit (:attr:`DLedgerNode.commit`): sends hold their answers on
        it (``append_marked``)."""
        if self.node is None:
            raise RuntimeError("the DLedger node is not attached")
        return self.node.commit

    def answer_failures_with(
        self, failed: Callable[[PutMessageStatus, str], ExpiredAnswer]
    ) -> None:
        """How answers held on :attr:`commit` read when their entry did not commit: after
        ``wait_ack_s`` (WAIT_QUORUM_ACK_TIMEOUT), or when the leader's term ended first
        (TERM_CHANGED), mapped by :func:`put_status_of` (the broker's send answers)."""
        self._failed_answer = failed
        if self.node is not None:
            self._wire_commit(self.node)

    def _wire_commit(self, node: DLedgerNode) -> None:
        failed = self._failed_answer
        if failed is None:
            return
        held = node.commit.held
        held.timeout_s = self.wait_ack_s
        timeout = ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
        held.expired_answer = failed(put_status_of(timeout), f"DLedger append: {timeout.name}")
        changed = ResponseCode.TERM_CHANGED
        node.term_changed = failed(put_status_of(changed), f"DLedger append: {changed.name}")

    def append_message(self, msg: Message) -> PutMessageResult:
        """Propose without waiting for the commit (schedule service, end-transaction)."""
        return self._propose(msg)[0]

    def append_messages(self, batch: Message) -> PutMessageResult:
        return self._propose_batch(batch)[0]

    async def _committed(self, result: PutMessageResult, index: int, term: int) -> PutMessageResult:
        if index < 0 or self.node is None:
            return result
        ack = await self.node.wait_committed(index, term, self.wait_ack_s)
        if ack.code is ResponseCode.SUCCESS:
            return result
        return PutMessageResult(
            put_status_of(ack.code), result.result, f"DLedger append: {ack.code.name}"
        )

    async def put_message(self, msg: Message) -> PutMessageResult:
        return await self._committed(*self._propose(msg))

    async def put_messages(self, batch: Message) -> PutMessageResult:
        return await self._committed(*self._propose_batch(batch))

    def append_raw(self, phys_offset: int, data: bytes | memoryview) -> None:
        raise ValueError("a DLedger store replicates through DLedger, not HA")

    # ================================================================== reads and status

    @property
    def max_offset(self) -> int:
        return self.view.committed_end if self.view is not None else 0

    @property
    def min_offset(self) -> int:
        return self.view.min_offset if self.view is not None else 0

    @property
    def flushed_offset(self) -> int:
        return self.max_offset

    @property
    def confirm_offset(self) -> int:
        return self.max_offset

    def dispatch(self, max_bytes: int = 0) -> int:
        """Apply what is committed but not applied yet, now (the node answers a send before it
        applies; a pull or query right after the answer calls this to see the message)."""
        node = self.node
        storage = self.storage
        if node is None or storage is None:
            return 0
        commit = min(node.core.commit, storage.last_index())
        if commit <= self.applied_index:
            return 0
        first = self.applied_index + 1
        self.apply_committed_range(first, commit + 1)
        self.applied_batch_done()
        return commit + 1 - first

    def dispatch_all(self) -> int:
        return self.dispatch()

    @property
    def dispatch_behind_bytes(self) -> int:
        node = self.node
        storage = self.storage
        if node is None or storage is None:
            return 0
        commit = min(node.core.commit, storage.last_index())
        if commit <= self.applied_index:
            return 0
        return storage.entry_end(commit) - storage.entry_end(self.applied_index)

    def rebuild_queue_offsets(self) -> None:
        if self.view is not None:
            rebuild_topic_queue_table(self.view, self.cqs)  # type: ignore[arg-type]

    def earliest_store_time(self) -> int:
        storage = self.storage
        if storage is None:
            return -1
        first = storage.first_index()
        for entry in storage.entries(first, min(storage.last_index(), self.applied_index) + 1):
            if entry.body and len(entry.body) >= RECORD_HEADER_SIZE:
                return peek_field(entry.body, "STORETIMESTAMP")
        return -1

    def read_raw(self, phys_offset: int, max_bytes: int) -> memoryview | None:
        return None

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO keys of DLedger mode."""
        node = self.node
        storage = self.storage
        info: dict[str, str] = {
            "brokerRole": self.store.role.value,
            "dLegerGroup": self.dcfg.group,
            "dLegerSelfId": self.dcfg.self_id,
            "dLegerLeaderReady": "true" if self.leader_ready else "false",
            "dLegerAppliedIndex": str(self.applied_index),
        }
        if storage is not None:
            info["dLegerEndIndex"] = str(storage.last_index())
            info["dLegerBeginIndex"] = str(storage.first_index())
        if node is not None:
            core = node.core
            info["dLegerRole"] = core.role.value
            info["dLegerTerm"] = str(core.term)
            info["dLegerLeaderId"] = core.leader_id
            info["dLegerCommitIndex"] = str(core.commit)
            info["dLegerPeerMatchIndex"] = ";".join(
                f"{peer}={pr.match}" for peer, pr in sorted(core.progress.items())
            )
            # batching: Readies processed, pushes sent and entries they carried (since boot)
            info["dLegerReadies"] = str(node.readies)
            info["dLegerPushes"] = str(node.pushes)
            info["dLegerPushedEntries"] = str(node.pushed_entries)
        return info
