"""The machine's state beside a bench run: what a CPU second buys here today.

``machine_state(java_cp)`` measures, in a few seconds: the load average; steal and idle time
over one second (/proc/stat); the CPU time of a fixed Python loop and of a fixed JVM loop
(BenchClient ``spin``); the loopback send/recv floor (bench/pingpong.c, built with cc into
``~/.cache/rmq-cluster-tools/``: wall and CPU µs per round trip); a directory fsync (ms, the cost
a store pays per new file). Compare two runs' broker CPU per message only beside these: a machine
whose Python loop costs 4x another's makes every Python broker 4x dearer there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Final

PINGPONG_SRC: Final = Path(__file__).resolve().parent / "pingpong.c"
CACHE: Final = Path.home() / ".cache" / "rmq-cluster-tools"
ROUND_TRIPS: Final = 20_000
TIMEOUT_S: Final = 120.0


def _proc_stat() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def steal_idle(seconds: float = 1.0) -> dict[str, float]:
    """Shares of all CPUs' time that were stolen by the hypervisor, and idle, over ``seconds``."""
    a = _proc_stat()
    time.sleep(seconds)  # a sampling interval, not a wait for a condition
    d = [y - x for x, y in zip(a, _proc_stat(), strict=False)]
    total = sum(d[:8]) or 1
    return {"steal_pct": round(100 * d[7] / total, 1), "idle_pct": round(100 * d[3] / total, 1)}


def python_loop_ns(n: int = 2_000_000) -> float:
    """CPU ns per iteration of ``x += i`` over ``range(n)``, best of 3."""
    best = float("inf")
    for _ in range(3):
        t, x = time.process_time(), 0
        for i in range(n):
            x += i
        best = min(best, time.process_time() - t)
    return round(best / n * 1e9, 1)


def fsync_dir_ms(files: int = 10) -> float:
    """Median ms of an fsync of a directory after creating a file in it (as a store does)."""
    times = []
    with tempfile.TemporaryDirectory(prefix="vs-machine-") as d:
        for i in range(files):
            Path(d, f"f{i}").write_bytes(b"x")
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            t = time.perf_counter()
            os.fsync(fd)
            times.append((time.perf_counter() - t) * 1e3)
            os.close(fd)
    return round(statistics.median(times), 2)


def _pingpong_binary() -> Path | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    digest = hashlib.sha256(PINGPONG_SRC.read_bytes()).hexdigest()[:16]
    out = CACHE / f"pingpong-{digest}"
    if not out.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + f".{os.getpid()}")
        subprocess.run([cc, "-O2", "-o", str(tmp), str(PINGPONG_SRC)], check=True,
                       timeout=TIMEOUT_S, capture_output=True)
        tmp.rename(out)
    return out


def _json_of(cmd: list[str]) -> dict[str, Any]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
                          stdin=subprocess.DEVNULL)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": done.stderr[-500:]}
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def machine_state(java_cmd: list[str] | None = None) -> dict[str, Any]:
    """The figures above; ``java_cmd`` runs BenchClient ``spin`` (skipped when None)."""
    state: dict[str, Any] = {"loadavg": os.getloadavg(), **steal_idle()}
    state["python_loop_ns_per_iter"] = python_loop_ns()
    if java_cmd is not None:
        state.update(_json_of(java_cmd))
        state.pop("sink", None)
    binary = _pingpong_binary()
    if binary is not None:
        state["loopback"] = _json_of([str(binary), str(ROUND_TRIPS)])
    state["fsync_dir_ms"] = fsync_dir_ms()
    return state
