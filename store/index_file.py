"""IndexFile: a hash index from ``topic#key`` to CommitLog offsets (pure; no trio).

Layout (big-endian): a 40-byte header (beginTimestamp i64, endTimestamp i64, beginPhyOffset i64,
endPhyOffset i64, hashSlotCount i32, indexCount i32 — starts at 1), then ``slots`` × i32 slot
heads, then ``entries`` × 20-byte entries (keyHash i32, phyOffset i64, timeDiff i32 seconds,
prevIndex i32). Files are named by creation time ``yyyyMMddHHmmssSSS`` (local time).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from typing import Final

import structlog

from cluster.protocol.message import (
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
    index_key_hash,
)
from store.commitlog import DispatchRequest
from store.mapped_file import MappedFile

log = structlog.get_logger(component="index")

HEADER: Final = struct.Struct(">qqqqii")
HEADER_SIZE: Final = 40
SLOT: Final = struct.Struct(">i")
SLOT_SIZE: Final = 4
ENTRY: Final = struct.Struct(">iqii")
ENTRY_SIZE: Final = 20
INVALID_INDEX: Final = 0
INT_MAX: Final = 0x7FFFFFFF
MAX_QUERY_RESULTS: Final = 64  # RocketMQ maxMsgsNumBatch


def index_file_size(slots: int, entries: int) -> int:
    return HEADER_SIZE + slots * SLOT_SIZE + entries * ENTRY_SIZE


def index_file_name(ms: int) -> str:
    t = time.localtime(ms // 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


class IndexFile:
    def __init__(self, path: str, slots: int, entries: int, *, create: bool) -> None:
        self.path = path
        self.slots = slots
        self.entries = entries
        self.mf = MappedFile(path, 0, index_file_size(slots, entries), create=create)
        self.mf.wrote = self.mf.file_size
        self.mm = self.mf.mm
        if create:
            self.begin_ts = self.end_ts = 0
            self.begin_phy = self.end_phy = 0
            self.slot_count = 0
            self.index_count = 1
            self._write_header()
        else:
            (
                self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count,
                self.index_count,
            ) = HEADER.unpack_from(self.mm, 0)
            if self.index_count < 1:
                self.index_count = 1

    def _write_header(self) -> None:
        HEADER.pack_into(
            self.mm, 0, self.begin_ts, self.end_ts, self.begin_phy, self.end_phy,
            self.slot_count, self.index_count,
        )

    def is_full(self) -> bool:
        return self.index_count >= self.entries

    def put_key(self, key: str, phys: int, store_ts: int) -> bool:
        if self.is_full():
            return False
        h = index_key_hash(key)
        slot_pos = HEADER_SIZE + (h % self.slots) * SLOT_SIZE
        (prev,) = SLOT.unpack_from(self.mm, slot_pos)
        if prev <= INVALID_INDEX or prev > self.index_count:
            prev = INVALID_INDEX
        if self.begin_ts <= 0:
            diff = 0
        else:
            diff = (store_ts - self.begin_ts) // 1000
            diff = INT_MAX if diff > INT_MAX else max(diff, 0)
        n = self.index_count
        ENTRY.pack_into(
            self.mm, HEADER_SIZE + self.slots * SLOT_SIZE + n * ENTRY_SIZE, h, phys, diff, prev
        )
        SLOT.pack_into(self.mm, slot_pos, n)
        if n <= 1:
            self.begin_phy = phys
            self.begin_ts = store_ts
        if prev == INVALID_INDEX:
            self.slot_count += 1
        self.index_count = n + 1
        self.end_phy = phys
        self.end_ts = store_ts
        self._write_header()
        return True

    def time_matched(self, begin: int, end: int) -> bool:
        return (begin < self.begin_ts and end > self.end_ts) or (
            self.begin_ts <= begin <= self.end_ts
        ) or (self.begin_ts <= end <= self.end_ts)

    def select(self, key: str, max_num: int, begin: int, end: int, out: list[int]) -> None:
        """Append phy offsets of entries whose hash matches and whose time lies in
        [begin, end]; the caller must compare the key with the message itself."""
        h = index_key_hash(key)
        (cur,) = SLOT.unpack_from(self.mm, HEADER_SIZE + (h % self.slots) * SLOT_SIZE)
        base = HEADER_SIZE + self.slots * SLOT_SIZE
        seen = 0
        while INVALID_INDEX < cur < self.index_count and len(out) < max_num:
            kh, phys, diff, prev = ENTRY.unpack_from(self.mm, base + cur * ENTRY_SIZE)
            if diff < 0:
                break
            t = self.begin_ts + diff * 1000
            if kh == h and begin <= t <= end:
                out.append(phys)
            # chains run newest to oldest: nothing further back can be inside the range
            if prev <= INVALID_INDEX or prev > self.index_count or prev == cur or t < begin:
                break
            cur = prev
            seen += 1
            if seen > self.index_count:
                break

    def flush(self) -> None:
        self.mf.flush_range(0, self.mf.file_size)

    def close(self) -> bool:
        return self.mf.close()

    def destroy(self) -> bool:
        return self.mf.destroy()


class IndexService:
    def __init__(
        self, directory: str, slots: int, entries: int, *, clock_ms: Callable[[], int]
    ) -> None:
        self.directory = directory
        self.slots = slots
        self.entries = entries
        self.clock_ms = clock_ms
        self.files: list[IndexFile] = []
        self.on_file_full: Callable[[IndexFile], None] | None = None

    def load(self) -> None:
        if not os.path.isdir(self.directory):
            return
        size = index_file_size(self.slots, self.entries)
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if not (len(name) == 17 and name.isdigit()):
                continue
            if os.path.getsize(path) != size:
                log.warning("index_file_size_mismatch_deleted", path=path)
                os.unlink(path)
                continue
            self.files.append(IndexFile(path, self.slots, self.entries, create=False))

    def truncate_beyond(self, phys_end: int, index_ts: int | None) -> int | None:
        """Delete files holding offsets >= ``phys_end`` (or newer than ``index_ts``); returns
        the lowest begin offset among them (dispatch must rebuild from there), or None."""
        rebuild: int | None = None
        keep: list[IndexFile] = []
        for f in self.files:
            # an empty file seeded from a dirty predecessor carries its stale end offset too
            used = f.index_count > 1 or f.end_phy > 0
            dirty = used and (
                f.end_phy >= phys_end or (index_ts is not None and f.end_ts > index_ts)
            )
            if dirty:
                rebuild = f.begin_phy if rebuild is None else min(rebuild, f.begin_phy)
                f.destroy()
            else:
                keep.append(f)
        self.files = keep
        return rebuild

    @property
    def end_phy(self) -> int:
        return self.files[-1].end_phy if self.files else 0

    def _writable(self) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full():
            return last
        os.makedirs(self.directory, exist_ok=True)
        ms = self.clock_ms()
        name = index_file_name(ms)
        while os.path.exists(os.path.join(self.directory, name)) or (
            self.files and name <= os.path.basename(self.files[-1].path)
        ):
            ms += 1
            name = index_file_name(ms)
        f = IndexFile(os.path.join(self.directory, name), self.slots, self.entries, create=True)
        if last is not None:
            f.begin_phy = f.end_phy = last.end_phy
            f.begin_ts = f.end_ts = last.end_ts
            f._write_header()
            if self.on_file_full is not None:
                self.on_file_full(last)
        self.files.append(f)
        return f

    def build_index(self, req: DispatchRequest) -> None:
        if (req.sys_flag & SYSFLAG_TRANSACTION_MASK) == SYSFLAG_TRANSACTION_ROLLBACK_TYPE:
            return
        if not req.uniq_key and not req.keys:
            return
        f = self._writable()
        if (f.index_count > 1 or len(self.files) > 1) and req.commitlog_offset <= f.end_phy:
            return  # already indexed (replayed dispatch)
        topic = req.topic
        if req.uniq_key:
            f = self._put(f, f"{topic}#{req.uniq_key}", req)
        if req.keys:
            for k in req.keys.split(" "):
                if k:
                    f = self._put(f, f"{topic}#{k}", req)

    def _put(self, f: IndexFile, key: str, req: DispatchRequest) -> IndexFile:
        if not f.put_key(key, req.commitlog_offset, req.store_timestamp):
            f = self._writable()
            f.put_key(key, req.commitlog_offset, req.store_timestamp)
        return f

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        out: list[int] = []
        full_key = f"{topic}#{key}"
        max_num = min(max_num, MAX_QUERY_RESULTS)
        for f in reversed(self.files):
            if len(out) >= max_num:
                break
            if f.index_count <= 1 or not f.time_matched(begin, end):
                continue
            f.select(full_key, max_num, begin, end, out)
        return out

    def delete_expired(self, commitlog_min: int) -> int:
        count = 0
        while len(self.files) > 1 and self.files[0].end_phy < commitlog_min:
            self.files.pop(0).destroy()
            count += 1
        return count

    def flush(self) -> None:
        for f in self.files[-2:]:
            f.flush()

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []
