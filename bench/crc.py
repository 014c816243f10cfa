"""CRC32 micro-benchmark: prints one JSON object.

    python3 bench/crc.py [--rounds 5] [--budget-mb 64]

CPU time per call and per KiB of each CRC32 on this machine, for a DLedger chain input (32 B),
a batched message's body (1 KiB, taken as a memoryview slice of a bigger buffer as the batch
put does) and a replica audit block (4 MiB): the system zlib (``zlib.crc32``, the baseline),
zlib-ng's (``zlib_ng.zlib_ng.crc32``), ISA-L's (``isal.isal_zlib.crc32``, measured when the
``isal`` package is installed: it is not a dependency), and the project's
``cluster.protocol.crc.crc32`` (which is zlib-ng's). Every implementation is checked against
zlib's value first. Best of ``--rounds`` (the machine is shared: the best round is the one
least disturbed), each round ``--budget-mb`` MiB of input (at least 2000 calls).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
import zlib
from collections.abc import Callable
from typing import Any

from rmq_cluster.cluster.protocol.crc import crc32 as ours

#: (name, bytes, offset into a bigger buffer)
SIZES = (("chain_32B", 32, 0), ("body_1KiB", 1024, 7), ("block_4MiB", 4 << 20, 0))


def implementations() -> dict[str, Callable[..., int]]:
    out: dict[str, Callable[..., int]] = {"zlib": zlib.crc32}
    for name, module in (("zlib_ng", "zlib_ng.zlib_ng"), ("isal", "isal.isal_zlib")):
        try:
            out[name] = importlib.import_module(module).crc32
        except ImportError:
            continue
    out["ours"] = ours
    return out


def per_call_ns(fn: Callable[..., int], src: memoryview, lo: int, hi: int, calls: int,
                rounds: int) -> float:  # fmt: skip
    """Best of ``rounds``: CPU ns per ``fn(src[lo:hi])`` (the slice included, as on a put)."""
    best = float("inf")
    for _ in range(rounds):
        t = time.process_time_ns()
        for _ in range(calls):
            fn(src[lo:hi])
        best = min(best, (time.process_time_ns() - t) / calls)
    return best


def measure(rounds: int, budget: int) -> dict[str, Any]:
    impls = implementations()
    out: dict[str, Any] = {}
    for label, n, skew in SIZES:
        src = memoryview(os.urandom(n + skew))
        want = zlib.crc32(src[skew:])
        row: dict[str, Any] = {}
        for name, fn in impls.items():
            if fn(src[skew:]) != want or fn(src[skew:], 12345) != zlib.crc32(src[skew:], 12345):
                raise SystemExit(f"{name}: a different CRC32 than zlib's")
            ns = per_call_ns(fn, src, skew, skew + n, max(2000, budget // n), rounds)
            row[name] = {"us_per_call": round(ns / 1000, 4),
                         "us_per_kib": round(ns / 1000 / (n / 1024), 4)}  # fmt: skip
        base = row["zlib"]["us_per_call"]
        for name in impls:
            row[name]["speedup_vs_zlib"] = round(base / row[name]["us_per_call"], 2)
        out[label] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget-mb", type=int, default=64)
    a = ap.parse_args()
    if a.rounds < 1 or a.budget_mb < 1:
        ap.error("--rounds and --budget-mb must be at least 1")
    figures = measure(a.rounds, a.budget_mb << 20)
    print(json.dumps({
        "benchmark": "crc",
        "zlib_runtime": zlib.ZLIB_RUNTIME_VERSION,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "implementations": list(implementations()),
        **figures,
    }, indent=2))


if __name__ == "__main__":
    main()
