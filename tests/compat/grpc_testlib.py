"""What the gRPC compat tests (Apache's Python and Java 5.x SDKs through ``mqproxy``) share: a
proxy started the way ``up --proxy`` starts it (TLS with the cluster's certificate, unless
``plaintext``) and stopped whatever happens, and reading back over remoting (our client, signed
when the cluster runs ACL) what the SDKs stored."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from rmq_cluster.client import Admin, PullConsumer
from rmq_cluster.client.frames import request
from rmq_cluster.client.model import PullStatus, ReceivedMessage
from rmq_cluster.cluster.acl.signing import Credentials
from rmq_cluster.cluster.remoting.codes import RequestCode
from rmq_cluster.deploy.proxy_up import PID_FILE, start_proxy
from rmq_cluster.deploy.testing import _in_thread, cli, pid_running, wait_routed

from .conftest import COMPAT_CACHE

#: Apache's Python SDK for RocketMQ 5 (gRPC), from PyPI
PYTHON_CLIENT = "5.1.2"
INSTALL_TIMEOUT_S = 600
#: how long a message may take to be readable (a timer message past its delivery time)
READ_WAIT_S = 30.0
#: how long the broker holds a pull of an empty queue while reading back
PULL_HOLD_S = 0.1
#: the cluster name of every profile of ``rmq-cluster up``
CLUSTER = "DefaultCluster"
#: how long a topic made by ``create_fifo_topic`` may take to be routed
ROUTE_WAIT_S = 30.0
#: the proxy's least invisible time for a receive (``minInvisibleTimeMillsForRecv``, 10 s by
#: default), lowered as Apache's own gRPC integration tests lower it: the SDKs' SimpleConsumers
#: here receive with 3 s and 5 s, so that what they leave comes back while the test waits
MIN_INVISIBLE_MS_FOR_RECV = 1_000
#: the invisible time of the PushConsumers' receives (``defaultInvisibleTimeMills``, 60 s by
#: default): 30 s, what the proxy gave them when these tests were tuned. A message a consumer
#: popped from a killed master comes back after it, and the failover tests drain for 60 s.
PUSH_INVISIBLE_MS = 30_000


def python_sdk() -> Path:
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


@contextlib.contextmanager
def running_proxy(cluster_dir: Path, out_dir: Path, *, plaintext: bool = False
                  ) -> Iterator[str]:
    """``mqproxy`` for the cluster in ``cluster_dir``, started by the code ``up --proxy`` runs
    (its invisible times: MIN_INVISIBLE_MS_FOR_RECV, PUSH_INVISIBLE_MS); yields its endpoint
    (host:port); killed afterwards. Its certificate is
    ``rmq_cluster.proxy.tls.cert_files(cluster_dir).cert``."""
    out = out_dir / "up-proxy.json"
    args = argparse.Namespace(dir=str(cluster_dir), name=None, proxy=0, json=True,
                              proxy_plaintext=plaintext,
                              proxy_min_invisible_time_ms_for_recv=MIN_INVISIBLE_MS_FOR_RECV,
                              proxy_default_invisible_time_ms=PUSH_INVISIBLE_MS)
    try:
        with open(out, "w") as f:  # `up --proxy` prints its line on stdout
            saved, sys.stdout = sys.stdout, f
            try:
                assert start_proxy(args) == 0
            finally:
                sys.stdout = saved
        yield str(json.loads(out.read_text())["proxy"])
    finally:
        pid_file = cluster_dir / PID_FILE
        if pid_file.exists():
            pid = int(pid_file.read_text())
            if pid_running(pid):
                os.kill(pid, signal.SIGKILL)


def read_topic(namesrv: str, topic: str, want: int, creds: Credentials | None = None
               ) -> list[ReceivedMessage]:
    """Every message stored in ``topic`` once there are ``want`` (deadline READ_WAIT_S)."""
    keys = (creds.access_key, creds.secret_key) if creds is not None else (None, None)

    async def go() -> list[ReceivedMessage]:
        async with PullConsumer("grpc_compat_reader", namesrv_addr=namesrv,
                                access_key=keys[0], secret_key=keys[1]) as consumer:
            queues = await consumer.fetch_queues(topic)
            got: list[ReceivedMessage] = []
            offsets = dict.fromkeys(queues, 0)
            with trio.fail_after(READ_WAIT_S):
                while len(got) < want:
                    for mq in queues:  # an empty queue holds the pull PULL_HOLD_S at most
                        res = await consumer.pull(mq, offsets[mq], suspend_s=PULL_HOLD_S)
                        if res.status == PullStatus.FOUND:
                            got += res.messages
                            offsets[mq] = res.next_begin_offset
            return got

    return _in_thread(go, timeout=READ_WAIT_S + 10)


def check_stored(namesrv: str, topics: dict[str, str], events: list[dict[str, Any]],
                 creds: Credentials | None = None) -> None:
    """What the SDK's producer sent (its "sent" events: 3 normal, 4 FIFO in two message groups,
    1 timer message) is stored as it was sent: ids, tags, keys, properties; each message group
    on one queue in send order; the timer message not before its time."""
    sent = {(e["kind"], e["idx"]): e for e in events if e["event"] == "sent"}
    assert len(sent) == 8, events
    normal = {m.msg_id: m for m in read_topic(namesrv, topics["normal"], 3, creds)}
    for i in range(3):
        m = normal[sent["normal", i]["message_id"]]
        assert (m.body, m.tags, m.keys, m.properties.get("idx")) == (
            f"normal {i}".encode(), "N", f"k{i}", str(i))
    fifo = sorted(read_topic(namesrv, topics["fifo"], 4, creds), key=lambda m: m.queue_offset)
    by_group: dict[str, list[ReceivedMessage]] = {}
    for m in fifo:
        by_group.setdefault(m.properties["__SHARDINGKEY"], []).append(m)
    for group, msgs in by_group.items():
        assert len({m.queue_id for m in msgs}) == 1, (group, msgs)
        ids = [m.msg_id for m in msgs]
        assert ids == [sent["fifo", i]["message_id"] for i in range(4)
                       if sent["fifo", i]["group"] == group]
    [timer] = read_topic(namesrv, topics["delay"], 1, creds)
    due_ms = sent["delay", 0]["deliver_ms"]
    assert timer.msg_id == sent["delay", 0]["message_id"] and timer.body == b"delayed"
    assert timer.store_timestamp >= due_ms - 50, (timer.store_timestamp, due_ms)
    assert time.time() * 1000 >= due_ms


def check_transactions(events: list[dict[str, Any]], topic: str) -> None:
    """Commit and rollback by the producer, the two others by the broker's check relayed over
    Telemetry (the checker saw each half message as sent), and consumers see the committed
    two only. A half message the producer resolved may be checked too: the broker checks
    every one older than its transactionTimeOut (1 s here) whose resolution it has not seen
    yet, and on a loaded machine the producer's may come later than that (the checker then
    answers as the producer did)."""
    sent = {e["body"]: e["message_id"] for e in events if e["event"] == "sent"}
    checked = {e["body"]: e for e in events if e["event"] == "checked"}
    assert {"check-commit", "check-rollback"} <= set(checked) <= set(sent), events
    for body, e in checked.items():
        assert (e["message_id"], e["topic"]) == (sent[body], topic)
    [visible] = [e["bodies"] for e in events if e["event"] == "visible"]
    assert visible in (["check-commit", "commit"], "check-commit,commit"), events


def _of(events: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == event]


def check_simple_consumer(events: list[dict[str, Any]]) -> None:
    """The ``simple`` scenario (both SDKs): "keep" acked at once, "change" back 1 s after its
    invisible duration was changed, "expire" back after its 3 s: both with delivery attempt 2,
    the same message id."""
    received = [(e["body"], e["attempt"]) for e in _of(events, "received")]
    assert sorted(received) == [("change", 1), ("change", 2), ("expire", 1), ("expire", 2),
                                ("keep", 1)], events
    assert sorted((e["body"], e["attempt"]) for e in _of(events, "acked")) == [
        ("change", 2), ("expire", 2), ("keep", 1)]
    assert [e["body"] for e in _of(events, "changed")] == ["change"]
    ids: dict[str, str] = {}
    for e in _of(events, "received"):  # a redelivery is the same message
        assert ids.setdefault(e["body"], e["message_id"]) == e["message_id"]


def check_push(events: list[dict[str, Any]], count: int = 12) -> None:
    """The ``push`` scenario (both SDKs): PushConsumers outnumbering the queues consumed each
    of the ``count`` messages, each at its first delivery."""
    consumed = _of(events, "consumed")
    assert {e["body"] for e in consumed} == {f"push {i}" for i in range(count)}, events
    assert all(e["attempt"] == 1 for e in consumed)


def orderly_group(namesrv: str, group: str, creds: Credentials | None = None) -> None:
    """``group`` created on every master as consuming in order, as a user makes it:
    ``rmq-cluster updateSubGroup -o true`` (5.x ``mqadmin updateSubGroup -o true``)."""
    keys = ["--access-key", creds.access_key, "--secret-key", creds.secret_key] if creds else []
    done = cli("updateSubGroup", "-n", namesrv, "-c", CLUSTER, "-g", group, "-o", "true", *keys)
    assert done.returncode == 0, done.stderr


#: the broker's transaction check within a second, as tests/compat/java/compat-single.toml
FAST_CHECKS = {"transactionTimeOut": 1000, "transactionCheckInterval": 1000}


#: controller mode's replicas beat every 200 ms against a 1 s timeout (a 800 ms master lease):
#: on CI's loaded machine a late renewal fenced the master, and the SDK gave up on the sends
#: it refused (NO_PERMISSION). These tests are about the SDKs across a failover, not its speed:
#: a 3 s timeout (a 2.8 s lease) as controller_testlib's steady tests have
PATIENT_CONTROLLER = {"controllerHeartBeatTimeoutMills": 3000}


def fast_checks_profile(root: Path, base: str) -> Path:
    """A profile file in ``root``: the profile ``base`` with the broker's transaction checks
    within a second (``FAST_CHECKS``), and in controller mode ``PATIENT_CONTROLLER``, for
    ``rmq_cluster(str(path))``."""
    path = root / f"grpc-{base}.toml"
    extra = PATIENT_CONTROLLER if base == "2m-2s-controller" else {}
    props = "\n".join(f"{k} = {v}" for k, v in {**FAST_CHECKS, **extra}.items())
    path.write_text(f'base = "{base}"\nname = "grpc-{base}"\n\n[broker_properties]\n{props}\n')
    return path


def create_fifo_topic(namesrv: str, topic: str, queues: int) -> None:
    """``topic`` of message type FIFO on every master (5.x ``mqadmin updateTopic -a
    +message.type=FIFO``: the topic attribute in UPDATE_AND_CREATE_TOPIC), once routed on each."""

    async def go() -> None:
        async with Admin(namesrv_addr=namesrv) as admin:
            masters = await admin.master_addrs()
            ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
                   "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
                   "topicSysFlag": "0", "order": "false", "attributes": "+message.type=FIFO"}
            for addr in masters:
                await admin.instance.invoke_ok(
                    addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))
            with trio.fail_after(ROUTE_WAIT_S):
                await wait_routed(admin, topic, len(masters))

    _in_thread(go, timeout=ROUTE_WAIT_S + 10)
