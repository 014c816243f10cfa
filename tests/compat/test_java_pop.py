"""RocketMQ 5 POP consumption with Apache's own 5.3.1 Java client and mqadmin (rocketmq-client
and rocketmq-tools, unmodified, from Maven Central) against a real rmq-cluster (NameServer and
broker as OS processes).

The real ``mqadmin setConsumeMode -m POP`` switches the group; then six push consumers (four
queues) built with ``clientRebalance=false`` ask the broker's QUERY_ASSIGNMENT, pop, ack, and
one message failing once comes back through changeInvisibleTime; the client's own pop / ack /
changeInvisibleTime calls (``MQClientAPIImpl``) show invisible-time redelivery through the pop
retry topic and orderly pop (tests/compat/java5/src/main/java/PopScenarios.java).

Two more scenarios (PopRetryOrderScenarios.java) run in a second JVM beside the first:

* retry -> DLQ: a group given ``retryMaxTimes`` 2 by the real ``mqadmin updateSubGroup -r 2``
  and switched to POP; its push consumer answers RECONSUME_LATER for one message (the client
  then calls changeInvisibleTime with its popDelayLevel, shortened to 1 s steps) and consumes
  the others. The message comes back with reconsume times 0, 1, 2 (from the pop retry topic
  after the first), then the broker's revive moves it to ``%DLQ%<group>`` with its body, keys,
  tags and properties, and it is not delivered again; both are read back by key with
  ``DefaultMQAdminExt``.
* FIFO order per message group under concurrency: a ``+message.type=FIFO`` topic of four
  queues (``mqadmin updateTopic -a``), an orderly group (``updateSubGroup -o true``) in POP
  mode; four producer threads send twelve message groups at once (``__SHARDINGKEY``, the
  group's queue by Guava's consistentHash as Apache's 5.x proxy picks it), and six consumers
  (each its own client instance) pop orderly with the client's own API, consume and ack:
  each group's messages arrive once each, in send order, each begun only once the one before
  it was consumed. The 5.3.1 push consumer cannot show this: in POP mode it always pops with
  ``order=false``, and its ConsumeMessagePopOrderlyService never calls a
  MessageListenerOrderly (its ConsumeRequest.run returns at once). FIFO push consumption is
  checked through the gRPC SDK and mqproxy (``test_java_grpc_client.py``)."""

from __future__ import annotations

import itertools
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.deploy.testing import RunningCluster, create_topics, rmq_cluster

from .conftest import JAVA_DIR, JVM_OPTS, build_java_probes
from .test_java_client import Events, finish, of, parse
from .test_mqadmin import FAILED, MQADMIN_HOME, java

pytestmark = pytest.mark.slow

JAVA5_DIR = Path(__file__).parent / "java5"
VERSION = "5.3.1"
PROFILE = JAVA_DIR / "compat-single.toml"
PREFIX = "pop"
JVM_TIMEOUT_S = 180
MQADMIN_TIMEOUT_S = 120
#: the DLQ group's retryMaxTimes (``updateSubGroup -r``)
DLQ_RETRY_MAX = 2


@pytest.fixture(scope="module")
def classpath() -> str:
    return build_java_probes(VERSION, JAVA5_DIR)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    with rmq_cluster(str(PROFILE), directory=tmp_path_factory.mktemp("pop-cluster")) as c:
        yield c


def mqadmin_all(classpath: str, home: Path, commands: list[tuple[str, ...]]) -> list[str]:
    """Run several real mqadmin commands at once (one JVM each; their order does not matter).
    One that fails runs once more alone: they are idempotent, and six JVMs starting at once on
    a loaded 2-core machine can miss an admin call's timeout."""
    procs = [_start_mqadmin(classpath, home, args) for args in commands]
    outs = []
    try:
        for args, proc in zip(commands, procs, strict=True):
            rc, out, _err = finish(proc, MQADMIN_TIMEOUT_S)
            if rc != 0 or FAILED.search(out):
                rc, out, _err = finish(_start_mqadmin(classpath, home, args), MQADMIN_TIMEOUT_S)
            assert rc == 0 and not FAILED.search(out), (args, out[-3000:])
            outs.append(out)
    finally:
        _stop(procs)
    return outs


