"""``rmq-cluster up`` benchmark: time to ready and idle RSS per node, beside a baseline.

    python3 bench/up.py [--runs 3] [--idle 2] [--profiles single,2m-noslave]

For every profile: ``rmq-cluster up PROFILE`` in a subprocess on a free base
port and a temporary directory, ``--runs`` times; per run the wall time of the ``up`` command
(interpreter start included) and the supervisor's own ready time (first spawn -> every
NameServer answers and every broker is registered and routable), then VmRSS of every node
after ``--idle`` seconds of idling, and again after a 10-message produce/consume round trip and
``--idle`` more seconds; then ``down --purge``.

VmRSS counts file-backed pages too: ``rss_split_last_run`` gives RssAnon (heap, interpreter)
and RssFile (shared libraries and the mapped store files the node has touched) per node.

Baseline, same run: the wall time and RSS of a bare ``python -c "import trio"`` process (the
floor every node pays).

Targets (issue 9): 2m-2s-async ready <= 3 s; every node <= 60 MB RSS idle.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkout  # noqa: F401  (bench/checkout.py: this tree's rmq_cluster first)

from rmq_cluster.cluster.logging import configure_logging
from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.demo import run_demo
from rmq_cluster.deploy.testing import become_subreaper, rmq_cluster
from rmq_cluster.deploy.topology import BUILTIN_PROFILES, resolve_profile

TARGET_READY_S = 3.0
TARGET_RSS_MB = 60.0
MB = 1024 * 1024
BASELINE_CODE = "import sys, trio; sys.stdout.write('up\\n'); sys.stdout.flush(); sys.stdin.read()"


def baseline(runs: int) -> dict[str, Any]:
    walls, rss = [], []
    for _ in range(runs):
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", BASELINE_CODE],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None and proc.stdin is not None
        proc.stdout.readline()
        walls.append(time.monotonic() - started)
        rss.append((supervisor.rss_bytes(proc.pid) or 0) / MB)
        proc.stdin.close()
        proc.wait()
    return {
        "what": "python -c 'import trio' (interpreter + trio, no node)",
        "start_s_median": round(statistics.median(walls), 3),
        "rss_mb_median": round(statistics.median(rss), 1),
    }


def _memory(cluster: Any) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    mems = {name: supervisor.memory_bytes(pid) for name, pid in cluster.pids().items()}
    rss = {name: round(m.get("VmRSS", 0) / MB, 1) for name, m in mems.items()}
    split = {
        name: {"anon_mb": round(m.get("RssAnon", 0) / MB, 1),
               "file_mb": round(m.get("RssFile", 0) / MB, 1)}
        for name, m in mems.items()
    }
    return rss, split


def bench_profile(profile: str, runs: int, idle_s: float) -> dict[str, Any]:
    walls: list[float] = []
    readies: list[float] = []
    empty_runs: list[dict[str, float]] = []
    used_runs: list[dict[str, float]] = []
    splits: dict[str, dict[str, dict[str, float]]] = {}
    demo_ok = True
    for _ in range(runs):
        started = time.monotonic()
        with rmq_cluster(profile) as cluster:
            walls.append(time.monotonic() - started)
            readies.append(cluster.ready_s)
            time.sleep(idle_s)  # let the nodes settle into idle before reading RSS
            rss, splits["idle_empty"] = _memory(cluster)
            empty_runs.append(rss)
            # idle again after a little traffic: the first message creates the CommitLog file
            demo_ok = run_demo(cluster.namesrv_addr, count=10)["ok"] and demo_ok
            time.sleep(idle_s)
            rss, splits["idle_after_10_messages"] = _memory(cluster)
            used_runs.append(rss)
    empty = {name: max(r[name] for r in empty_runs) for name in empty_runs[0]}
    used = {name: max(r[name] for r in used_runs) for name in used_runs[0]}
    worst = max([*empty.values(), *used.values()])
    return {
        "nodes": len(empty),
        "up_wall_s_median": round(statistics.median(walls), 3),
        "ready_s_median": round(statistics.median(readies), 3),
        "ready_s_runs": [round(r, 3) for r in readies],
        "rss_mb_idle_empty_max_per_node": empty,
        "rss_mb_idle_after_10_messages_max_per_node": used,
        "rss_split_last_run": splits,
        "demo_round_trips_ok": demo_ok,
        "rss_mb_worst_node": worst,
        "meets_rss_target": worst <= TARGET_RSS_MB,
        "within_ready_target_of_2m_2s_async": statistics.median(readies) <= TARGET_READY_S,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=float, default=2.0, help="seconds idle before RSS")
    parser.add_argument("--profiles", default=",".join(BUILTIN_PROFILES))
    args = parser.parse_args()
    configure_logging("warning")  # the demo's client logs to stderr, never into the JSON
    become_subreaper()
    report: dict[str, Any] = {
        "bench": "up",
        "targets": {"ready_s_2m_2s_async": TARGET_READY_S, "rss_mb_per_node_idle": TARGET_RSS_MB},
        "baseline": baseline(args.runs),
        "profiles": {},
    }
    for profile in [p.strip() for p in args.profiles.split(",") if p.strip()]:
        resolve_profile(profile)  # an unknown profile fails here, before anything starts
        report["profiles"][profile] = bench_profile(profile, args.runs, args.idle)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
