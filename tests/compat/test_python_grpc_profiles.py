"""Apache's RocketMQ 5 Python SDK (``rocketmq-python-client``, unmodified) through ``mqproxy``
on the replicated profiles of ``rmq-cluster up``: ``2m-2s-sync``, ``2m-2s-controller`` and
``dledger``, one cluster per profile (transaction checks within a second), the proxy started by
the code ``up --proxy`` runs (TLS with the cluster's certificate), and one probe process per
profile running the scenarios of test_python_grpc_client.py at once (``probe.py many``: a
thread each):

* the producer sends normal, FIFO (two message groups) and delay messages, stored as sent (read
  back over remoting), then a SimpleConsumer receives them, changes one's invisible duration
  and acks each; transactions: commit, rollback, and two half messages left to the broker's
  check, answered by the SDK's TransactionChecker over Telemetry; a SimpleConsumer acks one
  message, changes one's invisible duration to 1 s and leaves one to its 3 s: both come back
  (delivery attempt 2); three PushConsumers on a topic of one queue per master consume every
  message; three PushConsumers of an orderly group on a topic of one queue per master consume
  eight message groups of twelve messages, each group's in send order, one after the other
  (the probe's events are kept in its home, ``many.jsonl``, for a look after a failure);
* then a producer streams numbered messages while a SimpleConsumer receives and acks them, and
  broker-a's master (the controller's elected master, the DLedger leader) is ``kill -9``ed.
  Once a new master is routed (the controller's or DLedger's election; on ``2m-2s-sync``, which
  elects none, the killed master restarted), messages are stored on that group again through
  the same proxy process (no restart), and every message whose send was acknowledged is
  received (at least once). The gaps (longest time without an acknowledged send, without a
  received message) are printed."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from rmq_cluster.deploy.proxy_up import LOG_FILE, PID_FILE
from rmq_cluster.deploy.testing import RunningCluster, create_topics, pid_running, rmq_cluster
from rmq_cluster.proxy.tls import cert_files

from .failover_testlib import (
    EventStream,
    group_written_again,
    kill_during_stream,
    log_tails,
    stream_figures,
)
from .grpc_testlib import (
    check_push,
    check_simple_consumer,
    check_stored,
    fast_checks_profile,
    orderly_group,
    python_sdk,
    running_proxy,
)
from .pysdk_testlib import (
    FIFO_PER_GROUP,
    PROBE,
    SDK_USER,
    Lane,
    Proxied,
    Scenarios,
    check_consumed,
    check_fifo,
    check_sdk_transactions,
    fifo_args,
    run_scenarios,
    sdk_env,
    sdk_log,
)

pytestmark = pytest.mark.slow

PROFILES = ("2m-2s-sync", "2m-2s-controller", "dledger")
#: the profile that elects no new master for a group whose master died: the killed one is
#: restarted (``rmq-cluster restart``), as test_java_grpc_profiles.py does
RESTART_PROFILES = ("2m-2s-sync",)
#: topics of four queues on each master, and of one (the consumers outnumber the queues)
WIDE, NARROW = ("normal", "fifo", "delay", "tx", "simple"), ("push", "push_fifo")
#: a quarter as many messages per message group as on ``up single`` (as on ``2m-2s-async`` in
#: test_python_grpc_client.py: the profile's processes cost the time)
PER_GROUP = FIFO_PER_GROUP // 4
#: the probe running every scenario at once (each has a deadline of its own, 60 s at most)
SCENARIOS_TIMEOUT_S = 150
#: how long the probe goes on receiving once the stream stopped
DRAIN_S = 60


@pytest.fixture(scope="session")
def python_client() -> Path:
    return python_sdk()


@attrs.frozen
class OnProfile:
    #: the profile of ``rmq-cluster up`` (the cluster's own is its variant with fast checks)
    profile: str
    cluster: RunningCluster
    proxied: Proxied
    topics: dict[str, str]
    #: the scenarios' events, of the one probe that ran them all
    ran: Scenarios


def _name(kind: str) -> str:
    return f"grpc_{kind}_{os.getpid()}"


def _lanes(topics: dict[str, str]) -> list[Lane]:
    """The scenarios, each on topics and groups of its own: all at once, but ``consume``
    after ``produce`` (it receives what that sent)."""
    return [
        [("produce", topics["normal"], topics["fifo"], topics["delay"]),
         ("consume", topics["normal"], _name("simple"), "3", "40")],
        [("transaction", topics["tx"], "40")],
        [("simple", topics["simple"], _name("redeliver"), "45")],
        [("push", topics["push"], _name("push"), "3", "12", "40")],
        [fifo_args(topics["push_fifo"], _name("push_fifo"), PER_GROUP)],
    ]


@pytest.fixture(scope="module")
def on_profile(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
               python_client: Path) -> Iterator[OnProfile]:
    """The profile's cluster and proxy, and every scenario but the master kill run against
    them by one probe."""
    profile = str(request.param)
    root = tmp_path_factory.mktemp(f"grpc-{profile}")
    t0 = time.monotonic()
    with rmq_cluster(str(fast_checks_profile(root, profile)), directory=root / "cluster"
                     ) as cluster, running_proxy(cluster.dir, root) as endpoint:
        t_up = time.monotonic()
        ns = cluster.namesrv_addr
        topics = {kind: _name(kind) for kind in (*WIDE, *NARROW)}
        create_topics(ns, [topics[k] for k in WIDE], queues=4)
        create_topics(ns, [topics[k] for k in NARROW], queues=1)
        orderly_group(ns, _name("push_fifo"))
        proxied = Proxied(ns, cluster.dir, endpoint, root / "home", cert_files(cluster.dir).cert)
        t_probe = time.monotonic()
        ran = run_scenarios(proxied, python_client, _lanes(topics), SCENARIOS_TIMEOUT_S)
        print(f"{profile}: up + proxy {t_up - t0:.1f} s, scenarios "
              f"{time.monotonic() - t_probe:.1f} s")
        yield OnProfile(profile, cluster, proxied, topics, ran)


@pytest.mark.parametrize("on_profile", PROFILES, indirect=True)
def test_python_sdk_producer_normal_fifo_and_delay_and_a_simple_consumer(on_profile: OnProfile
                                                                         ) -> None:
    produced = on_profile.ran.of("produce")
    kinds = ("normal", "fifo", "delay")
    check_stored(on_profile.proxied.namesrv_addr, {k: on_profile.topics[k] for k in kinds},
                 produced)
    check_consumed(produced, on_profile.ran.of("consume"))


@pytest.mark.parametrize("on_profile", PROFILES, indirect=True)
def test_python_sdk_transactions_commit_rollback_and_checks_over_telemetry(on_profile: OnProfile
                                                                           ) -> None:
    check_sdk_transactions(on_profile.ran.of("transaction"), on_profile.topics["tx"])


@pytest.mark.parametrize("on_profile", PROFILES, indirect=True)
def test_python_sdk_simple_consumer_changes_invisible_duration_and_gets_redeliveries(
    on_profile: OnProfile
) -> None:
    check_simple_consumer(on_profile.ran.of("simple"))


@pytest.mark.parametrize("on_profile", PROFILES, indirect=True)
def test_python_sdk_push_consumers_outnumbering_the_queues_consume_everything(
    on_profile: OnProfile
) -> None:
    check_push(on_profile.ran.of("push"))


@pytest.mark.parametrize("on_profile", PROFILES, indirect=True)
def test_python_sdk_fifo_push_consumers_outnumbering_the_queues_keep_each_groups_order(
    on_profile: OnProfile
) -> None:
    check_fifo(on_profile.ran.of("push_fifo"), PER_GROUP)


class Probe(EventStream):
    """The SDK probe's ``stream`` scenario in a process of its own."""

    def __init__(self, python: Path, proxied: Proxied, *args: str) -> None:
        proxied.home.mkdir(exist_ok=True)
        self.home = proxied.home
        self.proxy_log = proxied.dir / LOG_FILE
        super().__init__(
            [str(python), str(PROBE), proxied.endpoint, "stream", *args],
            proxied.home / "stream.stderr",
            env={**os.environ, "HOME": str(proxied.home), **sdk_env(proxied.cert, SDK_USER)},
        )

    def logs(self) -> str:
        """The ends of the probe's stderr, the SDK's log and the proxy's log."""
        return "\n".join([self.tail(), log_tails(sdk_log(self.home), self.proxy_log)])


