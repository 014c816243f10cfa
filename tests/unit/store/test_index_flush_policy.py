"""IndexFile flushing as RocketMQ does it: the timer flushes a file once it is full (not the one
being written), ``indexMsgTimestamp`` is the end of the last flushed file, and after a crash the
unflushed file is rebuilt from the CommitLog so every key is found again."""

from __future__ import annotations

import shutil
from pathlib import Path

from rmq_cluster.store.message_store import MessageStore
from tests.unit.store.store_testlib import small_config
from tests.unit.store.test_store_reads import FakeClock, put


async def test_timer_flushes_full_index_files_and_a_crash_rebuilds_the_rest(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    cfg = small_config(tmp_path / "live")  # 256 entries per index file, 3 keys a message
    store = MessageStore.open(cfg, clock_ms=clock)
    try:
        assert store.index is not None and store.checkpoint is not None
        for i in range(40):  # 120 keys: one file, not full
            clock.now += 1000
            put(store, i, size=40)
        store.dispatch_all()
        await store.flush_logics()
        assert store.checkpoint.index_msg_timestamp == 0  # nothing full, nothing claimed
        for i in range(40, 300):
            clock.now += 1000
            put(store, i, size=40)
        store.dispatch_all()
        files = list(store.index.files)
        assert len(files) >= 3
        await store.flush_logics()
        assert store.checkpoint.index_msg_timestamp == files[-2].end_ts  # the newest full one
        assert files[-1].end_ts > files[-2].end_ts
        # a process crash: what is on disk now, without close() (the abort file stays)
        shutil.copytree(tmp_path / "live", tmp_path / "crashed")
    finally:
        store.close()
    crashed = MessageStore.open(small_config(tmp_path / "crashed"), clock_ms=clock)
    try:
        crashed.dispatch_all()
        for i in (0, 150, 260, 299):
            q = crashed.query_message("T", f"U{i}", 32, 0, 2**62)
            assert len(q.buffers) == 1, i
            q = crashed.query_message("T", f"k{i}", 32, 0, 2**62)
            assert len(q.buffers) == 1, i
    finally:
        crashed.close()
