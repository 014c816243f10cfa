"""Pure pieces behind the fixes for what Apache RocketMQ 4.9.7 showed us doing differently
(tests/interop, issue 22 follow-up): the expected values are what the Java broker wrote or
answered in the differential run."""

from __future__ import annotations

import types
from pathlib import Path

import orjson
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.broker.metrics import human_bytes, put_latency_figures
from rmq_cluster.broker.processors.broker_config import java_int_text
from rmq_cluster.broker.processors.gate import java_topic_remark, refusal, refusal_remark
from rmq_cluster.broker.processors.pull import offset_moved_body, offset_moved_message
from rmq_cluster.broker.processors.send import java_topic_config, message_illegal_remark
from rmq_cluster.broker.transaction import end_message, op_message, prepare_half_message
from rmq_cluster.cluster.metrics import Histogram
from rmq_cluster.cluster.protocol.message import (
    Message,
    decode_record,
    encode_batch,
    encode_properties,
    encode_record,
    java_map_order,
)
from rmq_cluster.cluster.protocol.route import TopicConfig
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode
from rmq_cluster.store.message_store import GetMessageStatus, MessageStore
from tests.unit.store.store_testlib import small_config

HOST = ("127.0.0.1", 10911)


def test_java_map_order_is_the_order_the_java_broker_wrote() -> None:
    # records of the differential run: a plain send, a half message, a retry (WAIT and DELAY
    # share a bucket: insertion order decides), the op and offset-moved records
    assert list(java_map_order(dict.fromkeys(["TAGS", "UNIQ_KEY", "KEYS", "CLUSTER"], ""))) == [
        "KEYS", "UNIQ_KEY", "CLUSTER", "TAGS"]
    half = ["TAGS", "UNIQ_KEY", "TRAN_MSG", "PGROUP", "CLUSTER", "WAIT", "REAL_TOPIC", "REAL_QID"]
    assert list(java_map_order(dict.fromkeys(half, ""))) == [
        "REAL_TOPIC", "TRAN_MSG", "UNIQ_KEY", "CLUSTER", "PGROUP", "WAIT", "TAGS", "REAL_QID"]
    retry = ["KEYS", "UNIQ_KEY", "CLUSTER", "TAGS", "RETRY_TOPIC", "WAIT", "DELAY",
             "ORIGIN_MESSAGE_ID", "REAL_TOPIC", "REAL_QID"]
    assert list(java_map_order(dict.fromkeys(retry, ""))) == [
        "REAL_TOPIC", "ORIGIN_MESSAGE_ID", "RETRY_TOPIC", "KEYS", "UNIQ_KEY", "CLUSTER", "WAIT",
        "DELAY", "TAGS", "REAL_QID"]
    assert list(java_map_order({"WAIT": "true", "TAGS": "d"})) == ["WAIT", "TAGS"]
    assert list(java_map_order({"TAGS": "g", "DELAY": "0", "KEYS": "g"})) == [
        "KEYS", "DELAY", "TAGS"]


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=4), max_size=40))
def test_java_map_order_keeps_every_entry(props: dict[str, str]) -> None:
    ordered = java_map_order(props)
    assert ordered == props and sorted(ordered) == sorted(props)


def test_batch_items_get_the_header_properties_stored(tmp_path: Path) -> None:
    store = MessageStore.open(small_config(tmp_path))
    try:
        body = encode_batch([(0, b"item", {"TAGS": "TagBatch", "KEYS": "bk0"})])
        header = java_map_order({"WAIT": "true", "CLUSTER": "C"})
        result = store.append_messages(
            Message(topic="T", body=body, queue_id=2, properties=header, store_host=HOST,
                    born_host=HOST)
        )
        assert result.result is not None
        rec = decode_record(store.read_record(result.result.wrote_offset))
        raw = encode_properties(rec.properties)
        assert raw == b"TAGS\x01TagBatch\x02KEYS\x01bk0\x02CLUSTER\x01C\x02WAIT\x01true"
    finally:
        store.close()


def test_offset_moved_event_record() -> None:
    body = offset_moved_body("InteropGroup", "InteropT", "broker-a", 0, 3, 2)
    assert body == (
        b'{"consumerGroup":"InteropGroup","messageQueue":{"brokerName":"broker-a","queueId":0,'
        b'"topic":"InteropT"},"offsetNew":2,"offsetRequest":3}'
    )
    assert len(body) == 136  # the Java broker's record body
    msg = offset_moved_message("G", "T", "b", 1, 9, 4, HOST, 5)
    assert (msg.topic, msg.queue_id, msg.sys_flag, msg.born_host, msg.store_host) == (
        "OFFSET_MOVED_EVENT", 0, 0, HOST, HOST)
    assert encode_properties(msg.properties) == b"KEYS\x01G\x02DELAY\x010\x02TAGS\x01G"
    assert orjson.loads(msg.body)["messageQueue"]["queueId"] == 1


