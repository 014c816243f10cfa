"""log_storage: the byte layout (golden, written from the reference table), recovery from every
truncation/corruption point, truncation, atomic term/vote, and memory/file twins agreeing."""

from __future__ import annotations

import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_cluster.dledger.log_storage import (
    CURRTERM_FILE,
    FileLogStorage,
    HardState,
    LogStorage,
    MemoryLogStorage,
    StorageError,
    read_hard_state,
)
from rmq_cluster.dledger.messages import Entry

DATA_BYTES = 256
INDEX_BYTES = 32 * 4


def be(n: int, width: int) -> bytes:
    return (n & ((1 << (8 * width)) - 1)).to_bytes(width, "big")


def golden_entry(index: int, term: int, pos: int, body: bytes, prev_chain: int) -> bytes:
    """Built field by field from store-and-replication.md §7.6 (not from the module's structs)."""
    body_crc = zlib.crc32(body)
    chain = zlib.crc32(be(index, 8) + be(term, 8) + be(pos, 8) + be(0, 4) + be(body_crc, 4),
                       prev_chain)
    return (
        be(1, 4)                      # 0 magic
        + be(48 + len(body), 4)       # 4 size
        + be(index, 8)                # 8 index
        + be(term, 8)                 # 16 term
        + be(pos, 8)                  # 24 pos
        + be(0, 4)                    # 32 channel
        + be(chain, 4)                # 36 chainCrc
        + be(body_crc, 4)             # 40 bodyCrc
        + be(len(body), 4)            # 44 body length
        + body                        # 48 body
    ), chain


def golden_index(pos: int, size: int, index: int, term: int) -> bytes:
    return be(1, 4) + be(pos, 8) + be(size, 4) + be(index, 8) + be(term, 8)


def open_store(d: Path, *, fsync: bool = False) -> FileLogStorage:
    """Small files; no fsync by default (recovery here is from process crashes)."""
    return FileLogStorage(d, data_file_bytes=DATA_BYTES, index_file_bytes=INDEX_BYTES,
                          fsync=fsync)


def entries_of(bodies: list[bytes], term: int = 1, start: int = 0) -> list[Entry]:
    return [Entry(start + i, term, b) for i, b in enumerate(bodies)]


def test_layout_golden(tmp_path: Path) -> None:
    s = FileLogStorage(tmp_path, data_file_bytes=4096, index_file_bytes=32 * 16)
    s.append([Entry(0, 1, b"hello"), Entry(1, 1, b""), Entry(2, 3, b"x" * 10)])
    s.sync()
    s.close()
    e0, c0 = golden_entry(0, 1, 0, b"hello", 0)
    e1, c1 = golden_entry(1, 1, 53, b"", c0)
    e2, _ = golden_entry(2, 3, 101, b"x" * 10, c1)
    data = (tmp_path / "data" / "00000000000000000000").read_bytes()
    assert len(data) == 4096
    assert data[: 53 + 48 + 58] == e0 + e1 + e2
    assert data[159:] == bytes(4096 - 159)
    index = (tmp_path / "index" / "00000000000000000000").read_bytes()
    assert index[:96] == (
        golden_index(0, 53, 0, 1) + golden_index(53, 48, 1, 1) + golden_index(101, 58, 2, 3)
    )
    assert index[96:] == bytes(len(index) - 96)


def test_reads_dledger_written_entries_with_zero_crcs(tmp_path: Path) -> None:
    """DLedger 0.3.x writes chainCrc = bodyCrc = 0: recovery accepts them structurally."""
    (tmp_path / "data").mkdir()
    raw = b""
    for index, body in enumerate([b"java-1", b"java-22"]):
        pos = len(raw)
        raw += (be(1, 4) + be(48 + len(body), 4) + be(index, 8) + be(1, 8) + be(pos, 8)
                + be(0, 4) + be(0, 4) + be(0, 4) + be(len(body), 4) + body)
    (tmp_path / "data" / "00000000000000000000").write_bytes(raw + bytes(4096 - len(raw)))
    s = FileLogStorage(tmp_path, data_file_bytes=4096, index_file_bytes=32 * 16, fsync=False)
    assert [e.body for e in s.entries(0, 10)] == [b"java-1", b"java-22"]
    s.append([Entry(2, 2, b"ours")])
    s.sync()
    s.close()
    s = FileLogStorage(tmp_path, data_file_bytes=4096, index_file_bytes=32 * 16, fsync=False)
    assert [e.body for e in s.entries(0, 10)] == [b"java-1", b"java-22", b"ours"]
    index = (tmp_path / "index" / "00000000000000000000").read_bytes()
    assert index[:32] == golden_index(0, 54, 0, 1)
    s.close()


