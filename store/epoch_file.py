"""The epoch file of controller mode (RocketMQ's ``epochFileCheckpoint``) and the consistent
point between two replicas' logs.  Pure: no trio (blocking file I/O; call it off the loop).

Each entry says "master epoch E began at CommitLog offset S"; epoch E's data ends where the next
entry begins (or at the log's end).  A new master appends (its new epoch, its max offset) before
it accepts a write; a slave takes its master's entries.  A replica rejoining under a new master
compares its entries with the master's (:func:`find_consistent_point`): the newest epoch both
hold with the same start offset ends at ``min(local end, master end)``; everything past that
point is a divergent tail (written by an old master after it lost its role, never acknowledged
to a SYNC producer), which :func:`truncate_commitlog` cuts before replication resumes.

A replica also keeps its **acked mark** (:class:`AckedMark`): the highest CommitLog offset it
knows was acknowledged -- as master, what a slave acked (what released SYNC sends); as slave,
what it acked to its master (RIP-44: a SyncStateSet member's data up to the master's confirm
offset is acked).  :func:`cut_is_safe` says whether cutting at a consistent point would drop
data below that mark: then the replica must not follow that master (it lacks acked data, e.g.
a replica that never held the data was elected) and waits for a correct election instead.

File format (ours; RocketMQ's is Java-serialized): text lines, first ``epochs <count> <crc32>``
(CRC-32 of the rest), then ``<epoch> <startOffset>`` per entry, written to a temporary file,
fsynced and renamed.  A file that fails its CRC or bounds is refused (EpochFileError), never
guessed at.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol

from ..cluster.protocol.controller import MAX_EPOCH_ENTRIES, EpochEntry
from ..cluster.protocol.crc import crc32

if TYPE_CHECKING:
    from .commitlog import CommitLog
    from .dispatcher import Dispatcher

EPOCH_FILE_NAME: Final = "epochFileCheckpoint"
ACKED_FILE_NAME: Final = "ackedOffsetCheckpoint"
MAX_ACKED_FILE_BYTES: Final = 64
MAX_EPOCH_FILE_BYTES: Final = 64 * MAX_EPOCH_ENTRIES


class EpochFileError(ValueError):
    """The epoch file is unreadable (torn, corrupt, out of order)."""


def with_ends(entries: Sequence[EpochEntry], max_offset: int) -> tuple[EpochEntry, ...]:
    """``entries`` with each end offset filled in (the next start, or ``max_offset``), cut at
    ``max_offset``: entries that begin past it hold no data here and are dropped."""
    kept = [e for e in entries if e.start_offset <= max_offset]
    out = []
    for i, e in enumerate(kept):
        end = kept[i + 1].start_offset if i + 1 < len(kept) else max_offset
        out.append(EpochEntry(e.epoch, e.start_offset, min(end, max_offset)))
    return tuple(out)


def find_consistent_point(
    local: Sequence[EpochEntry], local_max: int,
    remote: Sequence[EpochEntry], remote_max: int,
) -> int:
    """The CommitLog offset up to which the local log equals the remote one, by epochs.

    With no local epochs (a store from before controller mode), the local log is trusted as a
    prefix: ``min(local_max, remote_max)``.  With no common epoch: 0 (everything diverges)."""
    if not local:
        return min(local_max, remote_max)
    mine = with_ends(local, local_max)
    theirs = {e.epoch: e for e in with_ends(remote, remote_max)}
    for e in reversed(mine):
        r = theirs.get(e.epoch)
        if r is not None and r.start_offset == e.start_offset:
            return min(e.end_offset, r.end_offset)
    return 0


def _check(entries: Sequence[EpochEntry]) -> None:
    if len(entries) > MAX_EPOCH_ENTRIES:
        raise EpochFileError(f"more than {MAX_EPOCH_ENTRIES} epochs")
    for i, e in enumerate(entries):
        if e.epoch < 0 or e.start_offset < 0:
            raise EpochFileError(f"negative epoch or offset in {e}")
        if i and (e.epoch <= entries[i - 1].epoch or e.start_offset < entries[i - 1].start_offset):
            raise EpochFileError("epochs and start offsets must increase")


class EpochFile:
    """The entries in memory, saved on every change."""

    def __init__(self, store_root: str, *, fsync: bool = True) -> None:
        self.path = os.path.join(store_root, EPOCH_FILE_NAME)
        self.fsync = fsync
        self.entries: list[EpochEntry] = self._load()

    def _load(self) -> list[EpochEntry]:
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_EPOCH_FILE_BYTES + 1)
        except FileNotFoundError:
            return []
        if len(data) > MAX_EPOCH_FILE_BYTES:
            raise EpochFileError(f"{self.path}: larger than {MAX_EPOCH_FILE_BYTES} bytes")
        head, sep, rest = data.partition(b"\n")
        parts = head.split()
        if not sep or len(parts) != 3 or parts[0] != b"epochs":
            raise EpochFileError(f"{self.path}: no header line")
        try:
            count, crc = int(parts[1]), int(parts[2])
            lines = rest.decode("ascii").splitlines()
            entries = [EpochEntry(int(a), int(b)) for a, b in (ln.split() for ln in lines)]
        except (ValueError, UnicodeDecodeError) as exc:
            raise EpochFileError(f"{self.path}: unreadable ({exc})") from None
        if crc32(rest) != crc or count != len(entries):
            raise EpochFileError(f"{self.path}: CRC or count mismatch (torn or corrupt)")
        _check(entries)
        return entries

    def _save(self) -> None:
        _check(self.entries)
        rest = "".join(f"{e.epoch} {e.start_offset}\n" for e in self.entries).encode("ascii")
        data = f"epochs {len(self.entries)} {crc32(rest)}\n".encode("ascii") + rest
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            if self.fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self.path)

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def cache(self, max_offset: int) -> tuple[EpochEntry, ...]:
        return with_ends(self.entries, max_offset)

    def append(self, epoch: int, start_offset: int) -> None:
        """Epoch ``epoch`` begins at ``start_offset`` (a new master, before its first write).
        Entries that began at or past it hold no data and are dropped; an equal last entry is
        kept as is (idempotent)."""
        if self.entries and self.entries[-1] == EpochEntry(epoch, start_offset):
            return
        kept = [e for e in self.entries if e.start_offset < start_offset]
        if kept and epoch <= kept[-1].epoch:
            raise EpochFileError(f"epoch {epoch} is not newer than {kept[-1].epoch}")
        self.entries = [*kept, EpochEntry(epoch, start_offset)]
        self._save()

    def replace(self, entries: Sequence[EpochEntry]) -> None:
        """Take a master's entries (a slave)."""
        new = [EpochEntry(e.epoch, e.start_offset) for e in entries]
        _check(new)
        if new != self.entries:
            self.entries = new
            self._save()

    def truncate_after(self, offset: int) -> None:
        """The log was cut at ``offset``: drop entries that begin past it."""
        kept = [e for e in self.entries if e.start_offset <= offset]
        if kept != self.entries:
            self.entries = kept
            self._save()


