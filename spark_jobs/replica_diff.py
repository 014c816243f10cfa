"""Spark replica-diff: audit every replica's store against its group's master, offset by offset.

Run::

    python -m rmq_cluster.spark_jobs.replica_diff --dir CLUSTER_DIR --out OUT
    python -m rmq_cluster.spark_jobs.replica_diff --replica g:n0:MASTER:/a \\
        --replica g:n1:SLAVE:/b --out OUT
    spark-submit --master spark://host:7077 --py-files rmq_spark.zip \\
        spark_jobs/submit.py --replica ... --out OUT     (see spark_jobs/README.md)

Outputs in OUT: ``findings/`` (Parquet, partitioned by group), ``summary.json``, ``report.html``.
Exit 0 consistent (lag only with ``--allow-lag``), 1 divergence, 2 unverifiable (``--live``)
or bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import mmap
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

from ..cluster.home import cluster_home
from ..cluster.protocol.crc import crc32
from .compare import (
    Diff,
    compare_range,
    plan_compare,
    store_end,
    windows,
)
from .decode import (
    A_BAD_CRC,
    A_EOF_BLANK,
    ROW_FIELDS,
    decode_cq,
    decode_record_at,
    decode_segment_range,
    list_segments,
)
from .diff_local import window_findings
from .model import (
    K_CQ_DANGLING,
    K_CQ_MISMATCH,
    K_DIVERGENT,
    K_EXTRA_TAIL,
    K_LAG,
    K_MISSING,
    K_QUEUE_GAP,
    LAG_KINDS,
    MAX_NODE_TIMEOUT_S,
    NODE_TIMEOUT_S,
    BadInput,
    CqTask,
    Replica,
    ScanTask,
    SumTask,
    check_groups,
    choose_masters,
    consumer_offset_findings,
    parse_replica_spec,
    plan_cq,
    plan_scan,
    plan_sums,
    replicas_from_cluster_dir,
)

DEFAULT_NAME = "default"
DEFAULT_SPLIT_BYTES = 64 * 1024 * 1024
DEFAULT_BLOCK_BYTES = 4 * 1024 * 1024  # comparison granularity (aligned on absolute offsets)
_READ_BYTES = 4 * 1024 * 1024
FIRST_FINDINGS = 100
DRIVER_FINDINGS = 50_000  # up to this many findings are counted on the driver
MAP_BUCKETS = 100
#: The driver's address for a local-mode run (unless SPARK_LOCAL_IP or spark.driver.host).
LOOPBACK = "127.0.0.1"
#: Findings about two replicas (the rest are a store's own: copied to its identical replicas).
_COMPARED_KINDS = frozenset({K_DIVERGENT, K_EXTRA_TAIL, K_LAG, K_MISSING, K_CQ_MISMATCH})

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
                task.kind, m, task.seg_start, task.lo, task.hi, verify_crc=task.verify_crc,
                exact=task.exact,
            ):
                if task.limit < 0 or (
                    row[0] + row[1] <= task.limit if row[12] in (None, A_BAD_CRC)
                    else row[0] < task.limit
                ):
                    yield (task.rid, *row)


def _scan_cq(task: CqTask) -> Iterator[tuple[int, str, int, int, int, int, int]]:
    with open(task.path, "rb") as f:
        data = f.read()
    for u in decode_cq(data, task.seg_start):
        yield (task.rid, task.topic, task.queue_id, u.cq_index, u.phy_offset, u.size,
               u.tags_code)  # fmt: skip


def _sums(task: SumTask) -> Iterator[tuple[int, str, int, int, int]]:
    """(rid, area, absolute start, bytes, crc32) per block: read once, checksummed where read
    (crc32 over a reused buffer: C speed, no copies)."""
    with open(task.path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        hi = size if task.hi < 0 else min(task.hi, size)
        buf = bytearray(min(_READ_BYTES, max(1, hi - task.lo)))
        view = memoryview(buf)
        pos = task.lo
        f.seek(pos)
        while pos < hi:
            a = task.seg_start + pos
            bend = min(hi, a - a % task.block + task.block - task.seg_start)
            crc, start = 0, pos
            while pos < bend:
                n = f.readinto(view[: min(len(buf), bend - pos)])
                if not n:
                    break
                crc = crc32(view[:n], crc)
                pos += n
            yield (task.rid, task.area, task.seg_start + start, pos - start, crc)
            if pos < bend:
                break


# ----------------------------------------------------------------------------- Spark


def record_schema() -> Any:
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    types = {
        "phy_offset": LongType(), "size": LongType(), "body_crc": LongType(),
        "topic": StringType(), "queue_id": IntegerType(), "queue_offset": LongType(),
        "store_ts": LongType(), "sys_flag": IntegerType(), "msg_id": StringType(),
        "keys": StringType(), "uniq_key": StringType(), "term": LongType(),
        "anomaly": StringType(), "detail": StringType(), "digest": LongType(),
        "dig_head": LongType(), "dig_body": LongType(),
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


_QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _quiet_log4j() -> str:
    """A log4j2 configuration that logs errors only (the driver JVM reads it at start): a file
    of our own (mkstemp: 0600, a fresh name), removed when this process exits."""
    import atexit
    import tempfile

    fd, path = tempfile.mkstemp(prefix="rmq-replica-diff-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(_QUIET_LOG4J)
    atexit.register(_remove_quietly, path)
    return path


def build_session(master: str | None, *, app: str = "rmq-replica-diff", quiet: bool = True) -> Any:
    """``--master`` wins; under spark-submit Spark's own config; else ``local[*]``."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app)
    if master:
        b = b.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        b = b.master("local[*]")
    given = SparkConf()  # spark-submit's settings, when it launched us
    if (master or given.get("spark.master", "local")).startswith("local") and not (
        os.environ.get("SPARK_LOCAL_IP") or given.contains("spark.driver.host")
    ):  # a local run talks to itself only: no address of this host's network in use
        b = b.config("spark.driver.host", LOOPBACK).config("spark.driver.bindAddress", LOOPBACK)
    if quiet and "PYSPARK_GATEWAY_PORT" not in os.environ:  # our JVM: no WARN at its start
        b = b.config("spark.driver.extraJavaOptions",
                     f"-Dlog4j2.configurationFile={_quiet_log4j()}")
    b = (
        b.config("spark.ui.enabled", "false")
        .config("spark.log.level", "ERROR")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.ui.showConsoleProgress", "false" if quiet else "true")
        .config("spark.sql.adaptive.enabled", "true")
    )
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sc = spark.sparkContext
    _progress(quiet, f"Spark {sc.master}, driver at {sc.getConf().get('spark.driver.host')}")
    return spark


def decode_records(spark: Any, tasks: list[ScanTask]) -> Any:
    sc = spark.sparkContext
    # record-aligned ranges batched into a few partitions per core (a task costs more than a range)
    slices = max(1, min(len(tasks), sc.defaultParallelism * 4))
    rdd = sc.parallelize(tasks, slices).flatMap(_scan)
    return spark.createDataFrame(rdd, record_schema())


def _master_summary(task: ScanTask) -> Iterator[tuple[Any, ...]]:
    """One row per decode range: (rid, messages, bytes, first, end, anomalies, queue runs,
    queue maxima); queue runs are [first, last] queue offsets consecutive in offset order
    (transaction prepared/rollback records left out, as the queue-gap check does)."""
    msgs = nbytes = anomalies = 0
    first = end = -1
    runs: dict[tuple[str, int], list[list[int]]] = {}
    qmax: dict[tuple[str, int], int] = {}
    for row in _scan(task):
        if row[13] is not None:
            anomalies += 1
            continue
        _, phy, size, _, topic, qid, qoff, _, sysflag = row[:9]
        msgs += 1
        nbytes += size
        first = phy if first < 0 else first
        end = phy + size
        key = (topic, qid)
        qmax[key] = max(qmax.get(key, -1), qoff)
        if (sysflag & 0xC) in (4, 12):
            continue
        rs = runs.setdefault(key, [])
        if rs and rs[-1][1] + 1 == qoff:
            rs[-1][1] = qoff
        else:
            rs.append([qoff, qoff])
    yield (task.rid, msgs, nbytes, first, end, anomalies, runs, qmax)


