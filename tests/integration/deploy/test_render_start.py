"""A rendered single-host ``start.sh`` run for real: NameServer, wait, broker; a message is
sent and read back through the cluster it started; stopped by the pids it recorded."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rmq_cluster.client import Message
from rmq_cluster.client.sync import SyncProducer, SyncPullConsumer
from rmq_cluster.deploy import render, supervisor
from rmq_cluster.deploy.testing import become_subreaper, create_topics, pid_running
from rmq_cluster.deploy.topology import build_topology, resolve_profile

START_TIMEOUT_S = 60.0
STOP_WAIT_S = 15.0


def _stop(pids: list[int]) -> None:
    """SIGTERM every pid start.sh recorded, SIGKILL what is left after a deadline."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline and any(pid_running(p) for p in pids):
        time.sleep(0.05)  # polling the pids' exit against the deadline
    for pid in pids:
        if pid_running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_rendered_start_sh_serves_a_message(tmp_path: Path) -> None:
    become_subreaper()  # the nodes start.sh leaves behind are reaped here
    spec = resolve_profile("single")
    base = supervisor.free_base_port(spec)
    topo = render.per_host_plan(build_topology(spec, base_port=base))
    host_dir = tmp_path / "127.0.0.1"
    for rel, text in render.host_files(topo, bind_address="127.0.0.1").items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(render.file_mode(rel))
    pids: list[int] = []
    try:
        done = subprocess.run(
            ["sh", str(host_dir / "start.sh")], capture_output=True, text=True,
            timeout=START_TIMEOUT_S, check=False,
            env={**os.environ, "PYTHON": sys.executable, "NAMESRV_WAIT_S": "30"},
        )
        pids = [int(p.read_text()) for p in sorted((host_dir / "run").glob("*.pid"))]
        assert done.returncode == 0, done.stderr
        assert f"NameServers ready: 127.0.0.1:{base}" in done.stdout
        assert "started namesrv-0 broker-a on 127.0.0.1" in done.stdout
        assert len(pids) == 2
        ns = topo.namesrv_addr
        # the broker was started after the NameServer answered, so it registers at once (not
        # 30 s later): the topic is created on it and routed within the 10 s given here
        create_topics(ns, ["RenderT"], timeout=10.0)
        with SyncProducer("RenderPG", namesrv_addr=ns) as producer:
            sent = producer.send(Message("RenderT", b"rendered hello"))
        with SyncPullConsumer("RenderCG", namesrv_addr=ns) as consumer:
            assert sent.queue in consumer.fetch_queues("RenderT")
            pulled = consumer.pull(sent.queue, sent.queue_offset)
        assert pulled.messages[0].body == b"rendered hello"
    finally:
        _stop(pids)
    assert not any(pid_running(p) for p in pids)