def _start_mqadmin(classpath: str, home: Path, args: tuple[str, ...]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [java(), *JVM_OPTS, f"-Drocketmq.home.dir={MQADMIN_HOME}", f"-Duser.home={home}",
         "-cp", classpath, "org.apache.rocketmq.tools.command.MQAdminStartup", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()  # our own child, by its handle
            proc.communicate()


def _setup_commands(ns: str) -> list[tuple[str, ...]]:
    """The real mqadmin (5.3.1) prepares every scenario's topics and groups."""
    cluster = ("-n", ns, "-c", "DefaultCluster")

    def pop_mode(topic: str, group: str) -> tuple[str, ...]:
        return ("setConsumeMode", *cluster, "-t", f"{PREFIX}{topic}", "-g", f"{PREFIX}{group}",
                "-m", "POP", "-q", "0")

    return [
        pop_mode("PushT", "PushG"),
        # retry -> DLQ: retryMaxTimes (what the broker's revive counts against), POP mode
        ("updateSubGroup", *cluster, "-g", f"{PREFIX}DlqG", "-r", str(DLQ_RETRY_MAX)),
        pop_mode("DlqT", "DlqG"),
        # FIFO: a FIFO topic of four queues, an orderly group in POP mode
        ("updateTopic", *cluster, "-t", f"{PREFIX}OrderT", "-r", "4", "-w", "4",
         "-a", "+message.type=FIFO"),
        ("updateSubGroup", *cluster, "-g", f"{PREFIX}OrderG", "-o", "true"),
        pop_mode("OrderT", "OrderG"),
    ]


@pytest.fixture(scope="module")
def events(classpath: str, cluster: RunningCluster,
           tmp_path_factory: pytest.TempPathFactory) -> Events:
    ns = cluster.namesrv_addr
    home = tmp_path_factory.mktemp("pop-java-home")
    create_topics(ns, [f"{PREFIX}PushT", f"{PREFIX}ApiT", f"{PREFIX}DlqT"], queues=4)
    create_topics(ns, [f"{PREFIX}FifoT"], queues=1)
    commands = _setup_commands(ns)
    for args, out in zip(commands, mqadmin_all(classpath, home, commands), strict=True):
        assert args[0] != "setConsumeMode" or "success" in out.lower(), out
    for name in ("jvm0", "jvm1"):
        (home / name).mkdir()
    # two JVMs at once: the scenarios of each run in turn
    procs = [subprocess.Popen(
        [java(), *JVM_OPTS, f"-Duser.home={home / name}", "-cp", classpath, "PopScenarios", ns,
         PREFIX, *scenarios],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    ) for name, scenarios in (("jvm0", ("push", "api")), ("jvm1", ("dlq", "fifo")))]
    evs: Events = {}
    try:
        for proc in procs:
            rc, stdout, stderr = finish(proc, JVM_TIMEOUT_S)
            got = parse(stdout)
            for sc in got.values():  # a failed scenario fails its own tests (scenario())
                sc.append({"event": "stderr", "text": stderr[-4000:]})
            evs.update(got)
            if rc != 0 and not any(e["event"] == "failed" for sc in got.values() for e in sc):
                pytest.fail(f"PopScenarios exited {rc}\n{stderr[-4000:]}", pytrace=False)
    finally:
        _stop(procs)
    return evs


def scenario(events: Events, name: str) -> list[dict[str, Any]]:
    """A scenario's events, once it ran to its end."""
    evs = events.get(name, [])
    failed = of(evs, "failed")
    if failed or not of(evs, "done"):
        stderr = [e["text"] for e in of(evs, "stderr")]
        pytest.fail(f"scenario {name}: {failed or 'did not finish'}\n{stderr}", pytrace=False)
    return evs


def test_push_consumers_in_pop_mode_more_consumers_than_queues(events: Events) -> None:
    evs = scenario(events, "push")
    counts = {e["who"]: e["n"] for e in of(evs, "count")}
    # six consumers on four queues: every one of them received (and acked) messages
    assert sorted(counts) == [f"c{i}" for i in range(6)] and all(n > 0 for n in counts.values())
    sent = [e["body"] for e in of(evs, "sent")]
    assert all(e["status"] == "SEND_OK" for e in of(evs, "sent"))
    recv = of(evs, "recv")
    got = Counter(e["body"] for e in recv)
    assert set(got) == set(sent)
    for e in recv:
        assert e["topic"] == "popPushT" and e["pop_ck"] and len(e["pop_ck"].split(" ")) == 8
    # the message that failed once came back (changeInvisibleTime by the client, revived
    # by the broker into %RETRY%popPushG_popPushT) with one more reconsume time
    fail = [e for e in recv if e["body"] == "fail-once"]
    assert [e["reconsume"] for e in fail][:2] == [0, 1], fail
    assert fail[1]["pop_ck"].split(" ")[4] == "1"  # read from the pop retry topic
    # at least once: nothing but the failed one arrived twice before its ack
    assert [b for b, n in got.items() if n > 1 and b != "fail-once"] == []


def _popped(evs: list[dict[str, Any]], step: str) -> list[dict[str, Any]]:
    return [e for e in of(evs, "msg") if e["step"] == step]


def test_client_pop_ack_change_invisible_and_redelivery(events: Events) -> None:
    evs = scenario(events, "api")
    first = _popped(evs, "first")
    assert sorted(e["body"] for e in first) == ["change", "expire", "keep"]
    assert all(e["reconsume"] == 0 and e["pop_ck"].split(" ")[4] == "0" for e in first)
    assert [e["status"] for e in of(evs, "ack") if e["step"] == "first"] == ["OK"]
    assert [e["status"] for e in of(evs, "changed")] == ["OK"]
    again = _popped(evs, "again0") + _popped(evs, "again1")
    # "change" first (visible at once), then "expire" after its invisible time, each from the
    # pop retry topic with one more reconsume time; "keep" (acked) never again
    assert [e["body"] for e in again] == ["change", "expire"]
    for e in again:
        assert e["reconsume"] == 1 and e["topic"] == "popApiT"
        assert e["pop_ck"].split(" ")[4] == "1"
    assert all(e["status"] == "OK" for e in of(evs, "ack"))


def test_client_orderly_pop_blocks_until_acked(events: Events) -> None:
    evs = scenario(events, "api")
    assert [e["body"] for e in _popped(evs, "fifo1")] == ["f0", "f1"]
    blocked = [e for e in of(evs, "popped") if e["step"] == "fifo-blocked"]
    assert blocked[0]["status"] != "FOUND" and blocked[0]["n"] == 0
    assert [e["body"] for e in _popped(evs, "fifo2")] == ["f2", "f3"]
    assert all(e["pop_ck"].split(" ")[3] == "999" for e in _popped(evs, "fifo1"))


# --------------------------------------------------------------------------- retry -> DLQ


def test_push_consumer_retry_then_dlq_after_retry_max_times(events: Events) -> None:
    evs = scenario(events, "dlq")
    assert all(e["status"] == "SEND_OK" for e in of(evs, "sent"))
    sent = {e["body"]: e for e in of(evs, "sent")}
    poison = sent["poison"]
    got = [e for e in of(evs, "recv") if e["body"] == "poison"]
    # RECONSUME_LATER each time: delivered retryMaxTimes + 1 times (reconsume 0..N), first from
    # the topic, then from the pop retry topic (the receipt handle's retry flag), never again
    assert [e["reconsume"] for e in got] == list(range(DLQ_RETRY_MAX + 1)), got
    assert [e["props"]["POP_CK"].split(" ")[4] for e in got] == ["0"] + ["1"] * DLQ_RETRY_MAX
    for e in got:
        assert e["topic"] == "popDlqT" and e["uniq_id"] == poison["msg_id"]
    # each RECONSUME_LATER made it invisible for 1 s (changeInvisibleTime): not back before
    for before, after in itertools.pairwise(got):
        assert after["now_ms"] - before["now_ms"] >= 900, (before, after)
    # the revives wrote N copies into the pop retry topic, then one into %DLQ%<group>
    copies = of(evs, "retry_copy")
    assert sorted(e["reconsume"] for e in copies) == list(range(1, DLQ_RETRY_MAX + 1)), copies
    assert all(e["topic"] == "%RETRY%popDlqG_popDlqT" for e in copies)
    (dead,) = of(evs, "dlq")
    assert dead["topic"] == "%DLQ%popDlqG" and dead["body"] == "poison"
    assert dead["reconsume"] == DLQ_RETRY_MAX + 1
    assert (dead["uniq_id"], dead["keys"], dead["tags"]) == (poison["msg_id"], "dlq-poison", "TagD")
    props = dead["props"]
    # every property it was sent with (keys, tags, the unique id, the user's), as sent; WAIT
    # is not stored with a single message (Apache's broker drops it too)
    stored = {k: v for k, v in poison["props"].items() if k != "WAIT"}
    assert {k: props.get(k) for k in stored} == stored and len(stored) >= 4
    assert props["origin"] == "popDlq" and "POP_CK" not in props
    # as a send-back to the DLQ stores it: the topic it was read from, the copy's offset id
    assert props["RETRY_TOPIC"] == "%RETRY%popDlqG_popDlqT" and props["ORIGIN_MESSAGE_ID"]
    # the others were consumed once each, the one sent after the DLQ copy too
    counts = {e["body"]: e["n"] for e in of(evs, "count")}
    assert counts == {**{f"ok-{i}": 1 for i in range(5)}, "after": 1}


# --------------------------------------------------------------------------- FIFO, concurrently


def _by_group(evs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in evs:
        out[e["group"]].append(e)
    return out


def test_fifo_order_per_message_group_under_concurrency(events: Events) -> None:
    evs = scenario(events, "fifo")
    sent = of(evs, "sent")
    assert sent and all(e["status"] == "SEND_OK" for e in sent)
    queue_of = {}
    for group, es in _by_group(sent).items():
        # one producer thread per group, each send answered before the next: send order
        assert [e["seq"] for e in es] == list(range(len(es)))
        (queue_of[group],) = {e["queue_id"] for e in es}  # the group's one queue
        assert [e["queue_offset"] for e in es] == sorted(e["queue_offset"] for e in es)
    assert len(set(queue_of.values())) >= 2  # groups on several queues
    consumed = of(evs, "consumed")
    assert all(e["ack"] == "OK" and e["reconsume"] == 0 for e in consumed)
    assert all(e["pop_ck"].split(" ")[3] == "999" for e in consumed)  # orderly pops
    # every message arrived, once
    assert Counter((e["group"], e["seq"]) for e in consumed) == Counter(
        (e["group"], e["seq"]) for e in sent)
    for group, es in _by_group(consumed).items():
        by_seq = sorted(es, key=lambda e: e["seq"])
        assert {e["queue_id"] for e in es} == {queue_of[group]}
        # in send order, each begun only once the one before it was consumed (by any consumer)
        for before, after in itertools.pairwise(by_seq):
            assert after["start_ms"] >= before["done_ms"], (before, after)
    # it was concurrent: consumers worked on different queues at the same time, and a group
    # passed from one consumer to another
    assert any(a["queue_id"] != b["queue_id"] and a["start_ms"] < b["done_ms"]
               and b["start_ms"] < a["done_ms"] for a, b in itertools.combinations(consumed, 2))
    assert any(len({e["who"] for e in es}) > 1 for es in _by_group(consumed).values())
