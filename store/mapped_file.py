"""Fixed-size mmap'd segment files named by their 20-digit start offset (pure; no trio).

A ``MappedFile`` tracks three positions: ``wrote`` (bytes appended), and ``flushed`` (bytes
msync'ed); there is no transient store pool, so committed == wrote. Reads are memoryview slices
of the mapping: zero-copy until the caller copies them into a response.

Files are created at full size but sparse (``ftruncate``), as RocketMQ does, so a store uses disk
for what it holds, not for its segment sizes (a 1 GiB CommitLog segment and a 420 MB IndexFile
per broker would cost gigabytes per cluster in a box). A write through the mapping into a hole
that a full disk cannot fill is a SIGBUS, which kills the process: so the CommitLog reserves
blocks a chunk ahead of its writer (``reserve``: ``posix_fallocate``, after a free-space check)
and refuses the put (SERVICE_NOT_AVAILABLE) when that fails; below ``limit`` every write is
backed. ConsumeQueue and index writes (~40 bytes per record) live in the headroom the
CommitLog's free-space threshold leaves. ``preallocate=True`` (``warmMapedFileEnable=true`` for
the CommitLog) reserves the whole file at creation instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import sys
import threading
from collections.abc import Callable
from typing import Final, cast

import structlog

FILE_NAME_DIGITS: Final = 20
PAGE_SIZE: Final = mmap.PAGESIZE
ZERO_CHUNK_BYTES: Final = 1 << 20

log = structlog.get_logger(component="mapped_file")


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: str) -> list[str]:
    """``os.makedirs(directory, exist_ok=True)``; returns the directories whose entries it
    changed (the parent of each directory it created, outermost first): what must be fsynced
    for the new names to survive a power loss."""
    missing: list[str] = []
    path = os.path.abspath(directory)
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    changed: list[str] = []
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            continue  # made meanwhile by someone else, who answers for its entry
        changed.append(os.path.dirname(path))
    return changed


class DirSyncLedger:
    """Directories with a new entry (a file or directory created in them) that is not yet
    known to be durable, for the flush that must make it so (thread-safe, blocking ``sync``).

    The durability rule it serves: a new file's name (and the names of any directories made
    for it) is fsynced before the flush that covers the file's bytes reports them durable --
    the CommitLog's flush watermark (what a SYNC_FLUSH answer waits for) and the checkpoint's
    logicsMsgTimestamp (what recovery trusts of a ConsumeQueue). A file is created without a
    directory fsync of its own (2.6-40 ms each on a busy disk; a topic of 1024 queues makes
    1024 ConsumeQueue files); the next flush fsyncs each changed directory once, in the flush's
    worker thread, before it moves its watermark or checkpoint: one fsync per directory per
    flush, however many files were made there, and none on the event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _dirs (held for dict operations only)
        #: held through a whole ``sync``: a second sync waits until the first one's fsyncs
        #: are done, so "sync returned" always means "every entry added before it is durable"
        self._syncing = threading.Lock()
        self._dirs: dict[str, None] = {}

    def add(self, directories: list[str]) -> None:
        with self._lock:
            for d in directories:
                self._dirs[d] = None

    @property
    def pending(self) -> int:
        return len(self._dirs)

    def sync(self) -> int:
        """fsync every pending directory (blocking: a worker thread); returns how many. A
        directory gone meanwhile (its topic deleted) needs nothing; on any other error the
        directories not yet synced stay pending and the error is raised."""
        with self._syncing:
            with self._lock:
                dirs = list(self._dirs)
                self._dirs.clear()
            for i, d in enumerate(dirs):
                try:
                    fsync_dir(d)
                except FileNotFoundError:
                    continue
                except OSError:
                    self.add(dirs[i:])
                    raise
            return len(dirs)


def offset_to_file_name(offset: int) -> str:
    return f"{offset:0{FILE_NAME_DIGITS}d}"


FlushPlan = list[tuple["MappedFile", int, int]]

