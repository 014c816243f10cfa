"""A node process raises the collector's young-generation threshold once booted (see
``cluster.node_main.GC_GEN0_THRESHOLD``) and still stops cleanly on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from rmq_cluster.cluster.node_main import GC_GEN0_THRESHOLD

ROOT = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_S = 20.0

SCRIPT = textwrap.dedent(
    """
    import gc, trio
    from rmq_cluster.cluster.node_main import serve_until_signal

    async def start(*, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        await trio.sleep_forever()

    async def main():
        before = gc.get_threshold()
        def boot_line():
            return f"boot success {before} {gc.get_threshold()} {gc.get_freeze_count() > 0}"

        await serve_until_signal(start, boot_line, node="test", role="TEST")

    trio.run(main)
    """
)


def test_node_process_raises_gc_threshold_after_boot() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], cwd=str(ROOT), stdout=subprocess.PIPE, text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        before = "(700, 10, 10)"
        assert line.strip() == f"boot success {before} ({GC_GEN0_THRESHOLD}, 10, 10) True"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
