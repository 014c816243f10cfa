"""Byte-exact by default: one flipped byte anywhere in a slave's store (record header, body,
properties, END_OF_FILE blank header or padding, a ConsumeQueue unit) is found with its offset,
without --verify-crc; identical replicas are proven so by checksums and not decoded; a truncated
replica is lag; the CLI's --json/--name/--dir and exit codes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.spark_jobs.decode import CQ_UNIT_BYTES, list_segments
from rmq_cluster.spark_jobs.model import make_replica
from rmq_cluster.spark_jobs.replica_diff import main, run_job
from rmq_cluster.spark_jobs.synth import make_msgs, write_commitlog_store
from tests.spark import faults

FB = 4096


def _flip(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x21
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def exact_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("exact")
    master = tmp / "m"
    placed = write_commitlog_store(str(master), make_msgs(90, body_size=200), FB)
    seg0 = master / "commitlog" / f"{0:020d}"
    in0 = [p for p in placed if p.phy_offset < FB]
    blank = in0[-1].phy_offset + in0[-1].size  # END_OF_FILE blank of the first file
    assert FB - blank > 16
    rec = in0[5]
    cq_unit = [p for p in placed if (p.topic, p.queue_id) == ("T0", 0)][3]
    where: dict[str, tuple[str, int]] = {  # name -> (file under the store, byte offset)
        "header": (f"commitlog/{0:020d}", rec.phy_offset + 58),  # STORETIMESTAMP
        "qoffset": (f"commitlog/{0:020d}", rec.phy_offset + 27),  # QUEUEOFFSET's last byte
        "body": (f"commitlog/{0:020d}", rec.phy_offset + 88 + 3),
        "props": (f"commitlog/{0:020d}", rec.phy_offset + rec.size - 1),
        "blankpad": (f"commitlog/{0:020d}", FB - 1),
        "blankhead": (f"commitlog/{0:020d}", blank + 5),  # the blank's magic
        "cq": (f"consumequeue/T0/0/{0:020d}", 3 * CQ_UNIT_BYTES + 19),  # tags code
    }
    reps = [make_replica("same", "m", "MASTER", str(master)),
            make_replica("same", "s", "SLAVE", str(faults.copy_store(master, tmp / "same")))]
    for name, (rel, pos) in where.items():
        s = faults.copy_store(master, tmp / name)
        _flip(s / rel, pos)
        reps += [make_replica(name, "m", "MASTER", str(master)),
                 make_replica(name, "s", "SLAVE", str(s))]  # fmt: skip
    lag = faults.copy_store(master, tmp / "lag")
    faults.truncate_store(lag, placed[70].phy_offset, FB)
    reps += [make_replica("lag", "m", "MASTER", str(master)),
             make_replica("lag", "s", "SLAVE", str(lag))]  # fmt: skip
    assert seg0.exists()
    summary = run_job(spark, reps, str(tmp / "out"), block_bytes=1024)  # default: exact
    rows = [r.asDict() for r in spark.read.parquet(str(tmp / "out" / "findings")).collect()]
    return {"summary": summary, "rows": rows, "rec": rec, "blank": blank, "cq": cq_unit,
            "placed": placed}  # fmt: skip


def _of(run: dict[str, Any], group: str) -> list[dict[str, Any]]:
    return [r for r in run["rows"] if r["group"] == group and r["node"] == "s"]


@pytest.mark.parametrize(("group", "what"), [
    ("header", "header bytes"), ("qoffset", "queue_offset"), ("body", "body"),
    ("props", "topic/properties"),
])  # fmt: skip
def test_a_flipped_record_byte_is_divergent_at_its_record(
    exact_run: dict[str, Any], group: str, what: str
) -> None:
    (f,) = [r for r in _of(exact_run, group) if r["kind"] == "divergent"]
    assert f["phy_offset"] == exact_run["rec"].phy_offset
    assert what in f["detail"]
    g = exact_run["summary"]["groups"][group]["replicas"]["s"]
    assert g["verdict"] == "divergent" and g["proven_identical_to"] == f["phy_offset"]


def test_a_flipped_blank_byte_is_found(exact_run: dict[str, Any]) -> None:
    blank = exact_run["blank"]
    (pad,) = _of(exact_run, "blankpad")
    assert (pad["kind"], pad["phy_offset"], pad["end_offset"]) == ("divergent", blank, FB)
    assert "END_OF_FILE" in pad["detail"]
    kinds = {(r["kind"], r["phy_offset"]) for r in _of(exact_run, "blankhead")}
    assert ("garbage", blank) in kinds


def test_a_flipped_consume_queue_byte_is_found(exact_run: dict[str, Any]) -> None:
    unit = exact_run["cq"]
    (f,) = _of(exact_run, "cq")
    assert (f["kind"], f["phy_offset"], f["queue_offset"], f["topic"]) == (
        "cq_mismatch", unit.phy_offset, 3, "T0")


def test_identical_replicas_are_proven_by_checksums(exact_run: dict[str, Any]) -> None:
    g = exact_run["summary"]["groups"]["same"]["replicas"]["s"]
    assert g["byte_identical"] and g["verdict"] == "consistent" and not _of(exact_run, "same")
    assert g["messages"] is None  # not decoded, so not counted
    last = exact_run["placed"][-1]
    assert g["proven_identical_to"] == g["end_offset"] == last.phy_offset + last.size
    assert exact_run["summary"]["mode"] == "exact"


def test_a_truncated_replica_is_lag_not_divergence(exact_run: dict[str, Any]) -> None:
    cut = exact_run["placed"][70]
    (f,) = _of(exact_run, "lag")
    assert (f["kind"], f["phy_offset"], f["count"]) == ("lag", cut.phy_offset, 20)
    g = exact_run["summary"]["groups"]["lag"]["replicas"]["s"]
    assert g["verdict"] == "lagging" and g["proven_identical_to"] == cut.phy_offset


def test_cli_json_name_and_header_only(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    d = tmp_path / ".rmq-cluster" / "c1"
    placed = write_commitlog_store(str(d / "store" / "a0"), make_msgs(30, body_size=100), FB)
    shutil.copytree(d / "store" / "a0", d / "store" / "a1")
    seg = list_segments(str(d / "store" / "a1" / "commitlog"))[0]
    _flip(Path(seg.path), placed[4].phy_offset + 88)  # a body byte: the stored CRC still fits
    nodes = [{"name": "a0", "kind": "broker", "group": "a", "role": "SYNC_MASTER", "broker_id": 0},
             {"name": "a1", "kind": "broker", "group": "a", "role": "SLAVE", "broker_id": 1}]
    (d / "cluster.json").write_text(json.dumps({"topology": {"nodes": nodes}}))
    monkeypatch.setenv("HOME", str(tmp_path))  # the home: ~/.rmq-cluster, not the cwd's
    monkeypatch.delenv("RMQ_CLUSTER_HOME", raising=False)
    capsys.readouterr()
    assert main(["--name", "c1", "--json", "--quiet"]) == 1
    s = json.loads(capsys.readouterr().out)
    (f,) = s["first_findings"]
    assert (f["node"], f["kind"], f["phy_offset"]) == ("a1", "divergent", placed[4].phy_offset)
    assert main(["--dir", str(d), "--header-only", "--json", "--quiet"]) == 0  # blind to bodies
    assert json.loads(capsys.readouterr().out)["mode"] == "header-only"
    assert main(["--dir", str(d), "--quiet"]) == 1
    assert "a a1: divergent" in capsys.readouterr().out
    assert not os.path.exists(tmp_path / "out")  # no --out: nothing written
    assert main(["--name", "../x", "--quiet"]) == 2
    assert main(["--dir", str(d), "--block-mb", "0", "--quiet"]) == 2
    assert main(["--dir", str(d), "--split-mb", "0", "--quiet"]) == 2
    assert "bad input" in capsys.readouterr().err


def test_help_documents_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "0  consistent" in out and "1  divergent" in out and "2  no verdict" in out
    assert "unverifiable" in out and "bad input" in out
    assert "--json" in out and "--name" in out and "--package" in out


@pytest.mark.parametrize("defect", ["none", "consumer", "cq", "gap", "garbage"])
def test_all_identical_fast_path_equals_the_reference(
    spark: Any, tmp_path: Path, defect: str
) -> None:
    """Every replica identical: the masters' own soundness is checked without the Spark SQL
    plan, or (a defect) by the general path; either way the reference's findings."""
    from rmq_cluster.spark_jobs.reference import reference_diff
    from rmq_cluster.spark_jobs.replica_diff import run_diff

    m = tmp_path / "m"
    msgs = make_msgs(40, body_size=150)
    if defect == "gap":
        msgs = msgs[:10] + msgs[12:]  # T0/queue 1 loses its 6th message: not quite a gap
    placed = write_commitlog_store(str(m), msgs, FB,
                                   consumer_offsets={"T0@cg": {0: 99}} if defect == "consumer"
                                   else None)  # fmt: skip
    if defect == "gap":  # rewrite one record's queue offset: a real hole in its queue
        p = placed[-1]
        seg = list_segments(str(m / "commitlog"))[-1]
        data = bytearray(Path(seg.path).read_bytes())
        at = p.phy_offset - seg.start + 20
        data[at : at + 8] = (p.queue_offset + 5).to_bytes(8, "big")
        Path(seg.path).write_bytes(bytes(data))
    if defect == "cq":
        faults.repoint_cq_unit(m, "T0", 0, 2, placed[1].phy_offset)
    if defect == "garbage":
        _flip(Path(list_segments(str(m / "commitlog"))[0].path), placed[3].phy_offset + 4)
    reps = [make_replica("g", "m", "MASTER", str(m)),
            make_replica("g", "s", "SLAVE", str(faults.copy_store(m, tmp_path / "s")))]
    res = run_diff(spark, reps, check_stores=True)
    assert res["identical"] == {1: 0}
    assert (res["records"] is None) == (defect in ("none", "consumer"))  # the fast path
    got = sorted((r["group"], r["node"], r["kind"], r["phy_offset"], r["end_offset"],
                  int(r["count"])) for r in res["findings"].collect())  # fmt: skip
    key = [(g, n, k, lo, hi, c) for g, n, k, lo, hi, c in reference_diff(reps)]
    assert sorted(got, key=str) == sorted(key, key=str)
    assert bool(got) == (defect != "none")
    plain = run_diff(spark, reps)  # default: identical bytes are never decoded
    assert plain["records"] is None and plain["findings"] is None
    assert plain["findings_rows"] == [] and plain["identical"] == {1: 0}


