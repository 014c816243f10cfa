"""``.option("storePath", ...)``: a topic read straight from a local store's files (batch
reads, and a stream's micro-batches: ``store_queue_ends`` says how far each queue is written).

A queue's ConsumeQueue (``consumequeue/<topic>/<queueId>/``) lists its messages' CommitLog
offsets and sizes; each is read from ``commitlog/`` and decoded by the record layout's
``record_fields`` into the same rows as a pull.  Segments and ConsumeQueue units come from the
replica audit's decoders (``decode.list_segments``, ``decode.decode_cq``).  No broker is asked:
the files must be readable where the Spark tasks run (``local[*]``, or a worker on the store's
host).  A live store may be read: only units the ConsumeQueue already lists are visible, and
every record is checked against its unit (CommitLog offset, queue, queue offset, body CRC).
"""

from __future__ import annotations

import bisect
import mmap
import os
from collections.abc import Iterator
from typing import Any, Final

from ..cluster.protocol.message import RecordError, record_fields
from .decode import CQ_UNIT_BYTES, CqUnit, Segment, decode_cq, list_segments
from .mq_model import (
    QueueRange,
    ReadOptions,
    SourceError,
    first_true,
    offset_specs,
    resolve_range,
    row_of,
    tag_set,
)

COMMITLOG_DIR: Final = "commitlog"
CONSUMEQUEUE_DIR: Final = "consumequeue"
#: A topic has at most this many queue directories (RocketMQ's MAX_QUEUE_NUMS, as ours).
MAX_STORE_QUEUES: Final = 1024


