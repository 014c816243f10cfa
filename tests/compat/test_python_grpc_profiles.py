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

import json
import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from rmq_cluster.deploy.proxy_up import LOG_FILE, PID_FILE
from rmq_cluster.deploy.testing import RunningCluster, create_topics, pid_running, rmq_cluster
from rmq_cluster.proxy.tls import cert_files

from .failover_testlib import (
    EventStream,
    first_write_on_new_master,
    kill_during_stream,
    log_tails,
    stream_figures,
)
from .grpc_testlib import check_stored, python_sdk, running_proxy
from .test_python_grpc_client import PROBE, SDK_USER, Proxied, _run_probe, _sdk_env

pytestmark = pytest.mark.slow

#: how long the probe goes on receiving once the stream stopped
DRAIN_S = 60


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


class Probe(EventStream):
    """The SDK probe's ``stream`` scenario in a process of its own."""

    def __init__(self, python: Path, proxied: Proxied, *args: str) -> None:
        proxied.home.mkdir(exist_ok=True)
        self.home = proxied.home
        self.proxy_log = proxied.dir / LOG_FILE
        super().__init__(
            [str(python), str(PROBE), proxied.endpoint, "stream", *args],
            proxied.home / "stream.stderr",
            env={**os.environ, "HOME": str(proxied.home), **_sdk_env(proxied.cert, SDK_USER)},
        )

    def logs(self) -> str:
        """The ends of the probe's stderr, the SDK's log and the proxy's log."""
        sdk_log = self.home / "logs" / "rocketmq_python" / "rocketmq_client.log"
        return "\n".join([self.tail(), log_tails(sdk_log, self.proxy_log)])


@pytest.mark.parametrize("on_profile", ["2m-2s-controller", "dledger"], indirect=True)
def test_a_master_killed_during_consumption_loses_no_acked_message(
    on_profile: OnProfile, python_client: Path, tmp_path: Path
) -> None:
    cluster, proxied = on_profile.cluster, on_profile.proxied
    topic = _topics(on_profile, "failover")["failover"]
    proxy_pid = int((cluster.dir / PID_FILE).read_text())
    group = "broker-a"
    stop_file = tmp_path / "stop"
    probe = Probe(python_client, proxied, topic, f"grpc_fo_{os.getpid()}", str(stop_file),
                  str(DRAIN_S))
    try:
        fo = kill_during_stream(cluster, probe, topic=topic, group=group, stop_file=stop_file,
                                done=lambda ev: ev[-1:] == [{"event": "done"}])
        assert probe.finish(30) == 0, probe.tail()
    finally:
        probe.stop()
    events = probe.events
    sent = {e["body"] for e in events if e["event"] == "sent"}
    received = {e["body"] for e in events if e["event"] == "received"}
    assert sent and not sent - received, sorted(sent - received)[:20]
    # the same proxy process routed to the new master: messages stored on the group after it
    written = first_write_on_new_master(proxied.namesrv_addr, topic, group, fo, len(sent))
    assert pid_running(proxy_pid)
    figures = {"profile": cluster.profile, **stream_figures(events, fo, written)}
    print("failover figures:", json.dumps(figures))
