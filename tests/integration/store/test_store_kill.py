"""A real process writing SYNC_FLUSH puts in a loop is SIGKILLed mid-write; on restart every
acknowledged message is there, the store recovers abnormally and keeps going."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from rmq_cluster.cluster.protocol.message import decode_record
from rmq_cluster.store.config import FlushDiskType, MessageStoreConfig
from rmq_cluster.store.message_store import MessageStore

WRITER = r"""
import sys, trio
from rmq_cluster.cluster.logging import configure_logging
from rmq_cluster.cluster.protocol.message import Message
from rmq_cluster.store import flush
from rmq_cluster.store.config import FlushDiskType, MessageStoreConfig
from rmq_cluster.store.message_store import MessageStore

configure_logging("warning", stream=sys.stderr)
cfg = MessageStoreConfig(store_path_root_dir=sys.argv[1], mapped_file_size_commit_log=256 * 1024,
                         mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=128,
                         max_index_num=512, flush_disk_type=FlushDiskType.SYNC_FLUSH)

async def main():
    store = MessageStore.open(cfg)
    async with trio.open_nursery() as nursery:
        await nursery.start(flush.run, store)
        async def writer(w):
            i = store.get_max_offset_in_queue("K", w)  # continue after a restart
            while True:
                body = f"w{w}-{i}-".encode() * 20
                res = await store.put_message(Message(topic="K", body=body, queue_id=w,
                                                     properties={"KEYS": f"w{w}-{i}"},
                                                     store_host=("127.0.0.1", 10911)))
                if res.ok:
                    sys.stdout.write(f"ACK {w} {i} {res.result.wrote_offset}\n")
                    sys.stdout.flush()
                i += 1
        for w in range(4):
            nursery.start_soon(writer, w)

trio.run(main)
"""

ACKS_BEFORE_KILL = 400
DEADLINE_S = 30.0


def read_acks(proc: subprocess.Popen[bytes], want: int) -> list[tuple[int, int, int]]:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    acks: list[tuple[int, int, int]] = []
    buf = b""
    deadline = time.monotonic() + DEADLINE_S
    while len(acks) < want:
        left = deadline - time.monotonic()
        assert left > 0, "writer did not acknowledge in time"
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        assert chunk, f"writer exited early: {proc.poll()}"
        buf += chunk
        *lines, buf = buf.split(b"\n")
        acks += parse_acks(lines)
    return acks


def parse_acks(lines: list[bytes]) -> list[tuple[int, int, int]]:
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 4 and parts[0] == b"ACK":
            out.append((int(parts[1]), int(parts[2]), int(parts[3])))
    return out


CYCLES = 3


def test_sigkill_mid_write_recovers(tmp_path: Path) -> None:
    root = tmp_path / "store"
    acks: list[tuple[int, int, int]] = []
    for _cycle in range(CYCLES):
        acks += run_and_kill(root)
        check_after_kill(root, acks)


def run_and_kill(root: Path) -> list[tuple[int, int, int]]:
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root)], stdout=subprocess.PIPE, env=env,
    )
    try:
        acks = read_acks(proc, ACKS_BEFORE_KILL)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=DEADLINE_S)
        assert proc.stdout is not None
        acks += parse_acks(proc.stdout.read().split(b"\n"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert (root / "abort").exists()
    return acks


def check_after_kill(root: Path, acks: list[tuple[int, int, int]]) -> None:
    cfg = MessageStoreConfig(
        store_path_root_dir=str(root), mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=128, max_index_num=512,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
    )
    store = MessageStore.open(cfg)
    try:
        assert store.recovery is not None and store.recovery.abnormal
        for w, i, off in acks:
            rec = store.lookup_message_by_offset(off)
            assert rec is not None, f"acknowledged message w{w}-{i} lost"
            assert rec.body == f"w{w}-{i}-".encode() * 20 and rec.queue_id == w
        for w in range(4):
            count = store.get_max_offset_in_queue("K", w)
            mine = sorted(i for ww, i, _ in acks if ww == w)
            assert count >= len(mine)
            bodies = []
            offset = 0
            while offset < count:  # a pull stops at the end of a ConsumeQueue segment
                got = store.get_message("K", w, offset, 10_000, max_bytes=1 << 30)
                bodies += [decode_record(b).body for b in got.buffers]
                got.release()
                offset = got.next_begin_offset
            # the queue is exactly writer w's messages 0..count-1, in order, no gaps
            assert bodies == [f"w{w}-{i}-".encode() * 20 for i in range(count)]
        # keys are found through the rebuilt index
        w, i, off = acks[-1]
        q = store.query_message("K", f"w{w}-{i}", 4, 0, 2**62)
        assert [decode_record(b).commitlog_offset for b in q.buffers] == [off]
        q.copy_body()
    finally:
        store.close()
