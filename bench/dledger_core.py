"""DLedger core benchmark: entries committed/s through the pure core, JSON output.

    python3 bench/dledger_core.py [--entries 50000] [--inflight 256] [--size 1024]
                                  [--store memory|file]

A 3-node group of ``dledger.core.DLedgerCore`` in one process, no sockets: a loop plays the
driver for every node (sync, save hard state, hand messages to the peer, apply, advance) with
instant delivery.  The leader keeps ``--inflight`` proposals of ``--size`` bytes outstanding
(proposed, not yet applied on the leader).  Measures:

* ``committed_per_s``: entries applied on the leader per second (the whole pipeline: propose,
  push, follower append + ack, quorum, apply); ``follower_applied_per_s`` for the slowest peer;
* ``core_with_codec``: the same with every message through ``messages.encode``/``decode``
  (what node.py will add per message besides the sockets);
* ``baseline`` (same run): plain ``append`` of the same entries to the log store alone
  (memory and file), i.e. the floor the core adds its protocol cost to.

No target yet (issue 8): the figure is reported.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkout  # noqa: F401  (bench/checkout.py: this tree's rmq_cluster first)

from rmq_cluster.dledger.core import CoreConfig, DLedgerCore, Role
from rmq_cluster.dledger.log_storage import FileLogStorage, LogStorage, MemoryLogStorage
from rmq_cluster.dledger.messages import Entry, Message, decode, encode

PEERS = ("n0", "n1", "n2")
BENCH_DATA_FILE_BYTES = 64 * 1024 * 1024


def _storage(kind: str, tmp: Path, name: str) -> LogStorage:
    if kind == "memory":
        return MemoryLogStorage()
    return FileLogStorage(tmp / name, data_file_bytes=BENCH_DATA_FILE_BYTES)


def bench_core(
    entries: int, inflight: int, size: int, store: str, codec: bool = False
) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="dlbench"))
    try:
        stores = {p: _storage(store, tmp, p) for p in PEERS}
        cores = {
            p: DLedgerCore(CoreConfig("g", p, PEERS), stores[p], random.Random(i))
            for i, p in enumerate(PEERS)
        }
        applied = dict.fromkeys(PEERS, 0)
        queue: list[Message] = []

        def drive() -> None:
            for p, core in cores.items():
                if core.has_ready():
                    rd = core.ready()
                    if rd.must_sync:
                        stores[p].sync()
                    if rd.hard_state is not None:
                        stores[p].save_hard_state(rd.hard_state)
                    queue.extend(rd.messages)
                    applied[p] += len(rd.committed_entries)
                    core.advance(rd)

        def deliver() -> None:
            msgs = queue[:]
            queue.clear()
            for m in msgs:
                cores[m.remote_id].step(decode(encode(m)) if codec else m)

        leader = cores["n0"]
        leader.campaign()
        for _ in range(10):
            drive()
            deliver()
        assert leader.role is Role.LEADER
        drive()
        deliver()
        base = applied["n0"]  # the no-op
        body = b"x" * size
        proposed = 0
        t0 = time.perf_counter()
        while applied["n0"] - base < entries:
            while proposed < entries and proposed - (applied["n0"] - base) < inflight:
                res = leader.propose(body)
                assert res.index >= 0, res
                proposed += 1
            drive()
            deliver()
        dt = time.perf_counter() - t0
        slowest = min(applied[p] for p in PEERS) - base
        for s in stores.values():
            s.close()
        return {
            "store": store,
            "codec": codec,
            "entries": entries,
            "seconds": round(dt, 3),
            "committed_per_s": round(entries / dt),
            "follower_applied_per_s": round(slowest / dt),
            "mib_per_s": round(entries * size / dt / 2**20, 1),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_baseline(entries: int, size: int, store: str) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="dlbase"))
    try:
        s = _storage(store, tmp, "b")
        body = b"x" * size
        t0 = time.perf_counter()
        for i in range(entries):
            s.append([Entry(i, 1, body)])
        s.sync()
        dt = time.perf_counter() - t0
        s.close()
        return {"store": store, "appends_per_s": round(entries / dt)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--inflight", type=int, default=256)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--store", choices=["memory", "file"], default="memory")
    args = parser.parse_args()
    out = {
        "bench": "dledger_core",
        "nodes": len(PEERS),
        "entry_bytes": args.size,
        "inflight": args.inflight,
        "core": bench_core(args.entries, args.inflight, args.size, args.store),
        "core_with_codec": bench_core(args.entries, args.inflight, args.size, args.store, True),
        "baseline": [
            bench_baseline(args.entries, args.size, "memory"),
            bench_baseline(args.entries, args.size, "file"),
        ],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
