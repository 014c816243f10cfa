"""Apache's RocketMQ 5 Python SDK (``rocketmq-python-client``, unmodified, pinned from PyPI)
against ``rmq-cluster up single --acl`` with ``mqproxy`` in front of it (``up --proxy``), over
gRPC on TLS (the SDK's ``tls_enable=True``, trusting the cluster's certificate through
``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``) and signed with an account of the cluster's
``plain_acl.yml``: the producer starts (QueryRoute, Telemetry settings, Heartbeat) and sends
normal messages, FIFO messages of two message groups and a timer message with a delivery
timestamp. What the broker stored is then read back over remoting by our client: every message
with the SDK's message id, tag, keys and properties; each message group on one queue, in send
order; the timer message not before its time. Then the SDK's SimpleConsumer receives the
normal messages (ReceiveMessage on the broker's POP), changes one's invisible duration and
acks each.

The SDK is installed once into ``~/.cache/rmq-cluster-compat/pyclient-<version>`` (a venv of
its own: its grpcio/protobuf never meet ours); the probe (``pyclient/probe.py``) runs there.
Then the refusals: a wrong secret, an unknown access key and an account without PUB cannot
send (the SDK reports the proxy's UNAUTHORIZED); and ``rmq-cluster status`` shows the proxy,
on TLS and up."""

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

from rmq_cluster.client import Admin, PullConsumer
from rmq_cluster.client.model import PullStatus, ReceivedMessage
from rmq_cluster.cluster.acl.signing import Credentials
from rmq_cluster.deploy.proxy_up import PID_FILE, start_proxy
from rmq_cluster.deploy.testing import _create_topics, _in_thread, cli, pid_running
from rmq_cluster.proxy.pb import definition_pb2 as pb
from tests.integration.security.acl_cluster_testlib import ADMIN, acl_cluster

from .conftest import COMPAT_CACHE

pytestmark = pytest.mark.slow

#: Apache's Python SDK for RocketMQ 5 (gRPC), from PyPI
PYTHON_CLIENT = "5.1.2"
PROBE = Path(__file__).parent / "pyclient" / "probe.py"
INSTALL_TIMEOUT_S = 600
PROBE_TIMEOUT_S = 90
#: how long the timer message may take past its delivery time to be readable
TIMER_WAIT_S = 30.0
#: the SDK's account (may publish and subscribe), and one that may only subscribe
SDK_USER = Credentials("grpcUser01", "grpcUserSecret01")
SDK_READER = Credentials("grpcReader1", "grpcReaderSecret1")
ACCOUNTS = [
    {"accessKey": SDK_USER.access_key, "secretKey": SDK_USER.secret_key,
     "defaultTopicPerm": "PUB|SUB", "defaultGroupPerm": "SUB"},
    {"accessKey": SDK_READER.access_key, "secretKey": SDK_READER.secret_key,
     "defaultTopicPerm": "SUB", "defaultGroupPerm": "SUB"},
]


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


