"""The dispatcher's batched paths write what the record-by-record general path writes.

``Dispatcher.dispatch`` gathers ConsumeQueue units into runs (``ConsumeQueue.put_run``), index
entries of UNIQ_KEY-only records into ``IndexService.index_uniq_run``, reads a record whose
properties match the previous one's but for the UNIQ_KEY value through a template, and tells
arrival listeners once per run. Here a master appends batches and single sends built to hit
and to miss every one of those paths (UNIQ values of one length holding 0x01, 0x02, look-alike
names, non-ASCII; KEYS; tag changes inside a batch; delayed and transactional records; index
file, ConsumeQueue segment and CommitLog file rollovers), and four stores must end with the
same ConsumeQueue and IndexFile bytes:

* the master itself, dispatching as it appends (rounds of random size; a batch appended while
  the reput is caught up is dispatched by its put, ``Dispatcher.dispatch_batch``, from what the
  put knows of its records: seeds with plain items make that the usual case);
* a reference built by ``check_record`` + ``dispatch_request`` one record at a time (the general,
  decode-everything path);
* a slave fed the master's CommitLog bytes in random chunks that cut records, dispatching after
  each chunk;
* a store recovered from the master's CommitLog alone (ConsumeQueue and index rebuilt).

The master's arrival notifications must also wake exactly the parked pulls that one call per
record would wake.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.cluster.protocol.message import (
    SYSFLAG_TRANSACTION_COMMIT_TYPE,
    SYSFLAG_TRANSACTION_PREPARED_TYPE,
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
    Message,
    encode_batch,
    encode_offset_msg_id,
)
from rmq_cluster.store.index_file import _ascii_hash
from rmq_cluster.store.message_store import MessageStore
from rmq_cluster.store.record import is_dispatchable
from tests.unit.store.store_testlib import java_hash, small_config

HOST = ("127.0.0.1", 10911)
BORN = ("10.0.0.7", 40000)
UNIQ_LEN = 32


def _uniq(rng: random.Random, n: int) -> str:
    """A 32-byte UNIQ_KEY value: mostly client-style hex, sometimes built to trip a template."""
    roll = rng.random()
    if roll < 0.6:
        return f"7F0000011F2A18B4AAC2{n:012X}"
    tricky = [
        "UNIQ_KEY\x01" + f"{n:023d}",  # the name inside a value
        "KEYS\x01k" + f"{n:026d}",  # a KEYS look-alike (no 0x02 before it: stays a value)
        "ab\x02KEYS\x01k1 k2" + f"{n:019d}",  # 0x02 splits it: a real KEYS entry follows
        "x\x01y" + f"{n:029d}",  # 0x01 inside a value
        "é" * 16,  # non-ASCII, 32 bytes
        "TAGS\x01" + f"{n:027d}",
    ]
    value = rng.choice(tricky)
    assert len(value.encode()) == UNIQ_LEN
    return value


def _item_props(rng: random.Random, n: int, odd: float = 1.0) -> dict[str, str]:
    """An item's properties; ``odd`` scales how often they hold anything but a client-style
    UNIQ_KEY (TAGS, KEYS, tricky or short UNIQ_KEY values, none)."""
    roll = rng.random() / odd
    if roll < 0.05:
        return {}
    if roll < 0.12:
        return {"TAGS": rng.choice(["TagA", "TagB"])}  # no UNIQ_KEY: a whole-match template
    props: dict[str, str] = {}
    if roll < 0.1:
        props["UNIQ_KEY"] = f"{n:08X}"  # short keys take the general index path
    else:
        props["UNIQ_KEY"] = _uniq(rng, n) if rng.random() < odd else f"7F0000011F2A18B4AAC2{n:012X}"
    if rng.random() < 0.15 * odd:
        props["TAGS"] = rng.choice(["TagA", "TagB", "é"])
    if rng.random() < 0.08 * odd:
        props["KEYS"] = rng.choice(["k1", "k1 k2", " k3 "])
    return props


def _workload(master: MessageStore, rng: random.Random, rounds: int, odd: float = 1.0) -> int:
    """Random batches and single puts, dispatched in rounds of random size; how many batches
    the put dispatched itself (``Dispatcher.dispatch_batch``: nothing left for the reput)."""
    n = itertools.count()
    topics = ["TopicA", "TopicB", "Töpic"]
    inline = 0
    for _ in range(rounds):
        kind = rng.random()
        topic = rng.choice(topics)
        qid = rng.randrange(3)
        if kind < 0.55:
            items = [
                (0, os.urandom(rng.randrange(1, 300)), _item_props(rng, next(n), odd))
                for _ in range(rng.randrange(1, 40))
            ]
            extra = rng.choice([{}, {"TAGS": "TagA"}, {"CLUSTER": "c1", "TAGS": "TagB"},
                                {"CLUSTER": "c1", "TAGS": ""}])
            caught_up = master.dispatcher.behind == 0
            res = master.append_messages(
                Message(topic=topic, body=encode_batch(items), queue_id=qid, properties=extra,
                        store_host=HOST, born_host=BORN)
            )
            inline += caught_up and master.dispatcher.behind == 0
            # the batch answer's msgId: one offset msgId per record, comma-separated
            assert res.result is not None
            assert res.result.msg_id == ",".join(
                encode_offset_msg_id(HOST, off) for off in res.result.offsets
            )
            assert len(res.result.offsets) == len(items)
        else:
            props = _item_props(rng, next(n))
            sys_flag = 0
            if kind < 0.62:
                props["DELAY"] = "2"
            elif kind < 0.7:
                sys_flag = rng.choice([
                    SYSFLAG_TRANSACTION_PREPARED_TYPE, SYSFLAG_TRANSACTION_COMMIT_TYPE,
                    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
                ])
            res = master.append_message(
                Message(topic=topic, body=os.urandom(rng.randrange(1, 300)), queue_id=qid,
                        properties=props, sys_flag=sys_flag, store_host=HOST, born_host=BORN)
            )
        assert res.ok, res
        if rng.random() < 0.5:
            # (plain seeds catch the reput up more often: their batches find it caught up)
            master.dispatch(rng.choice([1, 500, 4000, 1 << 20] if odd == 1 else [1 << 20]))
    master.dispatch_all()
    return inline


def _files(root: Path, sub: str) -> list[tuple[str, bytes]]:
    """(path under ``sub``, bytes) of every file; index files by order (names are times)."""
    base = root / sub
    out = []
    for dirpath, _dirs, names in sorted(os.walk(base)):
        for i, name in enumerate(sorted(names)):
            rel = os.path.relpath(os.path.join(dirpath, name), base)
            key = f"#{i}" if sub == "index" else rel
            out.append((key, (Path(dirpath) / name).read_bytes()))
    return sorted(out)


def _general_dispatch(store: MessageStore) -> None:
    """Record by record through check_record + dispatch_request (full property decode)."""
    cl = store.commitlog
    for mf in cl.queue.files:
        pos = 0
        while True:
            size, req = cl.check_record(mf.view, pos, mf.file_from, check_crc=True, strict=True)
            if size <= 0 or req is None:
                break
            store.dispatcher.dispatch_request(req)
            pos += size


def _cq_max(store: MessageStore) -> dict[tuple[str, int], tuple[int, int]]:
    return {
        key: (cq.max_physic_offset, cq.max_offset_in_queue) for key, cq in store.cqs.queues.items()
    }


def _clock() -> Any:
    ticks = itertools.count(1_700_000_000_000, 337)
    return lambda: next(ticks)


@pytest.mark.parametrize(("seed", "odd"), [(1, 1.0), (2, 1.0), (3, 1.0), (4, 0.1), (5, 0.02)])
def test_batched_dispatch_writes_the_general_paths_bytes(
    tmp_path: Path, seed: int, odd: float
) -> None:
    rng = random.Random(seed)
    arrivals: list[tuple[str, int, int, int]] = []

    def on_arrival(topic: str, qid: int, next_offset: int, code: int, _ts: int) -> None:
        arrivals.append((topic, qid, next_offset, code))

    cfg = {"max_index_num": 400}
    roots = {name: tmp_path / name for name in ("master", "general", "slave", "recovered")}
    master = MessageStore.open(
        small_config(roots["master"], **cfg), clock_ms=_clock(), on_arrival=on_arrival
    )
    try:
        inline = _workload(master, rng, rounds=160, odd=odd)
        if odd < 1:  # batches of plain items: most are dispatched by their put
            assert inline > 15, inline
        master.flush_all_sync()
        master_max = _cq_max(master)
        raw = b"".join(
            bytes(mf.view[: mf.wrote]) for mf in master.commitlog.queue.files
        )
        assert master.commitlog.min_offset == 0
        records = []
        cl = master.commitlog
        for mf in cl.queue.files:
            pos = 0
            while (rec := cl.check_record(mf.view, pos, mf.file_from, check_crc=True,
                                          strict=True))[0] > 0:
                assert rec[1] is not None
                records.append(rec[1])
                pos += rec[0]
    finally:
        master.close()
    assert len(records) > 1000
    shutil.copytree(roots["master"] / "commitlog", roots["recovered"] / "commitlog")

    general = MessageStore.open(small_config(roots["general"], **cfg), clock_ms=_clock())
    slave = MessageStore.open(small_config(roots["slave"], **cfg), clock_ms=_clock())
    try:
        general.append_raw(0, raw)
        _general_dispatch(general)
        pos = 0
        while pos < len(raw):
            step = rng.choice([7, 90, 1000, 5000, 40000])
            slave.append_raw(pos, raw[pos : pos + step])
            pos += step
            slave.dispatch(rng.choice([300, 1 << 20]))
        slave.dispatch_all()
        # a replayed dispatch (abnormal recovery re-dispatches from the checkpoint) writes nothing
        slave.dispatcher.reput_from = rng.choice([0, len(raw) // 2])
        slave.dispatch_all()
        general.flush_all_sync()
        slave.flush_all_sync()
        assert _cq_max(general) == _cq_max(slave) == master_max
    finally:
        general.close()
        slave.close()
    recovered = MessageStore.open(small_config(roots["recovered"], **cfg), clock_ms=_clock())
    recovered.close()

    for sub in ("consumequeue", "index"):
        want = _files(roots["general"], sub)
        assert want, sub
        for name in ("master", "slave", "recovered"):
            got = _files(roots[name], sub)
            assert [k for k, _ in got] == [k for k, _ in want], (name, sub)
            for (key, data), (_, expected) in zip(got, want, strict=True):
                assert data == expected, (name, sub, key)

    # arrivals: every notification names a real record, and for each queue and tagsCode the
    # newest record is announced (so any parked pull that one call per record would wake,
    # "an offset past mine with a matching tag", is woken)
    by_queue: dict[tuple[str, int], dict[int, int]] = {}
    for req in records:
        if is_dispatchable(req.sys_flag):
            codes = by_queue.setdefault((req.topic, req.queue_id), {})
            codes[req.queue_offset] = req.tags_code
    newest: dict[tuple[str, int, int], int] = {}
    for (topic, qid), codes in by_queue.items():
        for offset, code in codes.items():
            k = (topic, qid, code)
            newest[k] = max(newest.get(k, 0), offset + 1)
    told: dict[tuple[str, int, int], int] = {}
    for topic, qid, next_offset, code in arrivals:
        assert by_queue[(topic, qid)][next_offset - 1] == code
        k = (topic, qid, code)
        told[k] = max(told.get(k, 0), next_offset)
    assert told == newest
    assert len(arrivals) < len(records)  # batched: fewer calls than records


def test_ascii_hash_matches_java_hash_code() -> None:
    """``_ascii_hash`` (a cache of all but the last two bytes, a pair table for those) is
    Java's String.hashCode mod 2**32 for every length, cached head or not."""
    rng = random.Random(5)
    lengths = [*range(0, 40), 64, 200, 511, 512]
    for n in lengths:
        head = "".join(rng.choice("0123456789ABCDEF#%_-x") for _ in range(max(0, n - 2)))
        for _ in range(6):  # the same head with new tails: cache hits after the first
            key = (head + "".join(chr(rng.randrange(128)) for _ in range(2)))[:n]
            assert len(key) == n
            assert _ascii_hash(key.encode()) == java_hash(key) & 0xFFFFFFFF, key


