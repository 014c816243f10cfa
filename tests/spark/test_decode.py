"""Pure decoders: split invariance, END_OF_FILE blanks, torn tails and garbage reported (never
a crash), DLedger entries wrapping records, ConsumeQueue units, planning and inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_cluster.spark_jobs.decode import (
    A_BAD_CRC,
    A_GARBAGE,
    A_TORN,
    decode_commitlog,
    decode_cq,
    decode_dledger,
    list_segments,
)
from rmq_cluster.spark_jobs.model import (
    K_MISSING_SEGMENT,
    BadInput,
    check_groups,
    choose_masters,
    make_replica,
    parse_replica_spec,
    plan_scan,
    replicas_from_cluster_dir,
)
from rmq_cluster.spark_jobs.report import render_html
from rmq_cluster.spark_jobs.synth import Msg, make_msgs, write_commitlog_store, write_dledger_store

FB = 2048


def _files(root: Path, sub: str = "commitlog") -> list[bytes]:
    return [Path(s.path).read_bytes() for s in list_segments(str(root / sub))]


def _decode_all(root: Path, *, dl: bool = False, verify: bool = False, split: int | None = None):
    sub = "dledger-n/data" if dl else "commitlog"
    fn = decode_dledger if dl else decode_commitlog
    rows = []
    for s in list_segments(str(root / sub)):
        data = Path(s.path).read_bytes()
        step = split or len(data)
        for lo in range(0, len(data), step):
            rows += list(fn(data, s.start, lo, lo + step, verify_crc=verify))
    return rows


def test_commitlog_records_blanks_and_fields(tmp_path: Path) -> None:
    placed = write_commitlog_store(str(tmp_path), make_msgs(60, body_size=150), FB)
    rows = _decode_all(tmp_path, verify=True)
    assert [r[0] for r in rows] == [p.phy_offset for p in placed]
    assert [(r[1], r[3], r[4], r[5]) for r in rows] == [
        (p.size, p.topic, p.queue_id, p.queue_offset) for p in placed
    ]
    assert all(r[12] is None for r in rows)
    assert rows[1][9] == "k1" and len(rows[1][8]) == 32  # keys, offset msgId
    assert len(_files(tmp_path)) > 3  # blanks rolled several files


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 50), split=st.integers(1, 3000), seed=st.integers(0, 10**6),
       junk=st.binary(min_size=1, max_size=24), dl=st.booleans())  # fmt: skip
def test_any_split_and_any_garbage_decode_the_same(
    tmp_path_factory: pytest.TempPathFactory, n: int, split: int, seed: int, junk: bytes,
    dl: bool,
) -> None:  # fmt: skip
    root = tmp_path_factory.mktemp("split")
    msgs = make_msgs(n, body_size=90)
    if dl:
        write_dledger_store(str(root), "n", msgs, FB)
    else:
        write_commitlog_store(str(root), msgs, FB)
    sub = "dledger-n/data" if dl else "commitlog"
    files = list_segments(str(root / sub))
    f = files[seed % len(files)]
    data = bytearray(Path(f.path).read_bytes())
    p = seed % len(data)
    data[p : p + len(junk)] = junk[: len(data) - p]
    Path(f.path).write_bytes(bytes(data))
    whole = _decode_all(root, dl=dl, verify=True)  # never raises
    assert _decode_all(root, dl=dl, verify=True, split=split) == whole
    offs = [r[0] for r in whole]
    assert offs == sorted(offs) and len(set(offs)) == len(offs)


def test_flipped_body_byte_is_a_crc_finding_only_when_verifying(tmp_path: Path) -> None:
    placed = write_commitlog_store(str(tmp_path), make_msgs(10, body_size=50), FB)
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[placed[2].phy_offset + 88 + 4] ^= 1
    path.write_bytes(bytes(data))
    assert all(r[12] is None for r in _decode_all(tmp_path))
    bad = [r for r in _decode_all(tmp_path, verify=True) if r[12]]
    assert [(r[0], r[12]) for r in bad] == [(placed[2].phy_offset, A_BAD_CRC)]


def test_torn_tail_and_garbage_are_reported(tmp_path: Path) -> None:
    placed = write_commitlog_store(str(tmp_path), make_msgs(5, body_size=50), 4096)
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    last = placed[-1]
    torn = data[: last.phy_offset + last.size // 2]  # a cut last record, file not preallocated
    rows = list(decode_commitlog(bytes(torn), 0))
    assert [r[0] for r in rows if r[12] is None] == [p.phy_offset for p in placed[:-1]]
    assert [(r[0], r[12]) for r in rows if r[12]] == [(last.phy_offset, A_TORN)]
    data[placed[1].phy_offset : placed[1].phy_offset + 8] = b"\x13" * 8
    rows = list(decode_commitlog(bytes(data), 0))
    assert [(r[0], r[12]) for r in rows if r[12]] == [(placed[1].phy_offset, A_GARBAGE)]
    assert [r[0] for r in rows if r[12] is None] == [
        p.phy_offset for i, p in enumerate(placed) if i != 1
    ]  # resynced on the next record


def test_dledger_entries_wrap_records_at_pos_plus_48(tmp_path: Path) -> None:
    placed = write_dledger_store(str(tmp_path), "n", make_msgs(40, body_size=70), FB, term=3)
    rows = _decode_all(tmp_path, dl=True, verify=True)
    assert [r[0] for r in rows] == [p.phy_offset for p in placed]
    assert {r[11] for r in rows} == {3} and all(r[12] is None for r in rows)
    assert placed[0].phy_offset == 48


def test_consume_queue_units(tmp_path: Path) -> None:
    placed = write_commitlog_store(str(tmp_path), make_msgs(30, body_size=10), FB)
    d = tmp_path / "consumequeue" / "T0" / "0"
    (seg,) = list_segments(str(d))
    units = list(decode_cq(Path(seg.path).read_bytes(), seg.start))
    mine = [p for p in placed if (p.topic, p.queue_id) == ("T0", 0)]
    assert [(u.cq_index, u.phy_offset, u.size) for u in units] == [
        (p.queue_offset, p.phy_offset, p.size) for p in mine
    ]
    filler = (0).to_bytes(8, "big") + (0x7FFFFFFF).to_bytes(4, "big") + bytes(8)
    units = list(decode_cq(filler * 2 + Path(seg.path).read_bytes(), 0))
    assert units[0].cq_index == 2  # placeholders skipped, indexes kept


def test_inputs_and_planning(tmp_path: Path) -> None:
    for n in ("a", "b"):
        write_commitlog_store(str(tmp_path / n), make_msgs(40, body_size=100), FB)
    a = parse_replica_spec(f"g:a:SYNC_MASTER:{tmp_path / 'a'}")
    b = parse_replica_spec(f"g:b:slave:{tmp_path / 'b'}")
    assert (a.role, b.role, a.kind) == ("SYNC_MASTER", "SLAVE", "commitlog")
    check_groups([a, b])
    with pytest.raises(BadInput):
        check_groups([b])
    with pytest.raises(BadInput):
        parse_replica_spec(f"g:a:BOSS:{tmp_path / 'a'}")
    files = list_segments(str(tmp_path / "b" / "commitlog"))
    Path(files[1].path).unlink()
    tasks, found, _ = plan_scan([a, b], 700, verify_crc=False)
    assert [(f.kind, f.offset, f.end) for f in found] == [
        (K_MISSING_SEGMENT, files[1].start, files[2].start)
    ]
    assert all(t.hi - t.lo <= 700 for t in tasks)
    # DLedger groups without a declared leader follow the longest log
    dl = [make_replica("d", n, "DLEDGER", str(tmp_path / n)) for n in ("a", "b")]
    assert choose_masters(dl, {0: 10, 1: 20}) == {"d": 1}


def test_cluster_json(tmp_path: Path) -> None:
    for n in ("broker-a-0", "broker-a-1"):
        write_commitlog_store(str(tmp_path / "store" / n), [Msg("T", 0, b"x")], FB)
    nodes = [
        {"name": "ns", "kind": "namesrv"},
        {"name": "broker-a-0", "kind": "broker", "group": "broker-a", "role": "ASYNC_MASTER",
         "broker_id": 0},
        {"name": "broker-a-1", "kind": "broker", "group": "broker-a", "role": "SLAVE",
         "broker_id": 1},
    ]  # fmt: skip
    (tmp_path / "cluster.json").write_text(json.dumps({"topology": {"nodes": nodes}}))
    reps = replicas_from_cluster_dir(str(tmp_path))
    assert [(r.group, r.node, r.role) for r in reps] == [
        ("broker-a", "broker-a-0", "ASYNC_MASTER"), ("broker-a", "broker-a-1", "SLAVE")
    ]
    (tmp_path / "cluster.json").write_text("{")
    with pytest.raises(BadInput):
        replicas_from_cluster_dir(str(tmp_path))


def test_html_report_is_self_contained() -> None:
    rep = {"role": "SLAVE", "kind": "commitlog", "is_master": False, "files": 2, "bytes": 10,
           "messages": 3, "end_offset": 100, "lag_bytes": 50, "lag_messages": 1,
           "common_prefix": 100, "findings": {"lag": 1}, "verdict": "lagging", "store": "x"}
    summary = {
        "exit_code": 1, "verdict": "divergent", "allow_lag": False, "verify_crc": False,
        "elapsed_s": 1.0, "first_findings": [],
        "groups": {"g<1>": {"master": "m", "replicas": {"s": rep, "m": {
            **rep, "is_master": True, "verdict": "consistent", "end_offset": 150}}}},
        "divergence_map": {"buckets": 100, "bucket_bytes": {"g<1>": 2},
                           "counts": {"g<1>": {"s": {"50": 1}}}},
    }  # fmt: skip
    html = render_html(summary)
    assert html.count("<svg") == 2 and "g&lt;1&gt;" in html and "<script" not in html
    assert "http" not in html  # no external resources


def test_dledger_layout_constants_agree_with_the_store() -> None:
    from rmq_cluster.dledger import log_storage
    from rmq_cluster.spark_jobs import decode

    assert (decode.DL_ENTRY_MAGIC, decode.DL_BLANK_MAGIC, decode.DL_BODY_OFFSET) == (
        log_storage.ENTRY_MAGIC, log_storage.BLANK_MAGIC, log_storage.BODY_OFFSET
    )


def test_package_archive_alone_imports_the_job(tmp_path: Path) -> None:
    """``--package``: the archive, without site-packages, imports everything the executors do
    (and no compiled wheel such as orjson)."""
    import subprocess
    import sys
    import zipfile

    from rmq_cluster.spark_jobs.package import build_package

    z = tmp_path / "job.zip"
    names = build_package(str(z))
    assert {"rmq_cluster/", "rmq_cluster/spark_jobs/", "attrs/", "attr/"} <= set(names)
    assert zipfile.ZipFile(z).namelist() == names
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "import rmq_cluster.spark_jobs.replica_diff, rmq_cluster.spark_jobs.model; "
            "assert 'orjson' not in sys.modules; print(rmq_cluster.spark_jobs.model.__file__)")
    out = subprocess.run([sys.executable, "-S", "-c", code, str(z)], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(z))
