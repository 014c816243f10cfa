"""The interop oracle: Apache RocketMQ 4.9.7's own NameServer and Broker (tests/interop/oracle.py,
pinned from Maven Central) and ours, fed the same messages by the rocketmq sink (the same
batches, message ids and queues), read back by the same batch reads on ``local[2]``: whole
topic, an offset range and a tag filter give the same rows on both (everything but what a
broker stamps by itself: times, CommitLog offsets, ports, the properties it adds)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.deploy.testing import create_topics
from rmq_cluster.spark_jobs.mq_io import Sender, out_message, send_all
from rmq_cluster.spark_jobs.rocketmq_source import register
from tests.interop import oracle

pytestmark = pytest.mark.slow
TOPIC = "SparkOracle"
N = 2000
USER_PROPS = ("n", "KEYS", "TAGS", "UNIQ_KEY")


@pytest.fixture(scope="module")
def java_cp() -> str:
    try:
        return oracle.java_classpath()
    except oracle.OracleError as exc:
        pytest.fail(f"Apache RocketMQ's Java nodes are not available: {exc}", pytrace=False)


def _messages() -> list[Any]:
    return [out_message(f"row {i}", TOPIC, (f"m{i}-".encode() * (1 + i % 17)), f"k{i}",
                        ("TagA", "TagB", "TagC")[i % 3], {"n": str(i)})
            for i in range(N)]  # fmt: skip


@pytest.fixture(scope="module")
def namesrvs(spark: Any, java_cp: str, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[dict[str, str]]:  # fmt: skip
    register(spark)
    msgs = _messages()  # one set of message ids for both
    with oracle.running_cluster("java", tmp_path_factory.mktemp("java"), cp=java_cp) as java, \
            oracle.running_cluster("ours", tmp_path_factory.mktemp("ours")) as ours:  # fmt: skip
        for c in (java, ours):
            create_topics(c.namesrv_addr, [TOPIC], queues=4)
            sender = Sender([c.namesrv_addr])
            try:
                assert send_all(sender, iter(msgs), 50) == N  # batch k -> queue k % 4 on both
            finally:
                sender.close()
        yield {"java": java.namesrv_addr, "ours": ours.namesrv_addr}


def _rows(spark: Any, namesrv: str, **opts: str) -> list[tuple[Any, ...]]:
    df = (spark.read.format("rocketmq").option("namesrv", namesrv).option("topic", TOPIC)
          .options(**opts).load())  # fmt: skip
    out = []
    for r in df.collect():
        props = {k: v for k, v in r.properties.items() if k in USER_PROPS}
        out.append((r.topic, r.broker, r.queueId, r.queueOffset, r.msgId, r.keys, r.tags,
                    bytes(r.body), json.dumps(props, sort_keys=True), r.reconsumeTimes,
                    r.bornHost.rsplit(":", 1)[0], r.storeHost.rsplit(":", 1)[0]))  # fmt: skip
    return sorted(out, key=lambda t: (t[2], t[3]))


@pytest.mark.parametrize("opts", [
    {},
    {"startingOffsets": '{"broker-a": {"0": 100, "2": 7}}',
     "endingOffsets": '{"broker-a": {"0": 300, "3": 50}}'},
    {"tags": "TagA || TagC"},
], ids=["whole", "offsets", "tags"])  # fmt: skip
def test_same_rows_as_apaches_broker(spark: Any, namesrvs: dict[str, str],
                                     opts: dict[str, str], tmp_path: Path) -> None:  # fmt: skip
    java = _rows(spark, namesrvs["java"], **opts)
    ours = _rows(spark, namesrvs["ours"], **opts)
    assert java, "the Java broker returned no rows"
    assert ours == java
    if not opts:
        assert len(java) == N
        assert {r[2] for r in java} == {0, 1, 2, 3}
