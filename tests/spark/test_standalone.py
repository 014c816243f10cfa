"""spark-submit against a real standalone Spark master and worker (``spark-class``, started and
stopped here on 127.0.0.1, ephemeral ports) with the archive ``replica-diff --package`` builds:
the executors run ``python3 -S`` (no site-packages), so the archive alone must carry what they
import; the findings equal a local-mode run's."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.spark_jobs import replica_diff, submit
from rmq_cluster.spark_jobs.replica_diff import main, run_job
from rmq_cluster.spark_jobs.synth import make_msgs, write_commitlog_store
from tests.spark import faults

pytestmark = pytest.mark.slow
DEADLINE_S = 90.0
FB = 8192


def _spark_bin(name: str) -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


def _wait_for(path: Path, pattern: str, proc: subprocess.Popen[bytes]) -> re.Match[str]:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        m = re.search(pattern, path.read_text(errors="replace")) if path.exists() else None
        if m:
            return m
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args} exited {proc.returncode}: {path.read_text()}")
        time.sleep(0.1)  # polling a log file for a line, bounded by the deadline
    raise AssertionError(f"no {pattern!r} in {path} after {DEADLINE_S} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # its own process group: only what we started
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(15)


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp_path),
           "SPARK_WORKER_DIR": str(tmp_path / "work")}  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    try:
        mlog = tmp_path / "master.log"
        with open(mlog, "wb") as out:
            procs.append(subprocess.Popen(
                [_spark_bin("spark-class"), "org.apache.spark.deploy.master.Master",
                 "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            ))  # fmt: skip
        url = _wait_for(mlog, r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", procs[0])[1]
        with open(tmp_path / "worker.log", "wb") as out:
            procs.append(subprocess.Popen(
                [_spark_bin("spark-class"), "org.apache.spark.deploy.worker.Worker",
                 "--host", "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", "2",
                 "--memory", "1g", "--work-dir", str(tmp_path / "work"), url],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            ))  # fmt: skip
        _wait_for(mlog, r"Registering worker", procs[0])
        yield url
    finally:
        for p in reversed(procs):
            _stop(p)


def _stores(tmp: Path) -> list[str]:
    m = tmp / "m"
    placed = write_commitlog_store(str(m), make_msgs(120, body_size=300), FB)
    flip = faults.copy_store(m, tmp / "flip")
    faults.flip_body_byte(flip, placed[50].phy_offset, FB, body_index=7)
    lag = faults.copy_store(m, tmp / "lag")
    faults.truncate_store(lag, placed[100].phy_offset, FB)
    return [f"g:m:MASTER:{m}", f"g:flip:SLAVE:{flip}", f"g:lag:SLAVE:{lag}"]


def _rows(out: Path) -> list[tuple[Any, ...]]:
    s = json.loads((out / "summary.json").read_text())
    return sorted(
        (f["node"], f["kind"], f["phy_offset"], f["end_offset"], f["count"], f["detail"])
        for f in s["first_findings"]
    )


def test_spark_submit_on_a_standalone_master_equals_local_mode(
    spark: Any, standalone: str, tmp_path: Path
) -> None:
    specs = _stores(tmp_path)
    archive = tmp_path / "rmq_spark.zip"
    assert main(["--package", str(archive), "--quiet"]) == 0
    py = tmp_path / "python-no-site"  # executors: the stdlib, Spark's own zips and the archive
    py.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    py.chmod(0o755)
    args = [a for s in specs for a in ("--replica", s)]
    proc = subprocess.run(
        [_spark_bin("spark-submit"), "--master", standalone, "--py-files", str(archive),
         "--conf", f"spark.pyspark.python={py}",
         "--conf", f"spark.pyspark.driver.python={sys.executable}",
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false",
         submit.__file__, *args, "--out", str(tmp_path / "remote"), "--json",
         "--quiet"],
        capture_output=True, timeout=240, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr.decode(errors="replace")[-4000:]
    remote = json.loads(proc.stdout)
    assert remote["groups"]["g"]["replicas"]["flip"]["verdict"] == "divergent"
    local = run_job(spark, [replica_diff.parse_replica_spec(s) for s in specs],
                    str(tmp_path / "local"))  # fmt: skip
    assert local["exit_code"] == 1
    assert _rows(tmp_path / "remote") == _rows(tmp_path / "local")
    kinds = {(r[0], r[1]) for r in _rows(tmp_path / "local")}
    assert kinds == {("flip", "divergent"), ("lag", "lag")}
