"""``IndexService.index_uniq_run`` writes the IndexFile bytes that one ``index_raw_keys`` call
per record writes: runs that mix plain client keys of two lengths with keys that are not plain
(too short, non-ASCII of the same length, longer than the hash's reach), under ASCII and
non-ASCII topics, into small files that roll over inside a run, with records replayed."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq_cluster.store.index_file import _HASH_UNITS, IndexService, _plain_stretches

SLOTS = 7
ENTRIES = 9  # a file takes 8 entries: runs roll over inside
T0 = 1_700_000_000_000

_HEX = "0123456789ABCDEF"
keys = st.one_of(
    st.text(_HEX, min_size=32, max_size=32),  # a Java client's UNIQ_KEY
    st.text(_HEX, min_size=20, max_size=20),  # another client's length
    st.text(_HEX, min_size=1, max_size=12),  # too short for the stretch's hash
    st.text(_HEX + "é", min_size=31, max_size=31),  # 32 UTF-8 bytes, maybe not ASCII
    st.text(_HEX, min_size=_HASH_UNITS + 1, max_size=_HASH_UNITS + 3),  # past the hash's reach
).map(str.encode)
#: (key, gap to the previous record's offset (they rise along a run), store time step in ms)
records = st.lists(st.tuples(keys, st.integers(1, 3), st.integers(0, 2500)), max_size=40)


def _service(root: str, name: str) -> IndexService:
    svc = IndexService(str(Path(root) / name), SLOTS, ENTRIES, clock_ms=lambda: T0)
    svc.load()
    return svc


def _bytes(svc: IndexService) -> list[bytes]:
    svc.write_headers()
    return [bytes(f.mm) for f in svc.files]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["T", "TopicTest", "Tö"]), st.lists(records, min_size=1, max_size=4))
def test_a_run_writes_what_one_call_per_record_writes(topic: str, runs: list) -> None:
    with tempfile.TemporaryDirectory() as root:
        batched, single = _service(root, "batched"), _service(root, "single")
        phys, ts = 100, T0
        for spec in runs:
            run = []
            for key, gap, step in spec:
                phys, ts = phys + 50 * gap, ts + step
                run.append((key, phys, ts))
            batched.index_uniq_run(topic, run)
            for key, at, when in run:
                single.index_raw_keys(topic, key, None, at, when)
            phys -= 120  # the next run replays a few of this one's records (a reput again)
        assert _bytes(batched) == _bytes(single)


def test_stretches_end_at_a_key_that_is_not_plain_or_of_another_length() -> None:
    a, b = b"A" * 32, b"B" * 20
    odd = "é".encode() * 16  # 32 bytes, not ASCII
    run = [(k, i, T0) for i, k in enumerate([a, a, odd, a, b, b, b"short", a])]
    assert _plain_stretches(1, run) == [(0, 2), (3, 4), (4, 6), (7, 8)]
    assert _plain_stretches(-1, run) == []  # a topic that is not ASCII: none
    assert _plain_stretches(1, [(a, i, T0) for i in range(5)]) == [(0, 5)]


def test_a_replayed_record_is_not_indexed_again_when_the_newest_file_is_full() -> None:
    """A reput replaying a record the full newest file holds already (after a recovery) rolls
    over to a new file, whose end is the full one's: the record is not indexed again there, as
    ``index_keys`` (and RocketMQ's ``buildIndex``) decide after the rollover too."""
    key = b"7F0000011F2A18B4AAC2000000000001"
    with tempfile.TemporaryDirectory() as root:
        svc = _service(root, "index")
        for i in range(ENTRIES - 1):
            svc.index_raw_keys("T", key, None, 100 + 50 * i, T0)
        assert [f.index_count for f in svc.files] == [ENTRIES]
        svc.index_raw_keys("T", key, None, 150, T0)  # replayed
        assert [f.index_count for f in svc.files] == [ENTRIES, 1]
        svc.index_raw_keys("T", key, None, 100 + 50 * ENTRIES, T0)  # the next new record
        assert [f.index_count for f in svc.files] == [ENTRIES, 2]
