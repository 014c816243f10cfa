"""``spark.read.format("rocketmq")`` / ``df.write.format("rocketmq")`` on ``local[2]`` against
a real 2-master cluster (real processes, remoting pulls): one seeded topic of 10 000 messages
over 8 queues for the module, read exactly, by offsets, by time, by tag; writes read back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.deploy.testing import create_topics
from rmq_cluster.spark_jobs.rocketmq_source import register
from tests.spark.rocketmq_testlib import TAGS, Seeded, seeded_cluster, sha

pytestmark = pytest.mark.slow
COUNT = 10_000


@pytest.fixture(scope="module")
def seeded(spark: Any) -> Iterator[Seeded]:
    register(spark)
    with seeded_cluster(COUNT) as s:
        yield s


def _read(spark: Any, s: Seeded, **opts: str) -> Any:
    r = spark.read.format("rocketmq").option("namesrv", s.namesrv).option("topic", s.topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _by_queue(rows: list[Any]) -> dict[tuple[str, int], list[tuple[int, str, str, str]]]:
    out: dict[tuple[str, int], list[tuple[int, str, str, str]]] = {}
    for r in rows:
        out.setdefault((r.broker, r.queueId), []).append(
            (r.queueOffset, sha(bytes(r.body)), r.keys, r.tags))
    return {k: sorted(v) for k, v in out.items()}


def test_read_whole_topic_exactly(spark: Any, seeded: Seeded) -> None:
    df = _read(spark, seeded, maxRecordsPerPartition="500")
    assert df.columns == [
        "topic", "broker", "queueId", "queueOffset", "commitLogOffset", "msgId", "keys", "tags",
        "body", "properties", "bornTimestamp", "storeTimestamp", "bornHost", "storeHost",
        "reconsumeTimes",
    ]
    assert df.rdd.getNumPartitions() == 8 * 3  # 1250 offsets per queue in ranges of <= 500
    rows = df.collect()
    assert len(rows) == COUNT
    got = _by_queue(rows)
    assert got == seeded.expected  # every queue dense from 0, bodies by SHA-256, keys, tags
    assert len({r.msgId for r in rows}) == COUNT
    assert {r.properties["n"] for r in rows} == {str(i) for i in range(COUNT)}
    assert all(r.topic == seeded.topic and r.reconsumeTimes == 0 for r in rows)
    assert all(r.storeHost.startswith("127.0.0.1:") for r in rows[:50])
    # commit-log offsets are distinct per broker, increasing with the queue offset
    for (broker, qid), _ in seeded.expected.items():
        phys = [r.commitLogOffset for r in sorted(
            (r for r in rows if (r.broker, r.queueId) == (broker, qid)),
            key=lambda r: r.queueOffset)]  # fmt: skip
        assert phys == sorted(set(phys))


def test_sql_over_a_topic(spark: Any, seeded: Seeded) -> None:
    _read(spark, seeded).createOrReplaceTempView("orders")
    rows = spark.sql("SELECT tags, count(*) AS n FROM orders GROUP BY tags ORDER BY tags").collect()
    want = {t: sum(1 for v in seeded.expected.values() for e in v if e[3] == t) for t in TAGS}
    assert {r.tags: r.n for r in rows} == want


def test_offset_ranges(spark: Any, seeded: Seeded) -> None:
    start = {"broker-a": {"0": 10, "1": -1}, "broker-b": {"3": 1000}}
    end = {"broker-a": {"0": 35, "2": 7}, "broker-b": {"3": -1}}
    rows = _read(spark, seeded, startingOffsets=json.dumps(start),
                 endingOffsets=json.dumps(end)).collect()  # fmt: skip
    want = {}
    for (b, q), entries in seeded.expected.items():
        lo = {("broker-a", 0): 10, ("broker-a", 1): len(entries), ("broker-b", 3): 1000}.get(
            (b, q), 0)
        hi = {("broker-a", 0): 35, ("broker-a", 2): 7}.get((b, q), len(entries))
        if hi > lo:
            want[(b, q)] = entries[lo:hi]
    assert _by_queue(rows) == want
    assert _read(spark, seeded, startingOffsets="latest").count() == 0


def test_timestamp_ranges(spark: Any, seeded: Seeded) -> None:
    after = _read(spark, seeded, startingTimestamp=str(seeded.cut_ms)).select("keys").collect()
    before = _read(spark, seeded, endingTimestamp=str(seeded.cut_ms)).select("keys").collect()
    assert {r.keys for r in before} == seeded.phase1
    assert len(before) == len(seeded.phase1)
    assert len(after) == COUNT - len(seeded.phase1)
    assert not {r.keys for r in after} & seeded.phase1


def test_tag_filter_is_exact(spark: Any, seeded: Seeded) -> None:
    rows = _read(spark, seeded, tags="TagA || TagC").select("broker", "queueId", "queueOffset",
                                                            "keys", "tags").collect()
    want = {(b, q, e[0]) for (b, q), v in seeded.expected.items() for e in v
            if e[3] in ("TagA", "TagC")}  # fmt: skip
    assert {(r.broker, r.queueId, r.queueOffset) for r in rows} == want
    assert len(rows) == len(want)


def test_bad_options_say_what(spark: Any, seeded: Seeded) -> None:
    with pytest.raises(Exception, match="startingOffsets"):
        _read(spark, seeded, startingOffsets="{nope").collect()
    with pytest.raises(Exception, match="names queues the topic does not have"):
        _read(spark, seeded, startingOffsets='{"broker-z": {"0": 1}}').collect()
    with pytest.raises(Exception, match="no route for topic"):
        (spark.read.format("rocketmq").option("namesrv", seeded.namesrv)
         .option("topic", "NoSuchTopic").load().collect())


def test_write_then_read_back(spark: Any, seeded: Seeded) -> None:
    topic = "SparkSink"
    create_topics(seeded.namesrv, [topic], queues=4)
    data = [(f"w{i}", ("TagX", "TagY")[i % 2], f"body {i}".encode() * (1 + i % 5),
             {"seq": str(i), "src": "spark"}) for i in range(300)]  # fmt: skip
    df = spark.createDataFrame(data, "keys STRING, tags STRING, body BINARY, "
                                     "properties MAP<STRING, STRING>").repartition(3)
    (df.write.format("rocketmq").option("namesrv", seeded.namesrv).option("topic", topic)
     .option("batchSize", "16").mode("append").save())
    back = (spark.read.format("rocketmq").option("namesrv", seeded.namesrv)
            .option("topic", topic).load().collect())
    assert len(back) == 300
    assert sorted((r.keys, r.tags, bytes(r.body), r.properties["seq"], r.properties["src"])
                  for r in back) == sorted((k, t, b, p["seq"], p["src"]) for k, t, b, p in data)
    assert len({(r.broker, r.queueId) for r in back}) > 1  # spread over queues and brokers
    for q in {(r.broker, r.queueId) for r in back}:
        offs = sorted(r.queueOffset for r in back if (r.broker, r.queueId) == q)
        assert offs == list(range(len(offs)))


def test_a_refused_row_is_named(spark: Any, seeded: Seeded) -> None:
    topic = "SparkSinkRefused"
    create_topics(seeded.namesrv, [topic], queues=1)
    big = "x" * 32_700  # fits a message's properties, not once the broker adds its own
    data = [("ok0", b"a", {}), ("ok1", b"b", {}), ("bad2", b"c", {"big": big}), ("ok3", b"d", {})]
    df = spark.createDataFrame(data, "keys STRING, body BINARY, properties MAP<STRING, STRING>")
    with pytest.raises(Exception, match=r"row 2 \(keys='bad2'\): the broker refused") as ei:
        (df.coalesce(1).write.format("rocketmq").option("namesrv", seeded.namesrv)
         .option("topic", topic).mode("append").save())
    assert "code 13" in str(ei.value)


def test_export_cli_lands_parquet(spark: Any, seeded: Seeded, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    from rmq_cluster.cli.main import main

    out = tmp_path / "out.parquet"
    code = main(["spark", "export", "-n", seeded.namesrv, "--topic", seeded.topic,
                 "--to", str(out), "--tags", "TagB", "--json"])  # fmt: skip
    cap = capsys.readouterr()
    assert code == 0, cap.err
    result = json.loads(cap.out)  # stdout: one JSON line, nothing else
    want = sum(1 for v in seeded.expected.values() for e in v if e[3] == "TagB")
    assert result["rows"] == want and result["topic"] == seeded.topic
    back = spark.read.parquet(str(out)).select("keys", "tags", "body").collect()
    assert {r.tags for r in back} == {"TagB"} and len(back) == want
    assert main(["spark", "export", "-n", seeded.namesrv, "--topic", seeded.topic,
                 "--to", str(out)]) == 1  # exists: errorifexists  # fmt: skip
    assert "already exists" in capsys.readouterr().err
    assert main(["spark", "export", "-n", seeded.namesrv, "--topic", "NoSuchTopic",
                 "--to", str(tmp_path / "x")]) == 1  # fmt: skip
    assert "no route for topic NoSuchTopic" in capsys.readouterr().err
    assert main(["spark", "export", "-n", seeded.namesrv, "--topic", seeded.topic,
                 "--to", str(tmp_path / "y"), "--starting-offsets", "{"]) == 2  # fmt: skip
    assert capsys.readouterr().out == ""


def _send_keys(namesrv: str, topic: str, ids: range) -> None:
    from rmq_cluster.spark_jobs.mq_io import Sender, out_message, send_all

    sender = Sender(namesrv.split(";"))
    try:
        msgs = (out_message(f"row {i}", topic, f"s{i}".encode(), f"s{i}", None, None)
                for i in ids)  # fmt: skip
        send_all(sender, msgs, 64)
    finally:
        sender.close()


def _wait_for(cond: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.2)  # polling a query's progress, bounded by the deadline


def _stored(s: Seeded, topic: str) -> int:
    """How many messages of ``topic`` the brokers' ConsumeQueue files list."""
    from rmq_cluster.spark_jobs.mq_io import queue_ends
    from rmq_cluster.spark_jobs.mq_model import read_options

    opts = read_options({"topic": topic, "storePath": json.dumps(s.stores)})
    return sum(end for _root, end in queue_ends(opts).values())


