"""The CommitLog warm-up (``MappedFile.populate``) advises no readahead for the unwritten tail
of a file and normal readahead behind the writer (see ``MappedFile._advise_readahead``).

Checked through the kernel's own view of the mapping (/proc/self/smaps: VmFlags ``rr`` =
VM_RAND_READ), and that the advice never changes a byte of the file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from rmq_cluster.store.mapped_file import PAGE_SIZE, MappedFile, MappedFileQueue

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="madvise advice is Linux-only"
)

FILE_BYTES = 64 * PAGE_SIZE


def _vmas(path: str) -> list[tuple[int, int, bool]]:
    """(file start, file end, random-read advised) of every mapping of ``path``, in order."""
    out = []
    current: list[int] | None = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                current = None
                if len(head) >= 6 and head[5] == path:
                    lo, hi = (int(x, 16) for x in head[0].split("-"))
                    off = int(head[2], 16)
                    current = [off, off + hi - lo]
            elif head and head[0] == "VmFlags:" and current is not None:
                out.append((current[0], current[1], "rr" in head[1:]))
                current = None
    return sorted(out)


def _random_ranges(path: str) -> list[tuple[int, int]]:
    """Merged file ranges advised MADV_RANDOM."""
    merged: list[tuple[int, int]] = []
    for lo, hi, rr in _vmas(path):
        if not rr:
            continue
        if merged and merged[-1][1] == lo:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return merged


def _write(mf: MappedFile, n: int, seed: int) -> bytes:
    data = bytes((seed + i) % 251 for i in range(n))
    assert mf.append(data) == n
    return data


def test_populate_advises_the_unwritten_tail_random_and_the_written_part_normal(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "00000000000000000000")
    mf = MappedFile(path, 0, FILE_BYTES, create=True, preallocate=True)
    try:
        assert _random_ranges(path) == []  # a new mapping: normal readahead everywhere
        if not mf.populate(0, 8 * PAGE_SIZE):
            pytest.skip("MADV_POPULATE_WRITE unsupported (Linux < 5.14)")
        # nothing written yet: the whole file is advised random
        assert _random_ranges(path) == [(0, FILE_BYTES)]
        assert mf.random_from == 0

        _write(mf, 3 * PAGE_SIZE + 100, 1)  # the writer is inside page 3
        assert mf.populate(8 * PAGE_SIZE, 16 * PAGE_SIZE)
        # written whole pages back to normal; the page being written and the rest random
        assert _random_ranges(path) == [(3 * PAGE_SIZE, FILE_BYTES)]
        assert mf.random_from == 3 * PAGE_SIZE

        _write(mf, 10 * PAGE_SIZE, 2)
        assert mf.populate(16 * PAGE_SIZE, 24 * PAGE_SIZE)
        assert _random_ranges(path) == [(13 * PAGE_SIZE, FILE_BYTES)]

        # a populate that does not move the boundary changes nothing
        assert mf.populate(16 * PAGE_SIZE, 24 * PAGE_SIZE)
        assert _random_ranges(path) == [(13 * PAGE_SIZE, FILE_BYTES)]
    finally:
        mf.close()


def test_advice_and_prefaulting_leave_the_bytes_identical(tmp_path: Path) -> None:
    """The same writes with and without populate (and its advice) give identical files."""
    files = []
    for name, warm in (("plain", False), ("warm", True)):
        d = tmp_path / name
        d.mkdir()
        path = str(d / "00000000000000000000")
        mf = MappedFile(path, 0, FILE_BYTES, create=True)
        try:
            for step in range(6):
                if warm:
                    mf.populate(mf.wrote, mf.wrote + 8 * PAGE_SIZE)
                _write(mf, 5 * PAGE_SIZE + 17 * step, step)
            mf.flush_range(0, mf.wrote)
        finally:
            mf.close()
        files.append(Path(path).read_bytes())
    assert len(files[0]) == FILE_BYTES
    assert files[0] == files[1]


def test_populate_of_a_full_file_advises_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "00000000000000000000")
    mf = MappedFile(path, 0, FILE_BYTES, create=True)
    try:
        mf.set_positions(FILE_BYTES)
        mf.populate(0, PAGE_SIZE)
        assert _random_ranges(path) == []
        assert mf.random_from == FILE_BYTES
    finally:
        mf.close()
    assert os.path.getsize(path) == FILE_BYTES


def test_preallocated_next_file_is_prefaulted_and_advised(tmp_path: Path) -> None:
    """The allocator's next file comes with its first bytes prefaulted and the rest advised
    no-readahead, so the first append into it does not zero-fill megabytes inline."""
    queue = MappedFileQueue(str(tmp_path), FILE_BYTES)
    first = queue.create_file(0)
    try:
        first.set_positions(FILE_BYTES)
        queue.preallocate(FILE_BYTES, 4 * PAGE_SIZE)
        nxt = queue.create_file(FILE_BYTES)
        if nxt.warmed == 0:
            pytest.skip("MADV_POPULATE_WRITE unsupported (Linux < 5.14)")
        assert nxt.warmed == 4 * PAGE_SIZE
        assert _random_ranges(nxt.path) == [(0, FILE_BYTES)]
        # without warm_bytes: created as before (no prefault, no advice)
        nxt.set_positions(FILE_BYTES)
        queue.preallocate(2 * FILE_BYTES)
        plain = queue.create_file(2 * FILE_BYTES)
        assert plain.warmed == 0 and _random_ranges(plain.path) == []
    finally:
        queue.close()


def test_a_failed_populate_gives_normal_readahead_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where MADV_POPULATE_WRITE fails (Linux < 5.14) the warm-up stops for good: the advice
    it set is undone, so the file is left with normal readahead everywhere."""
    import rmq_cluster.store.mapped_file as mapped_file

    real = mapped_file._madvise
    if real is None:
        pytest.skip("no libc madvise")

    def no_populate(address: int, length: int, advice: int) -> int:
        return -1 if advice == mapped_file.MADV_POPULATE_WRITE else real(address, length, advice)

    monkeypatch.setattr(mapped_file, "_madvise", no_populate)
    path = str(tmp_path / "00000000000000000000")
    mf = MappedFile(path, 0, FILE_BYTES, create=True)
    try:
        _write(mf, 2 * PAGE_SIZE, 3)
        assert mf.populate(2 * PAGE_SIZE, 8 * PAGE_SIZE) is False
        assert _random_ranges(path) == []
        assert mf.random_from == FILE_BYTES
    finally:
        mf.close()