MADV_POPULATE_WRITE: Final = 23  # Linux 5.14+: prefault pages writable without writing them
MADV_NORMAL: Final = 0  # <sys/mman.h>: default readahead
MADV_RANDOM: Final = 1  # <sys/mman.h>: no readahead (a fault maps just its page)


def _load_libc(name: str) -> Callable[[int, int, int], int] | None:
    """libc ``name(void *addr, size_t length, int flags)`` through ctypes (which releases the
    GIL for the call); None where it is not available."""
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast(Callable[[int, int, int], int], fn)


_LINUX = sys.platform.startswith("linux")
_madvise = _load_libc("madvise") if _LINUX else None


#: libc ``msync(addr, length, flags)`` (ctypes releases the GIL for the call); None where not
#: available (then ``mmap.flush``, which holds the GIL). Shared with dledger/.
libc_msync = _load_libc("msync") if _LINUX else None
_msync = libc_msync
MS_SYNC: Final = 4  # <sys/mman.h> on Linux


class MappedFile:
    __slots__ = (
        "file_from", "file_size", "flushed", "limit", "mm", "path", "random_from", "view",
        "warmed", "wrote",
    )

    def __init__(
        self,
        path: str,
        file_from: int,
        file_size: int,
        *,
        create: bool,
        preallocate: bool = False,
        sync_dir: bool = True,
    ) -> None:
        """Map ``path``; ``create`` makes it (O_EXCL) and, with ``sync_dir``, fsyncs its
        directory at once (without: the caller's ``DirSyncLedger`` answers for its name)."""
        self.path = path
        self.file_from = file_from
        self.file_size = file_size
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o644)
        try:
            if create and not preallocate:
                os.ftruncate(fd, file_size)
            elif create:
                try:
                    os.posix_fallocate(fd, 0, file_size)
                except OSError as exc:
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        os.close(fd)
                        with contextlib.suppress(OSError):
                            os.unlink(path)
                        raise
                    os.ftruncate(fd, file_size)
            else:
                actual = os.fstat(fd).st_size
                if actual < file_size:
                    # a crash during creation can leave a short file: extend it with zeros
                    os.ftruncate(fd, file_size)
                elif actual > file_size:
                    raise OSError(errno.EINVAL, f"{path}: size {actual} != {file_size}")
            self.mm = mmap.mmap(fd, file_size)
            if create and sync_dir:
                fsync_dir(os.path.dirname(path) or ".")  # the new name survives a power loss
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.view = memoryview(self.mm)
        self.wrote = 0
        self.flushed = 0
        #: file bytes [0, limit) have blocks reserved (``reserve``): a write there through the
        #: mapping cannot meet a full disk (SIGBUS). 0 for a sparse or loaded file.
        self.limit = file_size if create and preallocate else 0
        self.warmed = 0  # bytes prefaulted by ``populate`` (a hint; never affects contents)
        #: ``populate`` advises [random_from, file_size) MADV_RANDOM (file_size: nothing yet)
        self.random_from = file_size

    @property
    def file_end(self) -> int:
        return self.file_from + self.file_size

    @property
    def committed(self) -> int:
        """Bytes visible to readers, dispatch and HA: everything written (no transient pool)."""
        return self.wrote

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote

    def is_full(self) -> bool:
        return self.wrote >= self.file_size

    def set_positions(self, pos: int) -> None:
        self.wrote = pos
        self.flushed = pos

    def reserve(self, upto: int, chunk: int = 0) -> None:
        """Reserve blocks for file bytes up to ``upto`` (at least ``chunk`` more than reserved
        so far, page-aligned, at most the file size) with ``posix_fallocate``: afterwards a
        write through the mapping below ``limit`` cannot fault on a full disk. Raises OSError
        (ENOSPC: the disk is full; ``limit`` unchanged). Where the file system cannot
        fallocate, nothing can be reserved: ``limit`` becomes the file size (as before)."""
        if upto <= self.limit:
            return
        start = max(self.limit, self.wrote - self.wrote % PAGE_SIZE)  # written = backed
        end = max(upto, self.limit + chunk)
        end = min(self.file_size, end + (-end) % PAGE_SIZE)
        if end <= start:
            self.limit = max(self.limit, end)
            return
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, start, end - start)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            end = self.file_size
        finally:
            os.close(fd)
        self.limit = end

    def append(self, data: bytes | memoryview) -> int:
        """Copy ``data`` at the write position; returns the bytes written (may be short)."""
        n = min(len(data), self.file_size - self.wrote)
        self.mm[self.wrote : self.wrote + n] = data[:n] if n < len(data) else data
        self.wrote += n
        return n

    def read(self, pos: int, size: int) -> memoryview | None:
        """A view of ``size`` bytes at file position ``pos`` if they have been written."""
        if pos < 0 or size < 0 or pos + size > self.wrote:
            return None
        return self.view[pos : pos + size]

    def read_to_end(self, pos: int) -> memoryview | None:
        if pos < 0 or pos > self.wrote:
            return None
        return self.view[pos : self.wrote]

    def flush_range(self, start: int, end: int) -> None:
        """msync file bytes [start, end); safe to call from a worker thread.

        Through libc (ctypes releases the GIL for the call), not ``mmap.flush``: that holds the
        GIL while the kernel writes the pages back, so a flush "in a worker thread" stopped the
        event loop for the whole msync (milliseconds at a busy broker's flush interval: it was
        the p99 of HA replication lag in bench/ha.py). Same syscall, same range, same flags
        (MS_SYNC). The address comes from a buffer export released at once; a map closed on
        the event loop meanwhile makes msync fail with ENOMEM, and what is gone needs no
        flush."""
        if end <= start:
            return
        aligned = start - start % PAGE_SIZE
        if _msync is None:
            self.mm.flush(aligned, end - aligned)
            return
        try:
            probe = ctypes.c_char.from_buffer(self.mm, aligned)
            address = ctypes.addressof(probe)
            del probe
        except (ValueError, TypeError, BufferError):
            if self.mm.closed:
                return  # closed meanwhile: nothing left to flush
            self.mm.flush(aligned, end - aligned)  # no address to take: the GIL-holding way
            return
        if _msync(address, end - aligned, MS_SYNC) != 0:
            err = ctypes.get_errno()
            if err == errno.ENOMEM and self.mm.closed:
                return
            raise OSError(err, os.strerror(err))

    def populate(self, start: int, end: int) -> bool:
        """Prefault file bytes [start, end) writable (MADV_POPULATE_WRITE) so that later writes
        on the event loop do not page-fault (RocketMQ's warmMappedFile, without writing). Runs
        in a worker thread: the GIL is released during the call. Contents never change; False
        when unsupported (the caller stops trying)."""
        if _madvise is None or self.mm.closed:
            return False
        start -= start % PAGE_SIZE
        end = min(end, self.file_size)
        if end <= start:
            return True
        try:
            # the mapping's address: a buffer export taken and released at once
            probe = ctypes.c_char.from_buffer(self.mm, start)
            address = ctypes.addressof(probe)
            del probe
        except (ValueError, TypeError, BufferError):
            return False
        base = address - start
        self._advise_readahead(base)
        if _madvise(address, end - start, MADV_POPULATE_WRITE) == 0:
            return True
        # unsupported (Linux < 5.14) or failed: the warm-up stops, so nobody would move the
        # advice along behind the writer any more; give the whole file normal readahead back
        if self.random_from < self.file_size:
            _madvise(base + self.random_from, self.file_size - self.random_from, MADV_NORMAL)
            self.random_from = self.file_size
        return False

    def _advise_readahead(self, base: int) -> None:
        """No readahead where nothing is written yet, normal readahead behind the writer.

        A page fault in a file mapping reads ahead around the faulting page (the device's
        read_ahead_kb: 8 MB here). Past the written end of a sparse or fallocated file there
        is nothing to read: the kernel zero-fills that many fresh page-cache pages in one go,
        without a preemption point. Measured on the HA bench (perf sched + perf record): the
        prefaulting thread held a core 15-25 ms once per 8 MB in ``ext4_mpage_readpages`` ->
        memset, and an event loop woken meanwhile (the slave's, with replicated bytes to
        apply) waited for it: the replication-lag p99. MADV_RANDOM on [write position, end)
        makes each fault fill just its own page; as the writer moves on, the written part gets
        MADV_NORMAL back, so a cold read of evicted pages still reads ahead. Advice only: no
        byte of the file changes. Runs in the warm-up worker thread, like ``populate``.

        The price: such pages are single-page folios, so the periodic msync write-protects
        them one by one, each with a TLB-flush IPI while the event loop runs on another core
        (perf: the flush thread went from ~1% to ~6% of a busy master's CPU, the prefaulting
        thread from ~9% to ~5%). That work is preemptible and off the event loop's core."""
        advise = _madvise
        if advise is None:
            return
        size = self.file_size
        written = self.wrote - self.wrote % PAGE_SIZE
        random_from = self.random_from
        if random_from >= size:  # first call: the tail from the writer on
            if written < size and advise(base + written, size - written, MADV_RANDOM) == 0:
                self.random_from = written
        elif (  # the writer moved on: what it wrote reads ahead again
            written > random_from
            and advise(base + random_from, written - random_from, MADV_NORMAL) == 0
        ):
            self.random_from = written

    def zero_from(self, pos: int) -> None:
        """Erase bytes [pos, end) so a later scan cannot mistake old bytes for records. Bytes
        are written sequentially into a zero-filled file, so erasing stops at the first
        chunk that is already all zeros (no need to touch the untouched rest of the file)."""
        end = self.file_size
        chunk = ZERO_CHUNK_BYTES
        zeros = bytes(chunk)
        while pos < end:
            n = min(chunk, end - pos)
            if self.mm[pos : pos + n] == zeros[:n]:
                break
            self.mm[pos : pos + n] = zeros[:n]
            pos += n

    def last_modified(self) -> float:
        try:
            return os.path.getmtime(self.path)
        except OSError:
            return 0.0

    def close(self) -> bool:
        """Unmap; False when views are still exported (the caller retries later)."""
        try:
            self.view.release()
        except BufferError:
            return False
        try:
            self.mm.close()
        except BufferError:
            self.view = memoryview(self.mm)
            return False
        return True

    def destroy(self) -> bool:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        return self.close()


