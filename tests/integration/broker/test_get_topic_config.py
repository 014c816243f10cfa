"""GET_TOPIC_CONFIG (351), the RocketMQ 5 admin read that 5.x ``examineConsumeStats`` sends to
every broker of a route: SUCCESS with the topic's ``TopicConfigAndQueueMapping`` JSON, or
TOPIC_NOT_EXIST (which the tools accept); anything else made Apache's 5.3.1 admin give up."""

from __future__ import annotations

from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import Cluster, ok

GET_TOPIC_CONFIG = RequestCode.GET_TOPIC_CONFIG


async def test_get_topic_config_answers_the_topic_or_topic_not_exist(cluster: Cluster) -> None:
    create = {
        "topic": "CfgT",
        "defaultTopic": "TBW102",
        "readQueueNums": "3",
        "writeQueueNums": "2",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "order": "false",
    }
    ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create))
    # as 5.3.1 asks: topic and lo=true (no static topics here: no mappingDetail)
    got = ok(await cluster.call(GET_TOPIC_CONFIG, {"topic": "CfgT", "lo": "true"}))
    body = fastjson.loads(bytes(got.body))
    assert body["topicName"] == "CfgT"
    assert (body["readQueueNums"], body["writeQueueNums"], body["perm"]) == (3, 2, 6)
    assert body["topicFilterType"] == "SINGLE_TAG" and body["order"] is False
    assert "mappingDetail" not in body

    missing = await cluster.call(GET_TOPIC_CONFIG, {"topic": "NoSuchT"})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    assert missing.remark == "No topic in this broker. topic: NoSuchT"
    assert not missing.body


async def test_get_topic_config_refuses_a_bad_header_and_keeps_serving(cluster: Cluster) -> None:
    blank = await cluster.call(GET_TOPIC_CONFIG, {})
    assert blank.code == ResponseCode.SYSTEM_ERROR
    assert blank.remark == "The specified topic is blank."
    for bad in ("bad topic", "a" * 200, "x\n"):
        resp = await cluster.call(GET_TOPIC_CONFIG, {"topic": bad})
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark, bad
    # the connection and the broker are fine afterwards
    again = ok(await cluster.call(GET_TOPIC_CONFIG, {"topic": "TBW102"}))
    assert fastjson.loads(bytes(again.body))["topicName"] == "TBW102"
