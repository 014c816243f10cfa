"""A delayed message delivered when due keeps REAL_TOPIC and REAL_QID and loses DELAY, as
RocketMQ's ScheduleMessageService leaves it: Apache's Java client (tests/compat) reads them on
the consumer side. Before, the broker dropped both properties."""

from __future__ import annotations

from rmq_cluster.cluster.remoting.codes import ResponseCode

from .conftest import Cluster, messages, ok


async def test_delivered_delay_message_keeps_real_topic_and_queue(cluster: Cluster) -> None:
    ok(await cluster.send("DelayedReal", b"later", queue_id=2, props={"DELAY": "1", "u": "v"}))
    resp = await cluster.pull("DelayedReal", queue_id=2, suspend_ms=3000, timeout=10)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    (msg,) = messages(resp)
    assert msg.topic == "DelayedReal" and msg.queue_id == 2 and msg.body == b"later"
    assert msg.properties["REAL_TOPIC"] == "DelayedReal"
    assert msg.properties["REAL_QID"] == "2"
    assert msg.properties["u"] == "v" and "DELAY" not in msg.properties
