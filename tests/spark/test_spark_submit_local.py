"""``spark-submit`` of the replica audit as the README shows it, in local mode (issue 38 item
4): with ``--json`` stdout holds the summary and nothing else, even with ``-v`` (spark-submit
merges the driver's stderr into its stdout: no progress lines then), and the driver binds
loopback without SPARK_LOCAL_IP or spark.driver.host (a run that talks only to itself uses no
address of this host's network)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rmq_cluster.spark_jobs import replica_diff, submit
from tests.spark.test_standalone import _spark_bin, _stores

pytestmark = pytest.mark.slow


def test_spark_submit_local_prints_json_only_and_binds_loopback(tmp_path: Path) -> None:
    specs = _stores(tmp_path)
    archive = tmp_path / "rmq_spark.zip"
    assert replica_diff.main(["--package", str(archive)]) == 0
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP", "SPARK_CONF_DIR")}
    proc = subprocess.run(
        [_spark_bin("spark-submit"), "--master", "local[1]", "--py-files", str(archive),
         submit.__file__, *[a for s in specs for a in ("--replica", s)],
         "--out", str(tmp_path / "out"), "--json", "-v"],  # -v: progress would go to stdout
        capture_output=True, text=True, timeout=240, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout[:3000]  # one JSON object, nothing else
    (line,) = lines
    summary = json.loads(line)
    assert summary["groups"]["g"]["replicas"]["flip"]["verdict"] == "divergent"
    assert summary["spark"] == {"master": "local[1]", "driver_host": "127.0.0.1"}
