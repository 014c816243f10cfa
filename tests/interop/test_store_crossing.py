"""Issue 22 part 2 (first half): a store our broker wrote, `kill -9`-ed, is recovered and served
by Apache RocketMQ 4.9.7's broker booted on a copy of it: every record pulled back field for
field as ours served it, and the same messages found through its IndexFile and ConsumeQueue."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.cluster.remoting.net import open_remoting_client
from tests.interop import oracle, scenario

pytestmark = pytest.mark.slow

MESSAGES = 20
QUEUES = 4


async def _fill_and_read(broker: str) -> dict[int, dict[str, Any]]:
    async with open_remoting_client(node="interop-store") as client:
        create = {
            "topic": scenario.TOPIC, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES),
            "writeQueueNums": str(QUEUES), "perm": "6", "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0", "order": "false",
        }
        req = RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, create)
        resp = await client.invoke(broker, req)
        assert resp.code == 0, resp.remark
        for n in range(MESSAGES):
            ext = scenario.send_v2(scenario.TOPIC, n % QUEUES, 100 + n, keys=f"key{n} every")
            body = scenario.body_of(n, 100 + n)
            req = RemotingCommand.request(RC.SEND_MESSAGE_V2, ext, body)
            resp = await client.invoke(broker, req)
            assert resp.code == 0, resp.remark
        return await _read_all(client, broker)


async def _read_all(client: Any, broker: str) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for q in range(QUEUES):
        resp = await client.invoke(
            broker, RemotingCommand.request(RC.PULL_MESSAGE, scenario.pull(scenario.TOPIC, q, 0))
        )
        assert resp.code == 0, (q, resp.code, resp.remark)
        view = scenario.flatten_response(resp, "records")
        i = 0
        while f"body[{i}].commitlog_offset" in view:
            rec = {k.split(".", 1)[1]: v for k, v in view.items() if k.startswith(f"body[{i}].")}
            rec.pop("store_timestamp", None)
            out[int(rec["commitlog_offset"])] = rec
            i += 1
    return out


async def _read_with_deadline(broker: str, expected: int) -> dict[int, dict[str, Any]]:
    """The Java broker recovers and re-dispatches the copy at boot; read until all are there."""
    async with open_remoting_client(node="interop-store") as client:
        with trio.move_on_after(30):
            while True:
                got = await _read_all(client, broker)
                if len(got) >= expected:
                    return got
                await trio.sleep(0.2)
        return await _read_all(client, broker)


async def _query_key(broker: str, key: str) -> list[int]:
    async with open_remoting_client(node="interop-store") as client:
        ext = {"topic": scenario.TOPIC, "key": key, "maxNum": "64", "beginTimestamp": "0",
               "endTimestamp": str(2**63 - 1)}
        with trio.move_on_after(30):
            while True:
                resp = await client.invoke(broker, RemotingCommand.request(RC.QUERY_MESSAGE, ext))
                view = scenario.flatten_response(resp, "records")
                offs = sorted(int(v) for k, v in view.items() if k.endswith(".commitlog_offset"))
                if len(offs) >= MESSAGES or (key != "every" and offs):
                    return offs
                await trio.sleep(0.2)
        return []


def test_java_broker_serves_our_store_after_kill9(
    java_classpath: str, tmp_path: Path
) -> None:
    with oracle.running_cluster("ours", tmp_path / "ours") as ours:
        served = trio.run(_fill_and_read, ours.broker_addr)
        ours.broker.kill9()  # no clean shutdown: the abort file stays, Java must recover
        assert len(served) == MESSAGES
        java_root = tmp_path / "java"
        shutil.copytree(ours.store_dir, java_root / "store")
    with oracle.running_cluster("java", java_root, cp=java_classpath) as java:
        got = trio.run(_read_with_deadline, java.broker_addr, MESSAGES)
        assert sorted(got) == sorted(served)
        for offset, rec in served.items():
            diffs = {k: (v, got[offset].get(k)) for k, v in rec.items()
                     if k not in ("store_host",) and got[offset].get(k) != v}
            assert not diffs, f"record at {offset}: (ours, java) {diffs}"
        # IndexFile: one key per message, and one key all share
        assert trio.run(_query_key, java.broker_addr, "every") == sorted(served)
        assert trio.run(_query_key, java.broker_addr, "key7") == [sorted(served)[7]]
