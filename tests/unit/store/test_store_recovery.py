"""Recovery from any crash point: the prefix of complete records survives, ConsumeQueue and
IndexFile agree with the CommitLog, and offsets continue without gaps."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rmq_cluster.cluster.protocol.message import Message, encode_batch
from rmq_cluster.store.message_store import MessageStore
from tests.unit.store.store_testlib import (
    crash,
    decode_commitlog_dir,
    index_hash,
    java_hash,
    read_cq_dir,
    read_index_entries,
    small_config,
)

HOST = ("127.0.0.1", 10911)
SLOTS = 64

op = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 3000), st.integers(0, 2)),
    st.tuples(st.just("batch"), st.integers(1, 6), st.integers(0, 2)),
    st.tuples(st.just("checkpoint"), st.just(0), st.just(0)),
    st.tuples(st.just("dispatch"), st.integers(0, 20000), st.just(0)),  # 0 = everything
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        self.now += 700
        return self.now


def body_for(n: int, size: int) -> bytes:
    # never zero bytes, so a zeroed tail can never pass for a body
    return bytes([(n % 250) + 1]) * size


def run_ops(
    store: MessageStore, ops: list[tuple[str, int, int]]
) -> tuple[list[dict[str, Any]], int]:
    """Apply ops; returns the expected records (in log order) and the offset below which a
    crash may not cut (everything flushed when the last checkpoint was taken)."""
    expected: list[dict[str, Any]] = []
    durable = 0
    n = 0
    for kind, a, qid in ops:
        if kind == "put":
            props = {"TAGS": f"t{n % 3}", "UNIQ_KEY": f"U{n}", "KEYS": f"k{n}"}
            res = store.append_message(
                Message(topic="T", body=body_for(n, a), queue_id=qid, properties=props,
                        store_host=HOST)
            )
            assert res.ok and res.result is not None
            expected.append(dict(off=res.result.wrote_offset, size=res.result.wrote_bytes,
                                 qid=qid, body=body_for(n, a), keys=[f"U{n}", f"k{n}"],
                                 tags=f"t{n % 3}"))
            n += 1
        elif kind == "batch":
            items = [(0, body_for(n + j, 50 + 40 * j), {"UNIQ_KEY": f"U{n + j}"}) for j in range(a)]
            res = store.append_messages(
                Message(topic="T", body=encode_batch(items), queue_id=qid, store_host=HOST)
            )
            assert res.ok and res.result is not None
            for j, off in enumerate(res.result.offsets):
                size = (*res.result.offsets, res.result.end_offset)[j + 1] - off
                expected.append(dict(off=off, size=size, qid=qid, body=items[j][1],
                                     keys=[f"U{n + j}"], tags=None))
            n += a
        elif kind == "dispatch":
            if a:
                store.dispatch(max_bytes=a)  # leave a dispatch lag behind
            else:
                store.dispatch_all()
        else:
            store.dispatch_all()
            store.flush_commitlog_sync()
            store.flush_logics_sync()
            assert store.checkpoint is not None
            store.checkpoint.flush()
            durable = store.max_phys_offset
            store.durable_cq = {  # type: ignore[attr-defined]
                q: store.get_max_offset_in_queue("T", q) for q in range(3)
            }
    return expected, durable


def corrupt(cfg: Any, crash_at: int, garble: bytes, drop_files: bool) -> None:
    size = cfg.mapped_file_size_commit_log
    for name in sorted(os.listdir(cfg.commit_log_dir)):
        start = int(name)
        path = os.path.join(cfg.commit_log_dir, name)
        if start + size <= crash_at:
            continue
        if start > crash_at and drop_files:
            os.unlink(path)
            continue
        with open(path, "r+b") as f:
            cut = max(0, crash_at - start)
            f.seek(cut)
            f.write(bytes(size - cut))
            if garble and start <= crash_at:
                f.seek(cut)
                f.write(garble[: size - cut])


def keys_of(rec: dict[str, Any]) -> list[str]:
    props = rec["properties"]
    keys = [props["UNIQ_KEY"]] if props.get("UNIQ_KEY") else []
    return keys + [k for k in props.get("KEYS", "").split(" ") if k]


def cut_consume_queues(cfg: Any, durable: dict[int, int], frac: float) -> None:
    """An OS crash loses unflushed ConsumeQueue units: zero each queue's tail past what the
    last checkpoint flushed."""
    for q in range(3):
        qdir = os.path.join(cfg.store_path_root_dir, "consumequeue", "T", str(q))
        if not os.path.isdir(qdir):
            continue
        units = len(read_cq_dir(cfg.store_path_root_dir, "T", q))
        keep = durable.get(q, 0)
        cut = (keep + int((units - keep) * frac)) * 20
        for name in sorted(os.listdir(qdir)):
            start = int(name)
            path = os.path.join(qdir, name)
            size = os.path.getsize(path)
            if start + size <= cut:
                continue
            with open(path, "r+b") as f:
                f.seek(max(0, cut - start))
                f.write(bytes(size - max(0, cut - start)))


def check_store(
    cfg: Any, old: list[dict[str, Any]], crash_at: int, new: list[dict[str, Any]] | None = None
) -> int:
    """The CommitLog holds a prefix of ``old`` (every record that ended before the crash point,
    perhaps the one cut by it if it still validates) followed by ``new``; ConsumeQueues and
    IndexFiles agree with it exactly. Returns the number of records."""
    new = new or []
    recs = decode_commitlog_dir(cfg.commit_log_dir, cfg.mapped_file_size_commit_log)
    survivors = len(recs) - len(new)
    complete = sum(1 for e in old if e["off"] + e["size"] <= crash_at)
    assert complete <= survivors <= min(complete + 1, len(old))
    kept = old[:survivors] + new
    for rec, exp in zip(recs, kept, strict=True):
        assert rec["physical_offset"] == exp["off"] and rec["body"] == exp["body"]
        assert rec["queue_id"] == exp["qid"]
    root = cfg.store_path_root_dir
    for q in range(3):
        mine = [r for r in recs if r["queue_id"] == q]
        qdir = os.path.join(root, "consumequeue", "T", str(q))
        units = read_cq_dir(root, "T", q) if os.path.isdir(qdir) else []
        tags = [r["properties"].get("TAGS") for r in mine]
        assert units == [
            (r["physical_offset"], r["total_size"], java_hash(t) if t else 0)
            for r, t in zip(mine, tags, strict=True)
        ]
        assert [r["queue_offset"] for r in mine] == list(range(len(mine)))
    entries = read_index_entries(root, SLOTS)
    assert sorted(entries) == sorted(
        (index_hash(f"T#{k}"), r["physical_offset"]) for r in recs for k in keys_of(r)
    )
    return len(recs)


@settings(
    max_examples=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# safe-point recovery: a checkpoint after several files, then lost CommitLog and CQ tails
@example(
    ops=[("put", 1000, i % 3) for i in range(30)] + [("checkpoint", 0, 0)]
    + [("put", 1000, i % 3) for i in range(12)] + [("dispatch", 0, 0)]
    + [("put", 900, 1), ("batch", 4, 2)],
    crash_frac=0.5, garble=b"", drop_files=True, cq_cut=0.3,
)
@example(
    ops=[("put", 2500, 0)] * 20 + [("checkpoint", 0, 0)] + [("put", 10, 1)] * 40,
    crash_frac=0.9, garble=b"\x07" * 40, drop_files=False, cq_cut=0.0,
)
@given(
    ops=st.lists(op, min_size=1, max_size=60),
    crash_frac=st.floats(0, 1),
    garble=st.one_of(st.just(b""), st.binary(min_size=1, max_size=64)),
    drop_files=st.booleans(),
    cq_cut=st.one_of(st.none(), st.floats(0, 1)),
)
def test_recover_from_any_crash_point(
    ops: list[tuple[str, int, int]],
    crash_frac: float,
    garble: bytes,
    drop_files: bool,
    cq_cut: float | None,
) -> None:
    root = tempfile.mkdtemp(prefix="rmq-recovery-")
    try:
        cfg = small_config(root, mapped_file_size_commit_log=8 * 1024,
                           max_hash_slot_num=SLOTS, max_index_num=64)
        clock = Clock()
        store = MessageStore.open(cfg, clock_ms=clock)
        expected, durable = run_ops(store, ops)
        end = store.max_phys_offset
        durable_cq = getattr(store, "durable_cq", {})
        crash(store)
        crash_at = durable + int((end - durable) * crash_frac)
        corrupt(cfg, crash_at, garble, drop_files)
        if cq_cut is not None:
            cut_consume_queues(cfg, durable_cq, cq_cut)

        store = MessageStore.open(cfg, clock_ms=clock)
        assert store.recovery is not None and store.recovery.abnormal
        new: list[dict[str, Any]] = []
        try:
            # offsets continue without gaps
            for q in range(3):
                before = store.get_max_offset_in_queue("T", q)
                res = store.append_message(
                    Message(topic="T", body=b"after", queue_id=q, store_host=HOST,
                            properties={"UNIQ_KEY": f"A{q}"})
                )
                assert res.result is not None and res.result.logics_offset == before
                new.append(dict(off=res.result.wrote_offset, size=res.result.wrote_bytes,
                                qid=q, body=b"after"))
        finally:
            store.close()
        check_store(cfg, expected, crash_at, new)
        # a clean reopen changes nothing
        store = MessageStore.open(cfg, clock_ms=clock)
        assert store.recovery is not None and not store.recovery.abnormal
        store.close()
        check_store(cfg, expected, crash_at, new)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(sizes=[4 * 1024 * 1024, 100, 4 * 1024 * 1024], crash_frac=0.7)
@given(
    sizes=st.lists(st.integers(0, 4 * 1024 * 1024), min_size=1, max_size=4),
    crash_frac=st.floats(0, 1),
)
def test_recover_big_messages(sizes: list[int], crash_frac: float) -> None:
    root = tempfile.mkdtemp(prefix="rmq-recovery-big-")
    try:
        cfg = small_config(root, mapped_file_size_commit_log=5 * 1024 * 1024,
                           max_hash_slot_num=SLOTS, max_index_num=64)
        store = MessageStore.open(cfg, clock_ms=Clock())
        expected, _ = run_ops(store, [("put", s, i % 3) for i, s in enumerate(sizes)])
        store.dispatch_all()
        end = store.max_phys_offset
        crash(store)
        crash_at = int(end * crash_frac)
        corrupt(cfg, crash_at, b"", False)
        store = MessageStore.open(cfg, clock_ms=Clock())
        store.close()
        check_store(cfg, expected, crash_at)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_normal_recovery_truncates_dirty_tail(tmp_path: Path) -> None:
    """Even without an abort file, a garbled tail is cut and the CQ follows."""
    cfg = small_config(tmp_path, max_hash_slot_num=SLOTS, max_index_num=64)
    store = MessageStore.open(cfg, clock_ms=Clock())
    expected, _ = run_ops(store, [("put", 500, i % 3) for i in range(20)])
    store.close()
    crash_at = expected[-1]["off"] + 10
    corrupt(cfg, crash_at, b"\xff" * 30, False)
    store = MessageStore.open(cfg, clock_ms=Clock())
    assert store.recovery is not None and not store.recovery.abnormal
    assert store.max_phys_offset == expected[-1]["off"]
    store.close()
    assert check_store(cfg, expected, crash_at) == 19