@pytest.mark.parametrize("on_profile", PROFILES, indirect=True)
def test_a_master_killed_during_consumption_loses_no_acked_message(
    on_profile: OnProfile, python_client: Path, tmp_path: Path
) -> None:
    cluster, proxied = on_profile.cluster, on_profile.proxied
    topic = _name("failover")
    create_topics(cluster.namesrv_addr, [topic], queues=4)
    proxy_pid = int((cluster.dir / PID_FILE).read_text())
    group = "broker-a"
    stop_file = tmp_path / "stop"
    probe = Probe(python_client, proxied, topic, f"grpc_fo_{os.getpid()}", str(stop_file),
                  str(DRAIN_S))
    try:
        fo = kill_during_stream(cluster, probe, topic=topic, group=group, stop_file=stop_file,
                                done=lambda ev: ev[-1:] == [{"event": "done"}],
                                restart=on_profile.profile in RESTART_PROFILES)
        assert probe.finish(30) == 0, probe.tail()
    finally:
        probe.stop()
    events = probe.events
    sent = {e["body"] for e in events if e["event"] == "sent"}
    received = {e["body"] for e in events if e["event"] == "received"}
    assert sent and not sent - received, sorted(sent - received)[:20]
    # the same proxy process routed to the new master: messages stored on the group after it
    # (a restarted master: see group_written_again)
    written = group_written_again(proxied.namesrv_addr, topic, group, fo, len(sent))
    assert pid_running(proxy_pid)
    figures = {"profile": on_profile.profile, **stream_figures(events, fo, written)}
    print("failover figures:", json.dumps(figures))