def _run_probe(python: Path, endpoint: str, home: Path, *args: str,
               env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    home.mkdir(exist_ok=True)  # the SDK logs under $HOME/logs
    done = subprocess.run(
        [str(python), str(PROBE), endpoint, *args], capture_output=True, text=True,
        timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(home), **(env or {})},
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
        async with PullConsumer("grpc_compat_reader", namesrv_addr=namesrv,
                                access_key=ADMIN.access_key,
                                secret_key=ADMIN.secret_key) as consumer:
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


def _sdk_env(cert: str, who: Credentials) -> dict[str, str]:
    """What a user sets: TLS on, the cluster's certificate trusted, the account's keys."""
    return {"PROBE_TLS": "1", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": cert,
            "PROBE_ACCESS_KEY": who.access_key, "PROBE_SECRET_KEY": who.secret_key}


def _create_topics_signed(namesrv: str, topics: list[str]) -> None:
    async def go() -> None:
        async with Admin(namesrv_addr=namesrv, access_key=ADMIN.access_key,
                         secret_key=ADMIN.secret_key) as admin:
            await _create_topics(admin, topics, queues=4, order=False)

    _in_thread(go, timeout=60)


def _up_proxy(cluster_dir: Path, out: Path) -> dict[str, Any]:
    """What ``up --proxy`` runs, its JSON line read back."""
    args = argparse.Namespace(dir=str(cluster_dir), name=None, proxy=0, json=True,
                              proxy_plaintext=False)
    with open(out, "w") as f:
        saved, sys.stdout = sys.stdout, f
        try:
            assert start_proxy(args) == 0
        finally:
            sys.stdout = saved
    info: dict[str, Any] = json.loads(out.read_text())
    return info


def test_python_sdk_produces_and_a_simple_consumer_receives_and_acks_through_the_proxy(
    tmp_path: Path, python_client: Path
) -> None:
    with acl_cluster(tmp_path, profile={"base": "single"}, accounts=ACCOUNTS) as cluster:
        try:
            topics = {kind: f"grpc_{kind}_{os.getpid()}" for kind in ("normal", "fifo", "delay")}
            _create_topics_signed(cluster.namesrv_addr, list(topics.values()))
            info = _up_proxy(cluster.dir, tmp_path / "up-proxy.json")
            endpoint, cert = info["proxy"], info["cert"]
            assert info["tls"] and info["acl"], info
            assert (Path(cert).with_suffix(".key").stat().st_mode & 0o777) == 0o600
            env = _sdk_env(cert, SDK_USER)
            events = _run_probe(python_client, endpoint, tmp_path / "home", "produce",
                                topics["normal"], topics["fifo"], topics["delay"], env=env)
            _check_stored(cluster.namesrv_addr, topics, events)
            group = f"grpc_simple_{os.getpid()}"
            consumed = _run_probe(python_client, endpoint, tmp_path / "home", "consume",
                                  topics["normal"], group, "3", "40", env=env)
            acked = {e["message_id"]: e for e in consumed if e["event"] == "acked"}
            assert set(acked) == {sent_id for (kind, _), sent_id in _ids(events).items()
                                  if kind == "normal"}, consumed
            assert sorted(e["body"] for e in acked.values()) == [f"normal {i}" for i in range(3)]
            assert all(e["tag"] == "N" for e in acked.values())
            assert [e["event"] for e in consumed].count("changed") == 1
            _check_refusals(python_client, endpoint, cert, topics["normal"], tmp_path / "home")
            _check_status(cluster.dir, endpoint)
        finally:
            _stop_proxy(cluster.dir)


def _check_refusals(python: Path, endpoint: str, cert: str, topic: str, home: Path) -> None:
    """A wrong secret, an unknown key and an account without PUB: the SDK cannot send, and
    what it reports (its exception, or its log when the refusal came at startup: "failed to
    fetch topic route") carries the proxy's Code UNAUTHORIZED (40100)."""
    sdk_log = home / "logs" / "rocketmq_python" / "rocketmq_client.log"
    before = sdk_log.stat().st_size if sdk_log.exists() else 0
    refused = [Credentials(SDK_USER.access_key, "notTheSecret99"),
               Credentials("grpcNobody1", "grpcNobodySecret1"), SDK_READER]
    env = {**_sdk_env(cert, SDK_USER),
           "PROBE_ACCOUNTS": json.dumps([[c.access_key, c.secret_key] for c in refused])}
    events = _run_probe(python, endpoint, home, "try_send", topic, env=env)
    outcomes = [e for e in events if e["event"] in ("sent", "refused")]
    assert [e["event"] for e in outcomes] == ["refused"] * 3, events
    said = sdk_log.read_bytes()[before:].decode(errors="replace")
    said += "".join(e["error"] for e in outcomes)
    for remark in (f"Check signature failed for accessKey={SDK_USER.access_key}",
                   "No acl config for grpcNobody1", f"No default permission for topic:{topic}"):
        assert f"{pb.UNAUTHORIZED}, {remark}" in said, (remark, said[-3000:])


def _check_status(cluster_dir: Path, endpoint: str) -> None:
    done = cli("status", "--dir", str(cluster_dir), "--json")
    assert done.returncode == 0, done.stderr
    [proxy] = json.loads(done.stdout)["proxies"]
    assert (proxy["address"], proxy["tls"], proxy["state"]) == (endpoint, True, "up"), proxy
    text = cli("status", "--dir", str(cluster_dir))
    assert text.returncode == 0 and endpoint in text.stdout and "TLS" in text.stdout, text


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
