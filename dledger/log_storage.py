"""DLedger log storage: one interface, an in-memory twin and an mmap file store.

The core (``dledger/core.py``) writes through :class:`LogStorage` (``append``,
``truncate_suffix``) and reads back (``term_at``, ``entries``).  Writes land in memory or in the
mmap'd page cache; they become durable only when the driver calls :meth:`LogStorage.sync`
(and :meth:`LogStorage.save_hard_state` for term/vote), which it must do before sending the
messages of the same Ready.  Pure in the docs/architecture.md sense: no trio, no clocks, no
threads; file I/O and fsync happen only inside methods the driver calls.

File store layout (DLedger's ``DLedgerMmapFileStore``): ``<dir>/data/<20-digit offset>`` data files
holding entries back to back, ``<dir>/index/<20-digit offset>`` index files with one 32-byte record
per entry at ``index * 32``, and ``<dir>/currterm`` (properties: ``currTerm``, ``voteLeader``).

Entry (big-endian, :data:`ENTRY_HEADER`)::

    0 magic i32 (=1) | 4 size i32 (=48+n) | 8 index i64 | 16 term i64 | 24 pos i64 |
    32 channel i32 (0) | 36 chainCrc u32 | 40 bodyCrc u32 | 44 bodyLen i32 | 48 body

DLedger 0.3.x leaves both CRCs at 0; we fill them so recovery can find a torn tail:
``bodyCrc = crc32(body)`` and
``chainCrc = crc32(index i64|term i64|pos i64|channel i32|bodyCrc u32, previous chainCrc)``
(seed 0), so every byte of an entry is checked by recovery.  A reader that ignores CRCs
(DLedger) reads our files unchanged; an entry with both CRCs 0 (written by DLedger) gets the
structural checks only (magic, size, index, term, pos, channel 0).  A data file ends with a
blank when the next entry would not fit: ``i32 -1 | i32 bytes remaining``.
Index record (:data:`INDEX_RECORD`): ``magic i32 | pos i64 | size i32 | index i64 | term i64``.

Retention (:meth:`FileLogStorage.delete_first_data_files`): whole data files at the head of the
log go (the caller decides which: ``store/retention.py``'s policy, below the applied index);
index files wholly below the first kept entry go with them.  Before anything is unlinked the
``begin`` file (properties ``beginIndex``, ``prevTerm``) records the first kept entry and the
term of the one before it, so a push whose ``prev_index`` is the last deleted entry can still be
checked.  After a restart the log starts at the first data file left; the in-memory tables keep a
placeholder per deleted index (32 bytes each) so every index-addressed lookup stays direct, and
:meth:`FileLogStorage.first_index` says where real entries begin.  Reading a deleted entry raises
:class:`CompactedError`; nothing ever recreates a deleted file.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import mmap
import os
import shutil
import struct
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import attrs

from ..cluster.protocol.crc import crc32
from ..store.config import DISK_SPACE_WARNING_LEVEL_RATIO
from .messages import Entry, make_entry

ENTRY_MAGIC = 1
BLANK_MAGIC = -1
BLANK_MIN_BYTES = 8
ENTRY_HEADER = struct.Struct(">iiqqqiIIi")
BODY_OFFSET = 48
HEADER_SIZE = 44  # DLedger's name for the fixed part before bodyLen
POS_OFFSET = 24
INDEX_RECORD = struct.Struct(">iqiqq")
INDEX_UNIT_BYTES = 32
DEFAULT_DATA_FILE_BYTES = 1024 * 1024 * 1024
DEFAULT_INDEX_FILE_BYTES = INDEX_UNIT_BYTES * 5_000_000
CHAIN_STRUCT = struct.Struct(">qqqiI")
#: Blocks of a data or index file are reserved (posix_fallocate) this far ahead of what is
#: written: a write through the mapping into a hole of a full disk is a SIGBUS; a failed
#: reservation is an OSError (ENOSPC) before anything is written. As the CommitLog, refused
#: above DISK_SPACE_WARNING_LEVEL_RATIO used (the rest is headroom for ConsumeQueue/index).
RESERVE_CHUNK_BYTES = 4 * 1024 * 1024
CURRTERM_FILE = "currterm"
BEGIN_FILE = "begin"
KEY_BEGIN_INDEX = "beginIndex"
KEY_PREV_TERM = "prevTerm"
KEY_CURR_TERM = "currTerm"
KEY_VOTE_LEADER = "voteLeader"
FILE_NAME_DIGITS = 20
ZERO_CHUNK_BYTES = 1024 * 1024
RECENT_ENTRIES_CACHED = 32_768
"""FileLogStorage keeps up to twice this many of the newest entries' bodies, so pushes to
followers and the apply of committed entries do not read them back from the mmap."""

if ENTRY_HEADER.size != BODY_OFFSET or INDEX_RECORD.size != INDEX_UNIT_BYTES:
    raise ImportError("DLedger entry/index layouts disagree with their sizes")


class StorageError(Exception):
    """A request that would break the log (non-contiguous append, bad truncation)."""


class CompactedError(StorageError, IndexError):
    """A read of an entry that retention deleted (below :meth:`FileLogStorage.first_index`)."""


@attrs.frozen(slots=True)
class HardState:
    """What must survive a crash besides the log: DLedger's ``currterm`` file."""

    term: int = 0
    vote: str = ""