class TruncatableStore(Protocol):
    """What ``truncate_commitlog`` uses of an open ``MessageStore`` (this module stays pure:
    the store itself runs on trio)."""

    @property
    def commitlog(self) -> CommitLog: ...

    @property
    def dispatcher(self) -> Dispatcher: ...


def truncate_commitlog(store: TruncatableStore, offset: int) -> int:
    """Cut ``store``'s CommitLog at ``offset`` (a record boundary: a consistent point) on an
    open store that is about to be closed; the next open's recovery then cuts the
    ConsumeQueues and index files that point past it.  Returns the bytes dropped."""
    queue = store.commitlog.queue
    before = queue.max_offset
    if offset >= before:
        return 0
    queue.truncate_dirty(offset)
    queue.set_positions(offset)
    store.dispatcher.reput_from = min(store.dispatcher.reput_from, offset)
    return before - offset


def cut_is_safe(point: int, local_max: int, acked: int) -> bool:
    """Cutting the local log (``local_max`` bytes) at ``point`` keeps everything this replica
    knows was acknowledged (``acked``, as far as its log holds it)."""
    return point >= min(acked, local_max)


class AckedMark:
    """The highest CommitLog offset this replica knows was acknowledged, saved on request.
    File: one line ``acked <offset> <crc32 of "<offset>">``, written to a temporary file,
    fsynced and renamed; a file that fails its CRC is refused (EpochFileError)."""

    def __init__(self, store_root: str, *, fsync: bool = True) -> None:
        self.path = os.path.join(store_root, ACKED_FILE_NAME)
        self.fsync = fsync
        self.offset = self._load()
        self.saved = self.offset

    def _load(self) -> int:
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_ACKED_FILE_BYTES + 1)
        except FileNotFoundError:
            return 0
        parts = data.split()
        if len(data) > MAX_ACKED_FILE_BYTES or len(parts) != 3 or parts[0] != b"acked":
            raise EpochFileError(f"{self.path}: not an acked mark")
        try:
            offset, crc = int(parts[1]), int(parts[2])
        except ValueError:
            raise EpochFileError(f"{self.path}: unreadable") from None
        if offset < 0 or crc32(parts[1]) != crc:
            raise EpochFileError(f"{self.path}: CRC mismatch (torn or corrupt)")
        return offset

    def raise_to(self, offset: int) -> bool:
        """Remember ``offset`` if it is higher (in memory; :meth:`save` writes it)."""
        if offset <= self.offset:
            return False
        self.offset = offset
        return True

    @property
    def dirty(self) -> bool:
        return self.saved != self.offset

    def save(self) -> None:
        offset = self.offset  # raise_to may run meanwhile (this runs off the loop)
        if offset == self.saved:
            return
        text = str(offset).encode("ascii")
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"acked " + text + b" " + str(crc32(text)).encode("ascii") + b"\n")
            if self.fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.saved = offset
