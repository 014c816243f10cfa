"""Replica-diff benchmark: prints one JSON object.

    python -m bench.replica_diff [--gib 1.0] [--body-bytes 16384] [--file-mb 64] [--dir /tmp/x]

Generates a 2-replica store (master + an identical slave, ``--gib`` GiB in total, CommitLog
files of ``--file-mb`` MiB) and measures in the same run, on the same files:
  * raw_read: sequential read of every file (8 MiB reads), the baseline;
  * scan: the job's decode stage on Spark local[2] (header-only; ``--verify-crc`` reads bodies),
    i.e. every record row materialised in Spark;
  * job: the whole diff (decode, join, findings, outputs).
Target (issue 11): scan throughput >= 0.3x raw read.  Measured twice: warm (both read the page
cache; raw read is then memory bandwidth) and cold (the bench's own files evicted from the page
cache with POSIX_FADV_DONTNEED before each of the two reads).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from rmq_cluster.spark_jobs.model import make_replica, plan_scan
from rmq_cluster.spark_jobs.replica_diff import build_session, decode_records, run_job
from rmq_cluster.spark_jobs.synth import make_msgs, write_commitlog_store

MiB = 1 << 20


def raw_read(paths: list[str]) -> tuple[int, float]:
    buf = bytearray(8 * MiB)
    view = memoryview(buf)
    total = 0
    t0 = time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while n := f.readinto(view):
                total += n
    return total, time.perf_counter() - t0


def evict(paths: list[str]) -> None:
    """Drop these files (only) from the page cache: fsync, then POSIX_FADV_DONTNEED."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.replica_diff")
    ap.add_argument("--gib", type=float, default=1.0, help="total store size (both replicas)")
    ap.add_argument("--body-bytes", type=int, default=16384)
    ap.add_argument("--file-mb", type=int, default=64)
    ap.add_argument("--split-mb", type=int, default=32)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--verify-crc", action="store_true")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)

    base = args.dir or tempfile.mkdtemp(prefix="bench-replica-diff-")
    fb = args.file_mb * MiB
    per_replica = int(args.gib * (1 << 30) / 2)
    t0 = time.perf_counter()
    msg_bytes = args.body_bytes + 130
    n = per_replica // msg_bytes + 1
    master = os.path.join(base, "master")
    slave = os.path.join(base, "slave")
    try:
        if not os.path.isdir(os.path.join(master, "commitlog")):
            write_commitlog_store(master, make_msgs(n, body_size=args.body_bytes), fb)
            shutil.copytree(master, slave)
        gen_s = time.perf_counter() - t0
        reps = [
            make_replica("g", "m", "SYNC_MASTER", master),
            make_replica("g", "s", "SLAVE", slave),
        ]
        tasks, _, segs = plan_scan(reps, args.split_mb * MiB, verify_crc=args.verify_crc)
        paths = [s.path for ss in segs.values() for s in ss]
        raw_read(paths)  # warm: both figures read through the page cache
        raw_bytes, raw_s = raw_read(paths)

        spark = build_session(args.master, app="bench-replica-diff", quiet=True)
        try:
            decode_records(spark, tasks).count()  # warm the Python workers
            t1 = time.perf_counter()
            records = decode_records(spark, tasks).count()
            scan_s = time.perf_counter() - t1
            evict(paths)
            cold_raw_bytes, cold_raw_s = raw_read(paths)
            evict(paths)
            t1 = time.perf_counter()
            decode_records(spark, tasks).count()
            cold_scan_s = time.perf_counter() - t1
            t2 = time.perf_counter()
            summary = run_job(
                spark, reps, os.path.join(base, "out"),
                verify_crc=args.verify_crc, split_bytes=args.split_mb * MiB,
            )  # fmt: skip
            job_s = time.perf_counter() - t2
        finally:
            spark.stop()
        raw_gbs = raw_bytes / raw_s / 1e9
        scan_gbs = raw_bytes / scan_s / 1e9
        out: dict[str, Any] = {
            "bench": "replica_diff",
            "master": args.master,
            "cache": "raw_read/scan: warm page cache; cold_*: files evicted (fadvise) first",
            "store_bytes": raw_bytes,
            "replicas": 2,
            "files": len(paths),
            "file_bytes": fb,
            "body_bytes": args.body_bytes,
            "records": records,
            "ranges": len(tasks),
            "verify_crc": args.verify_crc,
            "generate_s": round(gen_s, 2),
            "raw_read_s": round(raw_s, 3),
            "raw_read_GBps": round(raw_gbs, 3),
            "scan_s": round(scan_s, 3),
            "scan_GBps": round(scan_gbs, 3),
            "scan_records_per_s": round(records / scan_s),
            "scan_vs_raw": round(scan_gbs / raw_gbs, 3),
            "target_scan_vs_raw": 0.3,
            "cold_raw_read_GBps": round(cold_raw_bytes / cold_raw_s / 1e9, 3),
            "cold_scan_GBps": round(raw_bytes / cold_scan_s / 1e9, 3),
            "cold_scan_vs_raw": round(cold_raw_s / cold_scan_s, 3),
            "job_s": round(job_s, 3),
            "job_GBps": round(raw_bytes / job_s / 1e9, 3),
            "job_exit_code": summary["exit_code"],
        }
        print(json.dumps(out, indent=2))
        return 0
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
