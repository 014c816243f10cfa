"""ConsumeQueue: per (topic, queueId) 20-byte units (phyOffset i64, size i32, tagsCode i64)
at logical byte offset index × 20, in segments named by their start byte offset (pure)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Final

import structlog

from .config import CQ_STORE_UNIT_SIZE_BYTES, RECOVER_FROM_LAST_FILES
from .mapped_file import PAGE_SIZE, DirSyncLedger, MappedFileQueue
from .paths import StoreRoot

log = structlog.get_logger(component="consume_queue")

CQ_UNIT: Final = struct.Struct(">qiq")
UNIT: Final = CQ_STORE_UNIT_SIZE_BYTES
FILLER_SIZE: Final = 0x7FFFFFFF  # (0, MAX_INT, 0) fills the space before a queue's first unit
#: the most units ``put_run`` packs in one call (the dispatcher cuts longer runs)
CQ_RUN_MAX_UNITS: Final = 64
#: the struct of a run of k units, for k = 0..CQ_RUN_MAX_UNITS
_RUN_PACKERS: Final = tuple(struct.Struct(">" + "qiq" * k) for k in range(CQ_RUN_MAX_UNITS + 1))


class ConsumeQueue:
    def __init__(
        self,
        root: str | StoreRoot,
        topic: str,
        queue_id: int,
        file_size: int,
        *,
        ledger: DirSyncLedger | None = None,
    ) -> None:
        """``root``: the ``consumequeue`` directory (or its guard). Raises StorePathError when
        ``topic`` / ``queue_id`` would not name a directory strictly inside it. ``ledger``:
        where new segments' names wait for the logics flush (``DirSyncLedger``)."""
        self.topic = topic
        self.queue_id = queue_id
        guard = root if isinstance(root, StoreRoot) else StoreRoot(root)
        self.directory = guard.child(topic, str(queue_id))
        self.queue = MappedFileQueue(self.directory, file_size, ledger=ledger)
        self.file_size = file_size
        self.max_physic_offset = -1  # end (offset + size) of the last unit, -1 when empty
        self.min_logic_offset = 0  # byte offset of the first real unit
        #: units below this index go into a segment that exists (``needs_file`` found it; a
        #: truncation or destroy resets it): the dispatcher's per-record check without a call
        self.units_ready = 0

    # ------------------------------------------------------------------ load / recover

    def load(self) -> None:
        self.queue.load()

    def recover(self) -> None:
        """Scan from the third-last segment; stop at the first unit with offset < 0 or
        size <= 0, and cut everything after it."""
        files = self.queue.files
        if not files:
            return
        start = max(0, len(files) - RECOVER_FROM_LAST_FILES)
        end = files[start].file_from
        max_phys = -1
        for mf in files[start:]:
            view = mf.view
            pos = 0
            complete = True
            while pos + UNIT <= mf.file_size:
                off, size, _tags = CQ_UNIT.unpack_from(view, pos)
                if off < 0 or size <= 0:
                    complete = False
                    break
                if size != FILLER_SIZE:
                    max_phys = off + size
                pos += UNIT
            end = mf.file_from + pos
            if not complete:
                break
        self.queue.set_positions(end)
        self.queue.truncate_dirty(end)
        self.units_ready = 0
        self.max_physic_offset = max_phys
        self._recompute_min()

    def _recompute_min(self, min_phys: int = 0) -> None:
        """min_logic_offset = the first real unit pointing at or above ``min_phys`` (units are
        ordered by phyOffset and fillers only precede real units: binary search)."""
        files = self.queue.files
        if not files:
            return
        lo = files[0].file_from // UNIT
        hi = self.queue.max_offset // UNIT
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self.queue.read(mid * UNIT, UNIT)
            if unit is None:
                lo = mid + 1
                continue
            off, size, _tags = CQ_UNIT.unpack(unit)
            if size == FILLER_SIZE or off < min_phys:
                lo = mid + 1
            else:
                hi = mid
        self.min_logic_offset = lo * UNIT

    def correct_min_offset(self, commitlog_min: int) -> None:
        self._recompute_min(commitlog_min)

    # ------------------------------------------------------------------ write

    def put(self, cq_index: int, phys: int, size: int, tags_code: int) -> bool:
        """Write the unit for ``cq_index``; False when it is already present (replay)."""
        if phys + size <= self.max_physic_offset:
            return False
        files = self.queue.files
        if files:
            # the common case: the next unit, with room left in the last segment
            last = files[-1]
            wrote = last.wrote
            if last.file_from + wrote == cq_index * UNIT and wrote < last.file_size:
                CQ_UNIT.pack_into(last.mm, wrote, phys, size, tags_code)
                last.wrote = wrote + UNIT
                self.max_physic_offset = phys + size
                return True
        expected = cq_index * UNIT
        q = self.queue
        cur = q.max_offset
        if not q.files:
            # the first unit of this queue may be far from index 0 (slave, retention)
            mf = q.create_file(expected - expected % self.file_size)
            self.min_logic_offset = expected
            cur = mf.file_from
            while cur < expected:
                CQ_UNIT.pack_into(mf.mm, cur - mf.file_from, 0, FILLER_SIZE, 0)
                cur += UNIT
            mf.wrote = cur - mf.file_from
        elif expected < cur:
            return False
        elif expected > cur:
            log.warning(
                "consume_queue_gap", topic=self.topic, queue_id=self.queue_id,
                expected=expected // UNIT, current=cur // UNIT,
            )
            while q.max_offset < expected:
                mf = q.last_file_for_write()
                CQ_UNIT.pack_into(mf.mm, mf.wrote, 0, FILLER_SIZE, 0)
                mf.wrote += UNIT
        mf = q.last_file_for_write()
        CQ_UNIT.pack_into(mf.mm, mf.wrote, phys, size, tags_code)
        mf.wrote += UNIT
        self.max_physic_offset = phys + size
        return True

    def needs_file(self, cq_index: int) -> int | None:
        """The start of the segment a ``put`` of unit ``cq_index`` would have to create (the
        queue's first, or the next), or None when it writes into a segment that exists (or is
        a replay). Such a segment is made ahead, off the event loop, by ``prepare_file``."""
        files = self.queue.files
        if files:
            start = files[-1].file_end
            if cq_index * UNIT < start:
                self.units_ready = start // UNIT
                return None
        else:
            expected = cq_index * UNIT
            start = expected - expected % self.file_size
        return None if self.queue.is_prepared(start) else start

    def prepare_file(self, start: int) -> None:
        """Create and map the segment at ``start`` and prefault its first page (blocking: a
        worker thread); the next ``put`` that needs it takes it (``create_file``). The first
        write into a fresh file was a page fault that allocates its first block: milliseconds
        on a busy disk, paid here instead of on the event loop."""
        self.queue.preallocate(start, warm_bytes=PAGE_SIZE)

    def put_run(self, cq_index: int, units: list[int]) -> None:
        """``put`` of consecutive units from ``cq_index``: ``units`` is flat
        ``(phys, size, tagsCode) * k`` with phys increasing (CommitLog order). When the first
        unit is new and all of them are the next units with room in the last segment (the
        usual case), one ``pack_into`` writes them all: the bytes ``put`` would write one by
        one. Anything else (replay, a gap, a segment rollover) goes through ``put`` each."""
        k = len(units) // 3
        files = self.queue.files
        if files and k <= CQ_RUN_MAX_UNITS and units[0] + units[1] > self.max_physic_offset:
            last = files[-1]
            wrote = last.wrote
            if last.file_from + wrote == cq_index * UNIT and wrote + k * UNIT <= last.file_size:
                _RUN_PACKERS[k].pack_into(last.mm, wrote, *units)
                last.wrote = wrote + k * UNIT
                self.max_physic_offset = units[-3] + units[-2]
                return
        put = self.put
        for i in range(0, 3 * k, 3):
            put(cq_index, units[i], units[i + 1], units[i + 2])
            cq_index += 1

    # ------------------------------------------------------------------ read

    @property
    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // UNIT

    @property
    def max_offset_in_queue(self) -> int:
        """Index one past the last unit."""
        if not self.queue.files:
            return self.min_logic_offset // UNIT
        return self.queue.max_offset // UNIT

    def get_index_buffer(self, index: int) -> memoryview | None:
        """Units from ``index`` to the end of the written part of its segment."""
        offset = index * UNIT
        if offset < self.min_logic_offset:
            return None
        mf = self.queue.find(offset)
        if mf is None:
            return None
        return mf.read_to_end(offset - mf.file_from)

    def get_unit(self, index: int) -> tuple[int, int, int] | None:
        offset = index * UNIT
        view = self.queue.read(offset, UNIT)
        if view is None:
            return None
        unit: tuple[int, int, int] = CQ_UNIT.unpack(view)
        return unit

    def roll_next_file(self, index: int) -> int:
        per_file = self.file_size // UNIT
        return index + per_file - index % per_file

    def iter_units(self) -> Iterator[tuple[int, int, int, int]]:
        """(index, phyOffset, size, tagsCode) of every real unit."""
        for mf in list(self.queue.files):
            view = mf.view
            for pos in range(0, mf.wrote, UNIT):
                off, size, tags = CQ_UNIT.unpack_from(view, pos)
                if size != FILLER_SIZE and mf.file_from + pos >= self.min_logic_offset:
                    yield (mf.file_from + pos) // UNIT, off, size, tags

    def offset_by_time(self, timestamp: int, store_time: Callable[[int, int], int]) -> int:
        """Smallest index whose message was stored at or after ``timestamp`` (RocketMQ's
        binary search; ``store_time(phys, size)`` reads a record's store timestamp, -1 if
        gone). Answers max offset when every message is older."""
        lo, hi = self.min_offset_in_queue, self.max_offset_in_queue - 1
        if hi < lo:
            return 0 if hi < 0 else lo
        result = hi + 1
        while lo <= hi:
            mid = (lo + hi) // 2
            unit = self.get_unit(mid)
            if unit is None:
                lo = mid + 1
                continue
            ts = store_time(unit[0], unit[1])
            if ts < 0 or ts < timestamp:
                lo = mid + 1
            else:
                result = mid
                hi = mid - 1
        return result

    # ------------------------------------------------------------------ truncate / retention

    def truncate_dirty(self, phys_end: int) -> None:
        """Drop units whose record does not end at or before ``phys_end``."""
        files = self.queue.files
        if not files or self.max_physic_offset <= phys_end:
            return
        # find the first unit to drop by scanning back from the end
        cut = self.queue.max_offset
        new_max = -1
        done = False
        for mf in reversed(files):
            view = mf.view
            pos = mf.wrote - UNIT
            while pos >= 0:
                off, size, _tags = CQ_UNIT.unpack_from(view, pos)
                if size == FILLER_SIZE or off + size <= phys_end:
                    if size != FILLER_SIZE:
                        new_max = off + size
                    done = True
                    break
                cut = mf.file_from + pos
                pos -= UNIT
            if done:
                break
        self.queue.truncate_dirty(cut)
        self.units_ready = 0
        if not self.queue.files:
            # keep the numbering: the next unit for this queue goes at index cut // UNIT
            self.min_logic_offset = cut
        self.max_physic_offset = new_max
        if new_max < 0 and self.queue.files:
            self.max_physic_offset = -1

    def delete_expired(self, commitlog_min: int) -> int:
        """Delete leading segments whose last unit points below the CommitLog min offset."""
        files = self.queue.files
        count = 0
        for mf in files[:-1]:
            if mf.wrote < UNIT:
                break
            off, size, _ = CQ_UNIT.unpack_from(mf.view, mf.wrote - UNIT)
            if size != FILLER_SIZE and off >= commitlog_min:
                break
            count += 1
        if count:
            self.queue.delete_first_files(count)
        self.correct_min_offset(commitlog_min)
        return count

    def flush(self) -> None:
        self.queue.flush()

    def close(self) -> None:
        self.queue.close()

    def destroy(self) -> None:
        """Delete every segment of this queue (its topic was deleted)."""
        self.queue.reset_empty(0)
        self.queue.close()
        self.units_ready = 0
        self.max_physic_offset = -1
        self.min_logic_offset = 0
