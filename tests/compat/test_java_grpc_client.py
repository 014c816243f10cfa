"""Apache's RocketMQ 5 Java SDK (``rocketmq-client-java``, unmodified, pinned from Maven Central)
against ``rmq-cluster up single`` with ``mqproxy`` in front of it (``up --proxy``), over gRPC:
one cluster and one JVM for the module (tests/compat/java5grpc/.../GrpcScenarios.java):

* Producer: normal (tag, keys, property), FIFO (two message groups), delay (a delivery
  timestamp 2 s ahead): read back over remoting as the Python SDK's are;
* transactions: commit, rollback, and two half messages left to the broker's check, which
  reaches the SDK's TransactionChecker over Telemetry; a SimpleConsumer then sees the two
  committed only;
* SimpleConsumer: ack, changeInvisibleDuration (1 s) and a message left to its invisible time
  (3 s): both come back with delivery attempt 2;
* three PushConsumers on a two-queue topic (QueryAssignment, then POP): every message consumed;
* FIFO order per message group (issue 34): a FIFO topic (``+message.type=FIFO``) of two queues,
  an orderly subscription group (``updateSubGroup -o true``), two PushConsumers and six message
  groups of 25 messages sent at once: each group's messages consumed once each, in send order,
  one after the other (the next began once the one before it had ended), by either consumer.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.deploy.testing import create_topics, rmq_cluster

from .conftest import JAVA_DIR, JVM_OPTS, build_java_probes
from .grpc_testlib import (
    check_push,
    check_simple_consumer,
    check_stored,
    check_transactions,
    create_fifo_topic,
    orderly_group,
    running_proxy,
)
from .test_java_client import Events, finish, of, parse

pytestmark = pytest.mark.slow

JAVA5GRPC_DIR = Path(__file__).parent / "java5grpc"
#: the newest rocketmq-client-java on Maven Central here (gRPC only; 5.3.x is the remoting one)
VERSION = "5.0.7"
#: transaction checks within a second (transactionTimeOut, transactionCheckInterval)
PROFILE = JAVA_DIR / "compat-single.toml"
PREFIX = "jg"
JVM_TIMEOUT_S = 240
SCENARIOS = ("produce", "transaction", "simple", "push", "fifopush")
#: the ``fifopush`` scenario: message groups, messages per group (GrpcScenarios' defaults)
FIFO_GROUPS, FIFO_PER_GROUP = 6, 25


@pytest.fixture(scope="module")
def classpath() -> str:
    return build_java_probes(VERSION, JAVA5GRPC_DIR)


@pytest.fixture(scope="module")
def run(classpath: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Events, str]]:
    """Every scenario in one JVM against one cluster; (events by scenario, NameServer)."""
    root = tmp_path_factory.mktemp("grpc-java")
    cluster_dir = root / "cluster"
    with rmq_cluster(str(PROFILE), directory=cluster_dir) as cluster, \
            running_proxy(cluster_dir, root) as endpoint:
        ns = cluster.namesrv_addr
        create_topics(ns, [f"{PREFIX}{t}" for t in ("Normal", "Fifo", "Delay", "Tx", "Simple")])
        create_topics(ns, [f"{PREFIX}Push"], queues=2)
        create_fifo_topic(ns, f"{PREFIX}FifoPush", queues=2)
        orderly_group(ns, f"{PREFIX}FifoPushG")
        java = shutil.which("java")
        assert java, "java is needed (see conftest)"
        proc = subprocess.Popen(
            [java, *JVM_OPTS, f"-Duser.home={root / 'home'}", "-cp", classpath,
             "GrpcScenarios", endpoint, PREFIX, *SCENARIOS],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL,
        )
        rc, stdout, stderr = finish(proc, JVM_TIMEOUT_S)
        evs = parse(stdout)
        failed = [e for sc in evs.values() for e in sc if e["event"] == "failed"]
        if rc != 0 or failed or any(of(evs[sc], "done") == [] for sc in SCENARIOS):
            pytest.fail(f"GrpcScenarios exited {rc}: {failed}\n{stderr[-4000:]}", pytrace=False)
        yield evs, ns


def test_java_sdk_producer_normal_fifo_and_delay(run: tuple[Events, str]) -> None:
    evs, ns = run
    topics = {k: f"{PREFIX}{k.title()}" for k in ("normal", "fifo", "delay")}
    check_stored(ns, topics, evs["produce"])


def test_java_sdk_transactions_commit_rollback_and_checks_over_telemetry(
    run: tuple[Events, str]
) -> None:
    check_transactions(run[0]["transaction"], f"{PREFIX}Tx")


def test_java_sdk_simple_consumer_ack_change_invisible_and_redelivery(
    run: tuple[Events, str]
) -> None:
    check_simple_consumer(run[0]["simple"])


def test_java_sdk_push_consumers_outnumbering_the_queues_consume_everything(
    run: tuple[Events, str]
) -> None:
    check_push(run[0]["push"])


def check_fifo_push(evs: list[dict[str, Any]], groups: int = FIFO_GROUPS,
                    per_group: int = FIFO_PER_GROUP) -> None:
    """The ``fifopush`` scenario: every message of each message group consumed once, in send
    order, each only after the one before it was done (its consumption ended), whichever of
    the two consumers took it; never two of one group at once."""
    consumed = sorted(of(evs, "consumed"), key=lambda e: e["start_us"])
    by_group: dict[str, list[dict[str, Any]]] = {}
    for e in consumed:
        assert e["message_group"] == e["group"] and not e["overlap"], e
        by_group.setdefault(e["group"], []).append(e)
    assert sorted(by_group) == sorted(f"g{k}" for k in range(groups)), sorted(by_group)
    for group, seen in by_group.items():
        assert [e["seq"] for e in seen] == list(range(per_group)), (group, seen)
        for before, after in itertools.pairwise(seen):
            assert after["start_us"] >= before["end_us"], (group, before, after)


def test_java_sdk_fifo_push_consumers_keep_each_message_groups_order(
    run: tuple[Events, str]
) -> None:
    check_fifo_push(run[0]["fifopush"])