def test_records_are_decoded_only_inside_differing_blocks(spark: Any, tmp_path: Path) -> None:
    """One flipped body byte in a 300-record store: the decoder sees only the records around
    that block (on the master and the slave), not the stores."""
    from rmq_cluster.spark_jobs.replica_diff import run_diff

    m = tmp_path / "m"
    placed = write_commitlog_store(str(m), make_msgs(300, body_size=150), FB)
    s = faults.copy_store(m, tmp_path / "s")
    victim = placed[200]
    seg = [x for x in list_segments(str(s / "commitlog")) if x.start <= victim.phy_offset][-1]
    _flip(Path(seg.path), victim.phy_offset - seg.start + 88 + 7)
    reps = [make_replica("g", "m", "MASTER", str(m)), make_replica("g", "s", "SLAVE", str(s))]
    from rmq_cluster.spark_jobs.replica_diff import compare_replicas

    here = compare_replicas(spark, reps, 512, in_driver=True)
    assert compare_replicas(spark, reps, 512, in_driver=False) == here  # as a Spark job
    ((area, a, b),) = here[1][1]
    assert area == "data" and a <= victim.phy_offset + 88 + 7 < b == a + 512
    from rmq_cluster.spark_jobs import replica_diff

    seen: list[tuple[int, int]] = []
    scan = replica_diff._scan

    def counting(task: Any) -> Any:
        for row in scan(task):
            seen.append((row[0], row[1]))
            yield row

    replica_diff._scan = counting  # type: ignore[assignment]
    try:
        res = run_diff(spark, reps, block_bytes=512)
    finally:
        replica_diff._scan = scan  # type: ignore[assignment]
    assert 2 <= len(seen) <= 2 * 4, seen  # a 512-byte block holds at most 3 records here
    assert res["records"] is None and res["findings"] is None  # compared in the driver
    (f,) = res["findings_rows"]
    assert (f["node"], f["kind"], f["phy_offset"]) == ("s", "divergent", victim.phy_offset)
    assert "body" in f["detail"]


