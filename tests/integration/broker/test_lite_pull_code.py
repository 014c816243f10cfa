"""LITE_PULL_MESSAGE (361): Apache's 5.x ``DefaultLitePullConsumer`` pulls with this code (the
PULL_MESSAGE header and answers under a code of its own, so brokers can give lite pulls their
own pool). Before it was routed, the broker answered REQUEST_CODE_NOT_SUPPORTED ("request type
361 not supported") and the 5.3.1 client never got a message (tests/compat/test_java_client.py).
The frame below has the fields rocketmq-client 5.3.1's lite pulls carry."""

from __future__ import annotations

from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import Cluster, messages, ok


def lite_pull_frame(topic: str, offset: int) -> dict[str, str]:
    return {
        "consumerGroup": "p1-cg-lite-assign",
        "topic": topic,
        "queueId": "0",
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "6",  # suspend + subscription: lite pulls carry their expression
        "subscription": "*",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": "0",
        "expressionType": "TAG",
        "bname": "broker-a",
    }


async def test_lite_pull_code_serves_as_pull_message(cluster: Cluster) -> None:
    for i in range(3):
        ok(await cluster.send("LiteT", f"m{i}".encode(), tags="A"))
    resp = await cluster.call(RequestCode.LITE_PULL_MESSAGE, lite_pull_frame("LiteT", 1))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert [m.body for m in messages(resp)] == [b"m1", b"m2"]
    assert resp.ext_fields["nextBeginOffset"] == "3"
    # and the same frame as PULL_MESSAGE answers the same
    same = await cluster.call(RequestCode.PULL_MESSAGE, lite_pull_frame("LiteT", 1))
    assert [m.body for m in messages(same)] == [b"m1", b"m2"]
    assert same.ext_fields["nextBeginOffset"] == resp.ext_fields["nextBeginOffset"]


async def test_lite_pull_of_a_missing_topic_answers_with_a_code(cluster: Cluster) -> None:
    resp = await cluster.call(RequestCode.LITE_PULL_MESSAGE, lite_pull_frame("NoSuchT", 0))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST and resp.remark
