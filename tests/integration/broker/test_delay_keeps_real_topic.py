"""A delayed message delivered when due keeps REAL_TOPIC, REAL_QID and its DELAY level, as
RocketMQ's ScheduleMessageService stores it: Apache's Java client (tests/compat) reads them on
the consumer side (``getDelayTimeLevel()``). The DELAY on the delivered record asks for nothing:
it is delivered once, not scheduled again. Before, the broker dropped DELAY."""

from __future__ import annotations

from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import Cluster, messages, ok


async def test_delivered_delay_message_keeps_real_topic_queue_and_level(cluster: Cluster) -> None:
    ok(await cluster.send("DelayedReal", b"later", queue_id=2, props={"DELAY": "1", "u": "v"}))
    resp = await cluster.pull("DelayedReal", queue_id=2, suspend_ms=3000, timeout=10)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    (msg,) = messages(resp)
    assert msg.topic == "DelayedReal" and msg.queue_id == 2 and msg.body == b"later"
    assert msg.properties["REAL_TOPIC"] == "DelayedReal"
    assert msg.properties["REAL_QID"] == "2"
    assert msg.properties["u"] == "v" and msg.properties["DELAY"] == "1"
    # delivered (a record the store scheduled again would never reach the real topic), and
    # the schedule queue holds the one scheduled record
    ext = {"topic": "SCHEDULE_TOPIC_XXXX", "queueId": "0"}
    scheduled = ok(await cluster.call(RequestCode.GET_MAX_OFFSET, ext))
    assert scheduled.ext_fields["offset"] == "1"
