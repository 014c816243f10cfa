"""Reads from slaves (``readFrom``) on ``up 2m-2s-async`` (real processes, ``local[2]``):
``readFrom=slave`` plans every queue on its group's slave and reads the topic exactly; with
broker-a's master killed (``kill -9``), a default read (``readFrom=master``) falls back to
broker-a's slave, as RocketMQ's consumers do, and still reads every message exactly once."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.deploy.testing import RunningCluster, create_topics, rmq_cluster
from rmq_cluster.spark_jobs.mq_io import fetch_route, plan_read, queue_ends
from rmq_cluster.spark_jobs.mq_model import read_options
from rmq_cluster.spark_jobs.rocketmq_source import register
from tests.spark.test_rocketmq_source import _send_keys, _wait_for

pytestmark = pytest.mark.slow
TOPIC = "SparkSlaveRead"
COUNT = 2000


def _brokers(cluster: RunningCluster, slaves: bool) -> dict[str, dict[str, Any]]:
    """group -> its slave's (or master's) status entry."""
    return {n["group"]: n for n in cluster.status()["nodes"]
            if n["kind"] == "broker" and (n["broker_id"] != 0) == slaves}  # fmt: skip


def _keys(spark: Any, namesrv: str, **opts: str) -> list[str]:
    df = (spark.read.format("rocketmq").option("namesrv", namesrv).option("topic", TOPIC)
          .options(**opts).load())  # fmt: skip
    return [r.keys for r in df.select("keys").collect()]


def test_reads_from_slaves_and_falls_back_when_a_master_dies(spark: Any, tmp_path: Path) -> None:
    register(spark)
    want = sorted(f"s{i}" for i in range(COUNT))
    with rmq_cluster("2m-2s-async") as cluster:
        ns = cluster.namesrv_addr
        create_topics(ns, [TOPIC], queues=4)
        _send_keys(ns, TOPIC, range(COUNT))
        slaves = _brokers(cluster, slaves=True)
        on_slaves = read_options({"namesrv": ns, "topic": TOPIC, "readFrom": "slave"})
        _wait_for(lambda: sum(e for _a, e in queue_ends(on_slaves).values()) == COUNT,
                  "slaves caught up", 60)  # fmt: skip
        assert {r.addr for r in plan_read(on_slaves)} == {n["addr"] for n in slaves.values()}
        assert sorted(_keys(spark, ns, readFrom="slave")) == want

        master = _brokers(cluster, slaves=False)["broker-a"]
        os.kill(int(master["pid"]), signal.SIGKILL)  # a node this test started
        _wait_for(lambda: "broker-a" not in fetch_route(ns.split(";"), TOPIC, 2.0).masters,
                  "broker-a's master gone from the route", 60)  # fmt: skip
        by_default = read_options({"namesrv": ns, "topic": TOPIC})
        planned = {r.broker: r.addr for r in plan_read(by_default)}
        assert planned["broker-a"] == slaves["broker-a"]["addr"]
        assert sorted(_keys(spark, ns)) == want