@pytest.mark.parametrize("path", ["remoting", "files"])
def test_stream_stopped_mid_way_and_restarted_writes_each_message_once(
    spark: Any, seeded: Seeded, tmp_path: Path, path: str
) -> None:
    """A stream stopped after a few micro-batches and restarted on its checkpoint (more
    messages sent in between) lands each message once: pulling, and from the brokers' store
    files (``storePath``: the files grow under the stream)."""
    topic = f"SparkStream{path.capitalize()}"
    create_topics(seeded.namesrv, [topic], queues=4)
    _send_keys(seeded.namesrv, topic, range(3000))
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    source = ({"namesrv": seeded.namesrv} if path == "remoting"
              else {"storePath": json.dumps(seeded.stores)})  # fmt: skip

    def start() -> Any:
        if path == "files":  # the brokers dispatch a moment after a send is answered
            _wait_for(lambda: _stored(seeded, topic) >= sent, "ConsumeQueues written", 30)
        stream = (spark.readStream.format("rocketmq").options(**source)
                  .option("topic", topic).option("startingOffsets", "earliest")
                  .option("maxMessagesPerTrigger", "400").load())
        return (stream.select("keys", "broker", "queueId", "queueOffset").writeStream
                .format("parquet").option("path", out).option("checkpointLocation", ckpt)
                .trigger(availableNow=True).start())

    sent = 3000
    q = start()
    _wait_for(lambda: len(q.recentProgress) >= 2 or not q.isActive, "second micro-batch")
    q.stop()  # mid-stream: some batches written, the rest not
    first_run = [p["numInputRows"] for p in q.recentProgress]
    assert all(n <= 400 for n in first_run), first_run
    _send_keys(seeded.namesrv, topic, range(3000, 4000))
    sent = 4000
    q = start()
    q.awaitTermination(300)
    assert q.exception() is None
    rows = spark.read.parquet(out).collect()
    keys = [r.keys for r in rows]
    assert len(keys) == 4000 and set(keys) == {f"s{i}" for i in range(4000)}
    assert sum(first_run) < 4000  # the restart did real work