class Segments:
    """The segment files of one directory, mapped read-only on first use, closed together."""

    def __init__(self, directory: str) -> None:
        self.segments = [s for s in list_segments(directory) if s.length > 0]
        self._starts = [s.start for s in self.segments]
        self._maps: dict[str, mmap.mmap] = {}

    def __enter__(self) -> Segments:
        return self

    def __exit__(self, *exc: object) -> None:
        for m in self._maps.values():
            m.close()
        self._maps.clear()

    def map(self, seg: Segment) -> mmap.mmap:
        m = self._maps.get(seg.path)
        if m is None:
            with open(seg.path, "rb") as f:
                m = self._maps[seg.path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return m

    def first_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    def read(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes at absolute ``offset`` inside one segment, or None if not held."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0 or size <= 0:
            return None
        seg = self.segments[i]
        pos = offset - seg.start
        if pos + size > seg.length:
            return None
        return self.map(seg)[pos : pos + size]


def _cq_dir(root: str, topic: str, queue_id: int) -> str:
    return os.path.join(root, CONSUMEQUEUE_DIR, topic, str(queue_id))


def store_queue_ids(root: str, topic: str) -> list[int]:
    """The topic's queue ids in the store at ``root`` (its ConsumeQueue directories)."""
    if not os.path.isdir(os.path.join(root, COMMITLOG_DIR)):
        raise SourceError(f"storePath {root}: no {COMMITLOG_DIR}/ here (not a broker store)")
    try:
        names = os.listdir(os.path.join(root, CONSUMEQUEUE_DIR, topic))
    except FileNotFoundError:
        return []
    ids = sorted(int(n) for n in names if n.isdigit() and int(n) < MAX_STORE_QUEUES)
    return ids


def units(cq: Segments, lo: int, hi: int) -> Iterator[CqUnit]:
    """ConsumeQueue units with index in ``[lo, hi)`` (placeholders skipped)."""
    for seg in cq.segments:
        first = seg.start // CQ_UNIT_BYTES
        last = first + seg.length // CQ_UNIT_BYTES
        if last <= lo or first >= hi:
            continue
        a, b = max(lo, first) - first, min(hi, last) - first
        yield from decode_cq(cq.map(seg)[a * CQ_UNIT_BYTES : b * CQ_UNIT_BYTES],
                             (first + a) * CQ_UNIT_BYTES)  # fmt: skip


class StoreQueue:
    """One queue of a local store: its bounds, its records, the time search over them."""

    def __init__(self, cq: Segments, log: Segments, r: QueueRange) -> None:
        self.cq, self.log, self.r = cq, log, r

    def end(self) -> int:
        """One past the last unit written (the queue's max offset)."""
        for seg in reversed(self.cq.segments):
            tail = list(units(self.cq, seg.start // CQ_UNIT_BYTES, 1 << 62))
            if tail:
                return tail[-1].cq_index + 1
        return 0

    def bounds(self) -> tuple[int, int]:
        """(min, max) offsets: the first unit whose record the CommitLog still holds, one
        past the last unit written."""
        hi = self.end()
        floor = self.log.first_offset()
        for u in units(self.cq, 0, hi):
            if u.phy_offset >= floor:
                return u.cq_index, hi
        return hi, hi

    def fields(self, u: CqUnit) -> Any:
        """The record ``u`` points at (its fields), checked against ``u``."""
        where = f"{self.r.broker}/{self.r.queue_id}@{u.cq_index}"
        raw = self.log.read(u.phy_offset, u.size)
        if raw is None:
            raise SourceError(f"{where}: CommitLog offset {u.phy_offset} (+{u.size}) is not "
                              "in the store's files")  # fmt: skip
        try:
            f = record_fields(memoryview(raw))
        except RecordError as exc:
            raise SourceError(f"{where}: bad record at CommitLog {u.phy_offset}: {exc}") from None
        if f[0] != u.size or f[5] != u.phy_offset or f[2] != self.r.queue_id or \
                f[4] != u.cq_index:  # fmt: skip
            raise SourceError(f"{where}: the record at CommitLog {u.phy_offset} is not the one "
                              "its ConsumeQueue unit names")  # fmt: skip
        return f

    def store_ts(self, offset: int) -> int:
        for u in units(self.cq, offset, offset + 1):
            return int(self.fields(u)[9])
        raise SourceError(f"{self.r.broker}/{self.r.queue_id}@{offset}: no unit to time")

    def first_at_or_after(self, ts: int, lo: int, hi: int) -> int:
        return first_true(lambda off: self.store_ts(off) >= ts, lo, hi, lo)


def plan_store_queues(opts: ReadOptions) -> list[QueueRange]:
    """One range per queue of every store in ``opts.store_paths``."""
    stores = opts.store_paths or {}
    found = {b: store_queue_ids(root, opts.topic) for b, root in sorted(stores.items())}
    if not any(found.values()):
        raise SourceError(f"topic {opts.topic} has no ConsumeQueue in "
                          f"{sorted(stores.values())}")  # fmt: skip
    specs = offset_specs(opts, {b: max(ids) + 1 for b, ids in found.items() if ids})
    ranges = []
    for broker, ids in found.items():
        root = stores[broker]
        with Segments(os.path.join(root, COMMITLOG_DIR)) as log:
            for qid in ids:
                r = QueueRange(opts.topic, broker, root, qid, 0, 0, opts.starting_ts,
                               opts.ending_ts, store=root)  # fmt: skip
                with Segments(_cq_dir(root, opts.topic, qid)) as cq:
                    start, end = resolve_range(StoreQueue(cq, log, r), opts, (broker, qid), specs)
                ranges.append(QueueRange(opts.topic, broker, root, qid, start, end,
                                         opts.starting_ts, opts.ending_ts, store=root))  # fmt: skip
    return ranges


def store_queue_ends(opts: ReadOptions) -> dict[str, tuple[str, int]]:
    """``broker/queueId`` -> (store root, max offset) of every queue of the topic in the
    stores of ``opts.store_paths``, now (what a stream's next micro-batch may read up to)."""
    out: dict[str, tuple[str, int]] = {}
    for broker, root in sorted((opts.store_paths or {}).items()):
        with Segments(os.path.join(root, COMMITLOG_DIR)) as log:
            for qid in store_queue_ids(root, opts.topic):
                r = QueueRange(opts.topic, broker, root, qid, 0, 0, store=root)
                with Segments(_cq_dir(root, opts.topic, qid)) as cq:
                    out[f"{broker}/{qid}"] = (root, StoreQueue(cq, log, r).end())
    return out


def read_store_range(r: QueueRange, opts: ReadOptions) -> Iterator[tuple[Any, ...]]:
    """Every row of ``r`` from the files of the store at ``r.store``."""
    if r.store is None:
        raise SourceError(f"{r.broker}/{r.queue_id}: not a range of a local store")
    tags = tag_set(opts.tags) if opts.tags is not None else frozenset()
    with Segments(os.path.join(r.store, COMMITLOG_DIR)) as log, \
            Segments(_cq_dir(r.store, r.topic, r.queue_id)) as cq:  # fmt: skip
        q = StoreQueue(cq, log, r)
        floor = log.first_offset()
        for u in units(cq, r.start, r.end):
            if u.phy_offset < floor:
                if opts.fail_on_data_loss:
                    raise SourceError(f"{r.broker}/{r.queue_id}@{u.cq_index}: its CommitLog "
                                      "file is deleted; failOnDataLoss=false skips it")  # fmt: skip
                continue
            row = row_of(q.fields(u), r, r.start, tags, opts.max_body_bytes)
            if row is not None:
                yield row
