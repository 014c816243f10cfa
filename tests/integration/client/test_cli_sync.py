"""The CLI commands and the blocking facade against an in-process cluster (they run their own
Trio loop, so they are driven from a worker thread of the test's loop)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from rmq_cluster.cli.main import main
from rmq_cluster.client import ConsumeResult, Message, ReceivedMessage
from rmq_cluster.client.sync import (
    SyncAdmin,
    SyncProducer,
    SyncPullConsumer,
    SyncPushConsumer,
)

from .conftest import WAIT_S, Cluster


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[Any]]:
    with trio.fail_after(WAIT_S * 2):
        code = await trio.to_thread.run_sync(main, list(argv))
    out = capsys.readouterr().out
    # the in-process nodes log to stdout too (structlog's default): keep the CLI's JSON lines
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return code, [r for r in rows if "event" not in r]


async def test_produce_consume_and_admin_commands(cluster: Cluster,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ns = cluster.ns_addr
    code, rows = await run_cli(capsys, "updateTopic", "-n", ns, "-t", "CLI1", "-c",
                               "TestCluster", "-r", "2", "-w", "2", "--json")
    assert code == 0 and rows[0]["updated"] == [cluster.addr]
    code, rows = await run_cli(capsys, "produce", "-n", ns, "-t", "CLI1", "--count", "10",
                               "--size", "64", "--tags", "T{i}", "--keys", "key-{i}", "--json")
    assert code == 0 and rows[-1]["summary"]["sent"] == 10
    sent = {r["msgId"]: r for r in rows[:-1]}
    assert len(sent) == 10 and {r["queueId"] for r in sent.values()} == {0, 1}
    code, rows = await run_cli(capsys, "produce", "-n", ns, "-t", "CLI1", "--count", "6",
                               "--batch", "3", "--json")
    assert code == 0 and rows[-1]["summary"]["sent"] == 6
    code, rows = await run_cli(capsys, "consume", "-n", ns, "-t", "CLI1", "-g", "CLIG",
                               "--count", "16", "--timeout", "5", "--json")
    assert code == 0 and rows[-1]["summary"]["received"] == 16
    got = {r["msgId"]: r for r in rows[:-1]}
    assert set(sent) <= set(got)
    one = next(iter(sent))
    assert got[one]["queueOffset"] == sent[one]["queueOffset"]
    assert got[one]["keys"].startswith("key-") and isinstance(got[one]["bodyCrc"], int)

    code, rows = await run_cli(capsys, "clusterList", "-n", ns, "--json")
    assert rows[0]["clusters"] == {"TestCluster": ["broker-a"]}
    code, rows = await run_cli(capsys, "topicRoute", "-n", ns, "-t", "CLI1", "--json")
    assert rows[0]["queueDatas"][0]["readQueueNums"] == 2
    code, rows = await run_cli(capsys, "topicList", "-n", ns, "--json")
    assert "CLI1" in rows[0]["topics"]
    code, rows = await run_cli(capsys, "brokerStatus", "-n", ns, "-b", cluster.addr, "--json")
    assert code == 0 and rows[0]
    code, rows = await run_cli(capsys, "consumerProgress", "-n", ns, "-g", "CLIG", "--json")
    assert code == 0
    assert sum(q["consumerOffset"] for q in rows[0]["queues"] if q["topic"] == "CLI1") == 16
    code, rows = await run_cli(capsys, "queryMsgById", "-n", ns,
                               "-i", sent[one]["offsetMsgId"], "--json")
    assert rows[0]["messages"][0]["msgId"] == one
    code, rows = await run_cli(capsys, "queryMsgById", "-n", ns, "-i", one, "-t", "CLI1",
                               "--json")
    assert rows[0]["messages"][0]["offsetMsgId"] == sent[one]["offsetMsgId"]
    key = got[one]["keys"]
    code, rows = await run_cli(capsys, "queryMsgByKey", "-n", ns, "-t", "CLI1", "-k", key,
                               "--json")
    assert [m["msgId"] for m in rows[0]["messages"]] == [one]
    code, rows = await run_cli(capsys, "topicRoute", "-n", ns, "-t", "NoSuchTopic", "--json")
    assert code == 1 and rows[0]["code"] == 17


def _blocking_round_trip(ns: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with SyncProducer("SPG", namesrv_addr=ns) as p:
        r = p.send(Message("SYNC1", b"hello"))
        many = p.send_many([Message("SYNC1", b"m%d" % i) for i in range(20)], in_flight=8)
        out["sent"] = [r, *many]
    with SyncPullConsumer("SPC", namesrv_addr=ns) as c:
        queues = c.fetch_queues("SYNC1")
        res = c.pull(r.queue, r.queue_offset)
        out["pulled"] = res.messages[0].body
        out["queues"] = queues
    with SyncAdmin(namesrv_addr=ns) as admin:
        out["topics"] = admin.topic_list()
    import threading

    done = threading.Event()
    seen: list[bytes] = []

    def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        seen.extend(m.body for m in msgs)
        if len(seen) >= 21:
            done.set()
        return ConsumeResult.SUCCESS

    from rmq_cluster.client import ConsumeFromWhere

    with SyncPushConsumer("SPUSH", listener, {"SYNC1": "*"}, namesrv_addr=ns,
                          consume_from=ConsumeFromWhere.FIRST_OFFSET):
        out["pushed"] = done.wait(WAIT_S)
    return out


async def test_blocking_facade(cluster: Cluster) -> None:
    with trio.fail_after(WAIT_S * 3):
        out = await trio.to_thread.run_sync(_blocking_round_trip, cluster.ns_addr)
    assert len({r.msg_id for r in out["sent"]}) == 21
    assert out["pulled"] == b"hello" and len(out["queues"]) == 4
    assert "SYNC1" in out["topics"] and out["pushed"]
