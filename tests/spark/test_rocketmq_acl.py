"""The rocketmq source and sink against ``rmq-cluster up --acl`` (real processes, local[2]):
with ``accessKey``/``secretKey`` every request is signed (plain ACL's HmacSHA1); a batch
write, a streaming copy (``readStream`` -> ``writeStream.format("rocketmq")``) and a batch
read of what it wrote all pass; without keys, or with a wrong secret, the cluster refuses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.deploy.testing import _create_topics, _in_thread
from rmq_cluster.spark_jobs.rocketmq_source import register
from tests.integration.security.acl_cluster_testlib import ADMIN, AclCluster, acl_cluster

pytestmark = pytest.mark.slow
KEY, SECRET = "sparkUser01", "sparkUserSecret01"
SRC, DST = "SparkAclIn", "SparkAclOut"
N = 600


@pytest.fixture(scope="module")
def cluster(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    register(spark)
    user = {"accessKey": KEY, "secretKey": SECRET, "admin": False, "defaultTopicPerm": "DENY",
            "defaultGroupPerm": "SUB", "topicPerms": [f"{SRC}=PUB|SUB", f"{DST}=PUB|SUB"]}
    with acl_cluster(tmp_path_factory.mktemp("acl"), profile={"base": "single"},
                     accounts=[user]) as c:  # fmt: skip
        async def create() -> None:
            from rmq_cluster.client import Admin

            async with Admin(namesrv_addr=c.namesrv_addr, access_key=ADMIN.access_key,
                             secret_key=ADMIN.secret_key) as admin:  # fmt: skip
                await _create_topics(admin, [SRC, DST], queues=2, order=False)

        _in_thread(create)
        yield c


def _opts(c: AclCluster, topic: str, secret: str | None = SECRET) -> dict[str, str]:
    keys = {"accessKey": KEY, "secretKey": secret} if secret is not None else {}
    return {"namesrv": c.namesrv_addr, "topic": topic, **keys}


def _read(spark: Any, opts: dict[str, str]) -> list[Any]:
    return spark.read.format("rocketmq").options(**opts).load().collect()


def test_signed_write_stream_copy_and_read(spark: Any, cluster: AclCluster,
                                           tmp_path: Path) -> None:  # fmt: skip
    data = [(f"a{i}", "TagA", f"body {i}".encode(), {"i": str(i)}) for i in range(N)]
    df = spark.createDataFrame(data, "keys STRING, tags STRING, body BINARY, "
                                     "properties MAP<STRING, STRING>").repartition(2)
    df.write.format("rocketmq").options(**_opts(cluster, SRC)).mode("append").save()
    # a stream read from SRC, written to DST by the streaming sink
    copy = (spark.readStream.format("rocketmq").options(**_opts(cluster, SRC))
            .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", "250").load()
            .selectExpr("keys", "tags", "body", "properties").writeStream.format("rocketmq")
            .options(**_opts(cluster, DST)).option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True).start())  # fmt: skip
    copy.awaitTermination(180)
    assert copy.exception() is None
    assert sum(p["numInputRows"] for p in copy.recentProgress) == N
    back = _read(spark, _opts(cluster, DST))
    assert sorted((r.keys, r.tags, bytes(r.body), r.properties["i"]) for r in back) == \
        sorted((k, t, b, p["i"]) for k, t, b, p in data)  # fmt: skip


def test_unsigned_or_wrongly_signed_is_refused(spark: Any, cluster: AclCluster) -> None:
    with pytest.raises(Exception, match="No accessKey is configured"):
        _read(spark, _opts(cluster, SRC, secret=None))
    with pytest.raises(Exception, match="Check signature failed"):
        _read(spark, _opts(cluster, SRC, secret="not-the-secret"))
    df = spark.createDataFrame([("x", b"x")], "keys STRING, body BINARY")
    with pytest.raises(Exception, match="No accessKey is configured"):
        df.write.format("rocketmq").options(**_opts(cluster, DST, secret=None)).mode(
            "append").save()