def _cq_problems(item: tuple[CqTask, tuple[tuple[int, int, str], ...], int, int]) -> int:
    """ConsumeQueue units of one file that do not point at their record (read in place)."""
    import bisect

    task, segs, r_lo, r_end = item
    starts = [s[0] for s in segs]
    maps: dict[str, Any] = {}
    bad = 0
    try:
        with open(task.path, "rb") as f:
            data = f.read()
        for u in decode_cq(data, task.seg_start):
            if u.phy_offset < r_lo:
                continue
            i = bisect.bisect_right(starts, u.phy_offset) - 1
            if u.phy_offset >= r_end or i < 0 or u.phy_offset >= starts[i] + segs[i][1]:
                bad += 1
                continue
            path = segs[i][2]
            if path not in maps:
                fh = open(path, "rb")  # noqa: SIM115  (closed below with its map)
                maps[path] = (fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
            m = maps[path][1]
            row = decode_record_at(m, u.phy_offset - starts[i], len(m), u.phy_offset,
                                   verify_crc=False)  # fmt: skip
            if row is None or (row[1], row[3], row[4], row[5]) != (
                u.size, task.topic, task.queue_id, u.cq_index
            ):
                bad += 1
    finally:
        for fh, m in maps.values():
            m.close()
            fh.close()
    return bad


def _all_identical(
    spark: Any, replicas: list[Replica], identical: dict[int, int], split_bytes: int,
    verify_crc: bool, quiet: bool, pre: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Every replica is byte-identical to its master: only the masters' own soundness is left
    (decode anomalies, queue gaps, ConsumeQueue pointers), checked here by one decode pass and
    one pointer pass with the arithmetic in Python, not a Spark SQL plan.  None when a master
    is not clean in that simple sense: the general path then reports what is wrong."""
    skip = frozenset(identical)
    tasks, file_findings, segs_by = plan_scan(replicas, split_bytes, verify_crc=verify_crc,
                                              skip=skip)  # fmt: skip
    if file_findings:
        return None
    sc = spark.sparkContext
    if pre is not None:  # computed with the checksums
        if pre["cq_bad"]:
            return None
        rows = pre["rows"]
    else:
        rows = (
            sc.parallelize(tasks, max(1, min(len(tasks), sc.defaultParallelism * 4)))
            .flatMap(_master_summary).collect()
        ) if tasks else []  # fmt: skip
    stats: dict[int, dict[str, int]] = {}
    runs: dict[tuple[int, str, int], list[list[int]]] = {}
    qmax: dict[tuple[int, str, int], int] = {}
    for rid, msgs, nbytes, first, end, anomalies, truns, tmax in rows:
        if anomalies:
            return None
        if not msgs:
            continue
        st = stats.setdefault(rid, {"messages": 0, "bytes": 0, "end": 0, "first": first})
        st["messages"] += msgs
        st["bytes"] += nbytes
        st["end"] = max(st["end"], end)
        st["first"] = min(st["first"], first)
        for key, rs in truns.items():
            runs.setdefault((rid, *key), []).extend(rs)
        for key, mx in tmax.items():
            qmax[(rid, *key)] = max(qmax.get((rid, *key), 0), mx + 1)
    for rs in runs.values():
        rs.sort()
        if any(b[0] != a[1] + 1 for a, b in itertools.pairwise(rs)):
            return None  # a queue gap: the general path names it
    _copy_identical(stats, qmax, identical)
    ends = {rid: st["end"] for rid, st in stats.items()}
    masters = choose_masters(replicas, ends)
    cq = []
    for cq_task in plan_cq(replicas, skip):
        segs = segs_by[cq_task.rid]
        lo = segs[0].start if segs else 0
        cq.append((cq_task, tuple((x.start, x.length, x.path) for x in segs), lo,
                   ends.get(cq_task.rid, lo)))
    if pre is None and cq and sum(sc.parallelize(cq, max(1, min(len(cq),
                                                                 sc.defaultParallelism * 2)))
                  .map(_cq_problems).collect()):  # fmt: skip
        return None
    sound = sum(st["messages"] for i, st in stats.items() if i not in skip)
    _progress(quiet, f"every replica byte-identical; {sound} master records sound")
    small = [
        dict(zip(FINDING_COLUMNS, (replicas[x[0]].group, replicas[x[0]].node, replicas[x[0]].role,
                                   *x[1:]), strict=True))
        for x in consumer_offset_findings(replicas, masters, qmax)
    ]  # fmt: skip
    findings = spark.createDataFrame([tuple(d.values()) for d in small], finding_schema())
    return {
        "findings": findings, "findings_rows": small, "records": None, "joined": None,
        "replicas": replicas, "masters": masters, "stats": stats, "segments": segs_by,
        "identical": identical, "exact": True,
    }  # fmt: skip


def _work(task: Any) -> Iterator[tuple[str, Any]]:
    """The first (and for a consistent cluster, only) Spark job's tasks, of three kinds: block
    checksums, a master's decode summary over the same bytes (read while they are hot), and a
    master's ConsumeQueue pointer check."""
    if isinstance(task, SumTask):
        for row in _sums(task):
            yield ("s", row)
    elif isinstance(task, ScanTask):
        for row in _master_summary(task):
            yield ("d", row)
    else:
        yield ("c", _cq_problems(task))


def checksum_replicas(
    spark: Any, replicas: list[Replica], block: int, *, with_masters: bool = False,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
) -> tuple[dict[int, int], dict[str, Any] | None]:
    """One Spark job checksums every data and CQ file in ``block``-byte pieces; returns
    {replica: its master} for the replicas proven byte-identical to their master, and (with
    ``with_masters``, every group with a declared master) the masters' decode summaries and
    ConsumeQueue pointer problems, computed in the same job for :func:`_all_identical`."""
    tasks: list[Any] = plan_sums(replicas, block, plan_cq(replicas))
    pre: dict[str, Any] | None = None
    declared = {i for i, r in enumerate(replicas) if r.declared_master}
    if with_masters and len(declared) == len({r.group for r in replicas}):
        pre = {"rows": [], "cq_bad": 0}
        for t in list(tasks):
            if t.rid in declared and t.area == "data":
                r = replicas[t.rid]
                lim = -1 if r.limit is None else r.limit
                for lo in range(t.lo, t.hi, max(1, split_bytes)):
                    tasks.append(ScanTask(t.rid, r.kind, t.path, t.seg_start, lo,
                                          min(lo + split_bytes, t.hi), False, False, lim))
        for c in plan_cq([r if i in declared else attrs.evolve(r, limit=0)
                          for i, r in enumerate(replicas)]):  # fmt: skip
            segs = list_segments(replicas[c.rid].data_dir)
            lo = segs[0].start if segs else 0
            tasks.append((c, tuple((x.start, x.length, x.path) for x in segs), lo, 1 << 62))
    if not tasks:
        return {}, pre
    sc = spark.sparkContext
    rows = sc.parallelize(tasks, max(1, min(len(tasks), sc.defaultParallelism * 4))).flatMap(
        _work
    ).collect()
    sums: dict[int, set[tuple[str, int, int, int]]] = {i: set() for i in range(len(replicas))}
    for tag, row in rows:
        if tag == "s":
            rid, area, start, n, crc = row
            sums[rid].add((area, start, n, crc))
        elif pre is not None and tag == "d":
            pre["rows"].append(row)
        elif pre is not None:
            pre["cq_bad"] += row
    masters = {r.group: i for i, r in enumerate(replicas) if r.declared_master}
    out = {}
    for rid, r in enumerate(replicas):
        m = masters.get(r.group)
        if m is None:  # DLedger without a declared leader: the longest log, known after decode
            groups = [i for i, x in enumerate(replicas) if x.group == r.group]
            if all(sums[i] == sums[groups[0]] for i in groups) and rid != groups[0]:
                out[rid] = groups[0]
            continue
        if rid != m and sums[rid] == sums[m]:
            out[rid] = m
    return out, pre


def _lazy(spark: Any) -> bool:
    """A session-making function (started on first need), not a session."""
    return callable(spark) and not hasattr(spark, "sparkContext")


def _session(spark: Any) -> Any:
    return spark() if _lazy(spark) else spark


def compare_replicas(
    spark: Any, replicas: list[Replica], block: int, *, in_driver: bool | None = None,
) -> tuple[dict[int, int], dict[int, list[tuple[str, int, int]]], dict[str, int]]:
    """Every member of a group compared byte for byte with its reference (declared master,
    else first member), over data files and ConsumeQueues: in the driver's threads when Spark
    runs locally (no Spark job: big reads and memcmp at memory speed), else one Spark job whose
    tasks read and compare where they run; only differing block runs travel back.  Returns
    {replica: reference} for the replicas proven byte-identical, {replica: [(area, a, b)]} for
    the others' differing runs, and group -> reference."""
    tasks, refs = plan_compare(replicas, block)
    sc = None if spark is None else spark.sparkContext
    if sc is None:
        in_driver = True
    elif in_driver is None:
        in_driver = str(sc.master).startswith("local")
    rows: list[Diff] = []
    if tasks and in_driver:
        from concurrent.futures import ThreadPoolExecutor

        threads = (os.cpu_count() or 2) if sc is None else sc.defaultParallelism
        with ThreadPoolExecutor(max(1, min(len(tasks), threads))) as pool:
            for part in pool.map(compare_range, tasks):
                rows.extend(part)
    elif tasks and sc is not None:
        rows = sc.parallelize(tasks, max(1, min(len(tasks), sc.defaultParallelism * 4))
                              ).flatMap(compare_range).collect()  # fmt: skip
    diffs: dict[int, list[tuple[str, int, int]]] = {}
    for rid, area, runs in rows:
        for a, b in runs:
            diffs.setdefault(rid, []).append((area, a, b))
    identical: dict[int, int] = {}
    for g, ref in refs.items():
        idx = [i for i, r in enumerate(replicas) if r.group == g and i != ref]
        if replicas[ref].declared_master:
            identical.update({i: ref for i in idx if i not in diffs})
        elif not any(i in diffs for i in idx):  # DLedger, no declared leader: all or none
            identical.update({i: ref for i in idx})
    for found in diffs.values():
        found.sort(key=lambda x: (x[0] != "data", x[1], x[0]))
    return identical, diffs, refs


def _probe_stats(replicas: list[Replica], rid: int) -> dict[str, Any]:
    """A store not decoded: where its records end (its last file's tail), no counts."""
    r = replicas[rid]
    segs = list_segments(r.data_dir)
    first = segs[0].start if segs else 0
    end = store_end(r.kind, segs, r.limit)
    return {"messages": None, "bytes": None, "first": first if end is not None else None,
            "end": end if end is not None else first}  # fmt: skip


def _proven(replicas: list[Replica], identical: dict[int, int], refs: dict[str, int],
            quiet: bool) -> dict[str, Any]:  # fmt: skip
    """Every replica byte-identical to its reference: nothing is decoded (the stores' own
    soundness is --check-stores' business); ends from the references' file tails."""
    _, file_findings, segs_by = plan_scan(replicas, DEFAULT_SPLIT_BYTES, verify_crc=False,
                                          skip=frozenset(range(len(replicas))))  # fmt: skip
    stats = {ref: _probe_stats(replicas, ref) for ref in refs.values()}
    for rid, src in identical.items():
        stats[rid] = dict(stats[src])
    masters = choose_masters(replicas, {i: int(s["end"] or 0) for i, s in stats.items()})
    _progress(quiet, "every replica byte-identical to its master; nothing decoded")
    small = [
        dict(zip(FINDING_COLUMNS, (replicas[f.rid].group, replicas[f.rid].node,
                                   replicas[f.rid].role, f.kind, f.offset, f.end, 1, None, None,
                                   None, f.detail), strict=True))
        for f in file_findings
    ]  # fmt: skip
    return {
        "findings": None, "findings_rows": small, "records": None, "joined": None,
        "replicas": replicas, "masters": masters, "stats": stats, "segments": segs_by,
        "identical": identical, "exact": True,
    }  # fmt: skip


def _window_tasks(replicas: list[Replica], skip: frozenset[int],
                  wins: dict[str, list[tuple[int, int]]], segs_by: dict[int, list[Any]],
                  exact: frozenset[int], split_bytes: int) -> list[ScanTask]:  # fmt: skip
    """Decode tasks for the records starting inside each group's windows, on every decoded
    member (the reference and the differing replicas), at most ``split_bytes`` each."""
    out = []
    for rid, r in enumerate(replicas):
        if rid in skip or r.group not in wins:
            continue
        lim = -1 if r.limit is None else r.limit
        for a, b in wins[r.group]:
            for s in segs_by[rid]:
                lo, hi = max(a, s.start) - s.start, min(b, s.start + s.length) - s.start
                for x in range(lo, hi, max(1, split_bytes)):
                    out.append(ScanTask(rid, r.kind, s.path, s.start, x,
                                        min(x + split_bytes, hi), False, rid in exact, lim))
    return out


def _windowed(
    replicas: list[Replica], identical: dict[int, int], refs: dict[str, int],
    quiet_refs: frozenset[int], probed: dict[int, dict[str, Any]],
    wins: dict[str, list[tuple[int, int]]], cq_areas: dict[str, set[str]], *,
    exact: bool, split_bytes: int, quiet: bool,
) -> dict[str, Any]:
    """The default audit of groups whose bytes differ: only the records in the differing
    windows are decoded and compared, in the driver (``diff_local.py``: no Spark job)."""
    skip = frozenset(identical) | quiet_refs
    _, file_findings, segs_by = plan_scan(replicas, split_bytes, verify_crc=False,
                                          skip=frozenset(range(len(replicas))))  # fmt: skip
    stats = {i: dict(st) for i, st in probed.items()}
    for ref in refs.values():
        stats.setdefault(ref, _probe_stats(replicas, ref))
    for rid, src in identical.items():
        stats[rid] = dict(stats[src])
    masters = choose_masters(replicas, {i: int(s["end"] or 0) for i, s in stats.items()})
    decoded = frozenset(i for i, r in enumerate(replicas) if i not in skip and r.group in wins)
    tasks = _window_tasks(replicas, skip, wins, segs_by, decoded if exact else frozenset(),
                          split_bytes)  # fmt: skip
    cq_tasks = [t for t in plan_cq(replicas, skip)
                if f"cq/{t.topic}/{t.queue_id}" in cq_areas.get(replicas[t.rid].group, ())]
    bounds = {i: ((segs_by[i][0].start if segs_by[i] else 0), int(stats[i]["end"] or 0))
              for i in range(len(replicas)) if i in stats}  # fmt: skip
    _progress(quiet, f"decoding {sum(len(w) for w in wins.values())} windows in the driver")
    found = window_findings(replicas, masters, skip, bounds, wins, tasks, cq_tasks, exact,
                            _scan, _scan_cq)  # fmt: skip
    own = [f for f in found if f[0] in identical.values() and f[1] not in _COMPARED_KINDS]
    found += [(rid, *f[1:]) for rid, src in identical.items() for f in own if f[0] == src]
    found += [(f.rid, f.kind, f.offset, f.end, 1, None, None, None, f.detail)
              for f in file_findings]  # fmt: skip
    rows = [dict(zip(FINDING_COLUMNS, (replicas[f[0]].group, replicas[f[0]].node,
                                       replicas[f[0]].role, *f[1:]), strict=True))
            for f in found]  # fmt: skip
    return {
        "findings": None, "findings_rows": rows, "records": None, "joined": None,
        "replicas": replicas, "masters": masters, "stats": stats, "segments": segs_by,
        "identical": identical, "exact": exact,
    }  # fmt: skip


def _group_windows(
    replicas: list[Replica], refs: dict[str, int], groups: set[str], identical: dict[int, int],
    diffs: dict[int, Any],
) -> tuple[dict[str, list[tuple[int, int]]], dict[str, set[str]]]:
    """For each of ``groups`` (whose bytes differ): the record windows to decode around its
    differing data blocks, and its differing ConsumeQueue areas."""
    wins: dict[str, list[tuple[int, int]]] = {}
    cq_areas: dict[str, set[str]] = {}
    for g in groups:
        members = [i for i, r in enumerate(replicas) if r.group == g and i not in identical]
        runs = [(a, b) for i in members for area, a, b in diffs.get(i, ()) if area == "data"]
        wins[g] = windows(replicas[refs[g]].kind,
                          {i: list_segments(replicas[i].data_dir) for i in members}, runs)
        cq_areas[g] = {area for i in members for area, _, _ in diffs.get(i, ())
                       if area != "data"}  # fmt: skip
    return wins, cq_areas


def run_diff(
    spark: Any,
    replicas: list[Replica],
    *,
    verify_crc: bool = False,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    quiet: bool = True,
    exact: bool = True,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    check_stores: bool = False,
) -> dict[str, Any]:
    """Decode, compare and return {findings DataFrame, stats}; no output written.

    Three modes, each a function of its own:

    * the default (``check_stores`` False, no ``verify_crc``), :func:`_audit_bytes_first`: the
      replicas are compared byte for byte first (:func:`compare_replicas`); a group whose
      members are all identical is not decoded at all (if every group is, nothing is and
      ``findings`` is None: the rows are in ``findings_rows``); in the other groups only the
      records inside the differing blocks are decoded and compared, in the driver;
    * ``check_stores`` (or ``verify_crc``) with ``exact``, :func:`_audit_checksums_first`:
      block checksums first (:func:`checksum_replicas`); a replica whose every block equals
      its master's is not decoded (its findings are its master's own); the masters and the
      others are decoded in full, with digests, so every byte is compared;
    * ``check_stores`` without ``exact`` (header-only), :func:`_audit_decoded`: every replica
      decoded in full and compared by its decoded header fields (and the stored body CRC).

    Both ``check_stores`` modes also check the stores' own soundness (decode anomalies, queue
    gaps, ConsumeQueue pointers, consumer offsets).

    ``spark`` may be a function returning the session (a local run): then it is started only
    if something has to be decoded, and the comparison runs in the driver."""
    check_groups(replicas)
    if not check_stores and not verify_crc:
        return _audit_bytes_first(spark, replicas, exact=exact, block_bytes=block_bytes,
                                  split_bytes=split_bytes, quiet=quiet)  # fmt: skip
    spark = _session(spark)  # something to decode: a session from here on
    if exact:
        return _audit_checksums_first(spark, replicas, verify_crc=verify_crc,
                                      block_bytes=block_bytes, split_bytes=split_bytes,
                                      quiet=quiet)  # fmt: skip
    return _audit_decoded(spark, replicas, {}, exact=False, verify_crc=verify_crc,
                          split_bytes=split_bytes, quiet=quiet)  # fmt: skip


def _audit_bytes_first(
    spark: Any, replicas: list[Replica], *, exact: bool, block_bytes: int, split_bytes: int,
    quiet: bool,
) -> dict[str, Any]:
    """The default audit: bytes compared first, then only the differing windows decoded and
    compared, in the driver (no Spark job when ``spark`` is a lazy local session)."""
    identical, diffs, refs = compare_replicas(None if _lazy(spark) else spark, replicas,
                                              max(1, block_bytes))  # fmt: skip
    _progress(quiet, f"compared byte for byte: {len(identical)} of "
                     f"{len(replicas) - len(refs)} replicas identical to their master")
    quiet_groups = {g for g, ref in refs.items()
                    if all(i in identical for i, r in enumerate(replicas)
                           if r.group == g and i != ref)}  # fmt: skip
    if len(quiet_groups) == len(refs):
        return _proven(replicas, identical, refs, quiet)
    # the others: decoded only inside their differing blocks (widened to whole records)
    probed = {i: _probe_stats(replicas, i) for i in range(len(replicas))
              if i not in identical}  # fmt: skip
    wins, cq_areas = _group_windows(replicas, refs, set(refs) - quiet_groups, identical, diffs)
    quiet_refs = frozenset(refs[g] for g in quiet_groups)
    return _windowed(replicas, identical, refs, quiet_refs, probed, wins, cq_areas,
                     exact=exact, split_bytes=split_bytes, quiet=quiet)


def _audit_checksums_first(
    spark: Any, replicas: list[Replica], *, verify_crc: bool, block_bytes: int,
    split_bytes: int, quiet: bool,
) -> dict[str, Any]:
    """``check_stores`` with ``exact``: block checksums prove replicas identical to their
    master; when all are, the masters' own soundness is checked from the same job
    (:func:`_all_identical`), else the rest is decoded and compared (:func:`_audit_decoded`)."""
    identical, pre = checksum_replicas(spark, replicas, max(1, block_bytes),
                                       with_masters=not verify_crc, split_bytes=split_bytes)
    others = len(replicas) - len({r.group for r in replicas})
    _progress(quiet, f"checksums: {len(identical)} of {others} replicas byte-identical to "
                     "their master")  # fmt: skip
    if pre is not None and len(identical) == others:
        fast = _all_identical(spark, replicas, identical, split_bytes, verify_crc, quiet, pre)
        if fast is not None:
            return fast
    return _audit_decoded(spark, replicas, identical, exact=True, verify_crc=verify_crc,
                          split_bytes=split_bytes, quiet=quiet)  # fmt: skip


def _audit_decoded(
    spark: Any, replicas: list[Replica], identical: dict[int, int], *, exact: bool,
    verify_crc: bool, split_bytes: int, quiet: bool,
) -> dict[str, Any]:
    """Decode every replica not in ``identical`` (proven byte-identical to its master: its
    findings are its master's own) in Spark and compare each with its group's master, record
    by record; check the stores' own soundness too."""
    from pyspark.sql import functions as F

    skip = frozenset(identical)
    tasks, file_findings, segs_by = plan_scan(
        replicas, split_bytes, verify_crc=verify_crc, skip=skip,
        exact=_exact_rids(replicas, skip) if exact else frozenset())
    nfiles = sum(len(segs_by[i]) for i in range(len(replicas)) if i not in skip)
    _progress(quiet, f"decoding {nfiles} files of {len(replicas) - len(skip)} replicas in "
                     f"{len(tasks)} ranges")  # fmt: skip
    recs_all = decode_records(spark, tasks).persist()
    good = recs_all.where(F.col("anomaly").isNull() | (F.col("anomaly") == A_BAD_CRC))
    stats, qmax, decoded = _decoded_stats(good, identical)
    ends = {rid: s["end"] for rid, s in stats.items()}
    masters = choose_masters(replicas, ends)
    _progress(quiet, f"decoded {decoded} records")
    reps_b = F.broadcast(_replicas_frame(spark, replicas, masters, segs_by, ends, skip))
    cols = ["phy_offset", "size", "body_crc", "topic", "queue_id", "queue_offset", "term"]
    if exact:
        cols += ["digest", "dig_head", "dig_body"]
    j, others = _paired_records(good, reps_b, cols, exact)
    parts = [_divergent(j, cols, exact), *_unpaired(j), _missing(j),
             _blank_diffs(recs_all, others)]
    own = [_decode_anomalies(recs_all), _queue_gaps(good)]  # a replica's own defects
    cq_own, cq_vs = _cq_findings(spark, plan_cq(replicas, skip), good, reps_b, others, exact)
    own += cq_own
    parts += cq_vs
    own_all = _union(own)
    parts.append(own_all)
    if identical:  # (copied to the replicas proven identical to their master)
        dup = spark.createDataFrame(list(identical.items()), "new_rid int, src int")
        parts.append(own_all.join(F.broadcast(dup), own_all["rid"] == dup["src"])
                     .drop("rid", "src").withColumnRenamed("new_rid", "rid"))  # fmt: skip
    small: list[tuple[Any, ...]] = [
        (f.rid, f.kind, f.offset, f.end, 1, None, None, None, f.detail) for f in file_findings
    ]
    small += consumer_offset_findings(replicas, masters, qmax)  # (driver side: tiny)
    if small:
        parts.append(spark.createDataFrame(small, _FINDING_ROW_SCHEMA))
    findings = _union(parts).join(reps_b.select("rid", "group", "node", "role"), "rid").select(
        *FINDING_COLUMNS
    )
    return {
        "findings": findings, "records": recs_all, "joined": j, "replicas": replicas,
        "masters": masters, "stats": stats, "segments": segs_by, "identical": identical,
        "exact": exact,
    }  # fmt: skip


#: A findings row before its replica's group, node and role are joined in.
_FINDING_ROW_SCHEMA = (
    "rid int, kind string, phy_offset long, end_offset long, count long, topic string, "
    "queue_id int, queue_offset long, detail string"
)
_CQ_SCHEMA = (
    "rid int, cq_topic string, cq_qid int, cq_index long, phy_offset long, cq_size long, "
    "cq_tags long"
)


def _union(frames: list[Any]) -> Any:
    out = frames[0]
    for p in frames[1:]:
        out = out.unionByName(p)
    return out


def _exact_rids(replicas: list[Replica], skip: frozenset[int]) -> frozenset[int]:
    """The decoded replicas compared by digest: those with another decoded member in their
    group (a lone decoded master needs none)."""
    return frozenset(
        i for i, r in enumerate(replicas)
        if i not in skip
        and any(j not in skip and j != i for j, x in enumerate(replicas) if x.group == r.group)
    )  # fmt: skip


def _copy_identical(stats: dict[int, dict[str, Any]], qmax: dict[tuple[int, str, int], int],
                    identical: dict[int, int]) -> None:  # fmt: skip
    """A replica proven identical to its master gets the master's figures and queue ends."""
    for rid, src in identical.items():
        if src in stats:
            stats[rid] = dict(stats[src])
        for (r0, t, qid), mx in list(qmax.items()):
            if r0 == src:
                qmax[(rid, t, qid)] = mx


def _decoded_stats(
    good: Any, identical: dict[int, int]
) -> tuple[dict[int, dict[str, Any]], dict[tuple[int, str, int], int], int]:
    """One pass over the decoded records: per replica its messages, bytes, first and end
    offsets; per (replica, topic, queue) the next queue offset; and how many records."""
    from pyspark.sql import functions as F

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
    stats: dict[int, dict[str, Any]] = {}
    qmax: dict[tuple[int, str, int], int] = {}
    for q in qrows:
        st = stats.setdefault(q["rid"], {"messages": 0, "bytes": 0, "end": 0, "first": q["first"]})
        st["messages"] += q["messages"]
        st["bytes"] += q["bytes"]
        st["end"] = max(st["end"], q["end"])
        st["first"] = min(st["first"], q["first"])
        qmax[(q["rid"], q["topic"], q["queue_id"])] = q["mx"] + 1
    _copy_identical(stats, qmax, identical)
    return stats, qmax, sum(q["messages"] for q in qrows)


def _replicas_frame(
    spark: Any, replicas: list[Replica], masters: dict[str, int],
    segs_by: dict[int, list[Any]], ends: dict[int, int], skip: frozenset[int],
) -> Any:
    """One row per replica: its group's master and the offset ranges both hold (``r_lo`` /
    ``m_lo``: retention bounds; ``r_end`` / ``m_end``: where their records end)."""
    rows = []
    for rid, r in enumerate(replicas):
        m = masters[r.group]
        segs = segs_by[rid]
        mseg = segs_by[m]
        rows.append((
            rid, r.group, r.node, r.role, rid == m, m,
            segs[0].start if segs else 0,  # r_lo: retention bound of the replica
            int(ends.get(rid, segs[0].start if segs else 0)),  # r_end
            mseg[0].start if mseg else 0,  # m_lo
            int(ends.get(m, mseg[0].start if mseg else 0)),  # m_end
            rid in skip,
        ))
    return spark.createDataFrame(
        rows,
        "rid int, group string, node string, role string, is_master boolean, mrid int, "
        "r_lo long, r_end long, m_lo long, m_end long, same boolean",
    )


def _paired_records(good: Any, reps_b: Any, cols: list[str], exact: bool) -> tuple[Any, Any]:
    """Master records (with their sequence number in the group) outer-joined by offset with
    every other decoded replica's, kept only where they can become findings (persisted); and
    the (rid, mrid) pairs compared."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    mrec = good.join(reps_b.where("is_master").select("rid"), "rid").select(
        F.col("rid").alias("mrid"),
        *[F.col(c).alias("m_" + c) for c in cols],
        F.row_number().over(Window.partitionBy("rid").orderBy("phy_offset")).alias("seq"),
    )
    others = reps_b.where(~F.col("is_master") & ~F.col("same")).select("rid", "mrid")
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
        | (~F.col("m_digest").eqNullSafe(F.col("digest")) if exact else F.lit(False))
    ).persist()
    return j, others


def _divergent(j: Any, cols: list[str], exact: bool) -> Any:
    """Findings: records both sides hold at the same offset that differ, naming the fields
    (with ``exact``: header bytes, body, else topic/properties or entry header)."""
    from pyspark.sql import functions as F

    def differs(c: str, name: str | None = None) -> Any:
        return F.when(~F.col("m_" + c).eqNullSafe(F.col(c)), F.lit(name or c))

    named = [differs(c) for c in cols[1:7]]
    if exact:  # the bytes no decoded field names: header, body, else topic/properties/entry
        same_fields = F.concat_ws(",", *named) == ""
        same_head = F.col("m_dig_head").eqNullSafe(F.col("dig_head"))
        named += [
            F.when(same_fields, differs("dig_head", "header bytes")),
            F.when(same_head, differs("dig_body", "body")),
            F.when(same_head & F.col("m_dig_body").eqNullSafe(F.col("dig_body")),
                   differs("digest", "topic/properties or entry header")),
        ]  # fmt: skip
    both = F.col("m_size").isNotNull() & F.col("size").isNotNull()
    return (
        j.where(both)
        .withColumn("what", F.concat_ws(",", *named))
        .where(F.col("what") != "")
        .select(
            "rid", F.lit(K_DIVERGENT).alias("kind"), "phy_offset",
            (F.col("phy_offset") + F.col("size")).alias("end_offset"),
            F.lit(1).cast("long").alias("count"), "topic", "queue_id", "queue_offset",
            F.concat(F.lit("differs from master in "), F.col("what")).alias("detail"),
        )
    )  # fmt: skip


def _unpaired(j: Any) -> list[Any]:
    """Findings: a replica's record where no master record starts (inside the master's range:
    divergent; beyond its end: extra tail), and master records beyond the replica's end
    (lag)."""
    from pyspark.sql import functions as F

    m_only = F.col("m_size").isNotNull() & F.col("size").isNull()
    r_only = F.col("m_size").isNull() & F.col("size").isNotNull()
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
                *_nulls(),
                F.concat(F.col("count"), F.lit(" records beyond the master's end")).alias("detail"))
    )  # fmt: skip
    lag = (
        j.where(m_only & (F.col("phy_offset") >= F.col("r_end")))
        .groupBy("rid")
        .agg(F.min("phy_offset").alias("phy_offset"),
             F.max(F.col("m_phy_offset") + F.col("m_size")).alias("end_offset"),
             F.count("*").alias("count"))
        .select("rid", F.lit(K_LAG).alias("kind"), "phy_offset", "end_offset", "count",
                *_nulls(),
                F.concat(F.col("count"), F.lit(" master records not yet on the replica")
                         ).alias("detail"))
    )  # fmt: skip
    return [stray, extra, lag]


def _missing(j: Any) -> Any:
    """Findings: runs of master records a replica lacks inside its own range (one finding per
    run of consecutive master records)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    m_only = F.col("m_size").isNotNull() & F.col("size").isNull()
    holes = j.where(
        m_only & (F.col("phy_offset") >= F.col("r_lo")) & (F.col("phy_offset") < F.col("r_end"))
    )
    # (consecutive master records share ``seq - rank``: one island per run)
    holes = holes.withColumn(
        "island", F.col("seq") - F.row_number().over(Window.partitionBy("rid").orderBy("seq"))
    )
    return (
        holes.groupBy("rid", "island")
        .agg(F.min("phy_offset").alias("phy_offset"),
             F.max(F.col("m_phy_offset") + F.col("m_size")).alias("end_offset"),
             F.count("*").alias("count"))
        .select("rid", F.lit(K_MISSING).alias("kind"), "phy_offset", "end_offset", "count",
                *_nulls(),
                F.concat(F.col("count"), F.lit(" master records missing")).alias("detail"))
    )  # fmt: skip


def _cq_findings(
    spark: Any, cq_tasks: list[CqTask], good: Any, reps_b: Any, others: Any, exact: bool
) -> tuple[list[Any], list[Any]]:
    """ConsumeQueue units against the same replica's records (a replica's own findings:
    dangling or mismatching units) and, with ``exact``, against the master's unit of the same
    index (compared findings)."""
    from pyspark.sql import functions as F

    if not cq_tasks:
        return [], []
    sc = spark.sparkContext
    cq = spark.createDataFrame(
        sc.parallelize(cq_tasks, min(len(cq_tasks), sc.defaultParallelism * 2)).flatMap(_scan_cq),
        _CQ_SCHEMA,
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
    if not exact:
        return [cq_find], []
    # a unit that checks out against its own records but not the master's unit
    return [cq_find], [_cq_against_master(cqj.where(~bad), cq, others)]


def _cq_against_master(units: Any, cq: Any, others: Any) -> Any:
    """cq_mismatch: a replica's ``units`` whose (offset, size, tags code) differ from the
    master's unit of the same index (the master's units: ``cq``)."""
    from pyspark.sql import functions as F

    mcq = cq.select(F.col("rid").alias("mrid"), "cq_topic", "cq_qid", "cq_index",
                    F.col("phy_offset").alias("m_phy"), F.col("cq_size").alias("m_cqs"),
                    F.col("cq_tags").alias("m_tags"))  # fmt: skip
    return (
        units.join(others, "rid")
        .join(mcq, ["mrid", "cq_topic", "cq_qid", "cq_index"])
        .where((F.col("phy_offset") != F.col("m_phy"))
               | (F.col("cq_size") != F.col("m_cqs"))
               | (F.col("cq_tags") != F.col("m_tags")))
        .select(
            "rid", F.lit(K_CQ_MISMATCH).alias("kind"), "phy_offset",
            (F.col("phy_offset") + F.col("cq_size")).alias("end_offset"),
            F.lit(1).cast("long").alias("count"),
            F.col("cq_topic").alias("topic"), F.col("cq_qid").alias("queue_id"),
            F.col("cq_index").alias("queue_offset"),
            F.concat(F.lit("cq unit "), F.col("cq_index"),
                     F.lit(" differs from master's (offset, size or tags code)"))
            .alias("detail"),
        )
    )  # fmt: skip


def _int_or_none(x: Any) -> int | None:
    return None if x is None else int(x)


def summarize(result: dict[str, Any], findings_rows: list[Any], by_kind: list[Any],
              buckets: list[Any], *, allow_lag: bool, elapsed: float, verify_crc: bool,
              bucket_width: dict[str, int],
              lag_counts: dict[tuple[str, str], int] | None = None) -> dict[str, Any]:  # fmt: skip
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
            # None: not decoded (proven byte-identical, or its group's reference)
            "bytes": _int_or_none(st.get("bytes")),
            "messages": _int_or_none(st.get("messages")),
            "first_offset": st.get("first"),
            "end_offset": end,
            "lag_bytes": max(0, mend - end),
            "lag_messages": (  # not decoded: the lag finding's count (records past its end)
                (lag_counts or {}).get((r.group, r.node), 0)
                if mst.get("messages") is None or st.get("messages") is None
                else max(0, int(mst["messages"]) - int(st["messages"]))
            ),
            "ahead_bytes": max(0, end - mend),
            "common_prefix": min(first_bad.get((r.group, r.node), min(end, mend)), end, mend),
            "byte_identical": rid in result["identical"],
            "audited_to": r.limit,  # live: the group's confirmed offset; None: every byte
            # every byte of data files and ConsumeQueues from first_offset up to here is equal
            # to the master's (exact mode; header-only proves only the decoded fields)
            "proven_identical_to": (
                None if not result["exact"] else max(end, mend) if rid in result["identical"]
                else min(first_bad.get((r.group, r.node), min(end, mend)), end, mend)
            ),
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
        "mode": "exact" if result["exact"] else "header-only",
        "elapsed_s": round(elapsed, 3),
        "groups": groups,
        "first_findings": [
            {k: r[k] for k in ("group", "node", "role", *FINDING_COLUMNS[3:])}
            for r in findings_rows[:FIRST_FINDINGS]
        ],
        "divergence_map": {"buckets": MAP_BUCKETS, "bucket_bytes": bucket_width, "counts": dmap},
    }


def _blank_diffs(recs_all: Any, others: Any) -> Any:
    """Findings: END_OF_FILE blanks (header and padding) that differ from the master's."""
    from pyspark.sql import functions as F

    blank = recs_all.where(F.col("anomaly") == A_EOF_BLANK)
    blank_diff = (
        blank.join(others, "rid")
        .join(blank.select(F.col("rid").alias("mrid"), "phy_offset",
                           F.col("size").alias("m_size"), F.col("digest").alias("m_digest")),
              ["mrid", "phy_offset"])
        .where((F.col("size") != F.col("m_size")) | (F.col("digest") != F.col("m_digest")))
        .select("rid", F.lit(K_DIVERGENT).alias("kind"), "phy_offset",
                (F.col("phy_offset") + F.col("size")).alias("end_offset"),
                F.lit(1).cast("long").alias("count"), *_nulls(),
                F.lit("END_OF_FILE blank (header or padding) differs from master's")
                .alias("detail"))
    )  # fmt: skip
    return blank_diff


def _decode_anomalies(recs_all: Any) -> Any:
    """Findings: the decode anomalies of every replica, master included."""
    from pyspark.sql import functions as F

    anomalies = recs_all.where(
        F.col("anomaly").isNotNull() & (F.col("anomaly") != A_EOF_BLANK)
    ).select(
        "rid", F.col("anomaly").alias("kind"), "phy_offset",
        (F.col("phy_offset") + F.col("size")).alias("end_offset"),
        F.lit(1).cast("long").alias("count"), "topic", "queue_id", "queue_offset", "detail",
    )  # fmt: skip
    return anomalies


def _queue_gaps(good: Any) -> Any:
    """Findings: queue offsets with gaps (transaction prepared/rollback records take no
    queue offset)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

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
    return gaps


def run_job(
    spark: Any,
    replicas: list[Replica],
    out_dir: str | None,
    *,
    verify_crc: bool = False,
    allow_lag: bool = False,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    quiet: bool = True,
    exact: bool = True,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    check_stores: bool = False,
    judge: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The whole job: diff, then (with ``out_dir``) ``findings/`` Parquet, ``summary.json`` and
    ``report.html``; returns the summary (passed through ``judge`` first: the live verdicts)."""
    t0 = time.monotonic()
    res = run_diff(spark, replicas, verify_crc=verify_crc, split_bytes=split_bytes, quiet=quiet,
                   exact=exact, block_bytes=block_bytes, check_stores=check_stores)  # fmt: skip
    known = res.get("findings_rows")  # the fast paths know them all: no Spark job to count them
    f = res["findings"]
    if f is not None or out_dir is not None:  # Parquet out, or findings to count: a session
        spark = _session(spark)
    if f is None and out_dir is not None:
        f = spark.createDataFrame([tuple(d.values()) for d in known or []], finding_schema())
    if f is not None:
        f = f.coalesce(max(1, spark.sparkContext.defaultParallelism))
    if known is None:
        f = f.persist()
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        findings_path = os.path.join(out_dir, "findings")
        _progress(quiet, f"writing findings to {findings_path}")
        f.write.mode("overwrite").partitionBy("group").parquet(findings_path)
    widths = _bucket_widths(res, replicas)
    few = known if known is not None else f.limit(DRIVER_FINDINGS + 1).collect()
    if len(few) <= DRIVER_FINDINGS:  # the usual case: count on the driver, no more Spark jobs
        by_kind, buckets, lag_counts, rows = _count_on_driver(few, widths)
    else:
        by_kind, buckets, lag_counts, rows = _count_with_spark(spark, f, widths)
    summary = summarize(res, rows, by_kind, buckets, allow_lag=allow_lag,
                        elapsed=time.monotonic() - t0, verify_crc=verify_crc,
                        bucket_width=widths, lag_counts=lag_counts)  # fmt: skip
    _unpersist(res, f)
    if judge is not None:
        summary = judge(summary)
    write_summary(summary, out_dir, quiet)
    return summary


def _bucket_widths(res: dict[str, Any], replicas: list[Replica]) -> dict[str, int]:
    """Per group, the byte width of one of the ``MAP_BUCKETS`` buckets of the findings map:
    the group's longest commitlog end, master included, cut in ``MAP_BUCKETS``."""
    widths: dict[str, int] = {}
    for g, m in res["masters"].items():
        ends = [int(res["stats"].get(i, {}).get("end") or 0)
                for i, r in enumerate(replicas) if r.group == g]  # fmt: skip
        widths[g] = max(1, -(-max([*ends, int(res["stats"].get(m, {}).get("end") or 0)])
                             // MAP_BUCKETS))  # fmt: skip
    return widths


def _count_on_driver(few: list[Any], widths: dict[str, int]) -> tuple[Any, Any, Any, Any]:
    """(counts by kind, counts by map bucket, lag counts, first findings) of a few findings,
    counted in Python on the driver."""
    kinds: dict[tuple[str, str, str], int] = {}
    bucket_n: dict[tuple[str, str, int], int] = {}
    for r in few:
        key = (r["group"], r["node"], r["kind"])
        kinds[key] = kinds.get(key, 0) + 1
        if r["phy_offset"] is not None:
            bk = (r["group"], r["node"], r["phy_offset"] // widths[r["group"]])
            bucket_n[bk] = bucket_n.get(bk, 0) + 1
    by_kind = [{"group": g, "node": n, "kind": k, "n": c} for (g, n, k), c in kinds.items()]
    buckets = [{"group": g, "node": n, "bucket": b, "n": c}
               for (g, n, b), c in bucket_n.items()]  # fmt: skip
    lag_counts = {(r["group"], r["node"]): int(r["count"]) for r in few if r["kind"] == K_LAG}
    rows = sorted(few, key=lambda r: (r["group"], r["phy_offset"] is None,
                                      r["phy_offset"] or 0, r["node"], r["kind"])
                  )[:FIRST_FINDINGS]  # fmt: skip
    return by_kind, buckets, lag_counts, rows


def _count_with_spark(spark: Any, f: Any, widths: dict[str, int]) -> tuple[Any, Any, Any, Any]:
    """The same four as ``_count_on_driver``, for too many findings to collect: Spark jobs."""
    from pyspark.sql import functions as F

    by_kind = f.groupBy("group", "node", "kind").agg(F.count("*").alias("n")).collect()
    lag_counts = {(r["group"], r["node"]): int(r["count"])
                  for r in f.where(F.col("kind") == K_LAG).collect()}  # fmt: skip
    rows = (
        f.orderBy(F.col("group"), F.col("phy_offset").asc_nulls_last(), "node", "kind")
        .limit(FIRST_FINDINGS).collect()
    )  # fmt: skip
    wdf = spark.createDataFrame(list(widths.items()), "group string, width long")
    buckets = (
        f.where(F.col("phy_offset").isNotNull())
        .join(F.broadcast(wdf), "group")
        .groupBy("group", "node",
                 F.floor(F.col("phy_offset") / F.col("width")).alias("bucket"))
        .agg(F.count("*").alias("n"))
        .collect()
    )  # fmt: skip
    return by_kind, buckets, lag_counts, rows


def _unpersist(res: dict[str, Any], f: Any) -> None:
    """Release the cached findings and the diff's cached frames."""
    if f is not None:
        f.unpersist()
    for frame in ("records", "joined"):
        if res[frame] is not None:
            res[frame].unpersist()


def write_summary(summary: dict[str, Any], out_dir: str | None, quiet: bool) -> None:
    """``summary.json`` and ``report.html`` in ``out_dir`` (if any); the verdict on stderr."""
    from .report import render_html

    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "summary.json"), "w") as fh:
            json.dump(summary, fh, indent=2, default=str)
        with open(os.path.join(out_dir, "report.html"), "w") as fh:
            fh.write(render_html(summary))
    _progress(quiet, f"verdict {summary['verdict']} (exit {summary['exit_code']})"
                     + (f" -> {out_dir}" if out_dir else ""))  # fmt: skip


# ----------------------------------------------------------------------------- CLI


EPILOG = """\
exit status:
  0  consistent: every replica matches its master (lag only with --allow-lag)
  1  divergent (or lagging without --allow-lag)
  2  no verdict: unverifiable (--live: a broker unreachable, too slow for
     --node-timeout, answering bad frames or offsets, or nothing compared; the
     reason per group on stdout), or bad input (unreadable cluster directory, store
     or replica spec; no PySpark) or usage

By default every byte is compared: each replica's data files and ConsumeQueues are
compared with its master's (big reads, memcmp, in --block-mb blocks), and records are
decoded only inside the blocks that differ, to name the first divergent record; a
consistent cluster is never decoded.  --header-only judges only decoded header fields
there; --check-stores (and --verify-crc: the body CRCs) decodes every record of every
store to check the stores' own soundness too.  The summary goes to stdout (--json: the
whole summary as JSON), progress to stderr; --out adds findings/ (Parquet), summary.json
and report.html.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("--dir", help="cluster directory holding cluster.json "
                                 "(default $RMQ_CLUSTER_HOME/<name>, the home defaulting to "
                                 "./.rmq-cluster, when no --replica is given)")
    p.add_argument("--name", default=DEFAULT_NAME, help="cluster name (default default)")
    p.add_argument("--replica", action="append", default=[], metavar="GROUP:NODE:ROLE:STORE",
                   help="a replica (repeatable); ROLE: MASTER/SYNC_MASTER/ASYNC_MASTER/SLAVE, "
                        "LEADER/FOLLOWER/DLEDGER for DLedger stores")  # fmt: skip
    p.add_argument("--out", default=None,
                   help="output directory (findings/ Parquet, summary.json, report.html)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--master", default=None,
                   help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--header-only", action="store_true",
                   help="compare decoded header fields only, not every byte (faster on "
                        "divergent stores, blind to body/property bytes)")
    p.add_argument("--verify-crc", action="store_true",
                   help="also recompute every body CRC (bad_crc findings, master included)")
    p.add_argument("--check-stores", action="store_true",
                   help="also decode every master record: decode anomalies, queue gaps, "
                        "ConsumeQueue pointers, consumer offsets (slower: record by record)")
    p.add_argument("--allow-lag", action="store_true",
                   help="a replica behind its master (a missing tail) is not a failure")
    p.add_argument("--split-mb", type=int, default=DEFAULT_SPLIT_BYTES >> 20,
                   help="decode range size within a file (MiB)")
    p.add_argument("--block-mb", type=float, default=DEFAULT_BLOCK_BYTES / (1 << 20),
                   help="comparison block (MiB, aligned on offsets): decode windows "
                        "start from the blocks that differ")
    p.add_argument("--live", action="store_true",
                   help="audit a running cluster (--dir/--name) up to each group's confirmed "
                        "offset, asked from its brokers (CommitLogs only)")
    p.add_argument("--node-timeout", type=float, default=NODE_TIMEOUT_S, metavar="SECONDS",
                   help="--live: the whole exchange with one broker (connect, ask, answer) "
                        f"within this many seconds, else its group is unverifiable "
                        f"(default {NODE_TIMEOUT_S:g})")
    p.add_argument("--package", metavar="ZIP", default=None,
                   help="only build the job's Python archive (for spark-submit --py-files) "
                        "and exit")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="progress lines, Spark's warnings and progress bar on stderr (not "
                        "with --json under spark-submit, which merges stderr into stdout)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress lines (the default; kept for scripts)")


def _cluster_dir(args: argparse.Namespace) -> str | None:
    if args.dir or args.replica:
        return str(args.dir) if args.dir else None
    # as the other commands: $RMQ_CLUSTER_HOME/<name>, the home defaulting to ./.rmq-cluster
    if not args.name or "/" in args.name or args.name in (".", ".."):
        raise BadInput(f"bad cluster name {args.name!r}")
    return str(cluster_home() / args.name)


def resolve_replicas(args: argparse.Namespace) -> list[Replica]:
    replicas: list[Replica] = []
    directory = _cluster_dir(args)
    if directory:
        replicas += replicas_from_cluster_dir(directory)
    if getattr(args, "live", False) and (not directory or args.replica):
        raise BadInput("--live audits a cluster directory (--dir or --name), no --replica")
    replicas += [parse_replica_spec(s) for s in args.replica]
    if not replicas:
        raise BadInput("give --dir or at least one --replica")
    check_groups(replicas)
    return replicas


def _check_numbers(args: argparse.Namespace) -> None:
    if not 1 <= args.split_mb <= 1 << 20:
        raise BadInput(f"--split-mb {args.split_mb}: want 1 .. {1 << 20}")
    if not (1 / 1024 <= args.block_mb <= 1024):  # also rejects NaN
        raise BadInput(f"--block-mb {args.block_mb}: want 1/1024 .. 1024")
    if not (0 < args.node_timeout <= MAX_NODE_TIMEOUT_S):  # also rejects NaN
        raise BadInput(f"--node-timeout {args.node_timeout}: want > 0 .. {MAX_NODE_TIMEOUT_S:g}")


def finding_line(f: dict[str, Any]) -> str:
    """One finding for a person: kind, CommitLog offset, topic/queue@queue offset, detail
    (which names the field that differs)."""
    where = f"offset {f['phy_offset']}" if f["phy_offset"] is not None else "file"
    if f.get("topic") is not None:
        where += f" topic {f['topic']} queue {f['queue_id']} queue offset {f['queue_offset']}"
    count = f" x{f['count']}" if f.get("count") not in (None, 1) else ""
    return f"{f['kind']}{count} at {where}: {f['detail']}"


def _print_text(summary: dict[str, Any]) -> None:
    for group, g in sorted(summary["groups"].items()):
        for node, r in sorted(g["replicas"].items()):
            if r["is_master"]:
                continue
            kinds = ", ".join(f"{k} {n}" for k, n in r["findings"].items()) or "no findings"
            if r["verdict"] == "unverifiable":
                continue
            print(f"{group} {node}: {r['verdict']}, identical up to "
                  f"{r['proven_identical_to']} of master {g['master']} end "
                  f"{r['end_offset'] + r['lag_bytes'] - r['ahead_bytes']} ({kinds})")  # fmt: skip
            for f in summary.get("first_findings", []):
                if (f["group"], f["node"]) == (group, node):
                    print("  " + finding_line(f))
    for group, why in summary.get("unverifiable", {}).items():
        print(f"{group}: unverifiable: {why}")
    print(f"verdict: {summary['verdict']}")


def _build_package(args: argparse.Namespace) -> int:
    from .package import build_package

    try:
        names = build_package(args.package)
    except OSError as exc:
        print(f"replica-diff: cannot write {args.package}: {exc}", file=sys.stderr)
        return 2
    _progress(args.quiet, f"wrote {args.package} ({len(names)} entries)")
    if args.json:
        print(json.dumps({"package": args.package, "entries": len(names)}))
    return 0


def _plan_live(args: argparse.Namespace, replicas: list[Replica]) -> Any:
    """Every broker asked for its offset (``--node-timeout`` each, side by side)."""
    try:
        from .live import plan_live
    except ImportError as exc:  # a spark-submit archive carries no remoting client
        raise BadInput(f"--live needs rmq-cluster installed where the driver runs: {exc}") from None

    plan = plan_live(replicas, str(_cluster_dir(args)), args.node_timeout)
    for node, a in sorted(plan.answers.items()):
        said = a.error if a.error is not None else f"commitLogMaxOffset {a.max_offset}"
        _progress(args.quiet, f"{node} at {a.addr}: {said}")
    return plan


def _nothing_audited(args: argparse.Namespace, plan: Any) -> dict[str, Any]:
    """Every group left out by the live check: a summary of no groups, judged unverifiable."""
    from .live import judge

    empty = {
        "exit_code": 2, "verdict": "unverifiable", "allow_lag": args.allow_lag,
        "verify_crc": args.verify_crc, "mode": "header-only" if args.header_only else "exact",
        "elapsed_s": 0.0, "groups": {}, "first_findings": [],
        "divergence_map": {"buckets": MAP_BUCKETS, "bucket_bytes": {}, "counts": {}},
    }  # fmt: skip
    summary = judge(empty, plan, {})
    write_summary(summary, args.out, args.quiet)
    return summary


def _audit(args: argparse.Namespace, replicas: list[Replica], plan: Any) -> dict[str, Any]:
    """The job on a Spark session started on first need (a consistent local audit needs
    none); with a live ``plan`` its brokers are asked again at the end and it is judged."""
    from pyspark.sql import SparkSession

    owned = SparkSession.getActiveSession() is None  # in-process callers keep their session
    started: list[Any] = []

    def session() -> Any:
        if not started:
            _progress(args.quiet, "starting Spark")
            started.append(build_session(args.master, quiet=args.quiet))
        return started[0]

    def judge(summary: dict[str, Any]) -> dict[str, Any]:
        # only a live audit imports the remoting side (a spark-submit archive lacks it)
        from . import live

        return live.judge(summary, plan, live.recheck(plan))

    local = (args.master or "").startswith("local") or (
        not args.master and "PYSPARK_GATEWAY_PORT" not in os.environ)
    try:
        summary = run_job(session if local else session(), replicas, args.out,
                          verify_crc=args.verify_crc, allow_lag=args.allow_lag,
                          split_bytes=args.split_mb << 20,
                          quiet=args.quiet, exact=not args.header_only,
                          block_bytes=max(1, int(args.block_mb * (1 << 20))),
                          check_stores=args.check_stores,
                          judge=None if plan is None else judge)  # fmt: skip
        if started:  # where the job ran (None of it when no Spark was needed)
            sc = started[0].sparkContext
            summary["spark"] = {"master": sc.master,
                                "driver_host": sc.getConf().get("spark.driver.host")}
        return summary
    finally:
        if owned and started:
            started[0].stop()


def run_from_args(args: argparse.Namespace) -> int:
    args.quiet = not getattr(args, "verbose", False)
    if args.json and "PYSPARK_GATEWAY_PORT" in os.environ:
        args.quiet = True  # spark-submit merges our stderr into stdout: JSON only there
    if args.package:
        return _build_package(args)
    try:
        _check_numbers(args)
        replicas = resolve_replicas(args)
        plan = _plan_live(args, replicas) if args.live else None
    except BadInput as exc:
        print(f"replica-diff: bad input: {exc}", file=sys.stderr)
        return 2
    if plan is not None and not plan.replicas:
        summary = _nothing_audited(args, plan)
    else:
        try:
            import pyspark  # noqa: F401
        except ImportError:
            print("replica-diff: needs PySpark: python3 -m pip install -e '.[spark]' (and "
                  "Java 17)", file=sys.stderr)  # fmt: skip
            return 2
        try:
            summary = _audit(args, replicas if plan is None else list(plan.replicas), plan)
        except BadInput as exc:
            print(f"replica-diff: bad input: {exc}", file=sys.stderr)
            return 2
    if args.json:
        sys.stdout.write(json.dumps(summary, default=str) + "\n")
    else:
        _print_text(summary)
    sys.stdout.flush()
    return int(summary["exit_code"])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="replica-diff", description=__doc__.split("\n")[0])
    add_arguments(p)
    return run_from_args(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
