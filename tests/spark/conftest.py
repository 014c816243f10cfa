"""One SparkSession (local[2], quiet) for the whole spark test session."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from rmq_cluster.spark_jobs.replica_diff import build_session

    # Spark's Python workers run this interpreter, so they import the code under test
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = build_session("local[2]", app="rmq-replica-diff-tests", quiet=True)
    session.conf.set("spark.sql.shuffle.partitions", "4")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def real_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real SYNC_MASTER + slave run (16 KiB CommitLog files): master at store/, slave at
    slave/.  Tests copy these before injecting faults."""
    import trio

    from tests.spark.real_cluster import FILE_BYTES, produce

    tmp = tmp_path_factory.mktemp("real-cluster")
    info = trio.run(produce, tmp, 300)
    return {"master": tmp / "store", "slave": tmp / "slave", "file_bytes": FILE_BYTES, **info}
