"""Replica-diff benchmark: prints one JSON object.

    python -m bench.replica_diff [--gib 1.0] [--body-bytes 16384] [--file-mb 64] [--dir /tmp/x]

Generates a 2-replica store (master + an identical slave, ``--gib`` GiB in total, CommitLog
files of ``--file-mb`` MiB) and measures in the same run, on the same files:
  * raw_read: sequential read of every file (8 MiB reads, as ``cat > /dev/null``), the baseline;
  * audit: the whole byte-exact job (checksums, the master's decode, findings, summary) on a
    Spark session already started (``job_*`` below; issue 24's target: >= 0.5x raw read);
  * checksum: the checksum stage alone (every byte of both replicas read and crc32'd);
  * audit_header_only: the same with ``--header-only``;
  * wall_small_s / wall_s: the CLI end to end (Spark's start included) on a 2 MB store and on
    this one (``--wall``).
Measured warm (both read the page cache) and cold (the bench's own files evicted from the page
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
from rmq_cluster.spark_jobs.replica_diff import build_session, checksum_replicas, run_job
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


def _cli_wall(specs: list[str]) -> float:
    import subprocess

    args = [a for sp in specs for a in ("--replica", sp)]
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rmq_cluster.spark_jobs.replica_diff", *args,
                    "--quiet", "--master", "local[2]"], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.replica_diff")
    ap.add_argument("--gib", type=float, default=1.0, help="total store size (both replicas)")
    ap.add_argument("--body-bytes", type=int, default=16384)
    ap.add_argument("--file-mb", type=int, default=64)
    ap.add_argument("--split-mb", type=int, default=64)
    ap.add_argument("--block-mb", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--wall", action="store_true",
                    help="also time the CLI end to end (Spark start included), 2 MB and this")
    args = ap.parse_args(argv)

    base = args.dir or tempfile.mkdtemp(prefix="bench-replica-diff-")
    fb = args.file_mb * MiB
    per_replica = int(args.gib * (1 << 30) / 2)
    t0 = time.perf_counter()
    n = per_replica // (args.body_bytes + 130) + 1
    master = os.path.join(base, "master")
    slave = os.path.join(base, "slave")
    try:
        if not os.path.isdir(os.path.join(master, "commitlog")):
            write_commitlog_store(master, make_msgs(n, body_size=args.body_bytes), fb)
            shutil.copytree(master, slave)
        gen_s = time.perf_counter() - t0
        reps = [make_replica("g", "m", "SYNC_MASTER", master),
                make_replica("g", "s", "SLAVE", slave)]  # fmt: skip
        _, _, segs = plan_scan(reps, args.split_mb * MiB, verify_crc=False)
        paths = [s.path for ss in segs.values() for s in ss]
        kw: dict[str, Any] = {"split_bytes": args.split_mb * MiB,
                              "block_bytes": args.block_mb * MiB}  # fmt: skip

        spark = build_session(args.master, app="bench-replica-diff", quiet=True)
        try:
            run_job(spark, reps, None, **kw)  # warm the Python workers and the page cache
            raw_read(paths)
            raw_bytes, raw_s = raw_read(paths)
            t1 = time.perf_counter()
            summary = run_job(spark, reps, None, **kw)
            audit_s = time.perf_counter() - t1
            t1 = time.perf_counter()
            checksum_replicas(spark, reps, kw["block_bytes"])
            sums_s = time.perf_counter() - t1
            t1 = time.perf_counter()
            run_job(spark, reps, None, exact=False, **kw)
            header_s = time.perf_counter() - t1
            evict(paths)
            cold_raw_bytes, cold_raw_s = raw_read(paths)
            evict(paths)
            t1 = time.perf_counter()
            run_job(spark, reps, None, **kw)
            cold_audit_s = time.perf_counter() - t1
        finally:
            spark.stop()
        out: dict[str, Any] = {
            "bench": "replica_diff",
            "master": args.master,
            "cache": "warm: page cache; cold_*: the files evicted (fadvise) before each read",
            "store_bytes": raw_bytes,
            "replicas": 2,
            "files": len(paths),
            "file_bytes": fb,
            "body_bytes": args.body_bytes,
            "records": summary["groups"]["g"]["replicas"]["m"]["messages"],
            "block_bytes": args.block_mb * MiB,
            "generate_s": round(gen_s, 2),
            "raw_read_s": round(raw_s, 3),
            "raw_read_GBps": round(raw_bytes / raw_s / 1e9, 3),
            "audit_s": round(audit_s, 3),
            "audit_GBps": round(raw_bytes / audit_s / 1e9, 3),
            "audit_vs_raw": round(raw_s / audit_s, 3),
            "target_audit_vs_raw": 0.5,
            "checksum_s": round(sums_s, 3),
            "checksum_vs_raw": round(raw_s / sums_s, 3),
            "audit_header_only_s": round(header_s, 3),
            "cold_raw_read_GBps": round(cold_raw_bytes / cold_raw_s / 1e9, 3),
            "cold_audit_GBps": round(raw_bytes / cold_audit_s / 1e9, 3),
            "cold_audit_vs_raw": round(cold_raw_s / cold_audit_s, 3),
            "audit_verdict": summary["verdict"],
            "byte_identical": summary["groups"]["g"]["replicas"]["s"]["byte_identical"],
        }
        if args.wall:
            small = os.path.join(base, "small")
            write_commitlog_store(os.path.join(small, "m"), make_msgs(1000, body_size=900),
                                  1 * MiB)  # fmt: skip
            shutil.copytree(os.path.join(small, "m"), os.path.join(small, "s"))
            out["wall_small_bytes"] = sum(
                os.path.getsize(os.path.join(d, f)) for x in ("m", "s")
                for d in [os.path.join(small, x, "commitlog")] for f in os.listdir(d)
            )  # fmt: skip
            out["wall_small_s"] = round(_cli_wall([f"g:m:MASTER:{small}/m",
                                                   f"g:s:SLAVE:{small}/s"]), 2)  # fmt: skip
            out["wall_s"] = round(_cli_wall([f"g:m:MASTER:{master}", f"g:s:SLAVE:{slave}"]), 2)
        print(json.dumps(out, indent=2))
        return 0
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
