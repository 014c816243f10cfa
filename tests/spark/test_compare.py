"""The byte comparison and the tail probe (pure, no Spark): a differing byte anywhere is found
in its block, presence counts (absent != zeros), and where a store's records end is found from
its last file's tail exactly as a full decode finds it."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_cluster.spark_jobs.compare import (
    CompareTask,
    Member,
    compare_range,
    store_end,
    windows,
)
from rmq_cluster.spark_jobs.decode import decode_segment_range, list_segments
from rmq_cluster.spark_jobs.synth import make_msgs, write_commitlog_store, write_dledger_store


def _member(rid: int, d: Path) -> Member:
    return Member(rid, tuple((s.start, s.length, s.path) for s in list_segments(str(d))))


def _decoded_end(kind: str, d: Path, limit: int | None = None) -> int | None:
    ends = []
    for s in list_segments(str(d)):
        for r in decode_segment_range(kind, Path(s.path).read_bytes(), s.start):
            if r[12] is None and (limit is None or r[0] + r[1] <= limit):
                ends.append(r[0] + r[1])
    return max(ends) if ends else None


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 60), body=st.integers(0, 700), fb=st.sampled_from([1024, 4096]),
       dl=st.booleans(), cut=st.floats(0, 1))
def test_store_end_equals_a_full_decode(n: int, body: int, fb: int, dl: bool,
                                        cut: float) -> None:  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if dl:
            write_dledger_store(tmp, "n", make_msgs(n, body_size=body), fb)
            d, kind = root / "dledger-n" / "data", "dledger"
        else:
            write_commitlog_store(tmp, make_msgs(n, body_size=body), fb)
            d, kind = root / "commitlog", "commitlog"
        segs = list_segments(str(d))
        assert store_end(kind, segs) == _decoded_end(kind, d)
        total = segs[-1].start + segs[-1].length if segs else 0
        limit = int(total * cut)
        assert store_end(kind, segs, limit) == _decoded_end(kind, d, limit)


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 50_000), where=st.floats(0, 1), block=st.sampled_from([1, 64, 4096]),
       chunk=st.sampled_from([4096, 1 << 20]))
def test_a_differing_byte_is_found_in_its_block(size: int, where: float, block: int,
                                                chunk: int) -> None:  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp, "a"), Path(tmp, "b")
        a.mkdir()
        b.mkdir()
        data = bytes((i * 31 + 7) % 251 for i in range(size))
        (a / f"{0:020d}").write_bytes(data)
        (b / f"{0:020d}").write_bytes(data)
        t = CompareTask("g", "data", 0, size, _member(0, a), (_member(1, b),), block)
        assert compare_range(t, chunk) == [(1, "data", ())]
        pos = min(size - 1, int(size * where))
        flipped = bytearray(data)
        flipped[pos] ^= 0x10
        (b / f"{0:020d}").write_bytes(bytes(flipped))
        ((lo, hi),) = compare_range(t, chunk)[0][2]
        assert lo <= pos < hi and lo % block == 0 and hi - lo <= max(block, 1)
        # absent differs from present zeros
        (b / f"{0:020d}").write_bytes(bytes(size))
        (a / f"{0:020d}").write_bytes(bytes(size))
        short = Member(1, ((0, size // 2, str(b / f"{0:020d}")),))
        t2 = CompareTask("g", "data", 0, size, _member(0, a), (short,), block)
        runs = compare_range(t2, chunk)[0][2]
        assert bool(runs) == (size // 2 < size) and all(hi > size // 2 for _, hi in runs)


def test_windows_start_at_the_record_holding_the_block(tmp_path: Path) -> None:
    placed = write_commitlog_store(str(tmp_path), make_msgs(40, body_size=300), 4096)
    segs = {0: list_segments(str(tmp_path / "commitlog"))}
    rec = placed[20]
    (w,) = windows("commitlog", segs, [(rec.phy_offset + 100, rec.phy_offset + 164)])
    assert w == (rec.phy_offset, rec.phy_offset + 164)
    # two runs inside one record's reach merge; far apart ones do not
    got = windows("commitlog", segs, [(placed[3].phy_offset + 5, placed[3].phy_offset + 6),
                                      (placed[3].phy_offset + 9, placed[3].phy_offset + 10),
                                      (placed[30].phy_offset, placed[30].phy_offset + 1)])
    assert got == [(placed[3].phy_offset, placed[3].phy_offset + 10),
                   (placed[30].phy_offset, placed[30].phy_offset + 1)]
