"""Apache's RocketMQ 5 Java SDK (``rocketmq-client-java``, unmodified, pinned from Maven Central)
through ``mqproxy`` on the replicated profiles of ``rmq-cluster up``: ``2m-2s-sync``,
``2m-2s-controller`` and ``dledger``, one cluster per profile (transaction checks within a
second), the proxy started by the code ``up --proxy`` runs (TLS), and one JVM per profile
running the scenarios of test_java_grpc_client.py (tests/compat/java5grpc/.../GrpcScenarios.java)
one after the other:

* Producer normal / FIFO (two message groups) / delay, stored as sent (read back over remoting);
  transactions: commit, rollback, and two half messages left to the broker's check over
  Telemetry; SimpleConsumer ack, change invisible duration and redelivery after the invisible
  time; three PushConsumers on a topic of one queue per master;
* then ``stream``: a producer sends numbered messages while a SimpleConsumer group and a
  PushConsumer group each receive and ack them, and broker-a's master (the DLedger leader) is
  ``kill -9``ed. Once a new master is routed (the controller's or DLedger's election; on
  ``2m-2s-sync``, which elects none, the killed master restarted), the same proxy process stores
  on that group again, and both groups receive every message whose send was acknowledged (at
  least once: duplicates are counted, with the gaps, in the printed figures)."""

from __future__ import annotations

import json
import shutil
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from rmq_cluster.deploy.proxy_up import LOG_FILE, PID_FILE
from rmq_cluster.deploy.testing import create_topics, pid_running, rmq_cluster

from .conftest import JVM_OPTS, build_java_probes
from .failover_testlib import (
    EventStream,
    Failover,
    group_written_again,
    kill_during_stream,
    log_tails,
    stream_figures,
)
from .grpc_testlib import (
    check_push,
    check_simple_consumer,
    check_stored,
    check_transactions,
    fast_checks_profile,
    running_proxy,
)
from .test_java_client import Events, of
from .test_java_grpc_client import JAVA5GRPC_DIR, VERSION

pytestmark = pytest.mark.slow

PROFILES = ("2m-2s-sync", "2m-2s-controller", "dledger")
#: the profile that elects no new master for a group whose master died: the killed one is
#: restarted (``rmq-cluster restart``)
RESTART_PROFILES = ("2m-2s-sync",)
PREFIX = "jp"
SCENARIOS = ("produce", "transaction", "simple", "push")
GROUP = "broker-a"
#: the JVM's exit once its scenarios are over (or the stream drained)
JVM_TIMEOUT_S = 240
#: the stream's consumers go on this long after the stop at most
DRAIN_MS = 60_000


@attrs.frozen
class ProfileRun:
    namesrv: str
    cluster_dir: Path
    #: events by scenario
    events: Events
    #: the kill during ``stream``
    failover: Failover


class Jvm(EventStream):
    """GrpcScenarios in a JVM of its own; on failure the proxy's log is shown too."""

    def __init__(self, classpath: str, endpoint: str, root: Path, scenarios: tuple[str, ...],
                 proxy_log: Path) -> None:
        java = shutil.which("java")
        assert java, "java is needed (see conftest)"
        self.proxy_log = proxy_log
        super().__init__(
            [java, *JVM_OPTS, f"-Duser.home={root / 'home'}",
             f"-Dstream.stop={root / 'stop-stream'}", f"-Dstream.drain.ms={DRAIN_MS}",
             "-cp", classpath, "GrpcScenarios", endpoint, PREFIX, *scenarios],
            root / "jvm.stderr",
        )

    def logs(self) -> str:
        return "\n".join([self.tail(), log_tails(self.proxy_log)])


def _stream_over(events: list[dict[str, Any]]) -> bool:
    return any(e.get("scenario") == "stream" and e["event"] in ("done", "failed")
               for e in events)


@pytest.fixture(scope="module")
def classpath() -> str:
    return build_java_probes(VERSION, JAVA5GRPC_DIR)


