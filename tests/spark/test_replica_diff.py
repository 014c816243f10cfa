"""The replica-diff job on stores from a real master/slave run, with faults injected at exact
offsets (one Spark run over a cluster of fault groups), a DLedger group, exit codes, outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.spark_jobs.model import make_replica
from rmq_cluster.spark_jobs.replica_diff import main, run_job
from tests.spark import faults

BODIES = [f"dledger-{i}-".encode() * (3 + i % 5) for i in range(90)]
DL_FILE = 4096
DL_DIVERGENT = 40  # entry whose body differs (same length) on n2


@pytest.fixture(scope="module")
def fault_run(spark: Any, real_stores: dict[str, Any], tmp_path_factory: Any) -> dict[str, Any]:
    tmp: Path = tmp_path_factory.mktemp("faults")
    fb = real_stores["file_bytes"]
    master, slave = real_stores["master"], real_stores["slave"]
    recs = faults.records(master)
    assert len({r[0] // fb for r in recs}) >= 4, "want several CommitLog files"
    byseg: dict[int, list[Any]] = {}
    for r in recs:
        byseg.setdefault(r[0] - r[0] % fb, []).append(r)
    segs = sorted(byseg)
    exp: dict[str, Any] = {}
    reps = []

    def group(name: str, m: Path, s: Path, mrole: str = "SYNC_MASTER") -> None:
        reps.append(make_replica(name, "m", mrole, str(m)))
        reps.append(make_replica(name, "s", "SLAVE", str(s)))

    clean_m = faults.copy_store(master, tmp / "clean-m")
    group("clean", clean_m, faults.copy_store(slave, tmp / "clean-s"))

    flip = byseg[segs[1]][3]  # 4th record of the 2nd file
    s = faults.copy_store(slave, tmp / "flip-s")
    faults.flip_body_byte(s, flip[0], fb, body_index=5)
    group("flip", master, s)
    exp["flip"] = flip

    cut = byseg[segs[2]][5]  # the slave stops mid 3rd file
    s = faults.copy_store(slave, tmp / "trunc-s")
    faults.truncate_store(s, cut[0], fb)
    group("trunc", master, s)
    exp["trunc"] = (cut, sum(1 for r in recs if r[0] >= cut[0]))

    old_end = byseg[segs[3]][2]  # the new master lost its tail from here; the old one has it
    new_m = faults.copy_store(master, tmp / "old-newm")
    faults.truncate_store(new_m, old_end[0], fb)
    group("oldmaster", new_m, faults.copy_store(master, tmp / "old-oldm"))
    exp["oldmaster"] = (old_end, sum(1 for r in recs if r[0] >= old_end[0]))

    hole = segs[2]
    s = faults.copy_store(slave, tmp / "hole-s")
    faults.delete_segment(s, hole)
    group("midseg", master, s)
    exp["midseg"] = (hole, byseg[hole])

    victim = [r for r in recs if r[2] == "DiffA" and r[3] == 0][10]
    wrong = [r for r in recs if r[2] == "DiffB"][20]
    s = faults.copy_store(slave, tmp / "cq-s")
    faults.repoint_cq_unit(s, "DiffA", 0, victim[4], wrong[0])
    group("cqwrong", master, s)
    exp["cqwrong"] = (victim, wrong)

    bad = list(BODIES)
    bad[DL_DIVERGENT] = bytes(b ^ 1 for b in bad[DL_DIVERGENT])
    offs = []
    for node, bodies, role in (("n0", BODIES, "LEADER"), ("n1", BODIES, "FOLLOWER"),
                               ("n2", bad, "FOLLOWER")):  # fmt: skip
        offs = faults.build_dledger_node(tmp / f"dl-{node}", node, bodies, DL_FILE)
        reps.append(make_replica("dledger", node, role, str(tmp / f"dl-{node}")))
    exp["dledger"] = offs

    out = tmp / "out"
    summary = run_job(spark, reps, str(out), verify_crc=True, split_bytes=6000)
    rows = [r.asDict() for r in spark.read.parquet(str(out / "findings")).collect()]
    return {"summary": summary, "rows": rows, "exp": exp, "out": out, "recs": recs, "fb": fb}


def _kinds(run: dict[str, Any], group: str, node: str = "s") -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in run["rows"]:
        if r["group"] == group and r["node"] == node:
            out.setdefault(r["kind"], []).append(r)
    return out


def test_consistent_replicas_have_no_findings(fault_run: dict[str, Any]) -> None:
    g = fault_run["summary"]["groups"]["clean"]["replicas"]
    assert g["s"]["verdict"] == "consistent" and g["m"]["verdict"] == "consistent"
    assert g["s"]["messages"] == len(fault_run["recs"]) and g["s"]["lag_bytes"] == 0
    assert not [r for r in fault_run["rows"] if r["group"] == "clean"]
    assert g["s"]["files"] >= 4


def test_flipped_body_byte_on_a_slave(fault_run: dict[str, Any]) -> None:
    phy = fault_run["exp"]["flip"][0]
    k = _kinds(fault_run, "flip")
    assert set(k) == {"bad_crc", "divergent"}
    assert [r["phy_offset"] for r in k["bad_crc"]] == [phy]
    assert [r["phy_offset"] for r in k["divergent"]] == [phy]
    assert "body_crc" in k["divergent"][0]["detail"]
    assert fault_run["summary"]["groups"]["flip"]["replicas"]["s"]["common_prefix"] == phy


def test_truncated_slave_is_lag(fault_run: dict[str, Any]) -> None:
    cut, n = fault_run["exp"]["trunc"]
    k = _kinds(fault_run, "trunc")
    assert set(k) == {"lag"}
    (lag,) = k["lag"]
    assert (lag["phy_offset"], lag["count"]) == (cut[0], n)
    r = fault_run["summary"]["groups"]["trunc"]["replicas"]["s"]
    assert r["verdict"] == "lagging" and r["lag_messages"] == n and r["end_offset"] == cut[0]


def test_extra_divergent_tail_on_an_old_master(fault_run: dict[str, Any]) -> None:
    end, n = fault_run["exp"]["oldmaster"]
    k = _kinds(fault_run, "oldmaster")
    assert set(k) == {"extra_tail"}
    (tail,) = k["extra_tail"]
    assert (tail["phy_offset"], tail["count"]) == (end[0], n)
    assert fault_run["summary"]["groups"]["oldmaster"]["replicas"]["s"]["verdict"] == "divergent"


def test_missing_middle_segment(fault_run: dict[str, Any]) -> None:
    start, lost = fault_run["exp"]["midseg"]
    fb = fault_run["fb"]
    k = _kinds(fault_run, "midseg")
    (seg,) = k["missing_segment"]
    assert (seg["phy_offset"], seg["end_offset"]) == (start, start + fb)
    (miss,) = k["missing_range"]
    assert (miss["phy_offset"], miss["count"]) == (start, len(lost))
    assert miss["end_offset"] == lost[-1][0] + lost[-1][1]
    # every CQ unit into the hole is reported, at its offset; queues show the gap
    assert sorted(r["phy_offset"] for r in k["cq_mismatch"]) == [r[0] for r in lost]
    assert k["queue_gap"] and all(r["phy_offset"] >= start + fb for r in k["queue_gap"])


def test_cq_unit_pointing_at_a_wrong_offset(fault_run: dict[str, Any]) -> None:
    victim, wrong = fault_run["exp"]["cqwrong"]
    k = _kinds(fault_run, "cqwrong")
    assert set(k) == {"cq_mismatch"}
    (u,) = k["cq_mismatch"]
    assert (u["phy_offset"], u["topic"], u["queue_id"], u["queue_offset"]) == (
        wrong[0], "DiffA", 0, victim[4]
    )


def test_dledger_group(fault_run: dict[str, Any]) -> None:
    offs = fault_run["exp"]["dledger"]
    g = fault_run["summary"]["groups"]["dledger"]
    assert g["master"] == "n0"
    assert g["replicas"]["n1"]["verdict"] == "consistent"
    assert g["replicas"]["n0"]["kind"] == "dledger"
    assert g["replicas"]["n1"]["messages"] == len(BODIES)
    assert g["replicas"]["n1"]["files"] > 3
    k = _kinds(fault_run, "dledger", "n2")
    div = sorted(k["divergent"], key=lambda r: r["phy_offset"])
    assert div[0]["phy_offset"] == offs[DL_DIVERGENT] and "body" in div[0]["detail"]
    # every later entry differs in its header's chain CRC, which covers the changed entry
    assert [r["phy_offset"] for r in div[1:]] == offs[DL_DIVERGENT + 1 :]
    assert all(r["detail"].endswith("in topic/properties or entry header") for r in div[1:])
    assert set(k) == {"divergent"}


def test_outputs(fault_run: dict[str, Any]) -> None:
    out: Path = fault_run["out"]
    s = json.loads((out / "summary.json").read_text())
    assert s["exit_code"] == 1 and s["verdict"] == "divergent"
    assert {"clean", "flip", "trunc", "oldmaster", "midseg", "cqwrong", "dledger"} <= set(
        s["groups"]
    )
    first = s["first_findings"]
    assert 0 < len(first) <= 100
    assert {"group", "node", "kind", "phy_offset"} <= set(first[0])
    assert sorted((out / "findings").glob("group=*"))  # partitioned by group
    html = (out / "report.html").read_text()
    assert html.count("<svg") >= 2 * len(s["groups"]) and "<script" not in html
    assert "divergence map" in html.lower()


def test_cli_exit_codes(spark: Any, real_stores: dict[str, Any], tmp_path: Path) -> None:
    m, s = real_stores["master"], real_stores["slave"]
    fb = real_stores["file_bytes"]
    # a cluster directory (deploy's cluster.json) plus an explicit lagging replica
    d = tmp_path / "cluster"
    (d / "store").mkdir(parents=True)
    faults.copy_store(m, d / "store" / "broker-a-0")
    faults.copy_store(s, d / "store" / "broker-a-1")
    nodes = [
        {"name": "ns-0", "kind": "namesrv", "host": "127.0.0.1", "port": 1},
        {"name": "broker-a-0", "kind": "broker", "group": "broker-a", "role": "SYNC_MASTER",
         "broker_id": 0},
        {"name": "broker-a-1", "kind": "broker", "group": "broker-a", "role": "SLAVE",
         "broker_id": 1},
    ]  # fmt: skip
    (d / "cluster.json").write_text(json.dumps({"topology": {"nodes": nodes}}))
    lagging = faults.copy_store(s, tmp_path / "lagging")
    faults.truncate_store(lagging, faults.records(s)[-7][0], fb)
    args = ["--dir", str(d), "--replica", f"g2:m:MASTER:{m}", "--replica", f"g2:s:SLAVE:{lagging}",
            "--quiet"]  # fmt: skip
    assert main([*args, "--out", str(tmp_path / "o1"), "--allow-lag"]) == 0
    s1 = json.loads((tmp_path / "o1" / "summary.json").read_text())
    assert s1["groups"]["g2"]["replicas"]["s"]["lag_messages"] == 7
    assert s1["groups"]["broker-a"]["replicas"]["broker-a-1"]["verdict"] == "consistent"
    assert main([*args, "--out", str(tmp_path / "o2")]) == 1


def test_bad_input_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "o")
    assert main(["--replica", "nonsense", "--out", out]) == 2
    assert main(["--dir", str(tmp_path), "--out", out]) == 2  # no cluster.json
    assert main(["--replica", f"g:m:MASTER:{tmp_path / 'absent'}", "--out", out]) == 2
    (tmp_path / "s" / "commitlog").mkdir(parents=True)
    assert main(["--replica", f"g:s:SLAVE:{tmp_path / 's'}", "--out", out]) == 2  # no master
    assert main(["--out", out]) == 2
    assert "bad input" in capsys.readouterr().err


def test_cli_subcommand_wiring() -> None:
    import argparse

    from rmq_cluster.spark_jobs.cli import add_commands

    p = argparse.ArgumentParser(prog="rmq-cluster")
    add_commands(p.add_subparsers(dest="cmd"))
    ns = p.parse_args(["replica-diff", "--dir", "D", "--out", "O", "--master", "local[2]"])
    assert (ns.cmd, ns.dir, ns.out, ns.master) == ("replica-diff", "D", "O", "local[2]")
    assert callable(ns.func)
