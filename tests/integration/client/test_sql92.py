"""SQL92 subscriptions end to end: our client subscribes with a selector, the broker (with
enablePropertyFilter=true) evaluates it on each stored message's properties; without the
switch, or with a bad expression, the broker answers with RocketMQ's codes."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from rmq_cluster.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    ReceivedMessage,
)
from rmq_cluster.client.errors import MQBrokerError
from rmq_cluster.client.model import MessageQueue
from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import WAIT_S, running_cluster


async def _send_numbered(cc: object, topic: str, n: int) -> None:
    async with Producer("SqlPG", client_config=cc) as p:  # type: ignore[arg-type]
        for i in range(n):
            tags = "TagA" if i % 2 == 0 else "TagB"
            await p.send(Message(topic, b"m%d" % i, tags=tags, properties={"a": str(i)}))


async def test_push_consumer_receives_exactly_the_selected_messages(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, enablePropertyFilter="true") as cluster:
        cc = cluster.client_config()
        await _send_numbered(cc, "SqlT", 20)
        got: list[ReceivedMessage] = []
        done = trio.Event()
        want = {b"m4", b"m6", b"m8"}  # a between 3 and 9 and TAGS = 'TagA' and a <> 2

        def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(msgs)
            if {m.body for m in got} >= want:
                done.set()
            return ConsumeResult.SUCCESS

        c = PushConsumer("SqlCG", client_config=cc, listener=listener,
                         consume_from=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe("SqlT", "a BETWEEN 3 AND 9 AND TAGS = 'TagA' AND a <> 2",
                    expression_type="SQL92")
        async with c:
            with trio.fail_after(WAIT_S):
                await done.wait()
            # nothing else trickles in: every queue was pulled to its end
            with trio.move_on_after(0.5):
                await trio.sleep_forever()
        assert sorted(m.body for m in got) == sorted(want)
        assert all(m.properties["a"] in {"4", "6", "8"} for m in got)


async def test_pull_consumer_with_sql92_walks_past_unmatched_messages(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, enablePropertyFilter="true") as cluster:
        cc = cluster.client_config()
        await _send_numbered(cc, "SqlP", 12)
        async with PullConsumer("SqlPull", client_config=cc) as pc:
            bodies: list[bytes] = []
            for q in range(4):
                mq = MessageQueue("SqlP", "broker-a", q)
                offset = 0
                while True:
                    r = await pc.pull(mq, offset, expression="a >= 10 OR a IN ('1')",
                                      expression_type="SQL92")
                    if r.status is PullStatus.FOUND:
                        bodies += [m.body for m in r.messages]
                    if r.next_begin_offset == offset or r.status is PullStatus.NO_NEW_MSG:
                        break
                    offset = r.next_begin_offset
        assert sorted(bodies) == [b"m1", b"m10", b"m11"]


async def test_broker_without_property_filter_refuses_sql92(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:  # enablePropertyFilter defaults to false
        cc = cluster.client_config()
        await _send_numbered(cc, "SqlOff", 2)
        c = PushConsumer("SqlOffCG", client_config=cc,
                         listener=lambda msgs: ConsumeResult.SUCCESS)
        c.subscribe("SqlOff", "a > 1", expression_type="SQL92")
        with pytest.raises(MQBrokerError) as info:  # CHECK_CLIENT_CONFIG at start, as Java
            async with c:
                pass
        assert info.value.code == ResponseCode.SYSTEM_ERROR
        assert "does not support consumer to filter message by SQL92" in str(info.value)
        pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "SqlOffCG", "topic": "SqlOff", "queueId": "0", "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
            "suspendTimeoutMillis": "0", "subscription": "a > 1", "subVersion": "0",
            "expressionType": "SQL92",
        })
        async with Producer("probe", client_config=cc) as p:
            resp = await p.instance.invoke(cluster.addr, pull)
        assert resp.code == ResponseCode.SYSTEM_ERROR


async def test_bad_expressions_get_rocketmq_codes(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, enablePropertyFilter="true") as cluster:
        cc = cluster.client_config()
        await _send_numbered(cc, "SqlBad", 2)
        async with Producer("probe", client_config=cc) as p:
            inst = p.instance

            def check(expr: str) -> RemotingCommand:
                body = fastjson.dumps({"clientId": "c", "group": "SqlBadCG", "subscriptionData": {
                    "topic": "SqlBad", "subString": expr, "expressionType": "SQL92",
                    "subVersion": 1, "tagsSet": [], "codeSet": [], "classFilterMode": False}})
                return RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, body)

            ok = await inst.invoke(cluster.addr, check("a > 1"))
            assert ok.code == ResponseCode.SUCCESS
            bad = await inst.invoke(cluster.addr, check("a >"))
            assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert bad.remark
            # a pull carrying a bad expression
            pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": "SqlBadCG", "topic": "SqlBad", "queueId": "0",
                "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                "suspendTimeoutMillis": "0", "subscription": "a = NULL", "subVersion": "0",
                "expressionType": "SQL92",
            })
            resp = await inst.invoke(cluster.addr, pull)
            assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            # a heartbeat registering a bad expression, then a pull relying on it
            hb = fastjson.dumps({"clientID": "127.0.0.1@bad", "producerDataSet": [],
                                 "consumerDataSet": [{
                                     "groupName": "SqlBadCG", "consumeType": "CONSUME_PASSIVELY",
                                     "messageModel": "CLUSTERING",
                                     "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                                     "unitMode": False,
                                     "subscriptionDataSet": [{
                                         "topic": "SqlBad", "subString": "a IN (1)",
                                         "expressionType": "SQL92", "subVersion": 1,
                                         "tagsSet": [], "codeSet": [],
                                         "classFilterMode": False}]}]})
            assert (await inst.invoke(
                cluster.addr, RemotingCommand.request(RequestCode.HEART_BEAT, None, hb)
            )).code == ResponseCode.SUCCESS
            pull2 = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                **pull.ext_fields, "sysFlag": "0", "subVersion": "1"})
            resp = await inst.invoke(cluster.addr, pull2)
            assert resp.code == ResponseCode.FILTER_DATA_NOT_EXIST, (resp.code, resp.remark)


async def test_cli_produce_with_properties_and_consume_with_sql(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from .test_cli_sync import run_cli

    async with running_cluster(tmp_path, enablePropertyFilter="true") as cluster:
        ns = cluster.ns_addr
        code, rows = await run_cli(capsys, "produce", "-n", ns, "-t", "SqlCli", "--count", "10",
                                   "--prop", "a={i}", "--prop", "kind=k{i}", "--json")
        assert code == 0 and rows[-1]["summary"]["sent"] == 10
        code, rows = await run_cli(capsys, "consume", "-n", ns, "-t", "SqlCli", "-g", "SqlCliG",
                                   "--sql", "a >= 7 OR kind = 'k0'", "--timeout", "2", "--json")
        assert code == 0
        received = rows[:-1]
        assert rows[-1]["summary"]["received"] == 4 == len(received)
        with pytest.raises(SystemExit) as usage:  # a usage error: exit status 2
            await run_cli(capsys, "produce", "-n", ns, "-t", "SqlCli", "--prop", "a")
        assert usage.value.code == 2
