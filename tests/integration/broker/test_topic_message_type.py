"""RocketMQ 5 topic attributes on a live broker: ``+message.type=FIFO`` in UPDATE_AND_CREATE_TOPIC
(as 5.x mqadmin ``updateTopic -a`` sends it) is kept in the topic config (GET_TOPIC_CONFIG,
topics.json, across a restart), a send of another type is refused as the 5.x proxy refuses it
(MESSAGE_ILLEGAL), a FIFO message (``__SHARDINGKEY``) goes through, bad attributes are
answered, and topics without the attribute take every type as before."""

from __future__ import annotations

from pathlib import Path

from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import Cluster, ok, running_cluster


def _create(topic: str, attributes: str | None) -> dict[str, str]:
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4",
           "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG"}
    if attributes is not None:
        ext["attributes"] = attributes
    return ext


async def _attributes(cluster: Cluster, topic: str) -> dict[str, str]:
    resp = ok(await cluster.call(RequestCode.GET_ALL_TOPIC_CONFIG))
    table = fastjson.loads(bytes(resp.body))["topicConfigTable"]
    return table[topic].get("attributes", {})


async def test_fifo_topic_refuses_other_types(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC,
                              _create("FifoT", "+message.type=FIFO")))
        assert await _attributes(cluster, "FifoT") == {"message.type": "FIFO"}
        fifo = await cluster.send("FifoT", b"f", props={"__SHARDINGKEY": "order-1"})
        ok(fifo)
        normal = await cluster.send("FifoT", b"n")
        assert normal.code == ResponseCode.MESSAGE_ILLEGAL
        assert normal.remark == ("TopicMessageType validate failed, the expected type is FIFO, "
                                 "but actual type is NORMAL")
        delayed = await cluster.send("FifoT", b"d", props={"DELAY": "1", "__SHARDINGKEY": "g"})
        assert delayed.code == ResponseCode.MESSAGE_ILLEGAL
        # a topic without the attribute (4.x) takes every type
        ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create("PlainT", None)))
        ok(await cluster.send("PlainT", b"n"))
        ok(await cluster.send("PlainT", b"f", props={"__SHARDINGKEY": "g"}))
        assert await _attributes(cluster, "PlainT") == {}
        # changed to NORMAL: the FIFO message is now the wrong type
        ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC,
                              _create("FifoT", "+message.type=NORMAL")))
        assert (await cluster.send("FifoT", b"f", props={"__SHARDINGKEY": "g"})).code == (
            ResponseCode.MESSAGE_ILLEGAL)
        await cluster.stop_broker()
        await cluster.start_broker(cluster.broker.settings)
        assert await _attributes(cluster, "FifoT") == {"message.type": "NORMAL"}
        ok(await cluster.send("FifoT", b"n"))


async def test_bad_attributes_are_answered(cluster: Cluster) -> None:
    for text in ("+message.type=BAD", "+nope=1", "-message.type", "message.type=FIFO",
                 "+message.type=MIXED", "+" * 5000):
        resp = await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create("BadAttrT", text))
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark, text
    ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC,
                          _create("BadAttrT", "+queue.type=SimpleCQ")))
    changed = await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                 _create("BadAttrT", "+queue.type=BatchCQ"))
    assert changed.code == ResponseCode.SYSTEM_ERROR  # not changeable after creation
