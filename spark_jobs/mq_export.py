"""``rmq-cluster spark export --topic T --to out.parquet``: a topic (or a range of it) landed
as Parquet by the ``rocketmq`` data source.

Driver side.  The options are checked and the topic's route asked before Spark starts (a bad
argument exits 2, an unknown topic or unreachable NameServer exits 1, both in a moment);
stdout carries the result only (one line, or one JSON line with ``--json``), logs go to
stderr.  ``--master spark://host:7077`` runs the read on a standalone cluster: the job archive
(``package.py``) is shipped to the executors with ``addPyFile`` (they need Python 3.11 with
PySpark's own dependencies, pyarrow included: Spark's Python data sources exchange rows as
Arrow batches).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any, Final

from ..cluster.logging import get_logger
from .mq_model import ReadOptions, SourceError, read_options

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
WRITE_MODES: Final = ("errorifexists", "overwrite")
log = get_logger(component="spark-export")


def add_commands(subparsers: Any) -> None:
    """``rmq-cluster spark export`` (``spark`` holds the data source's jobs)."""
    spark = subparsers.add_parser(
        "spark", help="Spark jobs over topics (the rocketmq data source)",
        description="Spark jobs that read topics through the rocketmq data source.",
    )  # fmt: skip
    sub = spark.add_subparsers(dest="spark_command", metavar="JOB", required=True)
    p = sub.add_parser(
        "export", help="land a topic (or a range of it) as Parquet",
        description="Read a topic with format('rocketmq') and write it as Parquet.",
    )  # fmt: skip
    p.add_argument("-n", "--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"),
                   help="NameServer address(es), ';'-separated (default: $NAMESRV_ADDR, else "
                        "127.0.0.1:9876)")  # fmt: skip
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("--to", required=True, help="output Parquet directory")
    p.add_argument("--mode", choices=WRITE_MODES, default="errorifexists",
                   help="when --to exists (default: errorifexists)")
    p.add_argument("--starting-offsets", default="earliest",
                   help="earliest, latest or JSON {broker: {queueId: offset}}")
    p.add_argument("--ending-offsets", default="latest")
    p.add_argument("--starting-timestamp", help="ms since the epoch: rows stored at or after")
    p.add_argument("--ending-timestamp", help="ms since the epoch: rows stored before")
    p.add_argument("--tags", help="tag filter, applied by the brokers: 'TagA || TagB'")
    p.add_argument("--sql92", help="SQL92 filter, applied by the brokers")
    p.add_argument("--max-records-per-partition", help="split queue ranges above this")
    p.add_argument("--read-from", choices=("master", "slave"),
                   help="pull from each group's master (default; its slave when the master is "
                        "down) or its slave")  # fmt: skip
    p.add_argument("--store-path", help="read a local broker store's files instead of the "
                                        "brokers: a path, or JSON {broker: path}")  # fmt: skip
    p.add_argument("--broker", help="with a plain --store-path: the broker name its rows carry")
    p.add_argument("--access-key", default=os.environ.get("RMQ_ACCESS_KEY"),
                   help="sign requests (a cluster under --acl; default: $RMQ_ACCESS_KEY)")
    p.add_argument("--secret-key", default=os.environ.get("RMQ_SECRET_KEY"),
                   help="default: $RMQ_SECRET_KEY")
    p.add_argument("--master", help="Spark master (default local[*]; spark://host:port runs "
                                    "on a standalone cluster)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="the result as one JSON line")
    p.set_defaults(func=run_export)


def _source_options(args: argparse.Namespace) -> dict[str, str]:
    named = {
        "namesrv": args.namesrv, "topic": args.topic, "startingOffsets": args.starting_offsets,
        "endingOffsets": args.ending_offsets, "startingTimestamp": args.starting_timestamp,
        "endingTimestamp": args.ending_timestamp, "tags": args.tags, "sql92": args.sql92,
        "maxRecordsPerPartition": args.max_records_per_partition,
        "storePath": args.store_path, "broker": args.broker, "readFrom": args.read_from,
    }
    named["accessKey"], named["secretKey"] = args.access_key, args.secret_key
    return {k: str(v) for k, v in named.items() if v is not None}


def run_export(args: argparse.Namespace) -> int:
    options = _source_options(args)
    try:
        opts = read_options(options)
    except SourceError as exc:
        sys.stderr.write(f"rmq-cluster spark export: error: {exc}\n")
        return EXIT_USAGE
    try:
        _check_route(opts)
        result = export(options, args.to, mode=args.mode, master=args.master)
    except SourceError as exc:
        sys.stderr.write(f"rmq-cluster spark export: {exc}\n")
        return EXIT_FAILED
    except Exception as exc:  # Spark's errors (AnalysisException, Py4JJavaError): one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        sys.stderr.write(f"rmq-cluster spark export: failed: {first}\n")
        return EXIT_FAILED
    if args.json:
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    else:
        sys.stdout.write(f"exported {result['rows']} messages of {result['topic']} to "
                         f"{result['to']} ({result['files']} files, "
                         f"{result['seconds']:.1f} s)\n")  # fmt: skip
    return EXIT_OK


def _check_route(opts: ReadOptions) -> None:
    from .mq_io import fetch_route

    if opts.store_paths is not None:
        return
    fetch_route(opts.namesrv, opts.topic, opts.timeout_s, (opts.access_key, opts.secret_key))


def export(options: dict[str, str], to: str, *, mode: str = "errorifexists",
           master: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Read with ``options`` and write Parquet at ``to``; the summary.  Uses the running
    SparkSession if there is one (and leaves it running), else starts one and stops it."""
    from pyspark.sql import SparkSession

    from .replica_diff import build_session
    from .rocketmq_source import register

    started = time.monotonic()
    own = SparkSession.getActiveSession() is None
    spark = build_session(master, app="rmq-spark-export", quiet=True)
    if master and not own and str(spark.sparkContext.master) != master:
        raise SourceError(f"a Spark session on {spark.sparkContext.master} is already running "
                          f"in this process: cannot run on {master}")  # fmt: skip
    try:
        with tempfile.TemporaryDirectory(prefix="rmq-spark-export-") as tmp:
            if not str(spark.sparkContext.master).startswith("local"):
                _ship_archive(spark, tmp)
            register(spark)
            reader = spark.read.format("rocketmq")
            for k, v in options.items():
                reader = reader.option(k, v)
            reader.load().write.mode(mode).parquet(to)  # one plan: "latest" is fixed once
            rows = spark.read.parquet(to).count()
        files = (len([f for f in os.listdir(to) if f.startswith("part-")])
                 if os.path.isdir(to) else None)  # fmt: skip
        log.info("exported", topic=options["topic"], rows=rows, to=to)
        return {"topic": options["topic"], "to": to, "rows": rows, "files": files,
                "master": str(spark.sparkContext.master),
                "seconds": round(time.monotonic() - started, 3)}  # fmt: skip
    finally:
        if own:
            spark.stop()


def _ship_archive(spark: Any, tmp: str) -> None:
    from .package import build_package

    archive = os.path.join(tmp, "rmq_spark.zip")
    build_package(archive)
    spark.sparkContext.addPyFile(archive)
