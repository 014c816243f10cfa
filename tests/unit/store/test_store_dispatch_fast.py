"""The dispatcher's targeted property scan and fixed-offset reads give what a full decode gives.

``find_property`` must agree with ``decode_properties`` on any properties text (duplicates, empty
values, NUL/0x01 inside values, names that end in a wanted name, invalid UTF-8); the fast
dispatch loop must write the ConsumeQueue units and IndexFile entries that the full
``check_record`` request describes.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq_cluster.cluster.protocol.message import (
    Message,
    decode_properties,
    encode_record,
    index_key_hash,
)
from rmq_cluster.store.config import SCHEDULE_TOPIC
from rmq_cluster.store.message_store import MessageStore
from rmq_cluster.store.record import (
    PROP_DELAY,
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    find_property,
    is_dispatchable,
)
from tests.unit.store.store_testlib import read_cq_dir, read_index_entries, small_config

HOST = ("127.0.0.1", 10911)
WANTED = {"TAGS": PROP_TAGS, "KEYS": PROP_KEYS, "UNIQ_KEY": PROP_UNIQ_KEY, "DELAY": PROP_DELAY}

names = st.sampled_from(
    ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "XTAGS", "UNIQ_KEYS", "MYKEYS", "", "A", "TAG"]
)
values = st.one_of(
    st.sampled_from(["", "TagA", "k1 k2", " ", "x\x01y", "TAGS\x01v", "\x00", "3", "é中"]),
    st.text(max_size=8),
)
raw_values = st.one_of(values.map(lambda v: v.encode()), st.binary(max_size=6))
entries = st.lists(st.tuples(names, st.booleans(), raw_values), max_size=8)


def _encode(items: list[tuple[str, bool, bytes]], trailing: bool) -> bytes:
    parts = [n.encode() + (b"\x01" if sep else b"") + v for n, sep, v in items]
    return b"\x02".join(p.replace(b"\x02", b"") for p in parts) + (b"\x02" if trailing else b"")


@settings(max_examples=400, deadline=None)
@given(items=entries, trailing=st.booleans(), lead=st.binary(max_size=3))
def test_find_property_matches_decode_properties(
    items: list[tuple[str, bool, bytes]], trailing: bool, lead: bytes
) -> None:
    raw = _encode(items, trailing)
    decoded = decode_properties(raw)
    # searched inside a larger buffer too (the mmap case): the bounds must hold
    buf = lead.replace(b"\x02", b"") + raw + b"TAGS\x01tail"
    start = len(buf) - len(raw) - len(b"TAGS\x01tail")
    for name, key in WANTED.items():
        found = find_property(buf, key, start, start + len(raw))
        got = None if found is None else found.decode("utf-8", "replace")
        assert got == decoded.get(name), (name, raw)


props_maps = st.dictionaries(
    st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "XTAGS", "A"]),
    st.sampled_from(["TagA", "k1 k2", "k3", "é中", "U" * 40, "2", "x y  z"]),
    max_size=5,
)


@settings(
    max_examples=60, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    msgs=st.lists(
        st.tuples(
            props_maps,
            st.sampled_from(["T", "Té", SCHEDULE_TOPIC]),
            st.integers(0, 2),
            st.sampled_from([0, 0x4, 0x8, 0xC]),
            st.one_of(st.none(), st.tuples(entries, st.booleans())),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_fast_dispatch_matches_full_decode(
    tmp_path_factory: object,
    msgs: list[
        tuple[dict[str, str], str, int, int, tuple[list[tuple[str, bool, bytes]], bool] | None]
    ],
) -> None:
    root = Path(tmp_path_factory.mktemp("fast"))  # type: ignore[attr-defined]
    cfg = small_config(root)
    store = MessageStore.open(cfg)
    try:
        next_qo: dict[tuple[str, int], int] = {}
        for props, topic, qid, txn, raw in msgs:
            qo = next_qo.get((topic, qid), 0)
            if is_dispatchable(txn):
                next_qo[(topic, qid)] = qo + 1
            # bytes appended raw (replication path): the store's own delay rewrite stays out
            # of the way, so SCHEDULE_TOPIC records carry DELAY as written
            phys = store.max_phys_offset
            rec = encode_record(
                Message(topic=topic, body=os.urandom(30), queue_id=qid, properties=props,
                        sys_flag=txn, store_host=HOST),
                queue_offset=qo, phys_offset=phys, store_timestamp=1_700_000_000_000,
                # raw properties text: duplicates, empty values, look-alike names, bad UTF-8
                properties=None if raw is None else _encode(*raw),
            )
            store.append_raw(phys, rec)
        store.dispatch_all()
        cl = store.commitlog
        expected_units: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        expected_keys: list[tuple[int, int]] = []
        mf = cl.queue.files[0]
        pos = 0
        while True:
            size, req = cl.check_record(mf.view, pos, 0, check_crc=False, strict=False)
            if size <= 0 or req is None:
                break
            if is_dispatchable(req.sys_flag):
                expected_units.setdefault((req.topic, req.queue_id), []).append(
                    (req.commitlog_offset, req.msg_size, req.tags_code)
                )
            if (req.sys_flag & 0xC) != 0xC:
                keys = ([req.uniq_key] if req.uniq_key else []) + [
                    k for k in req.keys.split(" ") if k
                ]
                expected_keys += [(index_key_hash(f"{req.topic}#{k}"), req.commitlog_offset)
                                  for k in keys]
            pos += size
        assert pos == cl.max_offset
        for (topic, qid), units in expected_units.items():
            assert read_cq_dir(str(root), topic, qid) == units
        store.flush_all_sync()
        assert sorted(read_index_entries(str(root), 64)) == sorted(expected_keys)
    finally:
        store.close()


def test_dispatch_stops_at_a_corrupt_record(tmp_path: Path) -> None:
    store = MessageStore.open(small_config(tmp_path))
    try:
        rec = encode_record(
            Message(topic="T", body=b"x" * 10, properties={"TAGS": "a"}, store_host=HOST),
            queue_offset=0, phys_offset=0, store_timestamp=1,
        )
        bad = bytearray(rec)
        struct.pack_into(">i", bad, 84, 10_000)  # BODYLEN beyond the record
        store.append_raw(0, rec)
        store.append_raw(len(rec), bytes(bad))
        assert store.dispatch_all() == 1
        assert store.dispatcher.stuck_at == len(rec)
        assert store.dispatcher.reput_from == len(rec)
    finally:
        store.close()


def test_queues_taking_turns_cost_one_call_per_record(tmp_path: Path) -> None:
    """Single sends spread over a topic's queues make every record a run of its own: the
    dispatch loop then writes its unit, checks its segment (the shell's deferred creation on)
    and gathers its UNIQ_KEY without a Python call of its own beyond the unit's ``put`` (main
    after issue 32 made 5-6 a record: wants_file, needs_file, file_end, _end_run,
    _index_record; ~25 % more reput work a message)."""
    store = MessageStore.open(small_config(tmp_path, mapped_file_size_consume_queue=20 * 4096))
    queues, rounds = 4, 100
    try:
        d = store.dispatcher
        phys = 0
        for i in range(rounds * queues):
            qid = i % queues
            rec = encode_record(
                Message(topic="T", body=b"x" * 16, queue_id=qid, store_host=HOST,
                        properties={"TAGS": "a", "UNIQ_KEY": f"{i:032X}"}),
                queue_offset=i // queues, phys_offset=phys, store_timestamp=1_700_000_000_000,
            )  # fmt: skip
            store.append_raw(phys, rec)
            phys += len(rec)
            if i == queues - 1:  # every queue's first segment made: deferral on from here
                assert store.dispatch_all() == queues
                d.on_file_wanted = lambda: None
        calls = [0]

        def profile(_frame: object, event: str, _arg: object) -> None:
            if event == "call":
                calls[0] += 1

        sys.setprofile(profile)
        try:
            dispatched = d.dispatch()
        finally:
            sys.setprofile(None)
        assert dispatched == (rounds - 1) * queues
        assert calls[0] / dispatched < 1.5, calls[0] / dispatched
        assert [u[0] for u in read_cq_dir(str(tmp_path), "T", 3)][-1] == phys - len(rec)
    finally:
        store.close()