@pytest.mark.parametrize("extra", [{}, {"CLUSTER": "c1", "WAIT": "true"}])
def test_batch_records_are_the_records_single_appends_write(
    tmp_path: Path, extra: dict[str, str]
) -> None:
    """append_batch writes, byte for byte, the records that one ``append`` per item writes for
    the same fields (item properties, then the batch's), so its per-record shortcuts (the
    one-pass header read, the joined properties copy, the offsets collected on the way) cannot
    drift from the general append."""
    rng = random.Random(9)
    items = []
    for i in range(rng.randrange(20, 60)):
        props = {} if i % 7 == 3 else {"UNIQ_KEY": f"{i:032X}", "TAGS": rng.choice(["a", "bb"])}
        if i % 5 == 1:
            props["KEYS"] = "k1 k2"
        items.append((rng.randrange(1 << 20), os.urandom(rng.randrange(0, 700)), props))
    fields: dict[str, Any] = dict(
        topic="T", queue_id=2, store_host=HOST, born_host=BORN, born_timestamp=123_456,
        reconsume_times=3,
    )
    batched = MessageStore.open(small_config(tmp_path / "b"), clock_ms=lambda: 1_700_000_000_000)
    single = MessageStore.open(small_config(tmp_path / "s"), clock_ms=lambda: 1_700_000_000_000)
    try:
        res = batched.append_messages(
            Message(body=encode_batch(items), properties=extra, **fields)
        )
        assert res.ok and res.result is not None
        offsets = []
        for flag, body, props in items:
            one = single.append_message(
                Message(body=body, flag=flag, properties={**props, **extra}, **fields)
            )
            assert one.ok and one.result is not None
            offsets.append(one.result.wrote_offset)
        assert list(res.result.offsets) == offsets
        assert res.result.wrote_bytes == single.commitlog.max_offset
        assert bytes(batched.commitlog.read_raw(0, 1 << 20) or b"") == bytes(
            single.commitlog.read_raw(0, 1 << 20) or b""
        )
    finally:
        batched.close()
        single.close()


