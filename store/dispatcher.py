"""Reput: turn CommitLog records into ConsumeQueue units and IndexFile entries (pure).

``Dispatcher.dispatch()`` reads from ``reput_from`` up to the CommitLog's readable end without
CRC checks, stops before an incomplete record (a slave may hold half a record from a master
frame), follows blanks to the next file, and calls ``on_arrival(topic, queue_id, next_offset,
tags_code, store_timestamp)`` for long polling: once per run of consecutive records of one
queue with one tagsCode, with the run's last offset (what a parked pull needs to know). The
Trio shell (``store/flush.py``) calls it whenever new bytes arrive; ``MessageStore.append_message``
calls it inline for a single put when the reput is caught up (``INLINE_DISPATCH``). A batch put
while the reput is caught up is dispatched by the put itself, from what it knows of its records
(``dispatch_batch``: no record is read back).

Only what dispatch needs is read from a record (``store/record.py``'s ``RecordScanner``: fixed
offsets via one struct, TAGS / KEYS / UNIQ_KEY by a bytes search of the properties), and
IndexFile headers are written once per
``dispatch()`` call. A crash between an index entry and its header leaves a header whose count
is behind: readers ignore slot heads at or past it and the entries are rewritten, and abnormal
recovery re-dispatches from the checkpoint anyway.
"""

from __future__ import annotations

import itertools
import operator
import os
import shutil
from collections.abc import Callable
from typing import Final, cast

import structlog

from ..cluster.protocol.message import (
    SYSFLAG_TRANSACTION_COMMIT_TYPE,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
)
from .commitlog import AppendMessageResult, CommitLog, DispatchRequest
from .config import MAX_DISPATCH_BYTES_PER_ROUND, MessageStoreConfig
from .consume_queue import CQ_RUN_MAX_UNITS, UNIT, ConsumeQueue
from .index_file import IndexService
from .mapped_file import DirSyncLedger
from .paths import StorePathError, StoreRoot, is_valid_component
from .record import (
    SCAN_BLANK,
    SCAN_CORRUPT,
    SCAN_SKIP,
    RecordScanner,
    Scanned,
    is_dispatchable,
)

log = structlog.get_logger(component="dispatcher")

ArrivalListener = Callable[[str, int, int, int, int], None]


