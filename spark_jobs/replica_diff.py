"""Spark replica-diff: audit every replica's store against its group's master, offset by offset.

Run::

    python -m rmq_cluster.spark_jobs.replica_diff --dir CLUSTER_DIR --out OUT
    python -m rmq_cluster.spark_jobs.replica_diff --replica g:n0:MASTER:/a \\
        --replica g:n1:SLAVE:/b --out OUT
    spark-submit --master spark://host:7077 --py-files rmq_spark.zip \\
        spark_jobs/replica_diff.py --replica ... --out OUT     (see spark_jobs/README.md)

Outputs in OUT: ``findings/`` (Parquet, partitioned by group), ``summary.json``, ``report.html``.
Exit 0 consistent (lag only with ``--allow-lag``), 1 divergence, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from rmq_cluster.spark_jobs.decode import ROW_FIELDS, decode_cq, decode_segment_range
from rmq_cluster.spark_jobs.model import (
    K_CQ_DANGLING,
    K_CQ_MISMATCH,
    K_DIVERGENT,
    K_EXTRA_TAIL,
    K_LAG,
    K_MISSING,
    K_QUEUE_GAP,
    LAG_KINDS,
    BadInput,
    CqTask,
    Replica,
    ScanTask,
    check_groups,
    choose_masters,
    consumer_offset_findings,
    parse_replica_spec,
    plan_cq,
    plan_scan,
    replicas_from_cluster_dir,
)

DEFAULT_SPLIT_BYTES = 64 * 1024 * 1024
FIRST_FINDINGS = 100
MAP_BUCKETS = 100

FINDING_COLUMNS = (
    "group", "node", "role", "kind", "phy_offset", "end_offset", "count",
    "topic", "queue_id", "queue_offset", "detail",
)  # fmt: skip


def _nulls() -> list[Any]:
    from pyspark.sql import functions as F

    return [F.lit(None).cast("string").alias("topic"), F.lit(None).cast("int").alias("queue_id"),
            F.lit(None).cast("long").alias("queue_offset")]  # fmt: skip


def _progress(quiet: bool, msg: str) -> None:
    if not quiet:
        print(f"[replica-diff] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- worker side


def _scan(task: ScanTask) -> Iterator[tuple[Any, ...]]:
    with open(task.path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            for row in decode_segment_range(
                task.kind, m, task.seg_start, task.lo, task.hi, verify_crc=task.verify_crc
            ):
                yield (task.rid, *row)


def _scan_cq(task: CqTask) -> Iterator[tuple[int, str, int, int, int, int]]:
    with open(task.path, "rb") as f:
        data = f.read()
    for u in decode_cq(data, task.seg_start):
        yield (task.rid, task.topic, task.queue_id, u.cq_index, u.phy_offset, u.size)


# ----------------------------------------------------------------------------- Spark


def record_schema() -> Any:
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    types = {
        "phy_offset": LongType(), "size": LongType(), "body_crc": LongType(),
        "topic": StringType(), "queue_id": IntegerType(), "queue_offset": LongType(),
        "store_ts": LongType(), "sys_flag": IntegerType(), "msg_id": StringType(),
        "keys": StringType(), "uniq_key": StringType(), "term": LongType(),
        "anomaly": StringType(), "detail": StringType(),
    }  # fmt: skip
    return StructType(
        [StructField("rid", IntegerType(), False)]
        + [StructField(n, types[n], True) for n in ROW_FIELDS]
    )


def finding_schema() -> Any:
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    types = {"phy_offset": LongType(), "end_offset": LongType(), "count": LongType(),
             "queue_id": IntegerType(), "queue_offset": LongType()}  # fmt: skip
    return StructType([StructField(c, types.get(c, StringType()), True) for c in FINDING_COLUMNS])


def build_session(master: str | None, *, app: str = "rmq-replica-diff", quiet: bool = True) -> Any:
    """``--master`` wins; under spark-submit Spark's own config; else ``local[*]``."""
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app)
    if master:
        b = b.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        b = b.master("local[*]")
    b = (
        b.config("spark.ui.enabled", "false")
        .config("spark.log.level", "ERROR")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.ui.showConsoleProgress", "false" if quiet else "true")
        .config("spark.sql.adaptive.enabled", "true")
    )
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def decode_records(spark: Any, tasks: list[ScanTask]) -> Any:
    sc = spark.sparkContext
    # record-aligned ranges batched into a few partitions per core (a task costs more than a range)
    slices = max(1, min(len(tasks), sc.defaultParallelism * 4))
    rdd = sc.parallelize(tasks, slices).flatMap(_scan)
    return spark.createDataFrame(rdd, record_schema())


