"""Reput: turn CommitLog records into ConsumeQueue units and IndexFile entries (pure).

``Dispatcher.dispatch()`` reads from ``reput_from`` up to the CommitLog's readable end without
CRC checks, stops before an incomplete record (a slave may hold half a record from a master
frame), follows blanks to the next file, and calls ``on_arrival(topic, queue_id, next_offset,
tags_code, store_timestamp)`` for long polling: once per run of consecutive records of one
queue with one tagsCode, with the run's last offset (what a parked pull needs to know). The
Trio shell (``store/flush.py``) calls it whenever new bytes arrive; ``MessageStore.append_message``
calls it inline for a single put when the reput is caught up.

Only what dispatch needs is read from a record (fixed offsets via one struct, TAGS / KEYS /
UNIQ_KEY by a bytes search of the properties), and IndexFile headers are written once per
``dispatch()`` call. A crash between an index entry and its header leaves a header whose count
is behind: readers ignore slot heads at or past it and the entries are rewritten, and abnormal
recovery re-dispatches from the checkpoint anyway.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Final

import structlog

from rmq_cluster.cluster.protocol.message import (
    BLANK_MAGIC,
    I16,
    MAGIC_V1,
    RECORD_FIXED_SIZE,
    RECORD_HEADER_SIZE,
    SIZE_MAGIC,
    SYSFLAG_TRANSACTION_COMMIT_TYPE,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
    tags_code,
)
from rmq_cluster.store.commitlog import (
    DISPATCH_HEADER,
    PROP_DELAY,
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    CommitLog,
    DispatchRequest,
    find_property,
    is_dispatchable,
)
from rmq_cluster.store.config import (
    DELAY_LEVELS_MS,
    MAX_DISPATCH_BYTES_PER_ROUND,
    SCHEDULE_TOPIC,
    MessageStoreConfig,
)
from rmq_cluster.store.consume_queue import CQ_RUN_MAX_UNITS, ConsumeQueue
from rmq_cluster.store.index_file import IndexService
from rmq_cluster.store.paths import StorePathError, StoreRoot, is_valid_component

log = structlog.get_logger(component="dispatcher")

ArrivalListener = Callable[[str, int, int, int, int], None]
TOPIC_CACHE_MAX_ENTRIES = 100_000
TAGS_CACHE_MAX_ENTRIES = 4096


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
                    cq = ConsumeQueue(self.guard, topic, int(qid), self.file_size)
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
            cq = ConsumeQueue(self.guard, topic, queue_id, self.file_size)
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
        self._topic_cache: dict[bytes, str] = {}
        self._tags_cache: dict[bytes, int] = {}
        #: records left out of ConsumeQueue and index because their topic (or queue) names
        #: no directory inside the store (a hostile or damaged record); dispatch goes on
        self.skipped_records = 0
        #: (length, head, tail, UNIQ_KEY value start, end, topic, tagsCode) of the template
        #: record: topic + properties bytes from the topic-length byte on; length -1 = none
        self._template: tuple[int, bytes, bytes, int, int, str, int] = (-1, b"", b"", 0, 0, "", 0)

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

        The hot loop reads only what dispatch needs straight from the mmap: the fixed fields
        through one precompiled struct, the topic through a cache, and TAGS / KEYS / UNIQ_KEY
        (DELAY for the schedule topic) by a bytes search of the properties text. It makes the
        same size checks as ``CommitLog.check_record(strict=False, check_crc=False)``; the CRC
        is checked by recovery only. Index headers are written once per call."""
        cl = self.commitlog
        queue = cl.queue
        if self.reput_from < cl.min_offset:
            self.reput_from = cl.min_offset
        count = 0
        budget = max_bytes
        end = cl.max_offset
        arrival = self.on_arrival
        index = self.index
        cq_table = self.cqs.queues
        topic_cache = self._topic_cache
        tags_cache = self._tags_cache
        max_record = cl.max_record
        unpack_head = DISPATCH_HEADER.unpack_from
        unpack_size = SIZE_MAGIC.unpack_from
        unpack_i16 = I16.unpack_from
        last_ts = self.last_store_timestamp
        lag_hist = self.lag_histogram
        lag_top = LAG_HISTOGRAM_BUCKETS - 1
        now_ms = cl.clock_ms() if lag_hist is not None else 0
        # Side effects are gathered per run and written when the run ends (a record that does
        # not continue it, a file end, the round's end): ConsumeQueue units of consecutive
        # offsets of one queue go out in one put_run, arrival listeners hear once per run of
        # records with one tagsCode (the last offset: a parked pull wakes for "an offset past
        # mine with a matching tag" and that holds for a run iff for its last record), and
        # index entries of records with a UNIQ_KEY and no KEYS go out in one index_uniq_run
        # per topic run, in record order. The files get the same bytes as record by record.
        run: list[int] = []  # flat (phys, size, tagsCode) of the pending ConsumeQueue run
        # (next offset, tagsCode, store ts) of the tagsCode changes inside the run, if any
        run_arrivals: list[tuple[int, int, int]] | None = None
        run_topic = ""
        run_qid = run_first = run_code = run_ts = 0
        run_next = -1
        run_max = 3 * CQ_RUN_MAX_UNITS
        keyed: list[tuple[bytes, int, int]] = []  # (UNIQ_KEY, phys, store ts) to index
        keyed_topic = ""
        # the template record (see below), kept across rounds: it is a function of its bytes
        tpl_len, tpl_head, tpl_tail, tpl_u0, tpl_u1, tpl_topic, tpl_code = self._template
        uniq: bytes | None = None
        keys: bytes | None = None
        try:
            while self.reput_from < end and budget > 0:
                mf = queue.find(self.reput_from)
                if mf is None:
                    break
                mm = mf.mm
                wrote = mf.wrote
                base = mf.file_from
                pos = self.reput_from - base
                corrupt = False
                while budget > 0:
                    avail = wrote - pos
                    if avail < RECORD_HEADER_SIZE:
                        # a blank, the start of a record still being written, or nothing
                        if avail >= 8:
                            total, magic = unpack_size(mm, pos)
                            if magic == BLANK_MAGIC:
                                pos = mf.file_size
                            elif magic != MAGIC_V1:
                                corrupt = bool(total or magic)
                            elif total < RECORD_FIXED_SIZE or total > max_record:
                                corrupt = True
                        break
                    (
                        total, magic, queue_id, queue_offset, phys, sys_flag, store_ts, body_len,
                    ) = unpack_head(mm, pos)
                    if magic != MAGIC_V1:
                        if magic == BLANK_MAGIC:
                            pos = mf.file_size
                        elif total or magic:
                            corrupt = True
                        break
                    if total < RECORD_FIXED_SIZE or total > max_record:
                        corrupt = True
                        break
                    if total > avail:
                        break
                    if body_len < 0 or body_len > total - RECORD_FIXED_SIZE:
                        corrupt = True
                        break
                    tp = pos + RECORD_HEADER_SIZE + body_len
                    rec_end = pos + total
                    # The template path: a record whose topic + properties bytes equal the
                    # previous fully read record's except for the UNIQ_KEY value (same length,
                    # no 0x02 in it) -- the records of a batch, a producer's run of sends --
                    # has that record's topic and tagsCode and no KEYS: the property entries
                    # sit at the same places and only the UNIQ_KEY value differs, so the full
                    # read below would find the same (the size checks it makes hold too:
                    # topic length, properties length and record end are the same bytes).
                    # A template record without UNIQ_KEY (and KEYS) must match whole.
                    hit = False
                    if rec_end - tp == tpl_len:
                        rest = mm[tp:rec_end]
                        if rest.startswith(tpl_head) and rest.endswith(tpl_tail):
                            uniq = rest[tpl_u0:tpl_u1]
                            hit = 2 not in uniq
                    if hit:
                        topic = tpl_topic
                        code = tpl_code
                    else:
                        topic_len = mm[tp]
                        pp = tp + 1 + topic_len
                        if pp + 2 > rec_end:
                            corrupt = True
                            break
                        (props_len,) = unpack_i16(mm, pp)
                        p0 = pp + 2
                        if props_len < 0 or p0 + props_len != rec_end or topic_len == 0:
                            corrupt = True
                            break
                        topic_raw = mm[tp + 1 : pp]
                        cached = topic_cache.get(topic_raw)
                        if cached is None:
                            try:
                                cached = topic_raw.decode()
                            except UnicodeDecodeError:
                                corrupt = True
                                break
                            if not is_valid_component(cached):
                                # no ConsumeQueue or index for a topic that names no store
                                # path: skip the record (checked on a cache miss only:
                                # valid topics are cached, so this costs nothing per record)
                                self._skip(base + pos, cached, "topic is not a valid path name")
                                last_ts = store_ts
                                pos = rec_end
                                budget -= total
                                count += 1
                                continue
                            if len(topic_cache) < TOPIC_CACHE_MAX_ENTRIES:
                                topic_cache[topic_raw] = cached
                        topic = cached
                        # tagsCode: hash of TAGS, or the delivery time for a delayed record
                        props = mm[p0:rec_end] if props_len else b""
                        if props_len == 0:
                            code = 0
                        elif topic == SCHEDULE_TOPIC and (
                            dl := find_property(props, PROP_DELAY, 0, props_len)
                        ) is not None:
                            try:
                                level = min(max(int(dl.decode("utf-8", "replace")), 1), 18)
                            except ValueError:
                                level = 1
                            code = store_ts + DELAY_LEVELS_MS[level - 1]
                        else:
                            # find_property, inlined for the usual case: the last TAGS entry
                            # starts an entry and has a value
                            tags = None
                            i = props.rfind(PROP_TAGS)
                            if i >= 0:
                                v0 = i + 5
                                j = props.find(b"\x02", v0)
                                if j < 0:
                                    j = props_len
                                if j > v0 and (i == 0 or props[i - 1] == 2):
                                    tags = props[v0:j]
                                else:
                                    tags = find_property(props, PROP_TAGS, 0, props_len)
                            if tags is None:
                                code = 0
                            else:
                                code = tags_cache.get(tags)  # type: ignore[assignment]
                                if code is None:
                                    code = tags_code(tags.decode("utf-8", "replace"))
                                    if len(tags_cache) < TAGS_CACHE_MAX_ENTRIES:
                                        tags_cache[tags] = code
                    txn = sys_flag & SYSFLAG_TRANSACTION_MASK
                    dispatchable = txn == 0 or txn == SYSFLAG_TRANSACTION_COMMIT_TYPE
                    if dispatchable:
                        if (
                            queue_offset == run_next
                            and topic is run_topic
                            and queue_id == run_qid
                            and len(run) < run_max
                        ):
                            # the next unit of the current run (a batch, or a queue's
                            # consecutive records)
                            run += (phys, total, code)
                            if code != run_code:
                                if run_arrivals is None:
                                    run_arrivals = []
                                run_arrivals.append((run_next, run_code, run_ts))
                                run_code = code
                            run_next += 1
                        else:
                            if run:
                                if len(run) == 3:
                                    # a one-record run (queues taking turns): put it directly
                                    cq = cq_table.get((run_topic, run_qid))
                                    if cq is None:
                                        cq = self.queue_for(run_topic, run_qid, run[0])
                                    if cq is not None:
                                        cq.put(run_first, run[0], run[1], run[2])
                                else:
                                    self._flush_run(
                                        run_topic, run_qid, run_first, run, run_arrivals
                                    )
                                if arrival is not None:
                                    arrival(run_topic, run_qid, run_next, run_code, run_ts)
                            run = [phys, total, code]
                            run_arrivals = None
                            run_topic = topic
                            run_qid = queue_id
                            run_first = queue_offset
                            run_next = queue_offset + 1
                            run_code = code
                        run_ts = store_ts
                    if index is not None and txn != SYSFLAG_TRANSACTION_ROLLBACK_TYPE:
                        if hit:
                            keys = None
                            if not uniq:
                                uniq = None  # a template without a UNIQ_KEY
                        elif props_len:
                            uniq = None
                            i = props.rfind(PROP_UNIQ_KEY)
                            if i >= 0:
                                v0 = i + 9
                                j = props.find(b"\x02", v0)
                                if j < 0:
                                    j = props_len
                                if j > v0 and (i == 0 or props[i - 1] == 2):
                                    uniq = props[v0:j]
                                else:
                                    uniq = find_property(props, PROP_UNIQ_KEY, 0, props_len)
                                    v0 = -1
                            keys = (
                                find_property(props, PROP_KEYS, 0, props_len)
                                if PROP_KEYS in props
                                else None
                            )
                            if (
                                keys is None
                                and uniq is not None
                                and v0 >= 0
                                and topic != SCHEDULE_TOPIC
                            ):
                                # this record is the template for the next ones
                                tpl_len = rec_end - tp
                                tpl_head = mm[tp:p0] + props[:v0]
                                tpl_tail = props[j:]
                                tpl_u0 = p0 - tp + v0
                                tpl_u1 = p0 - tp + j
                                tpl_topic = topic
                                tpl_code = code
                                self._template = (
                                    tpl_len, tpl_head, tpl_tail, tpl_u0, tpl_u1, tpl_topic,
                                    tpl_code,
                                )
                            elif keys is None and uniq is None and topic != SCHEDULE_TOPIC:
                                # no UNIQ_KEY, no KEYS: a template that must match whole
                                tpl_len = rec_end - tp
                                tpl_head = mm[tp:rec_end]
                                tpl_tail = b""
                                tpl_u0 = tpl_u1 = 0
                                tpl_topic = topic
                                tpl_code = code
                                self._template = (
                                    tpl_len, tpl_head, tpl_tail, tpl_u0, tpl_u1, tpl_topic,
                                    tpl_code,
                                )
                        else:
                            uniq = keys = None
                        if keys is None and uniq is not None:
                            # the usual record: indexed with its neighbours in one call
                            if topic is not keyed_topic:
                                if keyed:
                                    index.index_uniq_run(keyed_topic, keyed)
                                    keyed = []
                                keyed_topic = topic
                            keyed.append((uniq, phys, store_ts))
                        elif uniq is not None or keys is not None:
                            if keyed:
                                index.index_uniq_run(keyed_topic, keyed)
                                keyed = []
                            index.index_raw_keys(topic, uniq, keys, phys, store_ts)
                    last_ts = store_ts
                    if lag_hist is not None:
                        lag = now_ms - store_ts
                        lag_hist[lag if 0 <= lag < lag_top else (lag_top if lag > 0 else 0)] += 1
                    pos = rec_end
                    budget -= total
                    count += 1
                # what the records above left pending, before reput_from moves past them
                if run:
                    self._flush_run(run_topic, run_qid, run_first, run, run_arrivals)
                    if arrival is not None:
                        arrival(run_topic, run_qid, run_next, run_code, run_ts)
                    run = []
                    run_arrivals = None
                    run_next = -1
                if keyed and index is not None:
                    index.index_uniq_run(keyed_topic, keyed)
                    keyed = []
                if corrupt:
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
                self.last_store_timestamp = last_ts
                if index is not None:
                    index.write_headers()