def test_blank_and_file_roll(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    s.append(entries_of([b"a" * 100, b"b" * 100]))  # 148 + 148 > 256: second goes to file 256
    s.sync()
    s.close()
    first = (tmp_path / "data" / "00000000000000000000").read_bytes()
    assert first[148:156] == be(-1, 4) + be(256 - 148, 4)
    second = (tmp_path / "data" / "00000000000000000256").read_bytes()
    assert second[:4] == be(1, 4) and second[24:32] == be(256, 8)
    s = open_store(tmp_path)
    assert [e.body for e in s.entries(0, 10)] == [b"a" * 100, b"b" * 100]
    assert s.entry_pos(1) == 256
    s.close()


BODIES = [b"one", b"", b"three" * 9, b"four" * 30, b"5", b"six" * 20]


def _written(tmp_path: Path) -> tuple[Path, list[int], list[int]]:
    """A small multi-file store; returns its dir and each entry's start and end offsets."""
    src = tmp_path / "src"
    s = open_store(src)
    starts, ends = [], []
    for i, b in enumerate(BODIES):
        s.append([Entry(i, 1 + i // 2, b)])
        starts.append(s.entry_pos(i))
        ends.append(s.write_pos)
    s.sync()
    s.close()
    assert starts != [0, *ends[:-1]]  # at least one file roll with a blank
    return src, starts, ends


@pytest.fixture
def fast_tmp(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs directory when there is one: the every-byte recovery loops create and truncate
    thousands of small files, which a busy disk makes slow."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(prefix="dledger-test-", dir=shm))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _files(src: Path) -> dict[int, bytes]:
    return {int(f.name): f.read_bytes() for f in (src / "data").iterdir()}


def _reset(d: Path, files: dict[int, bytes]) -> None:
    """Make ``d`` a store holding exactly these data files and no index (recovery rebuilds it):
    cheaper than a copytree per case."""
    (d / "data").mkdir(parents=True, exist_ok=True)
    for f in (d / "data").iterdir():
        if int(f.name) not in files:
            f.unlink()
    for start, raw in files.items():
        (d / "data" / f"{start:020d}").write_bytes(raw)
    shutil.rmtree(d / "index", ignore_errors=True)


def _flat(src: Path) -> bytes:
    out = bytearray()
    for f in sorted((src / "data").iterdir()):
        out += f.read_bytes()
    return bytes(out)


def test_recovery_from_every_truncation_point(fast_tmp: Path) -> None:
    tmp_path = fast_tmp
    src, starts, ends = _written(tmp_path)
    original = _flat(src)
    files = _files(src)
    d = tmp_path / "work"
    for cut in range(ends[-1] + 1):
        cut_files = {}
        for start, raw in files.items():
            keep = min(max(cut - start, 0), len(raw))
            cut_files[start] = raw[:keep] + bytes(len(raw) - keep)
        _reset(d, cut_files)
        s = open_store(d)
        # an entry survives if the cut left its bytes intact (zeroing bytes that were already
        # zero, e.g. the CRC and length of an empty body, changes nothing), or if only its
        # chain CRC is gone from an empty-body entry: both CRCs 0 reads as a DLedger-written
        # entry, whose index/term/pos/body are all intact
        survivors = 0
        for lo, hi in zip(starts, ends, strict=True):
            before = original[lo:hi]
            after = before[: max(cut - lo, 0)].ljust(hi - lo, b"\0")
            intact = before == after
            # only the chain CRC changed, to 0, and the body CRC is 0 (an empty body)
            crcs_zeroed = (
                before[:36] == after[:36] and before[40:] == after[40:]
                and after[36:44] == bytes(8)
            )
            if intact or crcs_zeroed:
                survivors += 1
            else:
                break
        assert s.last_index() == survivors - 1, cut
        assert [e.body for e in s.entries(0, 100)] == BODIES[:survivors]
        # the store keeps working after recovery: append continues at the next index
        s.append([Entry(survivors, 9, b"after")])
        s.sync()
        s.close()
        s = open_store(d)
        assert s.last_index() == survivors and s.term_at(survivors) == 9
        s.close()


def test_recovery_from_every_garbled_byte(fast_tmp: Path) -> None:
    tmp_path = fast_tmp
    src, starts, ends = _written(tmp_path)
    files = _files(src)
    d = tmp_path / "work"
    for at in range(ends[-1]):
        fstart = at - at % DATA_BYTES
        raw = bytearray(files[fstart])
        raw[at - fstart] ^= 0x41
        _reset(d, {**files, fstart: bytes(raw)})
        s = open_store(d)
        # the entry holding the byte is dropped with everything after it; so is everything
        # after a garbled blank header; padding after a blank header does not matter
        spans = enumerate(zip(starts, ends, strict=True))
        hit = next((i for i, (lo, hi) in spans if lo <= at < hi), None)
        if hit is None:
            nxt = next(i for i, lo in enumerate(starts) if lo > at)
            blank_header = ends[nxt - 1] <= at < ends[nxt - 1] + 8
            expect = nxt if blank_header else len(BODIES)
        else:
            expect = hit
        assert s.last_index() == expect - 1, at
        s.close()


def test_index_rewritten_from_data(tmp_path: Path) -> None:
    src, _, _ = _written(tmp_path)
    (src / "index" / "00000000000000000000").write_bytes(bytes(INDEX_BYTES))
    s = open_store(src)
    assert s.last_index() == len(BODIES) - 1
    s.close()
    raw = (src / "index" / "00000000000000000000").read_bytes()
    assert raw[:32] == golden_index(0, 51, 0, 1)


def test_hard_state_atomic(tmp_path: Path) -> None:
    s = open_store(tmp_path, fsync=True)
    assert s.load_hard_state() == HardState(0, "")
    s.save_hard_state(HardState(3, "n2"))
    assert (tmp_path / CURRTERM_FILE).read_text() == "currTerm=3\nvoteLeader=n2\n"
    assert not (tmp_path / (CURRTERM_FILE + ".tmp")).exists()
    s.close()
    # a crash in the middle of the next save leaves only a torn temp file behind
    (tmp_path / (CURRTERM_FILE + ".tmp")).write_bytes(b"currTerm=4\nvoteLea")
    s = open_store(tmp_path, fsync=True)
    assert s.load_hard_state() == HardState(3, "n2")
    s.save_hard_state(HardState(4, ""))
    s.close()
    assert read_hard_state(tmp_path / CURRTERM_FILE) == HardState(4, "")


def test_truncate_then_append_survives_reopen(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    s.append(entries_of([b"a" * 60, b"b" * 60, b"c" * 60, b"d" * 60]))
    s.truncate_suffix(1)
    s.append([Entry(1, 2, b"B")])
    s.sync()
    s.close()
    s = open_store(tmp_path)
    assert [(e.term, e.body) for e in s.entries(0, 10)] == [(1, b"a" * 60), (2, b"B")]
    with pytest.raises(StorageError):
        s.append([Entry(5, 2, b"gap")])
    s.close()


def test_memory_crash_loses_only_unsynced() -> None:
    m = MemoryLogStorage()
    m.append(entries_of([b"a", b"b", b"c"]))
    m.sync()
    m.truncate_suffix(1)
    m.append([Entry(1, 2, b"x")])
    m.crash()
    assert [e.body for e in m.entries(0, 10)] == [b"a", b"b", b"c"]
    m.truncate_suffix(2)
    m.sync()
    m.crash()
    assert [e.body for e in m.entries(0, 10)] == [b"a", b"b"]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.binary(max_size=90), min_size=1, max_size=4)),
        st.tuples(st.just("truncate"), st.integers(0, 20)),
        st.tuples(st.just("reopen"), st.just([])),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops=ops)
def test_memory_and_file_twins_agree(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:
    d = tmp_path_factory.mktemp("twin")
    f: LogStorage = open_store(d)
    m = MemoryLogStorage()
    term = 1
    try:
        for kind, arg in ops:
            if kind == "append":
                term += 1
                ents = [Entry(m.last_index() + 1 + i, term, b) for i, b in enumerate(arg)]
                m.append(ents)
                f.append(ents)
            elif kind == "truncate":
                m.truncate_suffix(arg)
                f.truncate_suffix(arg)
            else:
                f.sync()
                f.close()
                f = open_store(d)
            assert f.last_index() == m.last_index()
            assert f.last_term() == m.last_term()
            assert f.entries(0, 100) == m.entries(0, 100)
            if m.last_index() >= 0:
                assert f.term_at(m.last_index()) == m.term_at(m.last_index())
    finally:
        f.close()
    assert os.path.isdir(d / "data")
