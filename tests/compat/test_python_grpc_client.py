"""Apache's RocketMQ 5 Python SDK (``rocketmq-python-client``, unmodified, pinned from PyPI)
against ``rmq-cluster up single`` with ``mqproxy`` in front of it (``up --proxy``), over gRPC:
the producer starts (QueryRoute, Telemetry settings, Heartbeat) and sends normal messages, FIFO
messages of two message groups and a timer message with a delivery timestamp. What the broker
stored is then read back over remoting by our client: every message with the SDK's message id,
tag, keys and properties; each message group on one queue, in send order; the timer message not
before its time. Then the SDK's SimpleConsumer receives the normal messages (ReceiveMessage on
the broker's POP), changes one's invisible duration and acks each.

The SDK is installed once into ``~/.cache/rmq-cluster-compat/pyclient-<version>`` (a venv of
its own: its grpcio/protobuf never meet ours); the probe (``pyclient/probe.py``) runs there."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from rmq_cluster.client import PullConsumer
from rmq_cluster.client.model import PullStatus, ReceivedMessage
from rmq_cluster.deploy.proxy_up import PID_FILE, start_proxy
from rmq_cluster.deploy.testing import _in_thread, create_topics, pid_running, rmq_cluster

from .conftest import COMPAT_CACHE

pytestmark = pytest.mark.slow

#: Apache's Python SDK for RocketMQ 5 (gRPC), from PyPI
PYTHON_CLIENT = "5.1.2"
PROBE = Path(__file__).parent / "pyclient" / "probe.py"
INSTALL_TIMEOUT_S = 600
PROBE_TIMEOUT_S = 90
#: how long the timer message may take past its delivery time to be readable
TIMER_WAIT_S = 30.0


@pytest.fixture(scope="session")
def python_client() -> Path:
    """The Python of a venv holding the pinned SDK (built once, reused while it imports)."""
    venv = COMPAT_CACHE / f"pyclient-{PYTHON_CLIENT}"
    python = venv / "bin" / "python"
    marker = venv / "installed"
    if marker.is_file():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True,
                   timeout=INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"rocketmq-python-client=={PYTHON_CLIENT}"],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        pytest.fail(f"installing rocketmq-python-client {PYTHON_CLIENT} failed:\n"
                    f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}", pytrace=False)
    marker.write_text(PYTHON_CLIENT)
    return python


def _run_probe(python: Path, endpoint: str, home: Path, *args: str) -> list[dict[str, Any]]:
    home.mkdir(exist_ok=True)  # the SDK logs under $HOME/logs
    done = subprocess.run(
        [str(python), str(PROBE), endpoint, *args], capture_output=True, text=True,
        timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL, env={**os.environ, "HOME": str(home)},
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    sdk_log = home / "logs" / "rocketmq_python" / "rocketmq_client.log"
    tail = sdk_log.read_text()[-3000:] if sdk_log.exists() else ""
    assert done.returncode == 0 and events[-1:] == [{"event": "done"}], (
        f"probe failed (exit {done.returncode}):\n{done.stderr[-3000:]}\nSDK log:\n{tail}"
    )
    return events


def _read_topic(namesrv: str, topic: str, want: int) -> list[ReceivedMessage]:
    """Every message stored in ``topic`` once there are ``want`` (deadline TIMER_WAIT_S)."""

    async def go() -> list[ReceivedMessage]:
        async with PullConsumer("grpc_compat_reader", namesrv_addr=namesrv) as consumer:
            queues = await consumer.fetch_queues(topic)
            got: list[ReceivedMessage] = []
            offsets = dict.fromkeys(queues, 0)
            with trio.fail_after(TIMER_WAIT_S):
                while len(got) < want:
                    for mq in queues:
                        res = await consumer.pull(mq, offsets[mq], suspend_s=0.5)
                        if res.status == PullStatus.FOUND:
                            got += res.messages
                            offsets[mq] = res.next_begin_offset
            return got

    return _in_thread(go, timeout=TIMER_WAIT_S + 10)


def _stop_proxy(cluster_dir: Path) -> None:
    pid_file = cluster_dir / PID_FILE
    if pid_file.exists():
        pid = int(pid_file.read_text())
        if pid_running(pid):
            os.kill(pid, signal.SIGKILL)


def test_python_sdk_produces_and_a_simple_consumer_receives_and_acks_through_the_proxy(
    tmp_path: Path, python_client: Path
) -> None:
    cluster_dir = tmp_path / "cluster"
    with rmq_cluster("single", directory=cluster_dir) as cluster:
        try:
            topics = {kind: f"grpc_{kind}_{os.getpid()}" for kind in ("normal", "fifo", "delay")}
            create_topics(cluster.namesrv_addr, topics.values())
            out = tmp_path / "up-proxy.json"
            args = argparse.Namespace(dir=str(cluster_dir), name=None, proxy=0, json=True)
            with open(out, "w") as f:  # the code `up --proxy` runs; its line on stdout
                saved, sys.stdout = sys.stdout, f
                try:
                    assert start_proxy(args) == 0
                finally:
                    sys.stdout = saved
            endpoint = json.loads(out.read_text())["proxy"]
            events = _run_probe(python_client, endpoint, tmp_path / "home", "produce",
                                topics["normal"], topics["fifo"], topics["delay"])
            _check_stored(cluster.namesrv_addr, topics, events)
            group = f"grpc_simple_{os.getpid()}"
            consumed = _run_probe(python_client, endpoint, tmp_path / "home", "consume",
                                  topics["normal"], group, "3", "40")
            acked = {e["message_id"]: e for e in consumed if e["event"] == "acked"}
            assert set(acked) == {sent_id for (kind, _), sent_id in _ids(events).items()
                                  if kind == "normal"}, consumed
            assert sorted(e["body"] for e in acked.values()) == [f"normal {i}" for i in range(3)]
            assert all(e["tag"] == "N" for e in acked.values())
            assert [e["event"] for e in consumed].count("changed") == 1
        finally:
            _stop_proxy(cluster_dir)


def _ids(events: list[dict[str, Any]]) -> dict[tuple[str, int], str]:
    return {(e["kind"], e["idx"]): e["message_id"] for e in events if e["event"] == "sent"}


def _check_stored(namesrv: str, topics: dict[str, str], events: list[dict[str, Any]]) -> None:
    sent = {(e["kind"], e["idx"]): e for e in events if e["event"] == "sent"}
    assert len(sent) == 8, events
    normal = {m.msg_id: m for m in _read_topic(namesrv, topics["normal"], 3)}
    for i in range(3):
        m = normal[sent["normal", i]["message_id"]]
        assert (m.body, m.tags, m.keys, m.properties.get("idx")) == (
            f"normal {i}".encode(), "N", f"k{i}", str(i))
    fifo = sorted(_read_topic(namesrv, topics["fifo"], 4), key=lambda m: m.queue_offset)
    by_group: dict[str, list[ReceivedMessage]] = {}
    for m in fifo:
        by_group.setdefault(m.properties["__SHARDINGKEY"], []).append(m)
    for group, msgs in by_group.items():
        assert len({m.queue_id for m in msgs}) == 1, (group, msgs)
        ids = [m.msg_id for m in msgs]
        assert ids == [sent["fifo", i]["message_id"] for i in range(4)
                       if sent["fifo", i]["group"] == group]
    [timer] = _read_topic(namesrv, topics["delay"], 1)
    due_ms = sent["delay", 0]["deliver_ms"]
    assert timer.msg_id == sent["delay", 0]["message_id"] and timer.body == b"delayed"
    assert timer.store_timestamp >= due_ms - 50, (timer.store_timestamp, due_ms)
    assert time.time() * 1000 >= due_ms
