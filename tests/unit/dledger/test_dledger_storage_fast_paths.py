"""FileLogStorage's per-message fast paths write exactly what the general path writes.

The leader appends one entry at a time (``append_one``), a follower whole pushes
(``_append_in_place``), and both fall back to the general encoder at file rolls; all of them
must leave byte-identical data and index files, which recovery then reads back.  ``entries``
serves recent entries from a bodies cache and hands the same list to consecutive identical
reads (one per follower): a truncation must never let a stale list through.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from rmq_cluster.dledger.log_storage import FileLogStorage
from rmq_cluster.dledger.messages import Entry

DATA_FILE_BYTES = 64 * 1024
INDEX_FILE_BYTES = 32 * 100  # 100 entries per index file: rolls often
ROUNDS = 120


def _digest(directory: Path) -> str:
    h = hashlib.sha256()
    for sub in ("data", "index"):
        for path in sorted((directory / sub).iterdir()):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _open(directory: Path) -> FileLogStorage:
    return FileLogStorage(
        directory, data_file_bytes=DATA_FILE_BYTES, index_file_bytes=INDEX_FILE_BYTES,
        fsync=False,
    )


def _workload(seed: int) -> list[tuple[str, object]]:
    """Batches of random sizes (some crossing file ends) and a few truncations."""
    rng = random.Random(seed)
    ops: list[tuple[str, object]] = []
    next_index = 0
    term = 1
    for round_no in range(ROUNDS):
        if round_no % 17 == 9 and next_index > 5:
            next_index -= rng.randrange(1, 5)
            term += 1
            ops.append(("truncate", next_index))
            continue
        n = rng.randrange(1, 12)
        batch = [
            Entry(next_index + i, term, rng.randbytes(rng.randrange(0, 3000))) for i in range(n)
        ]
        next_index += n
        ops.append(("append", batch))
    return ops


def _replay(storage: FileLogStorage, ops: list[tuple[str, object]], *, one_by_one: bool) -> None:
    for op, arg in ops:
        if op == "truncate":
            assert isinstance(arg, int)
            storage.truncate_suffix(arg)
        else:
            assert isinstance(arg, list)
            if one_by_one:
                for entry in arg:
                    storage.append([entry])
            else:
                storage.append(arg)


def test_batch_and_single_appends_write_identical_files(tmp_path: Path) -> None:
    ops = _workload(seed=11)
    batched = _open(tmp_path / "batched")
    single = _open(tmp_path / "single")
    _replay(batched, ops, one_by_one=False)
    _replay(single, ops, one_by_one=True)
    last = batched.last_index()
    assert last == single.last_index() > 100
    assert batched.entries(0, last + 1) == single.entries(0, last + 1)
    batched.sync()
    single.sync()
    batched.close()
    single.close()
    assert _digest(tmp_path / "batched") == _digest(tmp_path / "single")
    reopened = _open(tmp_path / "batched")  # recovery checks every CRC and position
    try:
        assert reopened.last_index() == last
        assert reopened.entries(0, last + 1) == _open(tmp_path / "single").entries(0, last + 1)
    finally:
        reopened.close()


def test_repeated_reads_never_return_truncated_entries(tmp_path: Path) -> None:
    storage = _open(tmp_path / "log")
    try:
        storage.append([Entry(i, 1, bytes([i]) * 10) for i in range(10)])
        first = storage.entries(5, 10, 1000)
        assert storage.entries(5, 10, 1000) is first  # the next follower's identical push
        assert [e.body for e in first] == [bytes([i]) * 10 for i in range(5, 10)]
        storage.truncate_suffix(7)
        storage.append([Entry(i, 2, b"new" + bytes([i])) for i in range(7, 10)])
        again = storage.entries(5, 10, 1000)
        assert [(e.index, e.term, e.body) for e in again] == [
            (5, 1, bytes([5]) * 10), (6, 1, bytes([6]) * 10),
            (7, 2, b"new\x07"), (8, 2, b"new\x08"), (9, 2, b"new\x09"),
        ]
        assert len(storage.entries(0, 10, 25)) == 2  # the byte budget still applies
    finally:
        storage.close()


def test_recovery_zeroes_a_torn_tail_and_stray_bytes_beyond_it(tmp_path: Path) -> None:
    """Recovery zeroes only the data extents past the valid end (SEEK_DATA skips the holes of
    the sparse file), and still erases everything non-zero there: a torn entry right after
    the end and stray bytes far beyond it."""
    directory = tmp_path / "log"
    size = 8 * 1024 * 1024
    storage = FileLogStorage(directory, data_file_bytes=size, fsync=False)
    storage.append([Entry(i, 1, bytes([i + 1]) * 100) for i in range(5)])
    end = storage.write_pos
    storage.sync()
    storage.close()
    path = directory / "data" / f"{0:020d}"
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(b"\x00\x00\x00\x01torn entry")  # looks like the start of an entry
        f.seek(6 * 1024 * 1024 + 123)
        f.write(b"stray")
    reopened = FileLogStorage(directory, data_file_bytes=size, fsync=False)
    try:
        assert reopened.last_index() == 4 and reopened.write_pos == end
        reopened.sync()
    finally:
        reopened.close()
    data = path.read_bytes()
    assert len(data) == size
    assert not any(data[end:])


def test_truncation_while_a_flush_thread_holds_a_later_file(tmp_path: Path) -> None:
    """The flush and warm threads take a map's address through a short buffer export; a
    conflict truncation on the event loop that deletes that file meanwhile must not raise
    (it killed the node) and must leave the log cut where asked."""
    import ctypes

    storage = FileLogStorage(tmp_path / "log", data_file_bytes=4096, index_file_bytes=2048,
                             fsync=False)
    try:
        storage.append([Entry(i, 1, bytes([i]) * 600) for i in range(12)])
        starts = sorted(storage.data.maps)
        assert len(starts) >= 2
        probe = ctypes.c_char.from_buffer(storage.data.maps[starts[-1]], 0)  # the thread's export
        storage.truncate_suffix(1)
        del probe
        assert storage.last_index() == 0
        assert sorted(storage.data.maps) == starts[:1]
        storage.append([Entry(1, 2, b"after")])
        assert [(e.index, e.term, e.body) for e in storage.entries(0, 2, 10_000)][1] == (
            1, 2, b"after"
        )
    finally:
        storage.close()
