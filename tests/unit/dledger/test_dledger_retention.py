"""Retention of DLedger data files (issue 25): small data files, a fake clock.

* the file store deletes whole data files only up to the caller's bound, records where the log
  begins, refuses reads of what is gone, never recreates a deleted file, and restarts from the
  first file left (term of the entry before it included);
* the Raft core keeps working over a log whose head is gone (a follower skips what it deleted,
  a leader does not try to push what it deleted);
* a single-member store over a DLedgerCommitLog runs the store's retention policy
  (``fileReservedTime``, ``deleteWhen``) over its data files: nothing young goes, old applied
  files go, ConsumeQueue min offsets move up, a pull below answers OFFSET_TOO_SMALL with the
  next begin offset, and reads of what remains work, also after a restart.
"""

from __future__ import annotations

import functools
import os
import random
import time
from pathlib import Path

import pytest
import trio

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.cluster.protocol.message import iter_records, new_message
from rmq_cluster.dledger.commitlog_adapter import DLedgerCommitLog, open_dledger_store
from rmq_cluster.dledger.core import CoreConfig, DLedgerCore, Role
from rmq_cluster.dledger.log_storage import (
    BEGIN_FILE,
    INDEX_UNIT_BYTES,
    CompactedError,
    FileLogStorage,
)
from rmq_cluster.dledger.messages import (
    Entry,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    ResponseCode,
    VoteResponse,
    VoteResult,
)
from rmq_cluster.dledger.node import run_store_node
from rmq_cluster.store.message_store import GetMessageStatus, MessageStore
from tests.ports import free_port

FB = 4096
IFB = INDEX_UNIT_BYTES * 16
WAIT_S = 20.0
TOPIC = "RetTopic"
HOUR_MS = 3600 * 1000
ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))


def _storage(path: Path) -> FileLogStorage:
    return FileLogStorage(path, data_file_bytes=FB, index_file_bytes=IFB, fsync=False)


