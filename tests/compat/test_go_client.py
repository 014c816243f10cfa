"""Apache's Go client (github.com/apache/rocketmq-client-go/v2 2.1.2, unmodified, pinned in
tests/compat/go/go.mod) against a real rmq-cluster: NameServer and broker as OS processes, the
client in a Go program of its own (tests/compat/go/main.go prints one JSON line per observation).
Every assertion is field by field: topic, tags, keys, body (SHA-256), user properties, queue,
offset, order."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.client.sync import SyncAdmin
from rmq_cluster.deploy.testing import RunningCluster, rmq_cluster

from .conftest import JAVA_DIR
from .test_java_client import acl_cluster

pytestmark = pytest.mark.slow

PROFILE = JAVA_DIR / "compat-single.toml"
PROBE_TIMEOUT_S = 120
SEND_OK = 0  # primitive.SendOK
PULL_FOUND = 0  # primitive.PullFound

Events = dict[str, list[dict[str, Any]]]


def run_probe(probe: Path, namesrv: str, broker: str, prefix: str, scenarios: tuple[str, ...],
              home: Path, *extra: str) -> Events:
    home.mkdir(parents=True, exist_ok=True)  # the client keeps its logs under $HOME
    proc = subprocess.Popen(
        [str(probe), "-namesrv", namesrv, "-broker", broker, "-prefix", prefix, *extra,
         *scenarios],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        cwd=home, env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
    )
    try:
        out, err = proc.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()  # our own child, by its handle
        out, err = proc.communicate()
    events: Events = defaultdict(list)
    for line in out.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            events[event["scenario"]].append(event)
    failed = [e for evs in events.values() for e in evs if e["event"] == "failed"]
    assert proc.returncode == 0 and not failed, (proc.returncode, failed, err[-3000:])
    return events


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    with rmq_cluster(str(PROFILE), directory=tmp_path_factory.mktemp("go-cluster")) as c:
        yield c


@pytest.fixture(scope="module")
def events(go_probe: Path, cluster: RunningCluster,
           tmp_path_factory: pytest.TempPathFactory) -> Events:
    return run_probe(go_probe, cluster.namesrv_addr, cluster.broker_addrs()["broker-a"], "go",
                     ("sends", "tags", "pull", "admin"), tmp_path_factory.mktemp("go-home"))


def of(evs: list[dict[str, Any]], event: str, who: str | None = None) -> list[dict[str, Any]]:
    return [e for e in evs if e["event"] == event and (who is None or e.get("who") == who)]


def expected_props(idx: int) -> dict[str, str]:
    return {"idx": str(idx), "color": "red" if idx % 2 == 0 else "blue"}


def expected_body(idx: int) -> str:
    if idx == 5:
        return "big-5-" + "0123456789abcdef" * 6 * 64
    return f"body-{idx}-\u00e9\u4e2d"


def assert_same_message(got: dict[str, Any], sent: dict[str, Any], idx: int) -> None:
    for field in ("topic", "tags", "keys", "body_sha", "body_len"):
        assert got[field] == sent[field], (field, got, sent)
    assert got["body"] == expected_body(idx)
    props = got["props"]
    assert {k: v for k, v in props.items() if k in ("idx", "color")} == expected_props(idx)
    assert props["TAGS"] == sent["tags"] and props["KEYS"] == sent["keys"] == f"k{idx}"
    if sent["uniq_id"]:
        assert got["uniq_id"] == props["UNIQ_KEY"] == sent["uniq_id"]
    assert got["reconsume_times"] == 0


def dense_per_queue(received: list[dict[str, Any]]) -> None:
    per_queue: dict[int, list[int]] = defaultdict(list)
    for r in received:
        per_queue[r["queue_id"]].append(r["queue_offset"])
    for queue, offsets in per_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), (queue, sorted(offsets))


def test_sync_async_batch_oneway_sends_reach_a_push_consumer(events: Events) -> None:
    evs = events["sends"]
    sent = {e["idx"]: e for e in of(evs, "sent")}
    assert sorted(sent) == list(range(18))
    assert Counter(s["mode"] for s in sent.values()) == {
        "sync": 8, "async": 6, "batch": 3, "oneway": 1}
    for s in sent.values():
        if s["mode"] in ("sync", "async"):
            assert s["status"] == SEND_OK and s["msg_id"] == s["uniq_id"], s
            assert len(s["offset_msg_id"]) == 32, s
    received = of(evs, "recv", "push")
    by_idx = Counter(int(r["props"]["idx"]) for r in received)
    assert by_idx == dict.fromkeys(range(18), 1)  # each exactly once
    for r in received:
        idx = int(r["props"]["idx"])
        s = sent[idx]
        assert_same_message(r, s, idx)
        if s["mode"] in ("sync", "async"):
            assert (r["broker"], r["queue_id"], r["queue_offset"]) == (
                s["broker"], s["queue_id"], s["queue_offset"])
            assert r["offset_msg_id"] == s["offset_msg_id"]
        elif s["mode"] == "batch":  # one queue, consecutive offsets from the one reported
            assert s["status"] == SEND_OK
            pos = s["batch_pos"]
            assert r["queue_id"] == s["queue_id"]
            assert r["queue_offset"] == s["queue_offset"] + pos
            assert r["offset_msg_id"] == s["offset_msg_id"].split(",")[pos]
    assert sent[5]["body_len"] > 4096  # compressed by the client, inflated on the way back
    dense_per_queue(received)


def test_push_consumer_tag_filter(events: Events) -> None:
    evs = events["tags"]
    sent = {e["idx"]: e for e in of(evs, "sent")}
    assert sorted(sent) == list(range(12)) and all(s["status"] == SEND_OK for s in sent.values())
    tagged = of(evs, "recv", "tag")
    assert sorted(int(r["props"]["idx"]) for r in tagged) == [i for i in range(12) if i % 3 != 1]
    assert {r["tags"] for r in tagged} == {"TagA", "TagC"}
    everything = of(evs, "recv", "all")
    assert sorted(int(r["props"]["idx"]) for r in everything) == list(range(12))
    for r in tagged + everything:
        idx = int(r["props"]["idx"])
        assert_same_message(r, sent[idx], idx)
        assert (r["queue_id"], r["queue_offset"]) == (sent[idx]["queue_id"],
                                                      sent[idx]["queue_offset"])


def test_lite_pull_consumer_and_pull_from_an_offset(events: Events) -> None:
    evs = events["pull"]
    sent = {e["idx"]: e for e in of(evs, "sent")}
    assert sorted(sent) == list(range(10)) and all(s["status"] == SEND_OK for s in sent.values())
    lite = of(evs, "recv", "lite")
    assert Counter(r["uniq_id"] for r in lite) == {s["uniq_id"]: 1 for s in sent.values()}
    for r in lite:
        idx = int(r["props"]["idx"])
        assert_same_message(r, sent[idx], idx)
        assert (r["queue_id"], r["queue_offset"]) == (sent[idx]["queue_id"],
                                                      sent[idx]["queue_offset"])
    (pulled,) = of(evs, "pulled")
    in_queue = sorted((s for s in sent.values() if s["queue_id"] == pulled["queue_id"]),
                      key=lambda s: s["queue_offset"])
    assert [s["queue_offset"] for s in in_queue] == list(range(len(in_queue)))
    assert pulled["status"] == PULL_FOUND
    assert (pulled["min_offset"], pulled["max_offset"], pulled["next_begin_offset"]) == (
        0, len(in_queue), len(in_queue))
    got = of(evs, "recv", "pull_from")
    assert pulled["count"] == len(got) == len(in_queue) - 1
    # from offset 1 on, in queue order
    assert [(r["queue_offset"], r["uniq_id"]) for r in got] == [
        (s["queue_offset"], s["uniq_id"]) for s in in_queue[1:]]
    for r in got:
        idx = int(r["props"]["idx"])
        assert_same_message(r, sent[idx], idx)


def test_admin_create_topic_route_send_delete(events: Events) -> None:
    evs = events["admin"]
    (created,) = of(evs, "created")
    assert of(evs, "listed")[0]["has_topic"] is True  # routed as soon as CreateTopic returned
    (queues,) = of(evs, "queues")
    assert queues == {**queues, "queue_ids": [0, 1, 2], "broker": "broker-a"}
    sent = of(evs, "sent")
    assert all(s["status"] == SEND_OK and s["topic"] == created["topic"] for s in sent)
    assert Counter(s["queue_id"] for s in sent) == {0: 2, 1: 2, 2: 2}
    dense_per_queue(sent)
    assert of(evs, "deleted")[0]["has_topic"] is False


def test_acl_signed_clients_and_a_wrong_secret(go_probe: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="go-acl-"))
    try:
        with acl_cluster(root / "cluster") as (c, ak, sk):
            broker = c.broker_addrs()["broker-a"]
            # created signed, as an operator would: the Go admin cannot sign (see below)
            with SyncAdmin(namesrv_addr=c.namesrv_addr, access_key=ak, secret_key=sk) as adm:
                adm.update_topic("goacl-t-acl", broker_addr=broker, read_queue_nums=2,
                                 write_queue_nums=2)
            evs = run_probe(go_probe, c.namesrv_addr, broker, "goacl", ("acl",), root / "home",
                            "-ak", ak, "-sk", sk)["acl"]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    (sent,) = of(evs, "sent")
    assert sent["status"] == SEND_OK and sent["topic"] == "goacl-t-acl"
    (got,) = of(evs, "recv", "push")
    assert_same_message(got, sent, 0)
    assert (got["queue_id"], got["queue_offset"]) == (sent["queue_id"], sent["queue_offset"])
    (bad,) = of(evs, "bad_secret")
    assert "status" not in bad, bad  # a wrong secret never stores a message
    assert "signature" in bad.get("error", "").lower(), bad
    # rocketmq-client-go's admin sends CreateTopic unsigned (its ACL hook is only registered by
    # a producer's or consumer's Start) and reports no error whatever the answer: the broker
    # must refuse it, so the topic is not routed
    (created,) = of(evs, "admin_create")
    assert created["routed"] is False, created