class LogStorage(Protocol):
    """What the core needs from a log.  Indexes are 0-based; an empty log has
    ``last_index() == -1`` and ``last_term() == 0``; ``term_at(-1) == 0``."""

    def first_index(self) -> int:
        """The first entry still held (0 unless retention deleted the head of the log)."""
        ...

    def last_index(self) -> int: ...

    def last_term(self) -> int: ...

    def term_at(self, index: int) -> int: ...

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries ``lo <= index < hi``; at least one if any, then up to ``max_bytes`` of bodies."""
        ...

    def append(self, entries: Sequence[Entry]) -> None:
        """Append at ``last_index() + 1`` (not durable until :meth:`sync`)."""
        ...

    def truncate_suffix(self, from_index: int) -> None:
        """Drop every entry with ``index >= from_index``."""
        ...

    def sync(self) -> None:
        """Make every append/truncation so far durable."""
        ...

    def load_hard_state(self) -> HardState: ...

    def save_hard_state(self, hs: HardState) -> None:
        """Atomically and durably replace term/vote."""
        ...

    def close(self) -> None: ...


def _check_append(last: int, entries: Sequence[Entry]) -> None:
    expect = last + 1
    for e in entries:
        if e.index != expect:
            raise StorageError(f"append index {e.index}, expected {expect}")
        expect += 1


def _slice_bytes(entries: list[Entry], max_bytes: int | None) -> list[Entry]:
    if max_bytes is None or len(entries) <= 1:
        return entries
    total = 0
    for i, e in enumerate(entries):
        total += len(e.body)
        if total > max_bytes and i > 0:
            return entries[:i]
    return entries


class MemoryLogStorage:
    """In-memory twin.  Tracks what is durable so a simulated crash (:meth:`crash`) loses
    exactly the unsynced appends/truncations and the unsaved hard state."""

    def __init__(self) -> None:
        self._log: list[Entry] = []
        self._durable: list[Entry] = []
        self._dirty_from = 0  # first list position changed since the last sync
        self._hs = HardState()

    def first_index(self) -> int:
        return 0

    def last_index(self) -> int:
        return len(self._log) - 1

    def last_term(self) -> int:
        return self._log[-1].term if self._log else 0

    def term_at(self, index: int) -> int:
        if index == -1:
            return 0
        if not 0 <= index < len(self._log):
            raise IndexError(index)
        return self._log[index].term

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        return _slice_bytes(self._log[max(lo, 0) : max(hi, 0)], max_bytes)

    def append(self, entries: Sequence[Entry]) -> None:
        _check_append(len(self._log) - 1, entries)
        self._log.extend(entries)

    def truncate_suffix(self, from_index: int) -> None:
        if from_index < 0:
            raise StorageError(f"truncate at {from_index}")
        if from_index < len(self._log):
            del self._log[from_index:]
            self._dirty_from = min(self._dirty_from, from_index)

    def sync(self) -> None:
        del self._durable[self._dirty_from :]
        self._durable.extend(self._log[self._dirty_from :])
        self._dirty_from = len(self._log)

    def load_hard_state(self) -> HardState:
        return self._hs

    def save_hard_state(self, hs: HardState) -> None:
        self._hs = hs

    def close(self) -> None:
        pass

    def crash(self) -> None:
        """Forget everything not synced (the process died before ``sync``)."""
        self._log = list(self._durable)
        self._dirty_from = len(self._log)

    def all_entries(self) -> list[Entry]:
        return list(self._log)


def _file_name(offset: int) -> str:
    return f"{offset:0{FILE_NAME_DIGITS}d}"


def _existing_file_size(directory: Path) -> int:
    """The size of the oldest data file in ``directory`` (0: none)."""
    try:
        names = sorted(n for n in os.listdir(directory)
                       if n.isdigit() and len(n) == FILE_NAME_DIGITS)
        return (directory / names[0]).stat().st_size if names else 0
    except OSError:
        return 0


def _data_ranges(path: Path, lo: int, hi: int) -> list[tuple[int, int]]:
    """The parts of ``[lo, hi)`` of a (sparse) file that are not holes, by SEEK_DATA /
    SEEK_HOLE (pages written through a mapping but not yet written back count as data);
    ``[(lo, hi)]`` when the file system cannot tell."""
    seek_data = getattr(os, "SEEK_DATA", None)
    seek_hole = getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None or lo >= hi:
        return [(lo, hi)]
    out: list[tuple[int, int]] = []
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return [(lo, hi)]
    try:
        pos = lo
        while pos < hi:
            try:
                start = os.lseek(fd, pos, seek_data)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    break  # nothing but a hole up to the end of the file
                return [(lo, hi)]
            if start >= hi:
                break
            stop = min(os.lseek(fd, start, seek_hole), hi)
            out.append((start, stop))
            pos = stop
    except OSError:
        return [(lo, hi)]
    finally:
        os.close(fd)
    return out


class _MmapFileList:
    """Fixed-size files named by their start offset, mapped on demand (DLedger's MmapFileList)."""

    def __init__(self, directory: Path, file_bytes: int) -> None:
        self.dir = directory
        self.file_bytes = file_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self.maps: dict[int, mmap.mmap] = {}
        self.dirty: set[int] = set()
        #: file start -> bytes of that file with blocks reserved (``reserve``)
        self.limits: dict[int, int] = {}
        #: files below this start were deleted by retention: never mapped (created) again
        self.floor = 0
        for name in sorted(os.listdir(directory)):
            if name.isdigit() and len(name) == FILE_NAME_DIGITS:
                start = int(name)
                path = directory / name
                if path.stat().st_size != file_bytes:
                    with open(path, "r+b") as f:
                        f.truncate(file_bytes)
                self._map(start)

    def _map(self, start: int) -> mmap.mmap:
        m = self.maps.get(start)
        if m is None:
            path = self.dir / _file_name(start)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size != self.file_bytes:
                    os.ftruncate(fd, self.file_bytes)
                m = mmap.mmap(fd, self.file_bytes)
            finally:
                os.close(fd)
            self.maps[start] = m
        return m

    def reserve(self, start: int, upto: int) -> None:
        """Reserve blocks of the file at ``start`` for its bytes below ``upto`` (a chunk at a
        time) before they are written through the mapping. Raises OSError(ENOSPC) when the
        disk is (nearly) full; nothing is reserved then."""
        limit = self.limits.get(start, 0)
        if upto <= limit:
            return
        end = max(upto, limit + RESERVE_CHUNK_BYTES)
        end = min(self.file_bytes, end + (-end) % mmap.PAGESIZE)
        usage = shutil.disk_usage(self.dir)
        want = end - limit
        if usage.total and (
            want > usage.free
            or (usage.used + want) / usage.total > DISK_SPACE_WARNING_LEVEL_RATIO
        ):
            raise OSError(
                errno.ENOSPC,
                f"the disk is full: {usage.free} bytes free of {usage.total}, {want} more "
                f"needed, writes stop above {DISK_SPACE_WARNING_LEVEL_RATIO:.0%} used",
            )
        fd = os.open(self.dir / _file_name(start), os.O_RDWR)
        try:
            os.posix_fallocate(fd, limit, end - limit)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            end = self.file_bytes  # nothing can be reserved here: as before
        finally:
            os.close(fd)
        self.limits[start] = end

    def file_of(self, pos: int) -> tuple[int, mmap.mmap]:
        start = pos - pos % self.file_bytes
        if start < self.floor:
            raise CompactedError(f"position {pos} is in a file deleted by retention")
        return start, self._map(start)

    def delete_below(self, bound: int) -> list[int]:
        """Unmap and unlink every file that ends at or below ``bound``; returns their starts."""
        gone = []
        for start in self.starts():
            if start + self.file_bytes > bound:
                break
            _close_map(self.maps.pop(start))
            self.limits.pop(start, None)
            self.dirty.discard(start)
            with contextlib.suppress(FileNotFoundError):
                (self.dir / _file_name(start)).unlink()
            gone.append(start)
        if gone:
            self.floor = max(self.floor, gone[-1] + self.file_bytes)
        return gone

    def write(self, pos: int, data: bytes) -> None:
        start, m = self.file_of(pos)
        off = pos - start
        if off + len(data) > self.limits.get(start, 0):
            self.reserve(start, off + len(data))
        m[off : off + len(data)] = data
        self.dirty.add(start)

    def read(self, pos: int, n: int) -> bytes:
        start, m = self.file_of(pos)
        off = pos - start
        return m[off : off + n]

    def starts(self) -> list[int]:
        return sorted(self.maps)

    def ranges(self, lo: int, hi: int) -> list[tuple[mmap.mmap, int, int]]:
        """(map, offset, length) pieces covering ``[lo, hi)``, offsets page-aligned (for
        ``mmap.flush(offset, length)``)."""
        out: list[tuple[mmap.mmap, int, int]] = []
        pos = lo - lo % mmap.PAGESIZE
        while pos < hi:
            start = pos - pos % self.file_bytes
            end = min(hi, start + self.file_bytes)
            m = self.maps.get(start)
            if m is not None:
                out.append((m, pos - start, end - pos))
            pos = end
        return out

    def truncate(self, pos: int, end: int | None = None) -> None:
        """Zero ``[pos, end)`` (``end`` None: to the end of pos's file) and delete the files
        after the one holding ``pos``."""
        containing = pos - pos % self.file_bytes
        for start in self.starts():
            if start > containing:
                _close_map(self.maps.pop(start))
                self.limits.pop(start, None)
                self.dirty.discard(start)
                (self.dir / _file_name(start)).unlink()
        m = self.maps.get(containing)
        if m is None:
            return
        stop = self.file_bytes if end is None else min(end - containing, self.file_bytes)
        off = pos - containing
        ranges = [(off, stop)]
        if end is None:
            # recovery: only the file's data extents can hold non-zero bytes (reading a 1 GiB
            # sparse file's holes page by page took seconds per boot)
            ranges = _data_ranges(self.dir / _file_name(containing), off, stop)
        for lo, hi in ranges:
            off = lo
            while off < hi:
                n = min(ZERO_CHUNK_BYTES, hi - off)
                if m[off : off + n].count(0) != n:
                    m[off : off + n] = bytes(n)
                    self.dirty.add(containing)
                off += n

    def flush(self, fsync: bool = True) -> None:
        if not fsync:
            self.dirty.clear()
            return
        for start in sorted(self.dirty):
            m = self.maps.get(start)
            if m is not None:
                m.flush()
        self.dirty.clear()
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        for m in self.maps.values():
            _close_map(m)
        self.maps.clear()


def _close_map(m: mmap.mmap) -> None:
    """Close a mapping that a worker thread may be reading the address of this instant (the
    flush and warm threads take it through a short-lived buffer export): then the mapping is
    released with its last reference instead (the thread's plan), which is soon."""
    with contextlib.suppress(BufferError):
        m.close()


def write_hard_state(path: Path, hs: HardState, *, fsync: bool = True) -> None:
    """temp + fsync + rename + fsync(dir): the file is either the old or the new state."""
    text = f"{KEY_CURR_TERM}={hs.term}\n{KEY_VOTE_LEADER}={hs.vote}\n".encode()
    _write_atomically(path, text, fsync=fsync)


def _write_atomically(path: Path, text: bytes, *, fsync: bool) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if not fsync:
        return
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _read_props(path: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            props[key.strip()] = value.strip()
    return props


def read_hard_state(path: Path) -> HardState:
    if not path.exists():
        return HardState()
    props = _read_props(path)
    return HardState(int(props.get(KEY_CURR_TERM, "0") or 0), props.get(KEY_VOTE_LEADER, ""))


def read_begin(path: Path) -> tuple[int, int]:
    """The ``begin`` file: (first kept index, term of the entry before it); (0, 0) if none or
    unreadable (then recovery trusts the data files alone)."""
    try:
        props = _read_props(path)
        begin, prev = int(props.get(KEY_BEGIN_INDEX, "0")), int(props.get(KEY_PREV_TERM, "0"))
    except (OSError, ValueError):
        return 0, 0
    return (begin, prev) if begin >= 0 and prev >= 0 else (0, 0)


def encode_entry(
    index: int, term: int, pos: int, body: bytes, prev_chain: int
) -> tuple[bytes, int]:
    """One entry's bytes and its chain CRC."""
    body_crc = crc32(body)
    chain = crc32(CHAIN_STRUCT.pack(index, term, pos, 0, body_crc), prev_chain)
    head = ENTRY_HEADER.pack(
        ENTRY_MAGIC, BODY_OFFSET + len(body), index, term, pos, 0, chain, body_crc, len(body)
    )
    return head + body, chain


class FileLogStorage:
    """The mmap file store.  ``recover()`` runs in the constructor and drops a torn tail."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        data_file_bytes: int = DEFAULT_DATA_FILE_BYTES,
        index_file_bytes: int = DEFAULT_INDEX_FILE_BYTES,
        fsync: bool = True,
        adopt_existing_size: bool = True,
        start_pos: int = 0,
    ) -> None:
        """``fsync=False`` keeps the write order and atomic renames but skips msync/fsync
        (survives a process crash, not a power loss): for simulations and benchmarks of the
        protocol rather than the disk.  ``adopt_existing_size``: data files already on disk
        keep their size (the oldest file's) whatever ``data_file_bytes`` says, so a changed
        setting never truncates or pads an existing log.  ``start_pos``: where a log with no
        data file yet puts its first entry (rounded up to a data file boundary): a group moved
        from master/slave keeps its old CommitLog below it (RocketMQ's
        ``dividedCommitlogOffset``); ignored once data files exist."""
        if index_file_bytes % INDEX_UNIT_BYTES:
            raise ValueError("index file size must be a multiple of 32")
        self.dir = Path(directory)
        self.fsync = fsync
        self.dir.mkdir(parents=True, exist_ok=True)
        if adopt_existing_size:
            data_file_bytes = _existing_file_size(self.dir / "data") or data_file_bytes
        self._first = 0  # first entry index held (retention deleted the ones before)
        self._start_pos = 0
        if start_pos > 0:
            self._start_pos = -(-start_pos // data_file_bytes) * data_file_bytes
        self._origin = 0  # data position of entry 0 (start_pos for a log that began there)
        self.data = _MmapFileList(self.dir / "data", data_file_bytes)
        self.index = _MmapFileList(self.dir / "index", index_file_bytes)
        self._terms = array("q")
        self._pos = array("q")
        self._sizes = array("q")
        self._chains = array("q")
        self._write_pos = 0
        self._synced_pos = 0
        # the newest entries' bodies (bytes: no objects for the garbage collector to walk;
        # an Entry per cached message made every full collection slower as the cache grew)
        self._cache: list[bytes] = []
        self._cache_base = 0  # index of _cache[0]
        # the last list entries() built from the cache (callers do not mutate it): the leader
        # asks for the same range once per follower; a truncation invalidates it
        self._last_read: tuple[tuple[int, int, int | None, int], list[Entry]] | None = None
        self._truncations = 0
        self._cut_data = self._cut_index = 1 << 62  # lowest truncation since flush_ranges()
        self._hs = read_hard_state(self.dir / CURRTERM_FILE)
        self._recover()

    # -- recovery -----------------------------------------------------------------------
    def _head_entry(self, pos: int) -> tuple[int, int] | None:
        """(index, term) of a plausible entry header at ``pos`` (the first kept data file)."""
        _start, m = self.data.file_of(pos)
        off = pos % self.data.file_bytes
        magic, size, idx, term, epos = struct.unpack_from(">iiqqq", m, off)
        if magic != ENTRY_MAGIC or size < BODY_OFFSET or epos != pos or idx < 0 or term < 1:
            return None
        return idx, term

    def _recover(self) -> None:
        prev_chain = 0
        prev_term = 0
        fb = self.data.file_bytes
        starts = self.data.starts()
        end_of_files = (starts[-1] + fb) if starts else 0
        pos = starts[0] if starts else self._start_pos
        self._origin = pos
        check_chain = True
        if not starts:
            self.data.floor = pos
        elif pos > 0:
            # retention deleted the head of the log: start at the first file left, with a
            # placeholder per deleted index (see the module docstring)
            self.data.floor = pos
            begin, begin_prev_term = read_begin(self.dir / BEGIN_FILE)
            head = self._head_entry(pos)
            base = head[0] if head is not None else begin
            if begin == base and begin > 0:
                prev_term = begin_prev_term
            elif head is not None:
                prev_term = head[1]  # committed history below: as good a guess as any
            self._terms.extend(array("q", [prev_term]) * base)
            self._pos.extend(array("q", [pos]) * base)
            self._sizes.extend(array("q", [0]) * base)
            self._chains.extend(array("q", [0]) * base)
            self._first = base
            check_chain = False  # the chain of the first kept entry starts in a deleted file
        while pos < end_of_files:
            start, m = self.data.file_of(pos)
            off = pos - start
            if fb - off < BLANK_MIN_BYTES:
                break
            magic, size = struct.unpack_from(">ii", m, off)
            if magic == BLANK_MAGIC and size == fb - off:
                pos = start + fb
                continue
            if magic != ENTRY_MAGIC or size < BODY_OFFSET or off + size > fb:
                break
            _, _, idx, term, epos, _ch, chain, bcrc, blen = ENTRY_HEADER.unpack_from(m, off)
            if blen + BODY_OFFSET != size or epos != pos or idx != len(self._terms):
                break
            if term < prev_term or term < 1:
                break
            if chain == 0 and bcrc == 0:
                # written by DLedger itself (0.3.x leaves both CRCs at 0): structural checks only
                if _ch != 0:
                    break
            else:
                body = m[off + BODY_OFFSET : off + size]
                if crc32(body) != bcrc:
                    break
                if check_chain and crc32(
                    CHAIN_STRUCT.pack(idx, term, pos, _ch, bcrc), prev_chain
                ) != chain:
                    break
            check_chain = True
            self._terms.append(term)
            self._pos.append(pos)
            self._sizes.append(size)
            self._chains.append(chain)
            prev_chain, prev_term = chain, term
            pos += size
        self._write_pos = pos
        self.data.truncate(pos)
        # index files wholly below the first kept entry went with their data (or should have)
        self.index.delete_below(self._first * INDEX_UNIT_BYTES)
        # rewrite the index from the data (it may disagree or be torn)
        for i in range(self._first, len(self._terms)):
            rec = INDEX_RECORD.pack(
                ENTRY_MAGIC, self._pos[i], self._sizes[i], i, self._terms[i]
            )
            ipos = i * INDEX_UNIT_BYTES
            if self.index.read(ipos, INDEX_UNIT_BYTES) != rec:
                self.index.write(ipos, rec)
        self.index.truncate(len(self._terms) * INDEX_UNIT_BYTES)
        self.sync()

    # -- LogStorage -------------------------------------------------------------------------
    def first_index(self) -> int:
        return self._first

    def last_index(self) -> int:
        return len(self._terms) - 1

    def last_term(self) -> int:
        return self._terms[-1] if self._terms else 0

    def term_at(self, index: int) -> int:
        if index == -1:
            return 0
        if not 0 <= index < len(self._terms):
            raise IndexError(index)
        return self._terms[index]

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        lo = max(lo, 0)
        hi = min(hi, len(self._terms))
        if lo < self._first and lo < hi:
            raise CompactedError(f"entries from {lo}: the log begins at {self._first}")
        base = self._cache_base
        if lo >= base and self._cache and lo < hi:
            key = (lo, hi, max_bytes, self._truncations)
            last = self._last_read
            if last is not None and last[0] == key:
                return last[1]  # the same push for the next follower
            bodies = self._cache[lo - base : hi - base]
            if max_bytes is not None:
                total = 0
                for n, body in enumerate(bodies):
                    total += len(body)
                    if n and total > max_bytes:
                        del bodies[n:]
                        break
            picked = list(map(make_entry, range(lo, lo + len(bodies)),
                              self._terms[lo : lo + len(bodies)], bodies))
            self._last_read = (key, picked)
            return picked
        out: list[Entry] = []
        total = 0
        for i in range(lo, hi):
            size = self._sizes[i]
            raw = self.data.read(self._pos[i] + BODY_OFFSET, size - BODY_OFFSET)
            total += len(raw)
            if max_bytes is not None and out and total > max_bytes:
                break
            out.append(Entry(i, self._terms[i], raw))
        return out

    def append(self, entries: Sequence[Entry]) -> None:
        """Encode every entry, then write each contiguous run of data (and of index records)
        with one copy into the mapping."""
        if len(entries) == 1:
            e = entries[0]
            if self.append_one(e.index, e.term, e.body):
                return
        _check_append(len(self._terms) - 1, entries)
        if entries and self._append_in_place(entries):
            return
        kept = len(self._terms)
        try:
            self._append_rolling(entries)
        except OSError:
            # a full disk (a refused reservation): forget the entries not written; bytes a
            # partial write left past the log's end are overwritten by the next append
            for table in (self._terms, self._pos, self._sizes, self._chains):
                del table[kept:]
            raise

    def _append_rolling(self, entries: Sequence[Entry]) -> None:
        """``append``'s general path: runs of entries across data/index file rolls."""
        fb = self.data.file_bytes
        ifb = self.index.file_bytes
        data_run: list[bytes] = []
        run_start = self._write_pos
        index_run: list[bytes] = []
        index_start = entries[0].index * INDEX_UNIT_BYTES if entries else 0
        pos = self._write_pos
        prev_chain = self._chains[-1] if self._chains else 0
        terms, poss, sizes, chains = self._terms, self._pos, self._sizes, self._chains
        pack_index = INDEX_RECORD.pack
        for e in entries:
            body = e.body
            size = BODY_OFFSET + len(body)
            if size + BLANK_MIN_BYTES > fb:
                raise StorageError(f"entry of {size} bytes does not fit a {fb}-byte data file")
            remaining = fb - pos % fb
            if size + BLANK_MIN_BYTES > remaining:
                data_run.append(struct.pack(">ii", BLANK_MAGIC, remaining))
                self.data.write(run_start, b"".join(data_run))
                data_run = []
                pos += remaining
                run_start = pos
            ipos = e.index * INDEX_UNIT_BYTES
            if ipos % ifb == 0 and index_run:
                self.index.write(index_start, b"".join(index_run))
                index_run = []
                index_start = ipos
            raw, chain = encode_entry(e.index, e.term, pos, body, prev_chain & 0xFFFFFFFF)
            data_run.append(raw)
            index_run.append(pack_index(ENTRY_MAGIC, pos, size, e.index, e.term))
            terms.append(e.term)
            poss.append(pos)
            sizes.append(size)
            chains.append(chain)
            prev_chain = chain
            pos += size
        if data_run:
            self.data.write(run_start, b"".join(data_run))
        if index_run:
            self.index.write(index_start, b"".join(index_run))
        self._write_pos = pos
        cache = self._cache
        if not cache:
            self._cache_base = entries[0].index if entries else 0
        cache.extend([e.body for e in entries])
        if len(cache) > 2 * RECENT_ENTRIES_CACHED:
            drop = len(cache) - RECENT_ENTRIES_CACHED
            del cache[:drop]
            self._cache_base += drop

    def _append_in_place(self, entries: Sequence[Entry]) -> bool:
        """A follower's batch (indexes already checked): when it fits in the current data file
        and index file, pack every header straight into the mapping and copy each body once
        (False: let the general path handle file rolls)."""
        data = self.data
        fb = data.file_bytes
        pos = self._write_pos
        start = pos - pos % fb
        total = 0
        for e in entries:
            total += BODY_OFFSET + len(e.body)
        first = entries[0].index
        ipos = first * INDEX_UNIT_BYTES
        ifb = self.index.file_bytes
        istart = ipos - ipos % ifb
        if pos - start + total + BLANK_MIN_BYTES > fb or (
            ipos + len(entries) * INDEX_UNIT_BYTES > istart + ifb
        ):
            return False
        m = data.maps.get(start) or data._map(start)
        im = self.index.maps.get(istart) or self.index._map(istart)
        off = pos - start
        ioff = ipos - istart
        # blocks for what is written below (OSError on a full disk, before any change)
        data.reserve(start, off + total + BLANK_MIN_BYTES)
        self.index.reserve(istart, ioff + len(entries) * INDEX_UNIT_BYTES)
        prev_chain = (self._chains[-1] & 0xFFFFFFFF) if self._chains else 0
        chain_pack = CHAIN_STRUCT.pack
        head_into = ENTRY_HEADER.pack_into
        index_into = INDEX_RECORD.pack_into
        terms, poss, sizes, chains = self._terms, self._pos, self._sizes, self._chains
        bodies: list[bytes] = []
        for e in entries:
            body = e.body
            blen = len(body)
            size = BODY_OFFSET + blen
            index, term = e.index, e.term
            body_crc = crc32(body)
            chain = crc32(chain_pack(index, term, pos, 0, body_crc), prev_chain)
            head_into(m, off, ENTRY_MAGIC, size, index, term, pos, 0, chain, body_crc, blen)
            m[off + BODY_OFFSET : off + size] = body
            index_into(im, ioff, ENTRY_MAGIC, pos, size, index, term)
            terms.append(term)
            poss.append(pos)
            sizes.append(size)
            chains.append(chain)
            bodies.append(body)
            prev_chain = chain
            pos += size
            off += size
            ioff += INDEX_UNIT_BYTES
        data.dirty.add(start)
        self.index.dirty.add(istart)
        self._write_pos = pos
        cache = self._cache
        if not cache:
            self._cache_base = first
        cache.extend(bodies)
        if len(cache) > 2 * RECENT_ENTRIES_CACHED:
            drop = len(cache) - RECENT_ENTRIES_CACHED
            del cache[:drop]
            self._cache_base += drop
        return True

    def append_one(self, index: int, term: int, body: bytes) -> bool:
        """The leader's per-message append, without an Entry object: one entry that fits in
        the current data file and index file, written in place; False (nothing written) when
        it does not fit: the caller uses :meth:`append`, which handles file rolls."""
        terms = self._terms
        if index != len(terms):
            raise StorageError(f"append index {index}, expected {len(terms)}")
        blen = len(body)
        size = BODY_OFFSET + blen
        data = self.data
        fb = data.file_bytes
        pos = self._write_pos
        start = pos - pos % fb
        off = pos - start
        ipos = index * INDEX_UNIT_BYTES
        index_files = self.index
        ifb = index_files.file_bytes
        istart = ipos - ipos % ifb
        if off + size + BLANK_MIN_BYTES > fb or ipos + INDEX_UNIT_BYTES > istart + ifb:
            return False
        m = data.maps.get(start) or data._map(start)
        im = index_files.maps.get(istart) or index_files._map(istart)
        # blocks for what is written below (OSError on a full disk, before any change)
        if off + size + BLANK_MIN_BYTES > data.limits.get(start, 0):
            data.reserve(start, off + size + BLANK_MIN_BYTES)
        if ipos - istart + INDEX_UNIT_BYTES > index_files.limits.get(istart, 0):
            index_files.reserve(istart, ipos - istart + INDEX_UNIT_BYTES)
        chains = self._chains
        body_crc = crc32(body)
        chain = crc32(
            CHAIN_STRUCT.pack(index, term, pos, 0, body_crc),
            (chains[-1] & 0xFFFFFFFF) if chains else 0,
        )
        ENTRY_HEADER.pack_into(
            m, off, ENTRY_MAGIC, size, index, term, pos, 0, chain, body_crc, blen
        )
        m[off + BODY_OFFSET : off + size] = body
        INDEX_RECORD.pack_into(im, ipos - istart, ENTRY_MAGIC, pos, size, index, term)
        data.dirty.add(start)
        index_files.dirty.add(istart)
        terms.append(term)
        self._pos.append(pos)
        self._sizes.append(size)
        chains.append(chain)
        self._write_pos = pos + size
        cache = self._cache
        if not cache:
            self._cache_base = index
        cache.append(body)
        if len(cache) > 2 * RECENT_ENTRIES_CACHED:
            drop = len(cache) - RECENT_ENTRIES_CACHED
            del cache[:drop]
            self._cache_base += drop
        return True

    def truncate_suffix(self, from_index: int) -> None:
        if from_index < 0:
            raise StorageError(f"truncate at {from_index}")
        if from_index >= len(self._terms):
            return
        if from_index < self._first:
            raise CompactedError(f"truncate at {from_index}: the log begins at {self._first}")
        self._truncations += 1
        self._last_read = None
        # a blank just before this entry (file roll) goes too: cut at the end of the previous
        # one (the first entry held starts its data file)
        if from_index > self._first:
            pos = self._pos[from_index - 1] + self._sizes[from_index - 1]
        else:
            pos = self._pos[from_index]
        self.data.truncate(pos, self._write_pos)
        self.index.truncate(from_index * INDEX_UNIT_BYTES, len(self._terms) * INDEX_UNIT_BYTES)
        del self._terms[from_index:]
        del self._pos[from_index:]
        del self._sizes[from_index:]
        del self._chains[from_index:]
        self._cut_data = min(self._cut_data, pos)
        self._cut_index = min(self._cut_index, from_index * INDEX_UNIT_BYTES)
        if from_index <= self._cache_base:
            self._cache.clear()
        else:
            del self._cache[from_index - self._cache_base :]
        self._write_pos = pos
        self._synced_pos = min(self._synced_pos, pos)

    def sync(self) -> None:
        self._synced_pos = self._write_pos
        self.data.flush(self.fsync)
        self.index.flush(self.fsync)

    def load_hard_state(self) -> HardState:
        return self._hs

    def save_hard_state(self, hs: HardState) -> None:
        write_hard_state(self.dir / CURRTERM_FILE, hs, fsync=self.fsync)
        self._hs = hs

    def close(self) -> None:
        self.data.close()
        self.index.close()

    @property
    def write_pos(self) -> int:
        return self._write_pos

    @property
    def synced_pos(self) -> int:
        """Data bytes below this are durable and unchanged since the last :meth:`sync`."""
        return self._synced_pos

    def entry_arrays(self) -> tuple[array[int], array[int], array[int]]:
        """Every entry's data position, size (header included) and term, by index: the live
        arrays, for a caller's tight loop over many entries; read them, never change them."""
        return self._pos, self._sizes, self._terms

    def body_at(self, index: int) -> bytes:
        """Entry ``index``'s body (from the cache of recent entries, else the data file)."""
        if index < self._first:
            raise CompactedError(f"entry {index}: the log begins at {self._first}")
        base = self._cache_base
        if index >= base and index - base < len(self._cache):
            return self._cache[index - base]
        return self.data.read(self._pos[index] + BODY_OFFSET, self._sizes[index] - BODY_OFFSET)

    def entry_pos(self, index: int) -> int:
        """Absolute data position of an entry (the CommitLog adapter adds 48)."""
        return self._pos[index]

    def flush_ranges(
        self, data_from: int, index_from: int
    ) -> tuple[list[tuple[mmap.mmap, int, int]], int, int]:
        """What a background msync must cover to make everything written since ``data_from`` /
        ``index_from`` (byte positions) durable, and the new positions."""
        data_to = self._write_pos
        index_to = len(self._terms) * INDEX_UNIT_BYTES
        data_from = min(data_from, data_to, self._cut_data)
        index_from = min(index_from, index_to, self._cut_index)
        self._cut_data = self._cut_index = 1 << 62
        plan = self.data.ranges(data_from, data_to) + self.index.ranges(index_from, index_to)
        return plan, data_to, index_to

    def entry_end(self, index: int) -> int:
        """Data position just past entry ``index`` (for index -1: where entry 0 begins, 0
        unless the log began at a ``start_pos``)."""
        if index < 0:
            return self._origin
        return self._pos[index] + self._sizes[index]

    @property
    def origin(self) -> int:
        """Data position of entry 0 (below it: an old CommitLog, if the log began there)."""
        return self._origin

    def next_pos(self, body_len: int) -> int:
        """Where :meth:`append` will put the next entry with a ``body_len``-byte body (after a
        blank when it does not fit in the current data file)."""
        fb = self.data.file_bytes
        pos = self._write_pos
        remaining = fb - pos % fb
        if BODY_OFFSET + body_len + BLANK_MIN_BYTES > remaining:
            pos += remaining
        return pos

    def index_at_or_after(self, pos: int) -> int:
        """The first entry whose position is >= ``pos`` (``last_index() + 1`` if none)."""
        return max(self._first, bisect.bisect_left(self._pos, pos))

    # -- retention ------------------------------------------------------------------------
    def data_files(self) -> list[tuple[int, int, float]]:
        """(start, end, last modified in s since the epoch) of every data file, oldest first."""
        out = []
        fb = self.data.file_bytes
        for start in self.data.starts():
            try:
                mtime = (self.data.dir / _file_name(start)).stat().st_mtime
            except FileNotFoundError:
                mtime = 0.0
            out.append((start, start + fb, mtime))
        return out

    @property
    def min_data_offset(self) -> int:
        """Where the retained data begins (the first data file's start)."""
        starts = self.data.starts()
        return starts[0] if starts else self.data.floor

    def delete_first_data_files(self, count: int, *, max_index: int) -> list[int]:
        """Delete the ``count`` oldest data files (never the newest one) when every entry in
        them is at or below ``max_index`` (the caller's applied index); index files wholly
        below the new first entry go too.  The ``begin`` file is written first, so a crash
        in between leaves files that the next round deletes again.  Returns the data file
        starts deleted (fewer than asked when a file holds entries above ``max_index``)."""
        starts = self.data.starts()
        count = min(count, len(starts) - 1)
        while count > 0:
            new_first = self.index_at_or_after(starts[count])
            if new_first - 1 <= max_index:
                break
            count -= 1
        if count <= 0:
            return []
        keep_from = starts[count]
        new_first = self.index_at_or_after(keep_from)
        prev_term = self._terms[new_first - 1] if new_first > 0 else 0
        _write_atomically(
            self.dir / BEGIN_FILE,
            f"{KEY_BEGIN_INDEX}={new_first}\n{KEY_PREV_TERM}={prev_term}\n".encode(),
            fsync=self.fsync,
        )
        gone = self.data.delete_below(keep_from)
        self.index.delete_below(new_first * INDEX_UNIT_BYTES)
        self._first = max(self._first, new_first)
        self._last_read = None
        if self._cache_base < self._first:
            drop = min(len(self._cache), self._first - self._cache_base)
            del self._cache[:drop]
            self._cache_base += drop
        return gone

    def view(self, pos: int, size: int) -> memoryview | None:
        """A view of ``size`` data bytes at ``pos`` (None when that crosses a file end)."""
        fb = self.data.file_bytes
        start = pos - pos % fb
        off = pos - start
        if off + size > fb or pos < 0 or pos + size > self._write_pos:
            return None
        m = self.data.maps.get(start)
        if m is None:
            return None
        return memoryview(m)[off : off + size]
