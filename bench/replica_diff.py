"""Replica-diff benchmark: prints one JSON object.

    python -m bench.replica_diff [--gib 1.0] [--body-bytes 16384] [--file-mb 64] [--dir /tmp/x]

Generates a 2-replica store (master + an identical slave, ``--gib`` GiB in total, CommitLog
files of ``--file-mb`` MiB) and measures in the same run, on the same files:
  * raw_read: sequential read of every file (8 MiB reads, as ``cat > /dev/null``), the baseline;
  * audit: the whole byte-exact job (byte comparison, findings, summary) on a Spark session
    already started (issue 24's target: >= 0.5x raw read); with ``local[*]`` the comparison
    runs in the driver's threads, no Spark job;
  * compare_executors: the comparison stage alone as a Spark job (how it runs on a cluster);
  * audit_header_only: the same audit with ``--header-only``;
  * audit_check_stores: with ``--check-stores`` (every master record decoded: the old way);
  * small_audit_s: the audit of a 2 MB store pair on the started session; with ``--wall``
    also wall_small_s / wall_s: the CLI end to end, 2 MB and this store (a consistent local
    audit starts no Spark), and wall_small_out_s / wall_out_s: the same with ``--out`` (Parquet
    findings: Spark's start included).
Measured warm (both read the page cache: equally warm) and cold (the bench's own files evicted
from the page cache with POSIX_FADV_DONTNEED before each of the two reads).

    python -m bench.replica_diff --divergent [--mb 150]

instead times, in one run, three commands on the same store pair (``--mb`` MiB each, warm):
``cat`` of both replicas' files to /dev/null, the CLI's audit of the identical pair, and the
CLI's audit after one body byte of the slave was flipped (issue 38: the divergent run within
2x the consistent one).
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
from rmq_cluster.spark_jobs.replica_diff import build_session, compare_replicas, run_job
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


def _cli_wall(specs: list[str], *extra: str) -> float:
    import subprocess

    args = [a for sp in specs for a in ("--replica", sp)] + list(extra)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rmq_cluster.spark_jobs.replica_diff", *args,
                    "--quiet", "--master", "local[2]"], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return time.perf_counter() - t0


def _timed(cmd: list[str]) -> tuple[float, str]:
    import subprocess

    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=False, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0, done.stdout.decode(errors="replace")


def divergent_bench(mb: int, body_bytes: int, base: str) -> dict[str, Any]:
    """cat, a consistent audit and a one-byte-divergent audit of the same ``mb`` MiB pair."""
    master, slave = os.path.join(base, "master"), os.path.join(base, "slave")
    placed = write_commitlog_store(master, make_msgs(mb * MiB // (body_bytes + 130) + 1,
                                                     body_size=body_bytes), 64 * MiB)
    shutil.copytree(master, slave)
    reps = [make_replica("g", "m", "SYNC_MASTER", master),
            make_replica("g", "s", "SLAVE", slave)]  # fmt: skip
    _, _, segs = plan_scan(reps, 64 * MiB, verify_crc=False)
    paths = [x.path for ss in segs.values() for x in ss]
    audit = [sys.executable, "-m", "rmq_cluster.spark_jobs.replica_diff", "--json",
             "--replica", f"g:m:SYNC_MASTER:{master}", "--replica", f"g:s:SLAVE:{slave}"]
    _timed(["cat", *paths])  # warm the page cache
    cat_s, _ = _timed(["cat", *paths])
    consistent_s, out = _timed(audit)
    ok = json.loads(out.splitlines()[-1])["verdict"]
    victim = placed[len(placed) // 2]
    seg = [x for x in segs[1] if x.start <= victim.phy_offset][-1]
    with open(seg.path, "r+b") as f:  # one body byte of one record in the middle
        pos = victim.phy_offset - seg.start + 88 + 7  # the body starts at byte 88
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0xFF]))
    divergent_s, out = _timed(audit)
    summary = json.loads(out.splitlines()[-1])
    return {
        "bench": "replica_diff_divergent", "store_bytes": sum(map(os.path.getsize, paths)),
        "records_per_replica": len(placed), "cat_s": round(cat_s, 3),
        "consistent_s": round(consistent_s, 3), "consistent_verdict": ok,
        "divergent_s": round(divergent_s, 3), "divergent_verdict": summary["verdict"],
        "divergent_vs_consistent": round(divergent_s / consistent_s, 2),
        "target_divergent_vs_consistent": 2.0,
        "first_finding": summary["first_findings"][0] if summary["first_findings"] else None,
        "load_1min": round(os.getloadavg()[0], 2),
    }


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
    ap.add_argument("--divergent", action="store_true",
                    help="cat vs a consistent vs a one-byte-divergent CLI audit, --mb each")
    ap.add_argument("--mb", type=int, default=150, help="--divergent: MiB per replica")
    args = ap.parse_args(argv)
    if args.divergent:
        base = args.dir or tempfile.mkdtemp(prefix="bench-replica-diff-")
        try:
            print(json.dumps(divergent_bench(args.mb, args.body_bytes, base), indent=2))
        finally:
            if not args.keep and not args.dir:
                shutil.rmtree(base, ignore_errors=True)
        return 0

    load0 = os.getloadavg()[0]
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

        small = os.path.join(base, "small")
        if not os.path.isdir(os.path.join(small, "m")):
            write_commitlog_store(os.path.join(small, "m"), make_msgs(1000, body_size=900),
                                  1 * MiB)  # fmt: skip
            shutil.copytree(os.path.join(small, "m"), os.path.join(small, "s"))
        small_reps = [make_replica("g", "m", "MASTER", os.path.join(small, "m")),
                      make_replica("g", "s", "SLAVE", os.path.join(small, "s"))]  # fmt: skip
        spark = build_session(args.master, app="bench-replica-diff", quiet=True)
        try:
            run_job(spark, reps, None, **kw)  # warm the Python workers and the page cache
            compare_replicas(spark, reps, kw["block_bytes"], in_driver=False)
            raw_read(paths)
            raw_bytes, raw_s = raw_read(paths)
            t1 = time.perf_counter()
            summary = run_job(spark, reps, None, **kw)
            audit_s = time.perf_counter() - t1
            t1 = time.perf_counter()
            compare_replicas(spark, reps, kw["block_bytes"], in_driver=False)
            exec_s = time.perf_counter() - t1
            t1 = time.perf_counter()
            run_job(spark, reps, None, exact=False, **kw)
            header_s = time.perf_counter() - t1
            t1 = time.perf_counter()
            run_job(spark, reps, None, check_stores=True, **kw)
            check_s = time.perf_counter() - t1
            run_job(spark, small_reps, None)
            t1 = time.perf_counter()
            run_job(spark, small_reps, None)
            small_s = time.perf_counter() - t1
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
            "cache": "warm: both from the page cache (equally warm); cold_*: the files "
                     "evicted (fsync + POSIX_FADV_DONTNEED) before each of the two reads",
            "load_1min_before": round(load0, 2),
            "store_bytes": raw_bytes,
            "replicas": 2,
            "files": len(paths),
            "file_bytes": fb,
            "body_bytes": args.body_bytes,
            "records_per_replica": n,
            "block_bytes": args.block_mb * MiB,
            "generate_s": round(gen_s, 2),
            "raw_read_s": round(raw_s, 3),
            "raw_read_GBps": round(raw_bytes / raw_s / 1e9, 3),
            "audit_s": round(audit_s, 3),
            "audit_GBps": round(raw_bytes / audit_s / 1e9, 3),
            "audit_vs_raw": round(raw_s / audit_s, 3),
            "target_audit_vs_raw": 0.5,
            "compare_executors_s": round(exec_s, 3),
            "compare_executors_vs_raw": round(raw_s / exec_s, 3),
            "audit_header_only_s": round(header_s, 3),
            "audit_header_only_vs_raw": round(raw_s / header_s, 3),
            "audit_check_stores_s": round(check_s, 3),
            "small_store_bytes": sum(os.path.getsize(s.path) for ss in
                                     plan_scan(small_reps, MiB, verify_crc=False)[2].values()
                                     for s in ss),
            "small_audit_s": round(small_s, 3),
            "cold_raw_read_GBps": round(cold_raw_bytes / cold_raw_s / 1e9, 3),
            "cold_audit_GBps": round(raw_bytes / cold_audit_s / 1e9, 3),
            "cold_audit_vs_raw": round(cold_raw_s / cold_audit_s, 3),
            "load_1min_after": round(os.getloadavg()[0], 2),
            "audit_verdict": summary["verdict"],
            "byte_identical": summary["groups"]["g"]["replicas"]["s"]["byte_identical"],
        }
        if args.wall:
            out["wall_small_s"] = round(_cli_wall([f"g:m:MASTER:{small}/m",
                                                   f"g:s:SLAVE:{small}/s"]), 2)  # fmt: skip
            out["wall_s"] = round(_cli_wall([f"g:m:MASTER:{master}", f"g:s:SLAVE:{slave}"]), 2)
            # with --out (Parquet findings): Spark is started whatever the verdict
            out["wall_small_out_s"] = round(_cli_wall(
                [f"g:m:MASTER:{small}/m", f"g:s:SLAVE:{small}/s"], "--out",
                os.path.join(base, "out-small")), 2)
            out["wall_out_s"] = round(_cli_wall(
                [f"g:m:MASTER:{master}", f"g:s:SLAVE:{slave}"], "--out",
                os.path.join(base, "out")), 2)
        print(json.dumps(out, indent=2))
        return 0
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