def test_a_local_audit_starts_no_spark(spark: Any, tmp_path: Path) -> None:
    """Given a session-making function, the job calls it only when it has something to
    decode (or Parquet to write): a consistent audit runs without Spark."""
    m = tmp_path / "m"
    placed = write_commitlog_store(str(m), make_msgs(50, body_size=100), FB)
    s = faults.copy_store(m, tmp_path / "s")
    reps = [make_replica("g", "m", "MASTER", str(m)), make_replica("g", "s", "SLAVE", str(s))]
    calls: list[int] = []

    def session() -> Any:
        calls.append(1)
        return spark

    summary = run_job(session, reps, None)
    assert calls == [] and summary["exit_code"] == 0
    assert summary["groups"]["g"]["replicas"]["s"]["end_offset"] == placed[-1].phy_offset + (
        placed[-1].size)
    _flip(Path(list_segments(str(s / "commitlog"))[0].path), placed[2].phy_offset + 90)
    summary = run_job(session, reps, None)  # divergent: still no Spark (issue 38 item 3)
    assert calls == [] and summary["exit_code"] == 1
    first = summary["first_findings"][0]
    assert first["phy_offset"] == placed[2].phy_offset
    assert (first["topic"], first["queue_id"], first["queue_offset"]) == (
        placed[2].topic, placed[2].queue_id, placed[2].queue_offset)


def test_text_output_names_topic_queue_offset_and_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The text summary lists each first finding with its CommitLog offset, topic, queue,
    queue offset and the field that differs (issue 38 item 3), not only --json."""
    from rmq_cluster.spark_jobs.replica_diff import _print_text

    finding = {"group": "g", "node": "s", "role": "SLAVE", "kind": "divergent",
               "phy_offset": 4096, "end_offset": 4300, "count": 1, "topic": "T0",
               "queue_id": 1, "queue_offset": 12, "detail": "differs from master in body"}
    rep = {"is_master": False, "verdict": "divergent", "findings": {"divergent": 1},
           "proven_identical_to": 4096, "end_offset": 9000, "lag_bytes": 0, "ahead_bytes": 0}
    _print_text({"groups": {"g": {"master": "m", "replicas": {"s": rep}}},
                 "first_findings": [finding], "verdict": "divergent"})
    out = capsys.readouterr().out
    assert ("  divergent at offset 4096 topic T0 queue 1 queue offset 12: differs from "
            "master in body\n") in out