class MappedFileQueue:
    """The ordered segments of one log (CommitLog, one ConsumeQueue)."""

    def __init__(
        self,
        directory: str,
        file_size: int,
        *,
        on_create: Callable[[MappedFile], None] | None = None,
        preallocate: bool = False,
        ledger: DirSyncLedger | None = None,
    ) -> None:
        """``ledger``: new files' names are left to it (``DirSyncLedger``: the next flush
        makes them durable); None: each creation fsyncs its directories itself."""
        self.directory = directory
        self.ledger = ledger
        self.file_size = file_size
        self.preallocate_files = preallocate
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self.on_create = on_create
        self._doomed: list[MappedFile] = []  # deleted but still referenced by views
        self._prealloc_lock = threading.Lock()
        self._prepared: MappedFile | None = None  # the next file, made ahead of need
        self._closed = False

    # ------------------------------------------------------------------ load / create

    def load(self) -> None:
        """Map every segment on disk; names must be 20-digit offsets spaced by file_size."""
        if not os.path.isdir(self.directory):
            return
        names = sorted(
            n for n in os.listdir(self.directory) if len(n) == FILE_NAME_DIGITS and n.isdigit()
        )
        for name in names:
            start = int(name)
            if self.files and start != self.files[-1].file_end:
                raise OSError(
                    errno.EINVAL,
                    f"{self.directory}: segment {name} does not follow {self.files[-1].path}",
                )
            if start % self.file_size:
                raise OSError(errno.EINVAL, f"{self.directory}: {name} is not file-aligned")
            path = os.path.join(self.directory, name)
            size = os.path.getsize(path)
            if size > self.file_size or (size < self.file_size and name != names[-1]):
                raise OSError(
                    errno.EINVAL, f"{path}: size {size}, expected {self.file_size} (config?)"
                )
            mf = MappedFile(path, start, self.file_size, create=False)
            mf.set_positions(self.file_size)
            self.files.append(mf)

    def create_file(self, start: int) -> MappedFile:
        """Map the file starting at ``start``, taking it from ``preallocate`` when ready."""
        with self._prealloc_lock:
            mf = self._prepared
            self._prepared = None
            if mf is not None and mf.file_from != start:
                mf.destroy()
                mf = None
            if mf is None:
                mf = self._new_file(start)
        self.files.append(mf)
        if self.on_create is not None:
            self.on_create(mf)
        return mf

    def is_prepared(self, start: int) -> bool:
        """Whether the file at ``start`` was made ahead (``preallocate``) and waits to be taken."""
        prepared = self._prepared
        return prepared is not None and prepared.file_from == start

    def next_file_start(self) -> int | None:
        """Start of the file after the last one, if none is prepared for it yet."""
        if not self.files:
            return None
        start = self.files[-1].file_end
        prepared = self._prepared
        return None if prepared is not None and prepared.file_from == start else start

    def preallocate(self, start: int, warm_bytes: int = 0) -> None:
        """Create (and map) the file at ``start`` ahead of need. Blocking: run it in
        a worker thread; ``create_file`` on the event loop takes the result, waiting for an
        allocation in progress instead of racing it. ``warm_bytes`` > 0 also prefaults the
        file's first bytes (``populate``, which advises the rest no-readahead): the first
        append into the new file then neither faults nor reads ahead (zero-fills) megabytes
        on the event loop before the warm-up service has started on it."""
        with self._prealloc_lock:
            if self._prepared is not None or self._closed:
                return
            if self.files and self.files[-1].file_end != start:
                return
            if os.path.exists(os.path.join(self.directory, offset_to_file_name(start))):
                return
            mf = self._new_file(start)
            if warm_bytes > 0 and mf.populate(0, warm_bytes):
                mf.warmed = min(warm_bytes, mf.file_size)
            self._prepared = mf

    def _new_file(self, start: int) -> MappedFile:
        """Create and map the file at ``start`` (its directories too); its name is made
        durable here (no ledger) or left to the ledger's next sync."""
        changed = make_dirs(self.directory)
        path = os.path.join(self.directory, offset_to_file_name(start))
        ledger = self.ledger
        mf = MappedFile(
            path, start, self.file_size, create=True, preallocate=self.preallocate_files,
            sync_dir=ledger is None,
        )
        if ledger is not None:
            changed.append(self.directory)
            ledger.add(changed)
        else:
            for d in changed:
                fsync_dir(d)
        return mf

    def sync_dirs(self) -> None:
        """Make the names of the files created so far durable (blocking: a worker thread)."""
        if self.ledger is not None:
            self.ledger.sync()

    def _drop_prepared(self) -> None:
        with self._prealloc_lock:
            if self._prepared is not None:
                self._prepared.destroy()
                self._prepared = None

    def last_file_for_write(self, start_if_empty: int = 0) -> MappedFile:
        """The file to append to, creating the first or next one when needed."""
        if not self.files:
            return self.create_file(start_if_empty - start_if_empty % self.file_size)
        last = self.files[-1]
        if last.is_full():
            return self.create_file(last.file_end)
        return last

    # ------------------------------------------------------------------ positions

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from if self.files else 0

    @property
    def max_offset(self) -> int:
        """End of the written bytes (== committed: there is no transient pool)."""
        if not self.files:
            return 0
        last = self.files[-1]
        return last.file_from + last.wrote

    def find(self, offset: int) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        idx = (offset - files[0].file_from) // self.file_size
        if 0 <= idx < len(files):
            mf = files[idx]
            if mf.file_from <= offset < mf.file_end:
                return mf
        return None

    def read(self, offset: int, size: int) -> memoryview | None:
        mf = self.find(offset)
        if mf is None:
            return None
        return mf.read(offset - mf.file_from, size)

    # ------------------------------------------------------------------ flush

    def flush_plan(self, upto: int | None = None) -> FlushPlan:
        """Snapshot of (file, start, end) file ranges to msync to reach ``upto`` (default: all
        written bytes). Computed on the caller's thread; run with ``run_flush_plan`` anywhere."""
        target = self.max_offset if upto is None else min(upto, self.max_offset)
        plan: FlushPlan = []
        for mf in self.files:
            if mf.file_end <= self.flushed_where or mf.file_from >= target:
                continue
            start = max(self.flushed_where, mf.file_from) - mf.file_from
            end = min(target, mf.file_from + mf.wrote) - mf.file_from
            if end > start:
                plan.append((mf, start, end))
        return plan

    def mark_flushed(self, plan: FlushPlan, upto: int) -> None:
        for mf, _start, end in plan:
            mf.flushed = max(mf.flushed, end)
        self.flushed_where = max(self.flushed_where, upto)

    def flush(self, upto: int | None = None) -> int:
        target = self.max_offset if upto is None else min(upto, self.max_offset)
        plan = self.flush_plan(target)
        self.sync_dirs()
        run_flush_plan(plan)
        self.mark_flushed(plan, target)
        return self.flushed_where

    # ------------------------------------------------------------------ truncate / delete

    def truncate_dirty(self, offset: int) -> None:
        """Drop every byte at or after ``offset``: trim the file holding it, delete later files."""
        self._drop_prepared()
        keep: list[MappedFile] = []
        for mf in self.files:
            if mf.file_end <= offset:
                keep.append(mf)
            elif mf.file_from <= offset:
                pos = offset - mf.file_from
                mf.zero_from(pos)
                mf.set_positions(pos)
                keep.append(mf)
            else:
                self._destroy(mf)
        self.files = keep
        self.flushed_where = min(self.flushed_where, offset)

    def set_positions(self, offset: int) -> None:
        """After a recovery scan: files before ``offset`` are full, the one holding it ends
        there."""
        for mf in self.files:
            if mf.file_end <= offset:
                mf.set_positions(mf.file_size)
            elif mf.file_from <= offset:
                mf.set_positions(offset - mf.file_from)
        self.flushed_where = offset

    def delete_first_files(self, count: int) -> list[MappedFile]:
        """Delete the ``count`` oldest files (never the last one)."""
        count = min(count, len(self.files) - 1)
        if count <= 0:
            return []
        gone, self.files = self.files[:count], self.files[count:]
        for mf in gone:
            self._destroy(mf)
        return gone

    def reset_empty(self, start: int) -> None:
        """Delete everything; the next file will start at the file holding ``start``."""
        self._drop_prepared()
        for mf in self.files:
            self._destroy(mf)
        self.files = []
        self.flushed_where = start

    def _destroy(self, mf: MappedFile) -> None:
        if not mf.destroy():
            self._doomed.append(mf)

    def retry_destroy(self) -> None:
        self._doomed = [mf for mf in self._doomed if not mf.close()]

    def close(self) -> None:
        self._drop_prepared()
        self._closed = True
        for mf in self.files:
            if not mf.close():
                log.warning("mapped_file_views_outstanding", path=mf.path)
        self.files = []
        self.retry_destroy()


def run_flush_plan(plan: FlushPlan) -> None:
    for mf, start, end in plan:
        try:
            mf.flush_range(start, end)
        except ValueError:  # unmapped meanwhile (deleted by retention): nothing to flush
            continue
