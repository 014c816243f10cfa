"""A streaming read killed mid-stream, broker-a's master killed (``kill -9``) while the query is
down, the controller electing its slave, the query restarted on the same checkpoint: the
Parquet output holds every message exactly once (``up 2m-2s-controller``, real processes,
``local[2]``).  The offsets live in Spark's checkpoint as (broker name, queue id, offset), and
a SYNC replica holds the same queues at the same offsets, so the restarted query goes on from
the new master of broker-a."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.deploy.testing import RunningCluster, create_topics, rmq_cluster
from rmq_cluster.spark_jobs.mq_io import fetch_route
from rmq_cluster.spark_jobs.rocketmq_source import register
from tests.spark.test_rocketmq_source import _send_keys, _wait_for

pytestmark = pytest.mark.slow
TOPIC = "SparkFailover"
GROUP = "broker-a"
FIRST, SECOND = 3000, 1000


def _master_of(cluster: RunningCluster, group: str = GROUP) -> dict[str, Any] | None:
    for n in cluster.status()["nodes"]:
        if n["kind"] == "broker" and n["group"] == group and n.get("alive") and \
                n.get("role") == "MASTER":  # fmt: skip
            return dict(n)
    return None


def _routed_master(namesrv: str, group: str = GROUP) -> str | None:
    try:
        return fetch_route([namesrv], TOPIC, 2.0).masters.get(group)
    except Exception:  # no route during the election
        return None


def test_stream_restarted_across_a_master_kill_writes_each_message_once(
    spark: Any, tmp_path: Path
) -> None:
    register(spark)
    with rmq_cluster("2m-2s-controller") as cluster:
        _wait_for(lambda: _master_of(cluster) is not None and
                  _master_of(cluster, "broker-b") is not None, "elected masters", 60)  # fmt: skip
        create_topics(cluster.namesrv_addr, [TOPIC], queues=4)
        _send_keys(cluster.namesrv_addr, TOPIC, range(FIRST))
        out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

        def start() -> Any:
            stream = (spark.readStream.format("rocketmq").option("namesrv", cluster.namesrv_addr)
                      .option("topic", TOPIC).option("startingOffsets", "earliest")
                      .option("maxMessagesPerTrigger", "500").load())
            return (stream.select("keys", "broker", "queueId", "queueOffset").writeStream
                    .format("parquet").option("path", out).option("checkpointLocation", ckpt)
                    .trigger(availableNow=True).start())

        q = start()
        _wait_for(lambda: len(q.recentProgress) >= 2 or not q.isActive, "second micro-batch")
        q.stop()  # mid-stream
        first_run = sum(p["numInputRows"] for p in q.recentProgress)
        old = _master_of(cluster)
        assert old is not None
        os.kill(int(old["pid"]), signal.SIGKILL)  # a node this test started
        _wait_for(lambda: _routed_master(cluster.namesrv_addr) not in (None, old["addr"]),
                  "broker-a routed to its new master", 60)  # fmt: skip
        _send_keys(cluster.namesrv_addr, TOPIC, range(FIRST, FIRST + SECOND))
        q = start()
        q.awaitTermination(300)
        assert q.exception() is None
        keys = [r.keys for r in spark.read.parquet(out).select("keys").collect()]
    assert 0 < first_run < FIRST + SECOND  # the restart did real work
    assert len(keys) == FIRST + SECOND  # nothing twice ...
    assert set(keys) == {f"s{i}" for i in range(FIRST + SECOND)}  # ... nothing lost