@pytest.fixture(scope="module")
def run(request: pytest.FixtureRequest, classpath: str,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProfileRun]:
    """The profile's cluster and proxy, and every scenario run in one JVM against them (broker-a's
    master killed during ``stream``)."""
    profile = str(request.param)
    root = tmp_path_factory.mktemp(f"jgrpc-{profile}")
    scenarios = (*SCENARIOS, "stream")
    t0 = time.monotonic()
    profile_file = fast_checks_profile(root, profile)
    with rmq_cluster(str(profile_file), directory=root / "cluster") as cluster, \
            running_proxy(cluster.dir, root) as endpoint:
        t_up = time.monotonic()
        ns = cluster.namesrv_addr
        create_topics(ns, [f"{PREFIX}{t}" for t in ("Normal", "Fifo", "Delay", "Tx", "Simple",
                                                     "Stream")])
        create_topics(ns, [f"{PREFIX}Push"], queues=1)  # 3 consumers, 1 queue per master
        t_jvm_start = time.monotonic()
        jvm = Jvm(classpath, endpoint, root, scenarios, cluster.dir / LOG_FILE)
        try:
            fo = kill_during_stream(cluster, jvm, topic=f"{PREFIX}Stream", group=GROUP,
                                    stop_file=root / "stop-stream", done=_stream_over,
                                    restart=profile in RESTART_PROFILES)
            rc = jvm.finish(JVM_TIMEOUT_S)
        finally:
            jvm.stop()
        t_jvm = time.monotonic()
        evs: Events = defaultdict(list)
        for e in jvm.events:
            evs[e["scenario"]].append(e)
        print(f"{profile}: up + proxy {t_up - t0:.1f} s, JVM {t_jvm - t_jvm_start:.1f} s",
              json.dumps({sc: e["ms"] for sc, es in evs.items() for e in es
                          if e["event"] == "done"}))
        failed = [e for sc in evs.values() for e in sc if e["event"] == "failed"]
        if rc != 0 or failed or any(of(evs[sc], "done") == [] for sc in scenarios):
            pytest.fail(f"GrpcScenarios on {profile} exited {rc}: {failed}\n{jvm.logs()}",
                        pytrace=False)
        yield ProfileRun(ns, cluster.dir, evs, fo)


@pytest.mark.parametrize("run", PROFILES, indirect=True)
def test_java_sdk_producer_normal_fifo_and_delay(run: ProfileRun) -> None:
    topics = {k: f"{PREFIX}{k.title()}" for k in ("normal", "fifo", "delay")}
    check_stored(run.namesrv, topics, run.events["produce"])


@pytest.mark.parametrize("run", PROFILES, indirect=True)
def test_java_sdk_transactions_commit_rollback_and_checks_over_telemetry(run: ProfileRun
                                                                         ) -> None:
    check_transactions(run.events["transaction"], f"{PREFIX}Tx")


@pytest.mark.parametrize("run", PROFILES, indirect=True)
def test_java_sdk_simple_consumer_ack_change_invisible_and_redelivery(run: ProfileRun) -> None:
    check_simple_consumer(run.events["simple"])


@pytest.mark.parametrize("run", PROFILES, indirect=True)
def test_java_sdk_push_consumers_outnumbering_the_queues_consume_everything(run: ProfileRun
                                                                            ) -> None:
    check_push(run.events["push"])


@pytest.mark.parametrize("run", PROFILES, indirect=True)
def test_java_sdk_consumers_lose_no_acked_message_through_a_master_kill(run: ProfileRun) -> None:
    events, fo = run.events["stream"], run.failover
    sent = {e["body"] for e in events if e["event"] == "sent"}
    assert sent, events[-5:]
    for via in ("simple", "push"):
        got = {e["body"] for e in events if e["event"] == "received" and e["via"] == via}
        assert not sent - got, (via, sorted(sent - got)[:20])
    # the same proxy process routed to the new master: the group written again (a restarted
    # master: see group_written_again)
    written = group_written_again(run.namesrv, f"{PREFIX}Stream", GROUP, fo, len(sent))
    assert pid_running(int((run.cluster_dir / PID_FILE).read_text()))
    print("failover figures:", json.dumps(stream_figures(events, fo, written)))