def run_diff(
    spark: Any,
    replicas: list[Replica],
    *,
    verify_crc: bool = False,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    quiet: bool = True,
) -> dict[str, Any]:
    """Decode, compare and return {findings DataFrame, stats}; no output written."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    check_groups(replicas)
    tasks, file_findings, segs_by = plan_scan(replicas, split_bytes, verify_crc=verify_crc)
    nfiles = sum(len(s) for s in segs_by.values())
    _progress(quiet, f"scanning {nfiles} files of {len(replicas)} replicas in {len(tasks)} ranges")
    recs_all = decode_records(spark, tasks).persist()
    good = recs_all.where(F.col("anomaly").isNull() | (F.col("anomaly") == "bad_crc"))

    # one pass for the per-replica stats and the per-queue maxima
    qrows = (
        good.groupBy("rid", "topic", "queue_id")
        .agg(
            F.count("*").alias("messages"),
            F.sum("size").alias("bytes"),
            F.max(F.col("phy_offset") + F.col("size")).alias("end"),
            F.min("phy_offset").alias("first"),
            F.max("queue_offset").alias("mx"),
        )
        .collect()
    )
    stats: dict[int, dict[str, int]] = {}
    qmax: dict[tuple[int, str, int], int] = {}
    for q in qrows:
        st = stats.setdefault(q["rid"], {"messages": 0, "bytes": 0, "end": 0, "first": q["first"]})
        st["messages"] += q["messages"]
        st["bytes"] += q["bytes"]
        st["end"] = max(st["end"], q["end"])
        st["first"] = min(st["first"], q["first"])
        qmax[(q["rid"], q["topic"], q["queue_id"])] = q["mx"] + 1
    ends = {rid: s["end"] for rid, s in stats.items()}
    masters = choose_masters(replicas, ends)
    _progress(quiet, f"decoded {sum(s['messages'] for s in stats.values())} records")

    rep_rows = []
    for rid, r in enumerate(replicas):
        m = masters[r.group]
        segs = segs_by[rid]
        mseg = segs_by[m]
        rep_rows.append(
            (
                rid, r.group, r.node, r.role, rid == m, m,
                segs[0].start if segs else 0,  # r_lo: retention bound of the replica
                int(ends.get(rid, segs[0].start if segs else 0)),  # r_end
                mseg[0].start if mseg else 0,  # m_lo
                int(ends.get(m, mseg[0].start if mseg else 0)),  # m_end
            )
        )
    reps = spark.createDataFrame(
        rep_rows,
        "rid int, group string, node string, role string, is_master boolean, mrid int, "
        "r_lo long, r_end long, m_lo long, m_end long",
    )
    reps_b = F.broadcast(reps)
    _NO_QUEUE = _nulls()
    cols = ["phy_offset", "size", "body_crc", "topic", "queue_id", "queue_offset", "term"]

    # ---- master rows (with their sequence number in the group) paired with every other replica
    mrec = good.join(reps_b.where("is_master").select("rid"), "rid").select(
        F.col("rid").alias("mrid"),
        *[F.col(c).alias("m_" + c) for c in cols],
        F.row_number().over(Window.partitionBy("rid").orderBy("phy_offset")).alias("seq"),
    )
    others = reps_b.where(~F.col("is_master")).select("rid", "mrid")
    pairs = mrec.join(others, "mrid").withColumn("phy_offset", F.col("m_phy_offset"))
    rrec = good.join(others.select("rid"), "rid").select("rid", *cols)
    j = pairs.join(rrec, ["rid", "phy_offset"], "full_outer").join(
        reps_b.select("rid", "r_lo", "r_end", "m_lo", "m_end"), "rid"
    )
    j = j.where(  # only rows that can become findings
        F.col("m_size").isNull()
        | F.col("size").isNull()
        | ~F.col("m_body_crc").eqNullSafe(F.col("body_crc"))
        | ~F.col("m_size").eqNullSafe(F.col("size"))
        | ~F.col("m_topic").eqNullSafe(F.col("topic"))
        | ~F.col("m_queue_id").eqNullSafe(F.col("queue_id"))
        | ~F.col("m_queue_offset").eqNullSafe(F.col("queue_offset"))
        | ~F.col("m_term").eqNullSafe(F.col("term"))
    ).persist()
    both = F.col("m_size").isNotNull() & F.col("size").isNotNull()
    m_only = F.col("m_size").isNotNull() & F.col("size").isNull()
    r_only = F.col("m_size").isNull() & F.col("size").isNotNull()

    def _diff(c: str) -> Any:
        return F.when(~F.col("m_" + c).eqNullSafe(F.col(c)), F.lit(c))

    diff_detail = F.concat_ws(",", *[_diff(c) for c in cols[1:]])
    divergent = (
        j.where(both)
        .withColumn("what", diff_detail)
        .where(F.col("what") != "")
        .select(
            "rid", F.lit(K_DIVERGENT).alias("kind"), "phy_offset",
            (F.col("phy_offset") + F.col("size")).alias("end_offset"),
            F.lit(1).cast("long").alias("count"), "topic", "queue_id", "queue_offset",
            F.concat(F.lit("differs from master in "), F.col("what")).alias("detail"),
        )
    )  # fmt: skip
    stray = j.where(r_only & (F.col("phy_offset") >= F.col("m_lo"))
                    & (F.col("phy_offset") < F.col("m_end"))).select(
        "rid", F.lit(K_DIVERGENT).alias("kind"), "phy_offset",
        (F.col("phy_offset") + F.col("size")).alias("end_offset"),
        F.lit(1).cast("long").alias("count"), "topic", "queue_id", "queue_offset",
        F.lit("no master record starts at this offset").alias("detail"),
    )  # fmt: skip
    extra = (
        j.where(r_only & (F.col("phy_offset") >= F.col("m_end")))
        .groupBy("rid")
        .agg(F.min("phy_offset").alias("phy_offset"),
             F.max(F.col("phy_offset") + F.col("size")).alias("end_offset"),
             F.count("*").alias("count"))
        .select("rid", F.lit(K_EXTRA_TAIL).alias("kind"), "phy_offset", "end_offset", "count",
                *_NO_QUEUE,
                F.concat(F.col("count"), F.lit(" records beyond the master's end")).alias("detail"))
    )  # fmt: skip
    lag = (
        j.where(m_only & (F.col("phy_offset") >= F.col("r_end")))
        .groupBy("rid")
        .agg(F.min("phy_offset").alias("phy_offset"),
             F.max(F.col("m_phy_offset") + F.col("m_size")).alias("end_offset"),
             F.count("*").alias("count"))
        .select("rid", F.lit(K_LAG).alias("kind"), "phy_offset", "end_offset", "count",
                *_NO_QUEUE,
                F.concat(F.col("count"), F.lit(" master records not yet on the replica")
                         ).alias("detail"))
    )  # fmt: skip
    holes = j.where(
        m_only & (F.col("phy_offset") >= F.col("r_lo")) & (F.col("phy_offset") < F.col("r_end"))
    ).withColumn(
        "island", F.col("seq") - F.row_number().over(Window.partitionBy("rid").orderBy("seq"))
    )
    missing = (
        holes.groupBy("rid", "island")
        .agg(F.min("phy_offset").alias("phy_offset"),
             F.max(F.col("m_phy_offset") + F.col("m_size")).alias("end_offset"),
             F.count("*").alias("count"))
        .select("rid", F.lit(K_MISSING).alias("kind"), "phy_offset", "end_offset", "count",
                *_NO_QUEUE,
                F.concat(F.col("count"), F.lit(" master records missing")).alias("detail"))
    )  # fmt: skip

    # ---- decode anomalies (every replica, master included)
    anomalies = recs_all.where(F.col("anomaly").isNotNull()).select(
        "rid", F.col("anomaly").alias("kind"), "phy_offset",
        (F.col("phy_offset") + F.col("size")).alias("end_offset"),
        F.lit(1).cast("long").alias("count"), "topic", "queue_id", "queue_offset", "detail",
    )  # fmt: skip

    # ---- queue offsets with gaps (transaction prepared/rollback records take no queue offset)
    w = Window.partitionBy("rid", "topic", "queue_id").orderBy("queue_offset", "phy_offset")
    txn = F.col("sys_flag").bitwiseAND(0xC)
    gaps = (
        good.where(~txn.isin(4, 12))
        .select("rid", "phy_offset", "size", "topic", "queue_id", "queue_offset",
                F.lag("queue_offset").over(w).alias("prev"))
        .where(F.col("prev").isNotNull() & (F.col("queue_offset") != F.col("prev") + 1))
        .select("rid", F.lit(K_QUEUE_GAP).alias("kind"), "phy_offset",
                (F.col("phy_offset") + F.col("size")).alias("end_offset"),
                F.greatest(F.col("queue_offset") - F.col("prev") - 1, F.lit(0)).alias("count"),
                "topic", "queue_id", "queue_offset",
                F.concat(F.lit("previous queue offset "), F.col("prev")).alias("detail"))
    )  # fmt: skip

    # ---- ConsumeQueue units against the same replica's records
    cq_tasks = plan_cq(replicas)
    parts: list[Any] = [divergent, stray, extra, lag, missing, anomalies, gaps]
    if cq_tasks:
        cq = spark.createDataFrame(
            spark.sparkContext.parallelize(
                cq_tasks, min(len(cq_tasks), spark.sparkContext.defaultParallelism * 2)
            ).flatMap(_scan_cq),
            "rid int, cq_topic string, cq_qid int, cq_index long, phy_offset long, cq_size long",
        )
        cqj = (
            cq.join(good.select("rid", "phy_offset", "size", "topic", "queue_id", "queue_offset"),
                    ["rid", "phy_offset"], "left")
            .join(reps_b.select("rid", "r_lo", "r_end"), "rid")
            .where(F.col("phy_offset") >= F.col("r_lo"))
        )  # fmt: skip
        bad = (
            F.col("size").isNull()
            | (F.col("size") != F.col("cq_size"))
            | (F.col("topic") != F.col("cq_topic"))
            | (F.col("queue_id") != F.col("cq_qid"))
            | (F.col("queue_offset") != F.col("cq_index"))
        )
        cq_find = cqj.where(bad).select(
            "rid",
            F.when(F.col("phy_offset") >= F.col("r_end"), F.lit(K_CQ_DANGLING))
            .otherwise(F.lit(K_CQ_MISMATCH)).alias("kind"),
            "phy_offset",
            (F.col("phy_offset") + F.col("cq_size")).alias("end_offset"),
            F.lit(1).cast("long").alias("count"),
            F.col("cq_topic").alias("topic"), F.col("cq_qid").alias("queue_id"),
            F.col("cq_index").alias("queue_offset"),
            F.concat(F.lit("cq unit "), F.col("cq_index"), F.lit(" -> "),
                     F.coalesce(F.concat(F.col("topic"), F.lit("/"), F.col("queue_id"),
                                         F.lit("@"), F.col("queue_offset"), F.lit(" size "),
                                         F.col("size")), F.lit("no record"))).alias("detail"),
        )  # fmt: skip
        parts.append(cq_find)

    # ---- consumer offsets (driver side: tiny)
    small: list[tuple[Any, ...]] = [
        (f.rid, f.kind, f.offset, f.end, 1, None, None, None, f.detail) for f in file_findings
    ]
    small += consumer_offset_findings(replicas, masters, qmax)
    if small:
        parts.append(
            spark.createDataFrame(
                small,
                "rid int, kind string, phy_offset long, end_offset long, count long, "
                "topic string, queue_id int, queue_offset long, detail string",
            )
        )
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    findings = out.join(reps_b.select("rid", "group", "node", "role"), "rid").select(
        *FINDING_COLUMNS
    )
    return {
        "findings": findings,
        "records": recs_all,
        "joined": j,
        "replicas": replicas,
        "masters": masters,
        "stats": stats,
        "segments": segs_by,
    }


def summarize(result: dict[str, Any], findings_rows: list[Any], by_kind: list[Any],
              buckets: list[Any], *, allow_lag: bool, elapsed: float, verify_crc: bool,
              bucket_width: dict[str, int]) -> dict[str, Any]:  # fmt: skip
    replicas: list[Replica] = result["replicas"]
    masters: dict[str, int] = result["masters"]
    stats: dict[int, dict[str, Any]] = result["stats"]
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for r in by_kind:
        counts.setdefault((r["group"], r["node"]), {})[r["kind"]] = int(r["n"])
    first_bad: dict[tuple[str, str], int] = {}
    for r in findings_rows:
        if r["phy_offset"] is not None and r["kind"] not in LAG_KINDS:
            key = (r["group"], r["node"])
            first_bad[key] = min(first_bad.get(key, r["phy_offset"]), r["phy_offset"])
    groups: dict[str, Any] = {}
    exit_code = 0
    for rid, r in enumerate(replicas):
        m = masters[r.group]
        st = stats.get(rid, {})
        mst = stats.get(m, {})
        kinds = counts.get((r.group, r.node), {})
        div = sum(n for k, n in kinds.items() if k not in LAG_KINDS)
        lagk = sum(n for k, n in kinds.items() if k in LAG_KINDS)
        verdict = "divergent" if div else ("lagging" if lagk else "consistent")
        if div or (lagk and not allow_lag):
            exit_code = 1
        end = int(st.get("end") or 0)
        mend = int(mst.get("end") or 0)
        g = groups.setdefault(r.group, {"master": replicas[m].node, "replicas": {}})
        g["replicas"][r.node] = {
            "role": r.role,
            "kind": r.kind,
            "store": r.store,
            "is_master": rid == m,
            "files": len(result["segments"][rid]),
            "bytes": int(st.get("bytes") or 0),
            "messages": int(st.get("messages") or 0),
            "first_offset": st.get("first"),
            "end_offset": end,
            "lag_bytes": max(0, mend - end),
            "lag_messages": max(0, int(mst.get("messages") or 0) - int(st.get("messages") or 0)),
            "ahead_bytes": max(0, end - mend),
            "common_prefix": min(first_bad.get((r.group, r.node), min(end, mend)), end, mend),
            "findings": dict(sorted(kinds.items())),
            "verdict": verdict,
        }
    dmap: dict[str, dict[str, dict[str, int]]] = {}
    for b in buckets:
        dmap.setdefault(b["group"], {}).setdefault(b["node"], {})[str(b["bucket"])] = int(b["n"])
    return {
        "exit_code": exit_code,
        "verdict": "consistent" if exit_code == 0 else "divergent",
        "allow_lag": allow_lag,
        "verify_crc": verify_crc,
        "elapsed_s": round(elapsed, 3),
        "groups": groups,
        "first_findings": [
            {k: r[k] for k in ("group", "node", "role", *FINDING_COLUMNS[3:])}
            for r in findings_rows[:FIRST_FINDINGS]
        ],
        "divergence_map": {"buckets": MAP_BUCKETS, "bucket_bytes": bucket_width, "counts": dmap},
    }


def run_job(
    spark: Any,
    replicas: list[Replica],
    out_dir: str,
    *,
    verify_crc: bool = False,
    allow_lag: bool = False,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    quiet: bool = True,
) -> dict[str, Any]:
    """The whole job: diff, then ``findings/`` Parquet, ``summary.json`` and ``report.html``."""
    from pyspark.sql import functions as F

    from rmq_cluster.spark_jobs.report import render_html

    t0 = time.monotonic()
    res = run_diff(spark, replicas, verify_crc=verify_crc, split_bytes=split_bytes, quiet=quiet)
    os.makedirs(out_dir, exist_ok=True)
    findings_path = os.path.join(out_dir, "findings")
    _progress(quiet, f"writing findings to {findings_path}")
    f = res["findings"].coalesce(max(1, spark.sparkContext.defaultParallelism)).persist()
    f.write.mode("overwrite").partitionBy("group").parquet(findings_path)
    by_kind = f.groupBy("group", "node", "kind").agg(F.count("*").alias("n")).collect()
    rows = (
        f.orderBy(F.col("group"), F.col("phy_offset").asc_nulls_last(), "node", "kind")
        .limit(FIRST_FINDINGS).collect()
    )  # fmt: skip
    widths: dict[str, int] = {}
    for g, m in res["masters"].items():
        ends = [int(res["stats"].get(i, {}).get("end") or 0)
                for i, r in enumerate(replicas) if r.group == g]  # fmt: skip
        widths[g] = max(1, -(-max([*ends, int(res["stats"].get(m, {}).get("end") or 0)])
                             // MAP_BUCKETS))  # fmt: skip
    wdf = spark.createDataFrame(list(widths.items()), "group string, width long")
    buckets = (
        f.where(F.col("phy_offset").isNotNull())
        .join(F.broadcast(wdf), "group")
        .groupBy("group", "node", F.floor(F.col("phy_offset") / F.col("width")).alias("bucket"))
        .agg(F.count("*").alias("n"))
        .collect()
    )
    summary = summarize(res, rows, by_kind, buckets, allow_lag=allow_lag,
                        elapsed=time.monotonic() - t0, verify_crc=verify_crc,
                        bucket_width=widths)  # fmt: skip
    f.unpersist()
    res["records"].unpersist()
    res["joined"].unpersist()
    with open(os.path.join(out_dir, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2, default=str)
    with open(os.path.join(out_dir, "report.html"), "w") as fh:
        fh.write(render_html(summary))
    _progress(quiet, f"verdict {summary['verdict']} (exit {summary['exit_code']}) -> {out_dir}")
    return summary


# ----------------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", help="cluster directory holding cluster.json (rmq-cluster up)")
    p.add_argument("--replica", action="append", default=[], metavar="GROUP:NODE:ROLE:STORE",
                   help="a replica (repeatable); ROLE: MASTER/SYNC_MASTER/ASYNC_MASTER/SLAVE, "
                        "LEADER/FOLLOWER/DLEDGER for DLedger stores")  # fmt: skip
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--master", default=None,
                   help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--verify-crc", action="store_true",
                   help="read bodies and recompute BODYCRC (default: headers only)")
    p.add_argument("--allow-lag", action="store_true",
                   help="a replica behind its master (a missing tail) is not a failure")
    p.add_argument("--split-mb", type=int, default=DEFAULT_SPLIT_BYTES >> 20,
                   help="scan range size within a file (MiB)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def resolve_replicas(args: argparse.Namespace) -> list[Replica]:
    replicas: list[Replica] = []
    if args.dir:
        replicas += replicas_from_cluster_dir(args.dir)
    replicas += [parse_replica_spec(s) for s in args.replica]
    if not replicas:
        raise BadInput("give --dir or at least one --replica")
    check_groups(replicas)
    return replicas


def run_from_args(args: argparse.Namespace) -> int:
    try:
        replicas = resolve_replicas(args)
    except BadInput as exc:
        print(f"replica-diff: bad input: {exc}", file=sys.stderr)
        return 2
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        print(
            "replica-diff: needs PySpark: python3 -m pip install -e '.[spark]' (and Java 17)",
            file=sys.stderr,
        )
        return 2

    owned = SparkSession.getActiveSession() is None  # in-process callers keep their session
    spark = build_session(args.master, quiet=args.quiet)
    try:
        summary = run_job(spark, replicas, args.out, verify_crc=args.verify_crc,
                          allow_lag=args.allow_lag, split_bytes=max(1, args.split_mb) << 20,
                          quiet=args.quiet)  # fmt: skip
    except BadInput as exc:
        print(f"replica-diff: bad input: {exc}", file=sys.stderr)
        return 2
    finally:
        if owned:
            spark.stop()
    return int(summary["exit_code"])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="replica-diff", description=__doc__.split("\n")[0])
    add_arguments(p)
    return run_from_args(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