def test_store_answers_max_past_the_end(tmp_path: Path) -> None:
    store = MessageStore.open(small_config(tmp_path))
    try:
        for _ in range(2):
            assert store.append_message(Message(topic="T", body=b"x")).ok
        store.dispatch_all()
        far = store.get_message("T", 0, 100, 4)
        assert (far.status, far.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 2)
        assert store.get_offset_in_queue_by_time("T", 0, 2**62) == 1
        assert store.get_miss_times == 1
    finally:
        store.close()


def test_send_remarks_in_java_words() -> None:
    tc = TopicConfig("InteropT", 4, 4, 6)
    assert java_topic_config(tc) == (
        "TopicConfig [topicName=InteropT, readQueueNums=4, writeQueueNums=4, perm=RW-, "
        "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false]")
    assert java_topic_config(TopicConfig("X", 1, 1, 7)).count("perm=RWX") == 1
    assert message_illegal_remark(4194304).endswith(
        "msg body length limit 4194304B, msg properties length limit 32KB.")
    assert java_topic_remark("bad topic!") == (
        "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$")
    assert java_topic_remark("T" * 128) == "The specified topic is longer than topic max length."
    assert java_topic_remark(" ") == "The specified topic is blank."
    assert java_topic_remark("T" * 127) is None


def test_gate_refusals_of_sends_carry_region_and_java_remark() -> None:
    send = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "bad topic!"})
    answer = refusal(send, "ours (field b)")
    assert answer.ext_fields == {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    assert answer.remark == java_topic_remark("bad topic!")
    # a topic RocketMQ's rule accepts keeps our remark; other codes are untouched
    assert refusal_remark(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%"}),
                          "ours") == "ours"
    pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "bad topic!"})
    assert refusal(pull, "ours").remark == "ours" and not refusal(pull, "ours").ext_fields


def test_config_ints_and_runtime_formats() -> None:
    assert (java_int_text("40.0"), java_int_text("40.5"), java_int_text("x")) == (
        "40", "40.5", "x")
    assert (human_bytes(512), human_bytes(1024), human_bytes(3 * 1024**3 // 2)) == (
        "512 B", "1.0 KiB", "1.5 GiB")
    assert put_latency_figures(None)["putLatency99"] == "0.00"
    h = Histogram((0.001, 0.01, 0.1))
    for v in [0.0005] * 98 + [0.005, 0.05]:
        h.observe(v)
    got = put_latency_figures(h)
    assert (got["putLatency99"], got["putLatency999"], got["putMessageEntireTimeMax"]) == (
        "10.00", "100.00", "100")
    assert got["putMessageDistributeTime"].startswith("[<=0ms]:98 [0~10ms]:1 [10~50ms]:0 ")


def _ctrl() -> types.SimpleNamespace:
    return types.SimpleNamespace(ensure_transaction_topics=lambda: None)


def test_half_commit_and_op_records() -> None:
    msg = Message(topic="T", body=b"b", queue_id=3, sys_flag=4, born_host=HOST, store_host=HOST,
                  properties={"TAGS": "A", "UNIQ_KEY": "U", "TRAN_MSG": "true", "PGROUP": "P",
                              "CLUSTER": "C"})
    half = prepare_half_message(_ctrl(), msg, "true")  # type: ignore[arg-type]
    assert (half.topic, half.queue_id, half.sys_flag) == ("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0)
    assert list(half.properties) == [
        "REAL_TOPIC", "TRAN_MSG", "UNIQ_KEY", "CLUSTER", "PGROUP", "WAIT", "TAGS", "REAL_QID"]
    stored = decode_record(_encode(half))
    committed = end_message(stored, 8, HOST)
    assert (committed.topic, committed.queue_id, committed.sys_flag) == ("T", 3, 8)
    assert committed.properties == stored.properties  # REAL_*, TRAN_MSG, WAIT kept
    op = op_message(7, HOST, 1)
    assert (op.born_host, encode_properties(op.properties)) == (HOST, b"WAIT\x01true\x02TAGS\x01d")


def _encode(msg: Message) -> bytes:
    return encode_record(msg, queue_offset=0, phys_offset=0, store_timestamp=1)