def _fill(st: FileLogStorage, n: int, term: int = 1) -> None:
    for i in range(st.last_index() + 1, st.last_index() + 1 + n):
        st.append([Entry(i, term if i < n // 2 else term + 1, b"x%05d" % i * 40)])
    st.sync()


def test_file_store_deletes_head_files_and_restarts_from_the_first_left(tmp_path: Path) -> None:
    st = _storage(tmp_path / "dl")
    _fill(st, 120)  # ~288 bytes per entry: 14 per 4 KiB file, 9 files; index: 16 per file
    files = st.data_files()
    assert len(files) >= 6
    # bounded by max_index: no file holding an entry above it goes
    assert st.delete_first_data_files(5, max_index=3) == []
    gone = st.delete_first_data_files(3, max_index=st.last_index())
    assert gone == [f[0] for f in files[:3]]
    first = st.first_index()
    assert first > 0 and st.entry_pos(first) == files[3][0] == st.min_data_offset
    prev_term = st.term_at(first - 1)
    with pytest.raises(CompactedError):
        st.entries(first - 1, first + 1)
    with pytest.raises(CompactedError):
        st.body_at(0)
    with pytest.raises(CompactedError):
        st.data.read(0, 8)  # never maps (recreates) a deleted file
    assert not (tmp_path / "dl" / "data" / f"{0:020d}").exists()
    assert [e.index for e in st.entries(first, first + 3)] == [first, first + 1, first + 2]
    # index files wholly below the first entry are gone too
    index_files = sorted(int(n) for n in os.listdir(tmp_path / "dl" / "index"))
    assert index_files[0] == (first * INDEX_UNIT_BYTES) // IFB * IFB
    assert (tmp_path / "dl" / BEGIN_FILE).exists()
    # never the last file
    assert len(st.delete_first_data_files(100, max_index=st.last_index())) == len(files) - 4
    assert len(st.data_files()) == 1
    first = st.first_index()
    prev_term = st.term_at(first - 1)
    last, last_term = st.last_index(), st.last_term()
    bodies = [e.body for e in st.entries(first, last + 1)]
    st.close()

    again = _storage(tmp_path / "dl")
    assert again.first_index() == first
    assert again.last_index() == last and again.last_term() == last_term
    assert again.term_at(first - 1) == prev_term  # from the begin file
    assert [e.body for e in again.entries(first, last + 1)] == bodies
    with pytest.raises(CompactedError):
        again.entries(0, 1)
    assert again.index_at_or_after(0) == first
    # appends continue, truncation down to the first entry held works
    again.append([Entry(last + 1, last_term, b"more")])
    again.truncate_suffix(first)
    assert again.last_index() == first - 1
    again.append([Entry(first, last_term, b"again")])
    again.sync()
    again.close()
    third = _storage(tmp_path / "dl")
    assert third.first_index() == first
    assert [e.body for e in third.entries(first, first + 1)] == [b"again"]
    third.close()


def _core(storage: FileLogStorage, self_id: str) -> DLedgerCore:
    cfg = CoreConfig("g", self_id, ("n0", "n1", "n2"))
    return DLedgerCore(cfg, storage, random.Random(1), applied=storage.last_index())


def test_core_over_a_log_whose_head_was_deleted(tmp_path: Path) -> None:
    st = _storage(tmp_path / "f")
    _fill(st, 60)
    st.delete_first_data_files(2, max_index=st.last_index())
    first, last = st.first_index(), st.last_index()
    assert first > 2
    follower = _core(st, "n1")
    # a leader's push overlapping what this follower deleted (already committed here)
    ents = tuple(Entry(i, st.term_at(i), b"ignored") for i in range(first - 2, last + 1))
    ents += (Entry(last + 1, 5, b"new"),)  # (a push's entries follow prev one by one)
    push = PushEntryRequest("g", "n0", "n1", "n0", 5, PushType.APPEND, first - 3, 1, last, ents)
    follower.step(push)
    rd = follower.ready()
    out = rd.messages
    follower.advance(rd)
    assert [m.code for m in out if isinstance(m, PushEntryResponse)] == [ResponseCode.SUCCESS]
    assert st.last_index() == last + 1 and st.body_at(last + 1) == b"new"
    assert st.body_at(first) != b"ignored"

    # a leader whose peer needs entries it deleted: no push to it, no crash
    lst = _storage(tmp_path / "l")
    _fill(lst, 60)
    lst.delete_first_data_files(2, max_index=lst.last_index())
    leader = DLedgerCore(CoreConfig("g", "n0", ("n0", "n1")), lst, random.Random(2),
                         applied=lst.last_index())
    old_last = lst.last_index()
    leader.campaign(pre_vote=False)
    leader.advance(leader.ready())
    leader.step(VoteResponse("g", "n1", "n0", "", leader.term, VoteResult.ACCEPT))
    assert leader.role is Role.LEADER
    leader.advance(leader.ready())
    # n1 answers it holds nothing: the leader would have to push from index 0
    leader.step(PushEntryResponse("g", "n1", "n0", "n0", leader.term,
                                  ResponseCode.INCONSISTENT_STATE, old_last, 0, -1))
    for _ in range(40):
        leader.tick()
        rd = leader.ready()
        assert not any(isinstance(m, PushEntryRequest) and m.entries for m in rd.messages)
        leader.advance(rd)
    assert "n1" in leader.behind_first_index


def _open(root: Path, port: int) -> tuple[MessageStore, DLedgerCommitLog]:
    values = {
        "storePathRootDir": str(root), "brokerName": "b", "enableDLegerCommitLog": "true",
        "dLegerGroup": "g", "dLegerPeers": f"n0-127.0.0.1:{port}", "dLegerSelfId": "n0",
        "heartBeatTimeIntervalMs": "200", "mappedFileSizeCommitLog": str(64 * 1024),
        "mappedFileSizeConsumeQueue": str(20 * 64), "fileReservedTime": "1",
        "deleteWhen": ALL_HOURS, "cleanResourceInterval": str(3600 * 1000),
    }
    settings = load_broker_config(values).settings
    return open_dledger_store(settings.store, settings.dledger)


def _msg(i: int) -> object:
    return new_message(TOPIC, b"m%05d-" % i + b"." * 1000, i % 2, 0, {}, 0, 1_700_000_000_000,
                       ("127.0.0.1", 40000), ("127.0.0.1", 10911), 0)


def _read_all(store: MessageStore, queue_id: int, offset: int) -> list[bytes]:
    out: list[bytes] = []
    while True:
        res = store.get_message(TOPIC, queue_id, offset, 32)
        if res.status is not GetMessageStatus.FOUND:
            res.release()
            return out
        out += [r.body for r in iter_records(res.copy_body())]
        offset = res.next_begin_offset


async def test_store_retention_by_age_moves_queue_minimums_and_reads_go_on(
    tmp_path: Path,
) -> None:
    port = free_port()
    root = tmp_path / "s"
    store, dl = await trio.to_thread.run_sync(_open, root, port)
    total = 400  # ~1 KiB each: ~7 data files of 64 KiB
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(run_store_node, dl, host="127.0.0.1"))
            node = dl.node
            assert node is not None
            with trio.fail_after(WAIT_S):
                await node.wait_for(lambda _n: dl.leader_ready)
            for i in range(total):
                assert (await store.put_message(_msg(i))).status.name == "PUT_OK"  # type: ignore[arg-type]
            storage = dl.storage
            assert storage is not None
            with trio.fail_after(WAIT_S):
                await node.wait_for(lambda _n: dl.applied_index >= storage.last_index())
            files = storage.data_files()
            assert len(files) >= 5
            now_ms = int(time.time() * 1000)
            # young files stay, whatever the hour
            assert store.clean_once(now_ms).commitlog_files_deleted == 0
            # an hour and a bit later: every applied file but the last goes (10 a round)
            result = store.clean_once(now_ms + HOUR_MS + 60_000)
            assert result.commitlog_files_deleted == len(files) - 1
            assert result.consume_queue_files_deleted > 0
            min_phys = store.min_phys_offset
            assert min_phys == files[-1][0] > 0
            mins = {q: store.get_min_offset_in_queue(TOPIC, q) for q in (0, 1)}
            assert all(m > 0 for m in mins.values()), mins
            for q, m in mins.items():
                below = store.get_message(TOPIC, q, 0, 32)
                assert below.status is GetMessageStatus.OFFSET_TOO_SMALL
                assert below.next_begin_offset == m
                kept = _read_all(store, q, m)
                assert kept and kept[-1].startswith(b"m%05d-" % (total - 2 + q))
            # the queue still takes messages
            assert (await store.put_message(_msg(total))).status.name == "PUT_OK"  # type: ignore[arg-type]
            with trio.fail_after(WAIT_S):
                await node.wait_for(lambda _n: dl.applied_index >= storage.last_index())
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    reopened, _reopened_dl = await trio.to_thread.run_sync(_open, root, port)
    try:
        assert reopened.min_phys_offset == min_phys
        for q, m in mins.items():
            assert reopened.get_min_offset_in_queue(TOPIC, q) >= m
            got = _read_all(reopened, q, reopened.get_min_offset_in_queue(TOPIC, q))
            assert got and got[-1].startswith(b"m%05d-" % (total if q == 0 else total - 1))
    finally:
        reopened.close()
