"""100 000 messages over 8 queues and 2 brokers (``up 2m-noslave``, real processes), read
exactly (count, every queue dense from 0, bodies by SHA-256, keys, tags), once per path:
``local[2]`` through remoting pulls, ``local[2]`` from the brokers' store files
(``storePath``), and ``rmq-cluster spark export --master spark://...`` on a real standalone
master and worker started here (the executors import the source from the job archive).  The
standalone run reads the first STANDALONE_PER_QUEUE offsets of every queue (10 000 messages,
checked as exactly): its JVMs (master, worker, driver, executor) beside the 2 brokers make a
100 000-message pass there several minutes long on a 2-core machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.spark_jobs.mq_model import read_options
from rmq_cluster.spark_jobs.mq_store import plan_store_queues
from rmq_cluster.spark_jobs.rocketmq_source import register
from tests.spark.rocketmq_testlib import Seeded, seeded_cluster, sha
from tests.spark.test_standalone import standalone

pytestmark = pytest.mark.slow
__all__ = ["standalone"]
COUNT = 100_000
SEED_BATCH = 256  # messages per SEND_BATCH_MESSAGE (our client's send_batch)
STANDALONE_PER_QUEUE = 1250
Got = dict[tuple[str, int], list[tuple[int, str, str, str]]]


@pytest.fixture(scope="module")
def big(spark: Any) -> Iterator[Seeded]:
    register(spark)
    with seeded_cluster(COUNT, "SparkBig", batch=SEED_BATCH, timeout=240.0) as s:
        yield s


def _by_queue(rows: Iterator[tuple[str, int, int, str, str, str]]) -> Got:
    out: Got = {}
    for broker, qid, off, digest, keys, tags in rows:
        out.setdefault((broker, qid), []).append((off, digest, keys, tags))
    return {k: sorted(v) for k, v in out.items()}


def _check_exact(got: Got, s: Seeded, per_queue: int | None = None) -> None:
    """``got`` is every queue's first ``per_queue`` messages (default: all) as seeded."""
    expected = {q: v[:per_queue] for q, v in s.expected.items()}
    assert sum(len(v) for v in got.values()) == sum(len(v) for v in expected.values())
    assert sorted(got) == sorted(expected)  # the 8 queues, 4 per broker
    for q, want in expected.items():
        assert [e[0] for e in got[q]] == list(range(len(want))), q  # dense from 0
        assert got[q] == want, q  # bodies by SHA-256, keys, tags


def _read_digests(spark: Any, reader: Any) -> Got:
    """One read pass; the SHA-256 of every body computed in Spark, small rows collected."""
    from pyspark.sql import functions as F

    df = reader.load().select("broker", "queueId", "queueOffset", F.sha2("body", 256),
                              "keys", "tags")  # fmt: skip
    return _by_queue(tuple(r) for r in df.collect())


def test_100k_over_remoting_on_local2(spark: Any, big: Seeded) -> None:
    reader = (spark.read.format("rocketmq").option("namesrv", big.namesrv)
              .option("topic", big.topic).option("maxRecordsPerPartition", "5000"))
    _check_exact(_read_digests(spark, reader), big)


def _wait_dispatched(s: Seeded) -> None:
    """The brokers write ConsumeQueues a moment after a send is answered: wait until the
    store files list every message (deadline)."""
    opts = read_options({"topic": s.topic, "storePath": json.dumps(s.stores)})
    deadline = time.monotonic() + 30
    while sum(r.end - r.start for r in plan_store_queues(opts)) < COUNT:
        assert time.monotonic() < deadline, "ConsumeQueues not written within 30 s"
        time.sleep(0.05)  # polling the files, bounded by the deadline


def test_100k_from_store_files_on_local2(spark: Any, big: Seeded) -> None:
    _wait_dispatched(big)
    reader = (spark.read.format("rocketmq").option("storePath", json.dumps(big.stores))
              .option("topic", big.topic).option("maxRecordsPerPartition", "5000"))
    _check_exact(_read_digests(spark, reader), big)


def test_100k_on_a_standalone_master(standalone: str, big: Seeded, tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    ends = {b: {str(q): STANDALONE_PER_QUEUE for q in range(4)} for b in ("broker-a", "broker-b")}
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, "-m", "rmq_cluster.cli", "spark", "export", "-n", big.namesrv,
         "--topic", big.topic, "--to", str(out), "--master", standalone,
         "--ending-offsets", json.dumps(ends), "--json"],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    assert result["rows"] == 8 * STANDALONE_PER_QUEUE and result["master"] == standalone
    import pyarrow.parquet as pq

    t = pq.read_table(str(out), columns=["broker", "queueId", "queueOffset", "body", "keys",
                                         "tags"]).to_pydict()  # fmt: skip
    rows = zip(t["broker"], t["queueId"], t["queueOffset"], (sha(b) for b in t["body"]),
               t["keys"], t["tags"], strict=True)  # fmt: skip
    _check_exact(_by_queue(rows), big, STANDALONE_PER_QUEUE)
