"""Apache's RocketMQ 5 Python SDK (``rocketmq-python-client``, unmodified) through ``mqproxy``
on the replicated profiles of ``rmq-cluster up``: ``2m-2s-sync``, ``2m-2s-controller`` and
``dledger``, one cluster per profile, the proxy started by the code ``up --proxy`` runs (TLS
with the cluster's certificate).

* On each profile the SDK's producer sends normal, FIFO (two message groups) and delay messages,
  stored as sent (read back over remoting), and a SimpleConsumer receives and acks the normal
  ones.
* On ``2m-2s-controller`` and ``dledger`` a producer streams numbered messages while a
  SimpleConsumer receives and acks them, and a master (the controller's elected master of
  broker-a, the DLedger leader) is ``kill -9``ed: once a new master is elected, messages are
  stored on that group again through the same proxy process (no restart), and every message
  whose send was acknowledged is received (at least once). The gaps (longest time without an
  acknowledged send, without a received message) are printed."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from rmq_cluster.client import Admin
from rmq_cluster.client.errors import MQClientError
from rmq_cluster.deploy.proxy_up import LOG_FILE, PID_FILE
from rmq_cluster.deploy.testing import (
    RunningCluster,
    _in_thread,
    create_topics,
    pid_running,
    rmq_cluster,
)
from rmq_cluster.proxy.tls import cert_files

from .grpc_testlib import check_stored, python_sdk, read_topic, running_proxy
from .test_python_grpc_client import PROBE, SDK_USER, Proxied, _run_probe, _sdk_env

pytestmark = pytest.mark.slow

#: acknowledged sends before the kill, and after the group has a new master
BEFORE_KILL = 20
AFTER_FAILOVER = 40
#: a new master elected and in the NameServer's route; each wait on the stream; its drain
FAILOVER_WAIT_S = 40.0
STREAM_WAIT_S = 120.0
DRAIN_S = 60
ROUTE_POLL_S = 0.1
MASTER_ID = 0


@pytest.fixture(scope="session")
def python_client() -> Path:
    return python_sdk()


@attrs.frozen
class OnProfile:
    cluster: RunningCluster
    proxied: Proxied


@pytest.fixture(scope="module")
def on_profile(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[OnProfile]:
    profile = str(request.param)
    root = tmp_path_factory.mktemp(f"grpc-{profile}")
    with rmq_cluster(profile, directory=root / "cluster") as cluster, \
            running_proxy(cluster.dir, root) as endpoint:
        yield OnProfile(cluster, Proxied(cluster.namesrv_addr, cluster.dir, endpoint,
                                         root / "home", cert_files(cluster.dir).cert))


def _topics(on: OnProfile, *kinds: str) -> dict[str, str]:
    topics = {kind: f"grpc_{kind}_{os.getpid()}" for kind in kinds}
    create_topics(on.cluster.namesrv_addr, topics.values(), queues=4)
    return topics


@pytest.mark.parametrize("on_profile", ["2m-2s-sync", "2m-2s-controller", "dledger"],
                         indirect=True)
def test_python_sdk_sends_and_receives_through_the_proxy(on_profile: OnProfile,
                                                         python_client: Path) -> None:
    proxied = on_profile.proxied
    topics = _topics(on_profile, "normal", "fifo", "delay")
    events = _run_probe(proxied, python_client, "produce",
                        topics["normal"], topics["fifo"], topics["delay"])
    check_stored(proxied.namesrv_addr, topics, events)
    group = f"grpc_simple_{os.getpid()}"
    consumed = _run_probe(proxied, python_client, "consume", topics["normal"], group, "3", "40")
    acked = {e["body"] for e in consumed if e["event"] == "acked"}
    assert acked == {f"normal {i}" for i in range(3)}, consumed


class Probe:
    """The SDK probe's ``stream`` scenario in a process of its own; a thread collects its
    events as they come."""

    def __init__(self, python: Path, proxied: Proxied, *args: str) -> None:
        proxied.home.mkdir(exist_ok=True)
        self.home = proxied.home
        self.proxy_log = proxied.dir / LOG_FILE
        self.events: list[dict[str, Any]] = []
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr = proxied.home / "stream.stderr"
        with self.stderr.open("w") as err:
            self.proc = subprocess.Popen(
                [str(python), str(PROBE), proxied.endpoint, "stream", *args],
                stdout=subprocess.PIPE, stderr=err, text=True, stdin=subprocess.DEVNULL,
                env={**os.environ, "HOME": str(proxied.home),
                     **_sdk_env(proxied.cert, SDK_USER)},
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._lines.put(json.loads(line))
        self._lines.put(None)

    def wait_for(self, what: str, cond: Callable[[list[dict[str, Any]]], bool],
                 deadline: float) -> None:
        while not cond(self.events):
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {what}: {self.events[-3:]}\n{self.logs()}"
            try:
                event = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            assert event is not None, f"probe exited before {what}: {self.tail()}"
            self.events.append(event)

    def tail(self) -> str:
        return self.stderr.read_text()[-3000:] if self.stderr.exists() else ""

    def logs(self) -> str:
        """The ends of the probe's stderr, the SDK's log and the proxy's log."""
        out = [self.tail()]
        for path in (self.home / "logs" / "rocketmq_python" / "rocketmq_client.log",
                     self.proxy_log):
            if path.exists():
                out.append(f"--- {path.name}:\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(out)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _master_of(cluster: RunningCluster, group: str) -> tuple[str, str]:
    """The node serving as ``group``'s master, and its address (from ``status``)."""
    [(name, addr)] = [(n["name"], n["addr"]) for n in cluster.status()["nodes"]
                      if n.get("kind") == "broker" and n.get("group") == group
                      and n.get("alive") and str(n.get("role")).endswith("MASTER")]
    return str(name), str(addr)


def _new_master(namesrv: str, topic: str, group: str, old_addr: str) -> str:
    """The address the NameServer routes ``group``'s master to once it is not ``old_addr``."""
    async def go() -> str:
        async with Admin(namesrv_addr=namesrv) as admin:
            with trio.fail_after(FAILOVER_WAIT_S):
                while True:
                    with contextlib.suppress(MQClientError):  # no route while none is master
                        route = await admin.topic_route(topic)
                        for bd in route.broker_datas:
                            addr = bd.broker_addrs.get(MASTER_ID)
                            if bd.broker_name == group and addr and addr != old_addr:
                                return str(addr)
                    await trio.sleep(ROUTE_POLL_S)  # the election's end: polled, with a deadline

    return _in_thread(go, FAILOVER_WAIT_S + 10)


def _sends(events: list[dict[str, Any]], since: float = 0.0) -> int:
    return sum(1 for e in events if e["event"] == "sent" and e["t"] >= since)


def _longest_gap(times: list[float], start: float) -> float:
    points = [start, *sorted(t for t in times if t >= start)]
    return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


@pytest.mark.parametrize("on_profile", ["2m-2s-controller", "dledger"], indirect=True)
def test_a_master_killed_during_consumption_loses_no_acked_message(
    on_profile: OnProfile, python_client: Path, tmp_path: Path
) -> None:
    cluster, proxied = on_profile.cluster, on_profile.proxied
    topic = _topics(on_profile, "failover")["failover"]
    proxy_pid = int((cluster.dir / PID_FILE).read_text())
    group = "broker-a"
    victim, old_addr = _master_of(cluster, group)  # status is slow: asked once, beforehand
    stop_file = tmp_path / "stop"
    probe = Probe(python_client, proxied, topic, f"grpc_fo_{os.getpid()}", str(stop_file),
                  str(DRAIN_S))
    try:
        probe.wait_for("sends before the kill", lambda ev: _sends(ev) >= BEFORE_KILL,
                       time.monotonic() + STREAM_WAIT_S)
        done = cluster.cli("kill", victim, "--wait")
        assert done.returncode == 0, done.stderr
        killed = time.time()
        new = _new_master(cluster.namesrv_addr, topic, group, old_addr)
        new_at = time.time()
        probe.wait_for("sends after the failover",
                       lambda ev: _sends(ev, new_at) >= AFTER_FAILOVER,
                       time.monotonic() + STREAM_WAIT_S)
        stop_file.touch()
        probe.wait_for("the drain", lambda ev: ev[-1:] == [{"event": "done"}],
                       time.monotonic() + DRAIN_S + 30)
        assert probe.proc.wait(30) == 0, probe.tail()
    finally:
        stop_file.touch()
        probe.stop()
    events = probe.events
    sent = {e["body"] for e in events if e["event"] == "sent"}
    received = {e["body"] for e in events if e["event"] == "received"}
    assert sent and not sent - received, sorted(sent - received)[:20]
    # the same proxy process routed to the new master: messages stored on the group after it
    stored = read_topic(proxied.namesrv_addr, topic, len(sent))
    after = [m.store_timestamp / 1000 for m in stored if m.queue.broker_name == group
             and m.store_timestamp > killed * 1000
             and f"{m.store_host[0]}:{m.store_host[1]}" != old_addr]
    assert after, "no message stored on the new master"
    assert pid_running(proxy_pid)
    figures = {
        "profile": cluster.profile, "killed": victim, "new_master": new,
        # the NameServer routed the group to its new master
        "routed_new_master_s": round(new_at - killed, 2),
        # the first message the proxy stored on the group's new master
        "group_write_gap_s": round(min(after) - killed, 2),
        "longest_send_gap_s": round(_longest_gap(
            [e["t"] for e in events if e["event"] == "sent"], killed), 2),
        "longest_receive_gap_s": round(_longest_gap(
            [e["t"] for e in events if e["event"] == "received"], killed), 2),
        "send_failures": sum(1 for e in events if e["event"] == "send_failed"),
        "ack_failures": sum(1 for e in events if e["event"] == "ack_failed"),
        "redelivered": sum(1 for e in events if e["event"] == "received" and e["attempt"] > 1),
        "acked_sends": len(sent),
    }
    print("failover figures:", json.dumps(figures))