def test_a_batch_is_dispatched_by_its_put_when_the_reput_is_caught_up(tmp_path: Path) -> None:
    """A batch appended while the reput has dispatched everything before it is in its
    ConsumeQueue and index as soon as the put returns (no reput round reads it back); a batch
    whose items carry KEYS, or differ in TAGS, waits for the reput, which reads its records;
    the next batch after it waits too (the reput is behind), and the reput's round dispatches
    both. The bytes are checked against the general path by the test above."""
    store = MessageStore.open(small_config(tmp_path / "s"), clock_ms=_clock())
    header = {"CLUSTER": "c1", "TAGS": "TagA", "WAIT": "true"}

    def batch(items: list[tuple[int, bytes, dict[str, str]]]) -> Any:
        res = store.append_messages(Message(topic="T", body=encode_batch(items), queue_id=1,
                                            properties=header, store_host=HOST, born_host=BORN))
        assert res.ok and res.result is not None
        return res.result

    def plain(start: int) -> list[tuple[int, bytes, dict[str, str]]]:
        return [(0, os.urandom(50), {"UNIQ_KEY": f"7F0000011F2A18B4AAC2{i:012X}"})
                for i in range(start, start + 20)]

    try:
        first = batch(plain(0))
        assert store.dispatcher.behind == 0
        cq = store.cqs.find("T", 1)
        assert cq is not None and cq.max_offset_in_queue == 20
        ends = [*first.offsets[1:], first.end_offset]
        tag = java_hash("TagA")
        assert [cq.get_unit(i) for i in range(20)] == [
            (at, end - at, tag) for at, end in zip(first.offsets, ends, strict=True)
        ]
        key = "7F0000011F2A18B4AAC2" + f"{7:012X}"
        assert store.index is not None
        assert store.index.query("T", key, 10, 0, 1 << 62) == [first.offsets[7]]

        keyed = plain(20)
        keyed[3][2]["KEYS"] = "k1"
        batch(keyed)
        assert store.dispatcher.behind > 0 and cq.max_offset_in_queue == 20
        batch(plain(40))  # behind: left to the reput too
        assert cq.max_offset_in_queue == 20
        assert store.dispatch_all() == 40
        assert cq.max_offset_in_queue == 60
        batch(plain(60))  # caught up again
        assert store.dispatcher.behind == 0 and cq.max_offset_in_queue == 80
    finally:
        store.close()
