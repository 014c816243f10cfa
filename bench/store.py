"""Store benchmark: prints one JSON object.

    python -m bench.store [--messages 100000] [--dir /tmp/x]

Each figure sits beside a baseline measured in the same run on the same disk:
  * raw_mmap_append: pack a 88-byte header, crc32 the body and copy it into an mmap (the
    irreducible per-record work), the baseline for every put figure;
  * raw_mmap_read: slice + copy 1 KiB records out of an mmap, the baseline for reads;
  * raw_scan: walk the records of a file checking size and CRC, the baseline for recovery.
Targets (issue 3): async single puts >= 0.3x raw, batch puts >= 0.5x raw, SYNC_FLUSH with
64 writers >= 20 000 puts/s.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from typing import Any

import orjson
import trio

from rmq_cluster.cluster.logging import configure_logging
from rmq_cluster.cluster.protocol.crc import crc32
from rmq_cluster.cluster.protocol.message import Message, encode_batch
from rmq_cluster.store import flush
from rmq_cluster.store.config import FlushDiskType, MessageStoreConfig
from rmq_cluster.store.message_store import MessageStore

BODY_BYTES = 1024
BATCH_SIZE = 32
SYNC_WRITERS = 64
READ_BATCH = 32
REPEATS = 5
FILE_BYTES = 256 * 1024 * 1024
MB100 = 100 * 1024 * 1024
HOST = ("127.0.0.1", 10911)
HEADER = struct.Struct(">iIiiiqqiq8sq8siqi")


def config(root: str, **kw: Any) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=root, mapped_file_size_commit_log=FILE_BYTES, **kw
    )


def messages(n: int) -> list[Message]:
    body = os.urandom(BODY_BYTES)
    return [
        Message(
            topic="BenchTopic", body=body, queue_id=i % 8, born_host=("10.0.0.1", 5000),
            store_host=HOST, properties={"TAGS": "TagA", "UNIQ_KEY": f"{i:032X}"},
        )
        for i in range(n)
    ]


def raw_append(root: str, n: int) -> float:
    """Records/s for the bare minimum: header pack + crc + body copy into an mmap."""
    path = os.path.join(root, "raw")
    size = (BODY_BYTES + 200) * n
    with open(path, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, size)  # created like a CommitLog segment
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), size)
    body = os.urandom(BODY_BYTES)
    topic = b"\x0aBenchTopic"
    props = b"TAGS\x01TagA\x02UNIQ_KEY\x01" + b"0" * 32
    host = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
    total = 91 + len(body) + len(topic) - 1 + len(props)
    pos = 0
    t0 = time.perf_counter()
    for i in range(n):
        HEADER.pack_into(mm, pos, total, 0xDAA320A7, crc32(body) & 0x7FFFFFFF, 0, 0, i,
                         pos, 0, 0, host, 0, host, 0, 0, len(body))
        p = pos + 88
        mm[p : p + len(body)] = body
        p += len(body)
        mm[p : p + len(topic)] = topic
        p += len(topic)
        mm[p : p + 2 + len(props)] = b"\x00\x30" + props
        pos += total
    dt = time.perf_counter() - t0
    mm.close()
    os.unlink(path)
    return n / dt


def raw_read_and_scan(root: str, n: int) -> tuple[float, float]:
    """(1 KiB slice copies/s, seconds per 100 MB for a size+CRC scan)."""
    path = os.path.join(root, "rawr")
    rec = BODY_BYTES + 100
    size = rec * n
    with open(path, "wb") as f:
        f.write((struct.pack(">i", rec) + os.urandom(rec - 4)) * n)
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), size)
    view = memoryview(mm)
    t0 = time.perf_counter()
    for i in range(n):
        bytes(view[i * rec : i * rec + rec])
    reads = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    pos = 0
    while pos < size:
        (s,) = struct.unpack_from(">i", view, pos)
        crc32(view[pos + 88 : pos + s])
        pos += s
    scan = (time.perf_counter() - t0) * MB100 / size
    view.release()
    mm.close()
    os.unlink(path)
    return reads, scan


DISPATCH_RATES: list[float] = []


async def bench_async_puts(root: str, msgs: list[Message]) -> float:
    store = MessageStore.open(config(root))
    try:
        t0 = time.perf_counter()
        for m in msgs:
            await store.put_message(m)
        dt = time.perf_counter() - t0
        # then the reput work those puts created: ConsumeQueue units + UNIQ_KEY index entries
        t0 = time.perf_counter()
        while store.dispatch():
            pass
        DISPATCH_RATES.append(len(msgs) / (time.perf_counter() - t0))
    finally:
        store.close()
    return len(msgs) / dt


async def bench_batch_puts(root: str, n: int) -> float:
    store = MessageStore.open(config(root))
    body = os.urandom(BODY_BYTES)
    batches = [
        Message(
            topic="BenchTopic", queue_id=b % 8, store_host=HOST,
            body=encode_batch(
                [(0, body, {"UNIQ_KEY": f"{b * BATCH_SIZE + j:032X}"}) for j in range(BATCH_SIZE)]
            ),
        )
        for b in range(n // BATCH_SIZE)
    ]
    try:
        t0 = time.perf_counter()
        for batch in batches:
            await store.put_messages(batch)
        dt = time.perf_counter() - t0
    finally:
        store.close()
    return len(batches) * BATCH_SIZE / dt


async def bench_sync_puts(root: str, msgs: list[Message]) -> dict[str, float]:
    store = MessageStore.open(config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH))
    per_writer = len(msgs) // SYNC_WRITERS
    ok = 0
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(flush.run, store)

            async def writer(w: int) -> None:
                nonlocal ok
                for m in msgs[w * per_writer : (w + 1) * per_writer]:
                    if (await store.put_message(m)).ok:
                        ok += 1

            t0 = time.perf_counter()
            async with trio.open_nursery() as writers:
                for w in range(SYNC_WRITERS):
                    writers.start_soon(writer, w)
            dt = time.perf_counter() - t0
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    return {"puts_per_s": ok / dt, "ok": ok, "attempted": per_writer * SYNC_WRITERS}


def bench_reads_and_recovery(root: str) -> dict[str, float]:
    """Uses the store the async-put bench left behind."""
    cfg = config(root)
    t0 = time.perf_counter()
    store = MessageStore.open(cfg)
    normal_s = time.perf_counter() - t0
    size = store.max_phys_offset
    try:
        count = 0
        t0 = time.perf_counter()
        for q in range(8):
            offset = 0
            while True:
                r = store.get_message("BenchTopic", q, offset, READ_BATCH, max_bytes=1 << 20)
                if not r.buffers:
                    break
                count += r.message_count
                r.copy_body()
                offset = r.next_begin_offset
        reads = count / (time.perf_counter() - t0)
    finally:
        store.close()
    # abnormal recovery: abort present and an old checkpoint -> CRC scan + re-dispatch
    open(cfg.abort_path, "wb").close()
    with open(cfg.checkpoint_path, "r+b") as f:
        f.write(bytes(24))
    shutil.rmtree(cfg.consume_queue_dir)
    shutil.rmtree(cfg.index_dir)
    t0 = time.perf_counter()
    store = MessageStore.open(cfg)
    abnormal_s = time.perf_counter() - t0
    store.close()
    return {
        "reads_per_s": reads,
        "messages_read": count,
        "normal_recovery_s_per_100MB": normal_s * MB100 / size,
        "abnormal_recovery_s_per_100MB": abnormal_s * MB100 / size,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--dir", default=None, help="parent for the temp dir (default: $TMPDIR)")
    args = parser.parse_args(argv)
    configure_logging("warning", stream=sys.stderr)
    n = args.messages
    root = tempfile.mkdtemp(prefix="rmq-bench-store-", dir=args.dir)
    try:
        msgs = messages(n)
        # paired runs: each store figure is divided by the better of two raw baselines measured
        # right before it (page-cache and neighbour noise hit both alike); medians of REPEATS
        raws: list[float] = []
        async_runs: list[tuple[float, float]] = []
        batch_runs: list[tuple[float, float]] = []
        for rep in range(REPEATS):
            a_dir, b_dir = os.path.join(root, f"a{rep}"), os.path.join(root, f"b{rep}")
            base = max(raw_append(root, n), raw_append(root, n))
            async_runs.append((trio.run(bench_async_puts, a_dir, msgs), base))
            base2 = max(raw_append(root, n), raw_append(root, n))
            batch_runs.append((trio.run(bench_batch_puts, b_dir, n), base2))
            raws += (base, base2)
            shutil.rmtree(b_dir)
            if rep:
                shutil.rmtree(a_dir)
        raw = statistics.median(raws)
        async_puts = statistics.median(r for r, _ in async_runs)
        batch_puts = statistics.median(r for r, _ in batch_runs)
        async_ratio = statistics.median(r / b for r, b in async_runs)
        batch_ratio = statistics.median(r / b for r, b in batch_runs)
        raw_reads, raw_scan = raw_read_and_scan(root, n)
        sync = trio.run(bench_sync_puts, os.path.join(root, "s"), msgs[: n // 2])
        reads = bench_reads_and_recovery(os.path.join(root, "a0"))
        out = {
            "messages": n,
            "repeats_median_of": REPEATS,
            "body_bytes": BODY_BYTES,
            "raw_mmap_append_per_s": round(raw),
            "async_single_puts_per_s": round(async_puts),
            "async_single_vs_raw": round(async_ratio, 3),
            "async_single_target_vs_raw": 0.3,
            "batch_puts_per_s": round(batch_puts),
            "batch_size": BATCH_SIZE,
            "batch_vs_raw": round(batch_ratio, 3),
            "batch_target_vs_raw": 0.5,
            "sync_flush_puts_per_s": round(sync["puts_per_s"]),
            "sync_flush_writers": SYNC_WRITERS,
            "sync_flush_ok": sync["ok"],
            "sync_flush_target_per_s": 20000,
            "dispatch_per_s": round(statistics.median(DISPATCH_RATES)),
            "raw_mmap_read_per_s": round(raw_reads),
            "cq_reads_per_s": round(reads["reads_per_s"]),
            "cq_reads_vs_raw": round(reads["reads_per_s"] / raw_reads, 3),
            "raw_scan_s_per_100MB": round(raw_scan, 4),
            "normal_recovery_s_per_100MB": round(reads["normal_recovery_s_per_100MB"], 4),
            "abnormal_recovery_s_per_100MB": round(reads["abnormal_recovery_s_per_100MB"], 4),
        }
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