class ConsumeQueueTable:
    """Every ConsumeQueue, created on first use: ``consumequeue/<topic>/<queueId>/``. Every
    directory goes through the store's path guard: a topic that is no valid file name (or a
    symlink leading out of the store) gets no ConsumeQueue (StorePathError)."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self.store_root = StoreRoot(config.store_path_root_dir)
        self.guard = self.store_root.sub("consumequeue")
        self.root = self.guard.path
        self.file_size = config.cq_file_size
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        #: names of new ConsumeQueue segments, made durable by the logics flush
        self.ledger = DirSyncLedger()

    def load(self) -> None:
        if not os.path.isdir(self.root):
            return
        for topic in sorted(os.listdir(self.root)):
            try:
                tdir = self.guard.child(topic)
            except StorePathError as exc:
                log.error("consume_queue_dir_refused", topic=topic[:200], error=str(exc))
                continue
            if not os.path.isdir(tdir):
                continue
            for qid in sorted(os.listdir(tdir)):
                if not qid.lstrip("-").isdigit():
                    continue
                try:
                    cq = ConsumeQueue(
                        self.guard, topic, int(qid), self.file_size, ledger=self.ledger
                    )
                except StorePathError as exc:
                    log.error("consume_queue_dir_refused", topic=topic[:200], error=str(exc))
                    continue
                cq.load()
                self.queues[(topic, int(qid))] = cq

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """Raises StorePathError when ``topic`` cannot name a ConsumeQueue directory."""
        key = (topic, queue_id)
        cq = self.queues.get(key)
        if cq is None:
            cq = ConsumeQueue(self.guard, topic, queue_id, self.file_size, ledger=self.ledger)
            self.queues[key] = cq
        return cq

    def max_physic_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self.queues.values()), default=-1)

    def delete_topic(self, topic: str) -> list[int]:
        """Destroy every ConsumeQueue of ``topic`` (files and directory); the queue ids.
        Raises StorePathError (deleting nothing) when ``topic`` names no directory inside
        ``consumequeue``."""
        tdir = self.guard.child(topic)
        if tdir != os.path.join(self.root, topic):  # a symlink: delete nothing it leads to
            raise StorePathError(f"consumequeue/{topic[:64]} is a symbolic link")
        gone = sorted(qid for (t, qid) in self.queues if t == topic)
        for qid in gone:
            self.queues.pop((topic, qid)).destroy()
        if os.path.isdir(tdir):
            shutil.rmtree(tdir, ignore_errors=True)
        return gone

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()


#: ConsumeQueue segments dispatch may still create inline, per ``INLINE_SEGMENTS_WINDOW_MS`` of
#: the store's clock, before it defers the rest to the shell's worker
#: (``Dispatcher.on_file_wanted``): a topic of a few queues is readable (and its pulls, offsets
#: and times answer) as soon as its first sends are dispatched, as before; a burst of new
#: queues (a topic of 1024) stalls the loop for at most this many creations (no directory
#: fsync: ~1-15 ms each on a busy disk) per window. (Per dispatch call, as this was, every
#: pull's and query's own dispatch call under a send load created 8 more: 243 creations, 3.2 s
#: of loop, in 15 s of a 1024-queue priming.)
INLINE_NEW_SEGMENTS_PER_WINDOW: Final = 8
INLINE_SEGMENTS_WINDOW_MS: Final = 1000

#: Buckets of ``Dispatcher.lag_histogram``: one per millisecond, the last holds everything from
#: ``LAG_HISTOGRAM_BUCKETS - 1`` ms up.
LAG_HISTOGRAM_BUCKETS: Final = 128


class Dispatcher:
    def __init__(
        self,
        commitlog: CommitLog,
        cqs: ConsumeQueueTable,
        index: IndexService | None,
        *,
        on_arrival: ArrivalListener | None = None,
    ) -> None:
        self.commitlog = commitlog
        self.cqs = cqs
        self.index = index
        self.on_arrival = on_arrival
        self.reput_from = 0
        self.last_store_timestamp = 0  # of the newest dispatched record (logicsMsgTimestamp)
        self.stuck_at: int | None = None  # offset of a corrupt record the dispatcher stopped at
        #: On a slave: how many records were dispatched how many ms after the master stored
        #: them (dispatch time minus the record's store timestamp; one clock reading per
        #: round): the replication lag to "readable on the slave", per message. None: off.
        self.lag_histogram: list[int] | None = None
        #: reads the records (keeps its topic / tags caches and template across rounds)
        self.scanner = RecordScanner(commitlog.max_record, commitlog.delay_levels)
        #: records left out of ConsumeQueue and index because their topic (or queue) names
        #: no directory inside the store (a hostile or damaged record); dispatch goes on
        self.skipped_records = 0
        #: units per ConsumeQueue segment (a run of units is cut where a segment ends)
        self.units_per_file = cqs.file_size // UNIT
        #: Set by the store's Trio shell: a ConsumeQueue segment a record needs is then not
        #: created on the caller's thread (the event loop). Dispatch stops before that
        #: record, notes the segment in ``wanted_files`` (with those the rest of the scanned
        #: records need) and calls ``on_file_wanted``; the shell creates them in a worker
        #: thread (``ConsumeQueue.prepare_file``) and dispatches again. None: created inline
        #: (recovery, shutdown, tools).
        self.on_file_wanted: Callable[[], None] | None = None
        #: (topic, queue id, segment start) -> its queue: segments to make before dispatch
        #: can go on
        self.wanted_files: dict[tuple[str, int, int], ConsumeQueue] = {}
        #: segments a worker failed to make: the next dispatch creates them inline (and
        #: meets the error where the put path reports it) rather than stopping forever
        self.inline_files: set[tuple[str, int, int]] = set()
        #: dispatch stopped for segments the shell has not made yet: a dispatch call (a pull's
        #: own, say) returns at once instead of scanning up to the same record again
        self.files_pending = False
        self.inline_left = 0  # creations dispatch may still do inline in the current window
        self.inline_window_at = -INLINE_SEGMENTS_WINDOW_MS  # (store clock ms) that window's start

    @property
    def behind(self) -> int:
        """Dispatch lag in bytes."""
        return max(0, self.commitlog.max_offset - self.reput_from)

    def _skip(self, offset: int, topic: str, reason: str) -> None:
        """Count (and log) a record whose topic or queue gives no valid store path."""
        self.skipped_records += 1
        log.error(
            "dispatch_record_skipped", offset=offset, topic=topic[:200], reason=reason,
            skipped=self.skipped_records,
        )

    def queue_for(self, topic: str, queue_id: int, offset: int) -> ConsumeQueue | None:
        """The ConsumeQueue of (topic, queue_id), created on first use; None (the record is
        skipped) when the path guard refuses its directory."""
        try:
            return self.cqs.find_or_create(topic, queue_id)
        except StorePathError as exc:
            self._skip(offset, topic, str(exc))
            return None

    def wants_file(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """Whether the unit ``queue_offset`` of (topic, queue_id) needs a segment that is not
        there yet and must be made off the caller's thread first (noted in
        ``wanted_files``). False when the segment exists, when nothing defers creation, or
        when the path guard refuses the queue (the record is skipped on dispatch)."""
        cq = self.cqs.queues.get((topic, queue_id))
        if cq is None:
            try:
                cq = self.cqs.find_or_create(topic, queue_id)
            except StorePathError:
                return False  # (dispatch skips the record, and counts it)
        start = cq.needs_file(queue_offset)
        if start is None:
            return False
        key = (topic, queue_id, start)
        if key in self.inline_files:  # a worker could not make it: this dispatch does
            self.inline_files.discard(key)
            return False
        if self.inline_left > 0 and not self.wanted_files:
            self.inline_left -= 1
            return False
        self.wanted_files[key] = cq
        return True

    def take_wanted_files(self) -> list[tuple[tuple[str, int, int], ConsumeQueue]]:
        wanted = list(self.wanted_files.items())
        self.wanted_files.clear()
        return wanted

    def _look_ahead(self, scanned: list[Scanned], stop_phys: int) -> None:
        """After a stop before the record at ``stop_phys``: note the segments the scanned
        records after it need too, so one worker call makes them all."""
        seen: set[tuple[str, int]] = set()
        for phys, _total, topic, queue_id, queue_offset, sys_flag, *_rest in scanned:
            if phys <= stop_phys or not is_dispatchable(sys_flag):
                continue
            if (topic, queue_id) not in seen:
                seen.add((topic, queue_id))
                self.wants_file(topic, queue_id, queue_offset)

    def dispatch_request(self, req: DispatchRequest) -> None:
        if not is_valid_component(req.topic):
            self._skip(req.commitlog_offset, req.topic, "topic is not a valid path name")
            self.last_store_timestamp = req.store_timestamp
            return
        if is_dispatchable(req.sys_flag):
            cq = self.queue_for(req.topic, req.queue_id, req.commitlog_offset)
            if cq is None:
                self.last_store_timestamp = req.store_timestamp
                return
            cq.put(req.queue_offset, req.commitlog_offset, req.msg_size, req.tags_code)
        if self.index is not None:
            self.index.build_index(req)
        self.last_store_timestamp = req.store_timestamp

    def dispatch_batch(self, topic: str, queue_id: int, appended: AppendMessageResult) -> bool:
        """Dispatch a batch the put just appended, from what the put knows of its records
        (``appended``: their offsets, first queue offset, store time, and ``keys``, the
        tagsCode and UNIQ_KEYs ``record.batch_keys`` read from the batch body) instead of
        reading them back: its ConsumeQueue units in runs of consecutive offsets, one arrival
        notice, its index entries in one ``index_uniq_run``; the bytes a reput round writes.
        Only when the reput has dispatched everything before the batch and the batch needs no
        new ConsumeQueue segment while the shell makes them (``on_file_wanted``); False (nothing
        written) otherwise, and the reput reads the records as usual."""
        keys = appended.keys
        first_phys = appended.wrote_offset
        if keys is None or self.reput_from != first_phys or self.lag_histogram is not None:
            return False
        cq = self._batch_queue(topic, queue_id, appended.logics_offset + appended.msg_num - 1)
        if cq is None:
            return False
        code, uniqs = keys
        offsets = appended.offsets
        end = appended.end_offset
        store_ts = appended.store_timestamp
        sizes = map(operator.sub, itertools.chain(offsets[1:], (end,)), offsets)
        units = list(itertools.chain.from_iterable(zip(offsets, sizes, itertools.repeat(code))))
        first = appended.logics_offset
        step = 3 * CQ_RUN_MAX_UNITS
        for i in range(0, len(units), step):
            cq.put_run(first + i // 3, units[i : i + step])
        if self.on_arrival is not None:
            self.on_arrival(topic, queue_id, first + appended.msg_num, code, store_ts)
        index = self.index
        if index is not None:
            keyed = (
                list(zip(cast("list[bytes]", uniqs), offsets, itertools.repeat(store_ts)))
                if None not in uniqs  # (the usual batch: every record has one; no step each)
                else [(u, at, store_ts) for u, at in zip(uniqs, offsets, strict=True) if u]
            )
            if keyed:
                index.index_uniq_run(topic, keyed)
                index.write_headers()
        self.reput_from = end
        self.last_store_timestamp = store_ts
        return True

    def _batch_queue(self, topic: str, queue_id: int, last_unit: int) -> ConsumeQueue | None:
        """The ConsumeQueue a batch's units up to ``last_unit`` go to, if they can go there now:
        None when the path guard refuses it (the reput skips and counts the records) or, while
        the shell makes segments (``on_file_wanted``), when the segment of ``last_unit`` is not
        made yet (the reput asks for it and any before it)."""
        cq = self.cqs.queues.get((topic, queue_id))
        deferred = self.on_file_wanted is not None
        if cq is None:
            if deferred:
                return None
            try:
                cq = self.cqs.find_or_create(topic, queue_id)
            except StorePathError:
                return None
        if deferred:
            files = cq.queue.files
            if not files or last_unit * UNIT >= files[-1].file_end:
                return None
        return cq

    def _flush_run(
        self,
        topic: str,
        queue_id: int,
        first: int,
        units: list[int],
        arrivals: list[tuple[int, int, int]] | None,
    ) -> None:
        """Write a run of ConsumeQueue units and tell the arrival listener about every tagsCode
        change inside it (the caller announces the run's last record)."""
        cq = self.cqs.queues.get((topic, queue_id))
        if cq is None:
            cq = self.queue_for(topic, queue_id, units[0])
            if cq is None:
                return
        cq.put_run(first, units)
        arrival = self.on_arrival
        if arrival is not None and arrivals:
            for next_offset, code, store_ts in arrivals:
                arrival(topic, queue_id, next_offset, code, store_ts)

    def dispatch(self, max_bytes: int = MAX_DISPATCH_BYTES_PER_ROUND) -> int:
        """Dispatch up to about ``max_bytes``; returns how many records were dispatched.

        Scan -> runs -> flush, file by file: the scanner (``store/record.py``) reads what
        dispatch needs of each record straight from the mmap, without CRC checks (recovery
        checks them); ``_Runs`` turns the scanned records into ConsumeQueue runs, arrival
        notices and index entries; what is pending is flushed before ``reput_from`` moves past
        it. Index headers are written once per call."""
        if self.files_pending and self.on_file_wanted is not None:
            return 0
        cl = self.commitlog
        if self.on_file_wanted is not None:
            now = cl.clock_ms()
            since = now - self.inline_window_at
            if since >= INLINE_SEGMENTS_WINDOW_MS or since < 0:
                self.inline_window_at = now
                self.inline_left = INLINE_NEW_SEGMENTS_PER_WINDOW
        queue = cl.queue
        if self.reput_from < cl.min_offset:
            self.reput_from = cl.min_offset
        scan = self.scanner.scan
        runs = _Runs(self, cl.clock_ms() if self.lag_histogram is not None else 0)
        scanned: list[Scanned] = []
        want_keys = self.index is not None
        count = 0
        budget = max_bytes
        end = cl.max_offset
        try:
            while self.reput_from < end and budget > 0:
                mf = queue.find(self.reput_from)
                if mf is None:
                    break
                base = mf.file_from
                pos = self.reput_from - base
                while True:
                    pos, stop, budget = scan(mf.mm, pos, mf.wrote, budget, scanned, want_keys)
                    if scanned:
                        wait_at = runs.add(scanned)
                        if wait_at >= 0:  # a segment to make first: stop before that record
                            count += runs.added
                            self._look_ahead(scanned, wait_at)
                            scanned.clear()
                            runs.flush()
                            self.reput_from = wait_at
                            self.files_pending = True
                            if self.on_file_wanted is not None:
                                self.on_file_wanted()
                            return count
                        count += len(scanned)
                        scanned.clear()
                    if stop != SCAN_SKIP:
                        break
                    size, topic, store_ts = self.scanner.skipped
                    self._skip(base + pos, topic, "topic is not a valid path name")
                    runs.last_ts = store_ts
                    pos += size
                    budget -= size
                    count += 1
                runs.flush()
                if stop == SCAN_BLANK:
                    pos = mf.file_size
                elif stop == SCAN_CORRUPT:
                    if self.stuck_at != base + pos:
                        log.error("dispatch_corrupt_record", offset=base + pos)
                        self.stuck_at = base + pos
                    self.reput_from = base + pos
                    return count
                new_from = base + pos
                if new_from == self.reput_from:
                    break  # incomplete record: wait for more bytes
                self.reput_from = new_from
            return count
        finally:
            if count:
                self.last_store_timestamp = runs.last_ts
                if self.index is not None:
                    self.index.write_headers()


class _Runs:
    """The side effects of scanned records, gathered per run and written when the run ends (a
    record that does not continue it, a file end, the round's end): ConsumeQueue units of
    consecutive offsets of one queue go out in one ``put_run``, arrival listeners hear once per
    run of records with one tagsCode (the last offset: a parked pull wakes for "an offset past
    mine with a matching tag" and that holds for a run iff for its last record), and index
    entries of records with a UNIQ_KEY and no KEYS go out in one ``index_uniq_run`` per topic
    run, in record order. The files get the same bytes as record by record."""

    def __init__(self, dispatcher: Dispatcher, now_ms: int) -> None:
        self.dispatcher = dispatcher
        self.now_ms = now_ms  # one clock reading per round, for the lag histogram
        self.last_ts = dispatcher.last_store_timestamp
        self.run: list[int] = []  # flat (phys, size, tagsCode) of the pending ConsumeQueue run
        #: (next offset, tagsCode, store ts) of the tagsCode changes inside the run, if any
        self.arrivals: list[tuple[int, int, int]] | None = None
        self.topic = ""
        self.qid = self.first = self.code = self.ts = 0
        self.next = -1
        self.keyed: list[tuple[bytes, int, int]] = []  # (UNIQ_KEY, phys, store ts) to index
        self.keyed_topic = ""
        #: the pending run's ConsumeQueue, as found when the run began (None: not there then;
        #: the run's end looks it up again)
        self.cq: ConsumeQueue | None = None
        self.added = 0  # records the last ``add`` took (all of them unless it stopped)

    def add(self, scanned: list[Scanned]) -> int:
        """Take the scanned records in order; -1, or the physical offset of the record it
        stopped before: its ConsumeQueue segment must be made first (``wants_file``, asked once
        the run before it is written: that run may take the segment the check must see; runs
        end where a segment does). ``added``: how many records it took."""
        d = self.dispatcher
        wants_file = d.wants_file if d.on_file_wanted is not None else None
        cq_table = d.cqs.queues
        per_file = d.units_per_file
        wait_at, prev_ts, run_cq = -1, self.last_ts, self.cq
        end_run, arrival = self._end_run, d.on_arrival
        index_record = self._index_record if d.index is not None else None
        keyed_append = self.keyed.append
        run_max = 3 * CQ_RUN_MAX_UNITS
        run = self.run
        run_arrivals = self.arrivals
        run_topic = self.topic
        run_qid, run_first, run_code, run_ts, run_next = (
            self.qid, self.first, self.code, self.ts, self.next
        )
        store_ts = self.last_ts
        for (
            phys, total, topic, queue_id, queue_offset, sys_flag, store_ts, code, uniq, keys,
        ) in scanned:
            txn = sys_flag & SYSFLAG_TRANSACTION_MASK
            if txn == 0 or txn == SYSFLAG_TRANSACTION_COMMIT_TYPE:
                if (
                    queue_offset == run_next
                    and topic is run_topic
                    and queue_id == run_qid
                    and len(run) < run_max
                    and queue_offset % per_file  # (runs end where a segment does)
                ):
                    # the next unit of the current run (a batch, a queue's consecutive ones)
                    run += (phys, total, code)
                    if code != run_code:
                        if run_arrivals is None:
                            run_arrivals = []
                        run_arrivals.append((run_next, run_code, run_ts))
                        run_code = code
                    run_next += 1
                else:
                    if run:
                        if run_cq is not None and len(run) == 3:  # a one-record run (queues
                            run_cq.put(run_first, run[0], run[1], run[2])  # taking turns)
                            if arrival is not None:
                                arrival(run_topic, run_qid, run_next, run_code, run_ts)
                        else:
                            end_run(run_topic, run_qid, run_first, run, run_arrivals, run_next,
                                    run_code, run_ts)  # fmt: skip
                        run, run_next = [], -1
                    run_cq = cq_table.get((topic, queue_id))  # (no call while its segment is)
                    if (
                        wants_file is not None
                        and (run_cq is None or queue_offset >= run_cq.units_ready)
                        and wants_file(topic, queue_id, queue_offset)
                    ):
                        wait_at, store_ts = phys, prev_ts
                        break
                    run = [phys, total, code]
                    run_arrivals, run_topic, run_qid, run_code = None, topic, queue_id, code
                    run_first, run_next = queue_offset, queue_offset + 1
                run_ts = store_ts
            if index_record is not None and txn != SYSFLAG_TRANSACTION_ROLLBACK_TYPE:
                if keys is None and topic is self.keyed_topic and uniq is not None:
                    keyed_append((uniq, phys, store_ts))  # (the usual record, no call)
                elif uniq is not None or keys is not None:
                    index_record(topic, uniq, keys, phys, store_ts)
            prev_ts = store_ts
        self.added = len(scanned) if wait_at < 0 else _taken(scanned, wait_at)
        if d.lag_histogram is not None:
            self._count_lags(d.lag_histogram, scanned, self.added)
        self.cq, self.last_ts, self.run, self.arrivals, self.topic = (
            run_cq, store_ts, run, run_arrivals, run_topic
        )
        self.qid, self.first, self.code, self.ts, self.next = (
            run_qid, run_first, run_code, run_ts, run_next
        )
        return wait_at

    def _count_lags(self, hist: list[int], scanned: list[Scanned], taken: int) -> None:
        """The lag histogram's share of the first ``taken`` scanned records (a slave's)."""
        top = LAG_HISTOGRAM_BUCKETS - 1
        now_ms = self.now_ms
        for rec in scanned[:taken]:
            lag = now_ms - rec[6]  # (its store timestamp)
            hist[lag if 0 <= lag < top else (top if lag > 0 else 0)] += 1

    def _index_record(
        self, topic: str, uniq: bytes | None, keys: bytes | None, phys: int, store_ts: int
    ) -> None:
        """A record's index entries: the usual one (a UNIQ_KEY, no KEYS) gathered with its
        neighbours of the same topic for one ``index_uniq_run``, in record order."""
        index = self.dispatcher.index
        if index is None:
            return
        if keys is None and uniq is not None:
            if topic is not self.keyed_topic:
                if self.keyed:
                    index.index_uniq_run(self.keyed_topic, self.keyed)
                    self.keyed.clear()
                self.keyed_topic = topic
            self.keyed.append((uniq, phys, store_ts))
        elif uniq is not None or keys is not None:
            if self.keyed:
                index.index_uniq_run(self.keyed_topic, self.keyed)
                self.keyed.clear()
            index.index_raw_keys(topic, uniq, keys, phys, store_ts)

    def _end_run(
        self, topic: str, qid: int, first: int, run: list[int],
        arrivals: list[tuple[int, int, int]] | None, nxt: int, code: int, ts: int,
    ) -> None:
        """Write the run the record ``add`` just read does not continue, and tell the arrival
        listener (``nxt``: the offset after the run's last record, ``code`` and ``ts`` its
        tagsCode and store time)."""
        d = self.dispatcher
        if len(run) == 3:
            # a one-record run (queues taking turns): put it directly
            cq = d.cqs.queues.get((topic, qid))
            if cq is None:
                cq = d.queue_for(topic, qid, run[0])
            if cq is not None:
                cq.put(first, run[0], run[1], run[2])
        else:
            d._flush_run(topic, qid, first, run, arrivals)
        if d.on_arrival is not None:
            d.on_arrival(topic, qid, nxt, code, ts)

    def flush(self) -> None:
        """Write what the records so far left pending."""
        d = self.dispatcher
        if self.run:
            d._flush_run(self.topic, self.qid, self.first, self.run, self.arrivals)
            if d.on_arrival is not None:
                d.on_arrival(self.topic, self.qid, self.next, self.code, self.ts)
            self.run = []
            self.arrivals = None
            self.next = -1
        if self.keyed and d.index is not None:
            d.index.index_uniq_run(self.keyed_topic, self.keyed)
            self.keyed.clear()  # (in place: ``add`` appends through its bound method)


def _taken(scanned: list[Scanned], stop_phys: int) -> int:
    """How many of ``scanned`` come before the record at ``stop_phys``."""
    for i, rec in enumerate(scanned):
        if rec[0] == stop_phys:
            return i
    return len(scanned)
