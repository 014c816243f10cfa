"""A live audit of a running 2m-2s-async cluster (real processes) while producers keep
writing: every group is audited up to the confirmed offset its brokers report, and reported
consistent up to there."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.deploy.demo import run_demo
from rmq_cluster.deploy.testing import rmq_cluster
from rmq_cluster.spark_jobs.replica_diff import main

pytestmark = pytest.mark.slow


def test_live_audit_under_load(spark: Any, tmp_path: Path) -> None:
    with rmq_cluster("2m-2s-async") as cluster:
        stop = threading.Event()
        rounds: list[dict[str, Any]] = []
        first = threading.Event()

        def load() -> None:
            while not stop.is_set():
                rounds.append(run_demo(cluster.namesrv_addr, count=40, topic="LiveAudit"))
                first.set()

        t = threading.Thread(target=load, daemon=True)
        t.start()
        try:
            assert first.wait(120), "no load round finished"
            assert rounds[0]["ok"], rounds[0]
            code = main(["--dir", str(cluster.dir), "--live", "--out", str(tmp_path / "o"),
                         "--quiet"])  # fmt: skip
            running_rounds = len(rounds)
        finally:
            stop.set()
            t.join(180)
        s = json.loads((tmp_path / "o" / "summary.json").read_text())
        assert code == 0, s["first_findings"]
        assert t.is_alive() is False and running_rounds >= 1
        assert set(s["groups"]) == {"broker-a", "broker-b"}
        for g in s["groups"].values():
            limits = {r["audited_to"] for r in g["replicas"].values()}
            assert len(limits) == 1 and None not in limits
            for r in g["replicas"].values():
                assert r["verdict"] == "consistent"
                assert r["proven_identical_to"] == r["end_offset"] <= r["audited_to"]
        audited = [r for g in s["groups"].values() for r in g["replicas"].values()]
        assert all(r["byte_identical"] or r["is_master"] for r in audited)
    assert sum(r["end_offset"] for r in audited) > 0  # not decoded: ends, no message counts
