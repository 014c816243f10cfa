"""``rmq-cluster spark export --master spark://...`` as a user runs it (a subprocess: its own
driver JVM) against a real standalone master and worker started here, reading a real
cluster: the executors import the data source from the job archive the CLI ships."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmq_cluster.deploy.testing import create_topics, rmq_cluster
from tests.spark.test_rocketmq_source import _send_keys
from tests.spark.test_standalone import standalone

pytestmark = pytest.mark.slow
__all__ = ["standalone"]
COUNT = 500


def test_export_on_a_standalone_master(standalone: str, tmp_path: Path) -> None:
    with rmq_cluster("single") as cluster:
        create_topics(cluster.namesrv_addr, ["Standalone"], queues=4)
        _send_keys(cluster.namesrv_addr, "Standalone", range(COUNT))
        out = tmp_path / "out.parquet"
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        proc = subprocess.run(
            [sys.executable, "-m", "rmq_cluster.cli", "spark", "export", "-n",
             cluster.namesrv_addr, "--topic", "Standalone", "--to", str(out), "--master",
             standalone, "--json"],
            capture_output=True, text=True, timeout=300, env=env, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-4000:]
        result = json.loads(proc.stdout)
        assert result["rows"] == COUNT and result["master"] == standalone
    import pyarrow.parquet as pq

    keys = pq.read_table(str(out), columns=["keys"]).column("keys").to_pylist()
    assert sorted(keys) == sorted(f"s{i}" for i in range(COUNT))
