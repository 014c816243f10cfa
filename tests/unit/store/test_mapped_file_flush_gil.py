"""MappedFile.flush_range msyncs through libc so that a flush in a worker thread does not stop
the event loop (``mmap.flush`` holds the GIL for the whole msync: the HA lag p99 tail)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.store import mapped_file
from rmq_cluster.store.mapped_file import MS_SYNC, PAGE_SIZE, MappedFile

#: Dirty bytes flushed by the GIL test (large enough that msync takes tens of milliseconds).
DIRTY_BYTES = 64 * 1024 * 1024
#: Below this the flush is too quick to tell a held GIL from a released one.
MIN_TELLING_FLUSH_S = 0.03


def test_flush_range_msyncs_the_page_aligned_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if mapped_file._msync is None:
        pytest.skip("no libc msync here")
    calls: list[tuple[int, int, int]] = []
    real = mapped_file._msync

    def spy(address: int, length: int, flags: int) -> int:
        calls.append((address, length, flags))
        return real(address, length, flags)

    monkeypatch.setattr(mapped_file, "_msync", spy)
    mf = MappedFile(str(tmp_path / f"{0:020d}"), 0, 4 * PAGE_SIZE, create=True)
    try:
        mf.mm[PAGE_SIZE + 10 : PAGE_SIZE + 20] = b"0123456789"
        mf.flush_range(PAGE_SIZE + 10, PAGE_SIZE + 20)
        assert len(calls) == 1
        _address, length, flags = calls[0]
        assert (length, flags) == (20, MS_SYNC)  # from the page start to the end
        with open(mf.path, "rb") as f:
            f.seek(PAGE_SIZE + 10)
            assert f.read(10) == b"0123456789"
        mf.flush_range(5, 5)  # empty: no call
        assert len(calls) == 1
    finally:
        mf.close()


def test_flush_in_a_worker_thread_leaves_the_main_thread_running(tmp_path: Path) -> None:
    mf = MappedFile(str(tmp_path / f"{0:020d}"), 0, DIRTY_BYTES, create=True)
    try:
        chunk = os.urandom(1 << 20)
        for pos in range(0, DIRTY_BYTES, len(chunk)):
            mf.mm[pos : pos + len(chunk)] = chunk
        took: dict[str, Any] = {}

        def flush() -> None:
            t0 = time.perf_counter()
            mf.flush_range(0, DIRTY_BYTES)
            took["s"] = time.perf_counter() - t0

        worker = threading.Thread(target=flush)
        last = time.perf_counter()
        gap = 0.0
        worker.start()
        while worker.is_alive():
            now = time.perf_counter()
            gap = max(gap, now - last)
            last = now
            time.sleep(0.0002)
        worker.join()
        if took["s"] < MIN_TELLING_FLUSH_S:
            pytest.skip(f"msync took {took['s'] * 1000:.1f} ms: too quick to tell")
        # with the GIL held by the flush, the main thread stalls for the whole msync
        assert gap < took["s"] / 2, (gap, took["s"])
    finally:
        mf.close()
