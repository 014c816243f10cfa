"""Timer messages through a real broker over real sockets (issue 33, item 2): the RocketMQ 5
properties on a plain send, the refusals a 5.x broker answers, hostile values, and the timer
store's recovery after a restart."""

from __future__ import annotations

import time

from rmq_cluster.cluster.remoting.codes import ResponseCode
from tests.integration.broker.conftest import Cluster, messages, ok, running_cluster


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _pull_one(cluster: Cluster, topic: str, queue_id: int = 0, timeout: float = 10.0):
    resp = await cluster.pull(topic, queue_id=queue_id, suspend_ms=int(timeout * 1000),
                              timeout=timeout + 2)
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    return messages(resp)


async def test_timer_message_is_delivered_at_its_time_with_5x_properties(tmp_path) -> None:
    async with running_cluster(tmp_path) as cluster:
        ok(await cluster.send("TimerT", b"first", queue_id=0))  # the topic exists from here on
        sent_at = _now_ms()
        resp = ok(await cluster.send("TimerT", b"later", queue_id=1,
                                     props={"TIMER_DELAY_MS": "1500", "u": "v"}))
        answered_at = _now_ms()
        assert resp.ext_fields["queueId"] == "1"
        (msg,) = await _pull_one(cluster, "TimerT", queue_id=1)
        got_at = _now_ms()
        assert msg.topic == "TimerT" and msg.queue_id == 1 and msg.body == b"later"
        props = msg.properties
        assert props["u"] == "v" and props["TIMER_DELAY_MS"] == "1500"
        # kept on the delivered message, as Apache 5.3.1 keeps them (tests/interop)
        assert props["REAL_TOPIC"] == "TimerT" and props["REAL_QID"] == "1"
        out = int(props["TIMER_OUT_MS"])
        # the broker's clock read at the put, between sent_at and answered_at, plus 1500, rounded
        # down to the second (with sent_at + 1500 as the top, a put a few ms later that
        # crossed a second boundary failed: ~latency/1 s of runs)
        assert out % 1000 == 0 and sent_at + 1500 - 1000 <= out <= answered_at + 1500
        assert int(props["TIMER_DEQUEUE_MS"]) >= out + 1000
        assert "TIMER_ENQUEUE_MS" in props
        assert got_at - sent_at >= 1000


async def test_refusals_and_hostile_values_never_hurt_the_broker(tmp_path) -> None:
    async with running_cluster(tmp_path, timerMaxDelaySec="60") as cluster:
        too_far = await cluster.send("TimerT", props={"TIMER_DELAY_SEC": "61"})
        assert too_far.code == ResponseCode.MESSAGE_ILLEGAL, too_far.remark
        assert "60000ms" in (too_far.remark or "")
        for bad in ("x", "1e3", " 5", "5_0", "9" * 30, "0x10", "１２"):
            for key in ("TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_DELIVER_MS"):
                resp = await cluster.send("TimerT", props={key: bad})
                assert resp.code == ResponseCode.MESSAGE_ILLEGAL, (key, bad, resp.remark)
        huge = await cluster.send("TimerT", props={"TIMER_DELAY_SEC": str(2**62)})
        assert huge.code == ResponseCode.MESSAGE_ILLEGAL
        # a time not ahead is an ordinary message, delivered at once (as 5.x does)
        ok(await cluster.send("TimerNow", b"now", props={"TIMER_DELAY_MS": "-5000"}))
        (msg,) = await _pull_one(cluster, "TimerNow", timeout=3)
        assert "TIMER_OUT_MS" not in msg.properties
        # nobody writes the timer topic itself (it would reach any topic past ACL)
        forged = await cluster.send("rmq_sys_wheel_timer", props={
            "TIMER_OUT_MS": "1", "REAL_TOPIC": "Victim", "REAL_QID": "0"})
        assert forged.code == ResponseCode.NO_PERMISSION
        # a delay level wins over the timer properties, which are dropped
        ok(await cluster.send("TimerLevel", b"lvl", props={"DELAY": "1", "TIMER_DELAY_SEC": "50"}))
        (msg,) = await _pull_one(cluster, "TimerLevel", timeout=5)
        assert "TIMER_DELAY_SEC" not in msg.properties and msg.properties["REAL_TOPIC"]
        # still alive and delivering
        ok(await cluster.send("TimerT", b"after", props={"TIMER_DELAY_MS": "100"}))
        (msg,) = await _pull_one(cluster, "TimerT", timeout=5)
        assert msg.body == b"after"


async def test_wheel_disabled_refuses_as_5x(tmp_path) -> None:
    async with running_cluster(tmp_path, timerWheelEnable="false") as cluster:
        resp = await cluster.send("TimerT", props={"TIMER_DELAY_SEC": "5"})
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark == "accurate timer message is not enabled, timerWheelEnable is false"
