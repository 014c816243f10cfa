"""store/epoch_file.py: the epoch file, the consistent point, and cutting a divergent tail."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.cluster.protocol.controller import EpochEntry
from rmq_cluster.store.epoch_file import (
    EPOCH_FILE_NAME,
    EpochFile,
    EpochFileError,
    find_consistent_point,
    truncate_commitlog,
    with_ends,
)
from rmq_cluster.store.message_store import MessageStore
from tests.integration.ha.ha_testlib import append_many
from tests.unit.store.store_testlib import small_config


def test_epoch_file_survives_reopen_and_drops_entries_without_data(tmp_path: Path) -> None:
    f = EpochFile(str(tmp_path))
    assert f.entries == [] and f.last_epoch == 0
    f.append(1, 0)
    f.append(2, 500)
    f.append(2, 500)  # idempotent
    assert EpochFile(str(tmp_path)).entries == [EpochEntry(1, 0), EpochEntry(2, 500)]
    f.append(3, 500)  # epoch 2 began at 500 and wrote nothing: gone
    assert f.entries == [EpochEntry(1, 0), EpochEntry(3, 500)]
    with pytest.raises(EpochFileError):
        f.append(2, 900)
    f.truncate_after(100)
    assert EpochFile(str(tmp_path)).entries == [EpochEntry(1, 0)]
    assert f.cache(70) == (EpochEntry(1, 0, 70),)


@pytest.mark.parametrize("damage", [
    lambda b: b[:-3], lambda b: b.replace(b"500", b"501"), lambda b: b"garbage",
    lambda b: b"epochs 1 0\nx y\n",
])
def test_a_damaged_epoch_file_is_refused(tmp_path: Path, damage) -> None:  # type: ignore[no-untyped-def]
    f = EpochFile(str(tmp_path))
    f.append(1, 0)
    f.append(2, 500)
    path = tmp_path / EPOCH_FILE_NAME
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(EpochFileError):
        EpochFile(str(tmp_path))


def test_consistent_point_cuts_the_old_masters_tail() -> None:
    # old master wrote epoch 1 up to 900; the slave had 600 when it became master (epoch 2)
    old = [EpochEntry(1, 0)]
    new = [EpochEntry(1, 0), EpochEntry(2, 600)]
    assert find_consistent_point(old, 900, new, 1500) == 600
    # a slave that was behind keeps everything it has
    assert find_consistent_point(old, 400, new, 1500) == 400
    # same history: nothing to cut
    assert find_consistent_point(new, 1500, new, 1500) == 1500
    # no common epoch: everything diverges; no local epochs: trusted as a prefix
    assert find_consistent_point([EpochEntry(5, 0)], 10, new, 1500) == 0
    assert find_consistent_point([], 700, new, 1500) == 700


@given(
    cuts=st.lists(st.integers(1, 1000), min_size=1, max_size=6, unique=True),
    split=st.integers(0, 6), tail=st.integers(0, 500), lag=st.integers(0, 500),
)
def test_consistent_point_is_where_the_histories_part(
    cuts: list[int], split: int, tail: int, lag: int
) -> None:
    """A shared history of epochs; the old master keeps writing its last shared epoch past the
    point where the other replica (at ``fork``) took over with a newer epoch."""
    starts = sorted({0, *cuts})
    shared = [EpochEntry(i + 1, s) for i, s in enumerate(starts[: max(1, split)])]
    fork = shared[-1].start_offset + lag
    local_max = fork + tail
    remote = [*shared, EpochEntry(shared[-1].epoch + 10, fork)]
    remote_max = fork + 100
    point = find_consistent_point(shared, local_max, remote, remote_max)
    assert point == fork
    assert point <= min(local_max, remote_max)
    assert with_ends(remote, remote_max)[-1].end_offset == remote_max


def _commitlog_bytes(directory: str) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(Path(directory).iterdir()))


def test_truncate_commitlog_then_reopen_recovers_the_prefix(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store = MessageStore.open(cfg)
    keep = append_many(store, 0, 20)
    end = append_many(store, 20, 30)  # crosses into more CommitLog files (64 KiB each)
    assert end > keep
    store.commitlog.queue.flush()
    prefix = _commitlog_bytes(cfg.commit_log_dir)[:keep]
    assert truncate_commitlog(store, keep) == end - keep
    store.close()
    again = MessageStore.open(cfg)
    try:
        assert again.max_phys_offset == keep
        total = sum(again.get_max_offset_in_queue("T", q) for q in range(4))
        assert total == 20
        data = _commitlog_bytes(cfg.commit_log_dir)
        assert data[:keep] == prefix and not data[keep:].strip(b"\0")
        append_many(again, 100, 1)  # it goes on writing where the prefix ends
        assert again.max_phys_offset > keep
    finally:
        again.close()
