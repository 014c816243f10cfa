"""The rocketmq data source's batch read: prints one JSON object.

    python3 bench/spark_read.py [--messages 100000] [--rounds 2] [--body-bytes 200]

A quiet run (stdout: the JSON line only; Spark's and the JVM's lines on stderr dropped):
``python3 bench/spark_read.py --messages 100000 --rounds 2 2>/dev/null``.  An A/B of two
checkouts runs each tree's own file with an interpreter that imports that tree (Spark's
Python workers import ``rmq_cluster`` through the interpreter, not through this process's
``sys.path``), alternating base and new.

Starts ``rmq-cluster up 2m-noslave`` (real processes), seeds ``--messages`` messages over 8
queues (4 per broker, our client's batch send) and measures, on the same topic in the same run
(``--rounds`` times each, interleaved; the best round is reported, all rounds listed):
  * spark_remoting: ``spark.read.format("rocketmq")`` on ``local[2]`` (remoting pulls), every
    column materialised (``sum(length(body))``), one partition per queue;
  * spark_files: the same read with ``storePath`` (the brokers' CommitLog and ConsumeQueue
    files, no broker asked);
  * raw_pull: one thread pulling every queue (PULL_MESSAGE, 32 per pull, frames counted,
    records not decoded): what the wire gives one reader;
  * cat_commitlog: ``cat`` of both brokers' CommitLog files to /dev/null (the disk/page-cache
    floor; the files hold the topic's records and nothing else, but are preallocated at
    ``mappedFileSizeCommitLog``: cat reads the whole file, its unwritten tail included).
Rates are rows/s (messages per second of wall time; the cat: the topic's messages over its
time).  The Spark session is started (and warmed by one small read) before timing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import checkout  # noqa: E402  (bench/checkout.py: this tree's rmq_cluster first)

checkout.use(ROOT)

TOPIC = "BenchSparkRead"
QUEUES_PER_BROKER = 4
SEED_BATCH = 256


def seed(namesrv: str, count: int, body_bytes: int) -> None:
    from rmq_cluster.client import Admin, Message, Producer
    from rmq_cluster.client.model import MessageQueue
    from rmq_cluster.deploy.testing import _in_thread

    async def go() -> None:
        async with Admin(namesrv_addr=namesrv) as admin:
            route = await admin.topic_route(TOPIC)
        brokers = sorted(b.broker_name for b in route.broker_datas)
        queues = [MessageQueue(TOPIC, b, q) for b in brokers for q in range(QUEUES_PER_BROKER)]
        async with Producer("bench_spark_seed", namesrv_addr=namesrv) as producer:
            for s in range(0, count, SEED_BATCH):
                ids = range(s, min(count, s + SEED_BATCH))
                msgs = [Message(TOPIC, (b"%08d" % i) * (body_bytes // 8), tags="T",
                                keys=f"k{i}") for i in ids]  # fmt: skip
                await producer.send_batch(msgs, queue=queues[(s // SEED_BATCH) % len(queues)])

    _in_thread(go, 600.0)


def spark_read(spark: Any, options: dict[str, str]) -> tuple[int, float]:
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    row = (spark.read.format("rocketmq").options(**options).load()
           .agg(F.count("*"), F.sum(F.length("body"))).collect()[0])  # fmt: skip
    return int(row[0]), time.perf_counter() - t0


def raw_pull(namesrv: str) -> tuple[int, float]:
    from rmq_cluster.spark_jobs.mq_io import SUCCESS, plan_read, pull_once
    from rmq_cluster.spark_jobs.mq_model import read_options
    from rmq_cluster.spark_jobs.mq_wire import Channel

    opts = read_options({"namesrv": namesrv, "topic": TOPIC})
    t0 = time.perf_counter()
    total = 0
    for r in plan_read(opts):
        with Channel(r.addr, opts.timeout_s) as ch:
            offset = r.start
            while offset < r.end:
                reply = pull_once(ch, opts, r.queue_id, offset, 32, ("*", "TAG"))
                nxt = int(reply.ext_fields["nextBeginOffset"])
                if reply.code != SUCCESS or nxt <= offset:
                    raise RuntimeError(f"pull {r.broker}/{r.queue_id}@{offset}: {reply.code}")
                total += min(nxt, r.end) - offset
                offset = nxt
    return total, time.perf_counter() - t0


def cat_commitlog(stores: dict[str, str]) -> float:
    files = [str(p) for root in stores.values() for p in sorted(Path(root, "commitlog").iterdir())]
    t0 = time.perf_counter()
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from rmq_cluster.deploy.testing import create_topics, rmq_cluster
    from rmq_cluster.spark_jobs.replica_diff import build_session
    from rmq_cluster.spark_jobs.rocketmq_source import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    names = ("spark_remoting", "spark_files", "raw_pull", "cat_commitlog")
    rounds: dict[str, list[float]] = {k: [] for k in names}
    with rmq_cluster("2m-noslave") as cluster:
        ns = cluster.namesrv_addr
        create_topics(ns, [TOPIC], queues=QUEUES_PER_BROKER)
        t0 = time.perf_counter()
        seed(ns, args.messages, args.body_bytes)
        seed_s = time.perf_counter() - t0
        stores = {b: str(cluster.dir / "store" / b) for b in ("broker-a", "broker-b")}
        spark = build_session("local[2]", app="bench-spark-read", quiet=True)
        try:
            register(spark)
            remote = {"namesrv": ns, "topic": TOPIC}
            files = {"storePath": json.dumps(stores), "topic": TOPIC}
            spark_read(spark, {**remote, "endingOffsets": '{"broker-a": {"0": 100}}'})  # warm
            for _ in range(args.rounds):
                for name, fn in (("spark_remoting", lambda: spark_read(spark, remote)),
                                 ("spark_files", lambda: spark_read(spark, files)),
                                 ("raw_pull", lambda: raw_pull(ns))):  # fmt: skip
                    n, secs = fn()
                    if n != args.messages:
                        raise RuntimeError(f"{name} read {n} rows, not {args.messages}")
                    rounds[name].append(n / secs)
                rounds["cat_commitlog"].append(args.messages / cat_commitlog(stores))
        finally:
            spark.stop()
    best = {k: round(max(v)) for k, v in rounds.items()}
    return {
        "bench": "spark_read", "messages": args.messages, "body_bytes": args.body_bytes,
        "queues": 2 * QUEUES_PER_BROKER, "master": "local[2]", "seed_msgs_per_s":
        round(args.messages / seed_s), "rows_per_s": best,
        "rounds": {k: [round(x) for x in v] for k, v in rounds.items()},
        "spark_remoting_vs_raw_pull": round(best["spark_remoting"] / best["raw_pull"], 3),
        "spark_files_vs_spark_remoting": round(best["spark_files"] / best["spark_remoting"], 3),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--body-bytes", type=int, default=200)
    args = p.parse_args()
    print(json.dumps(measure(args), sort_keys=True))


if __name__ == "__main__":
    main()
