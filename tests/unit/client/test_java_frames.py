"""Compatibility: the request frames a Java 4.9.7 client sends, hand-built from
docs/protocol/remoting.md (JSON header, string extFields) and docs/protocol/commitlog.md
(properties, batch body) and Java 4.9.7's header fields, HeartbeatData and lock body,
compared field for field (and byte for byte where Java's output is deterministic) with what
our client builds.

Nothing here uses our encoders to build the expectation: the JSON texts are literals and the
frame prefix is packed by hand.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from rmq_cluster.client import frames
from rmq_cluster.client.model import Message, MessageQueue
from rmq_cluster.client.subscription import ConsumerData, build_subscription, heartbeat_body
from rmq_cluster.cluster.remoting.codec import encode

MQ = MessageQueue("T", "broker-a", 1)


def java_frame(header_json: str, body: bytes = b"") -> bytes:
    """§1.1: int32 length (4 + header + body), int32 type 0 | header length, header, body."""
    h = header_json.encode()
    return struct.pack(">ii", 4 + len(h) + len(body), len(h)) + h + body


def header_of(frame: bytes) -> dict[str, Any]:
    (hlen,) = struct.unpack(">i", frame[4:8])
    return json.loads(frame[8 : 8 + (hlen & 0xFFFFFF)])


def assert_same_frame(ours: bytes, java: bytes) -> None:
    assert header_of(ours) == header_of(java)  # field for field first: a readable diff
    assert ours == java  # then byte for byte


def java_hashmap_iteration(keys: list[str]) -> list[str]:
    """Independent model of java.util.HashMap iteration: 16 buckets (keys <= 12), bucket =
    (h ^ h >>> 16) & 15 with h = String.hashCode(), chained in insertion order."""

    def string_hash(s: str) -> int:
        h = 0
        for ch in s:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        return h

    buckets: list[list[str]] = [[] for _ in range(16)]
    for k in keys:
        h = string_hash(k)
        buckets[(h ^ (h >> 16)) & 15].append(k)
    return [k for b in buckets for k in b]


def test_send_message_v2_frame() -> None:
    uniq = "7F00000100002A9F0000000000000000"
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "WAIT": "true", "UNIQ_KEY": uniq}
    order = java_hashmap_iteration(list(props))
    i_value = "\x02".join(f"{k}\x01{props[k]}" for k in order)  # Java: no trailing 0x02
    java = java_frame(
        '{"code":310,"extFields":{"a":"PG","b":"T","c":"TBW102","d":"4","e":"1","f":"0",'
        '"g":"1700000000000","h":"0","i":' + json.dumps(i_value) + ',"j":"0","k":"false",'
        '"m":"false","n":"broker-a"},"flag":0,"language":"JAVA","opaque":7,'
        '"serializeTypeCurrentRPC":"JSON","version":407}',
        b"hello",
    )
    from rmq_cluster.client.subscription import java_properties_string

    wire = Message("T", b"hello", tags="TagA", keys=["k1", "k2"]).wire_properties()
    wire["UNIQ_KEY"] = uniq
    cmd = frames.send_message(
        group="PG", topic="T", queue_id=1, sys_flag=0, born_timestamp=1700000000000, flag=0,
        properties=java_properties_string(wire), body=b"hello",
        broker_name="broker-a",
    )
    assert_same_frame(encode(cmd, 7), java)


@pytest.mark.parametrize("seed", range(20))
def test_properties_string_is_the_encoded_java_map_order(seed: int) -> None:
    """The producer's one-join properties string equals encoding the Java-ordered map."""
    import random

    from rmq_cluster.client.subscription import java_hashmap_order, java_properties_string
    from rmq_cluster.cluster.protocol.message import encode_properties

    rnd = random.Random(seed)
    names = ["TAGS", "KEYS", "WAIT", "UNIQ_KEY", "DELAY", "a", "bb", "user-key", "\u00e9t\u00e9"]
    props = {
        rnd.choice(names) + str(rnd.randrange(50)): "".join(
            rnd.choices("abcXYZ 019_\u00fc", k=rnd.randrange(12))
        )
        for _ in range(rnd.randrange(10))
    }
    assert java_properties_string(props) == encode_properties(java_hashmap_order(props)).decode()


def test_send_batch_frame_header() -> None:
    java = java_frame(
        '{"code":320,"extFields":{"a":"PG","b":"T","c":"TBW102","d":"4","e":"1","f":"0",'
        '"g":"1700000000000","h":"0","i":"WAIT\\u0001true","j":"0","k":"false","m":"true",'
        '"n":"broker-a"},"flag":0,"language":"JAVA","opaque":8,'
        '"serializeTypeCurrentRPC":"JSON","version":407}',
        b"B",
    )
    cmd = frames.send_message(
        group="PG", topic="T", queue_id=1, sys_flag=0, born_timestamp=1700000000000, flag=0,
        properties="WAIT\x01true", body=b"B", broker_name="broker-a", batch=True,
    )
    ours = encode(cmd, 8)
    assert header_of(ours) == header_of(java)


def test_pull_message_frame_push_consumer() -> None:
    java = java_frame(
        '{"code":11,"extFields":{"bname":"broker-a","commitOffset":"5","consumerGroup":"CG",'
        '"expressionType":"TAG","maxMsgNums":"32","queueId":"1","queueOffset":"7",'
        '"subVersion":"1700000000000","subscription":"TagA || TagB",'
        '"suspendTimeoutMillis":"15000","sysFlag":"7","topic":"T"},"flag":0,"language":"JAVA",'
        '"opaque":9,"serializeTypeCurrentRPC":"JSON","version":407}'
    )
    sub = build_subscription("T", "TagA || TagB", 1700000000000)
    cmd = frames.pull_message(
        group="CG", mq=MQ, offset=7, max_nums=32, sys_flag=frames.pull_sys_flag(True, True, True),
        commit_offset=5, suspend_ms=15000, subscription=sub.sub_string,
        sub_version=sub.sub_version,
    )
    assert_same_frame(encode(cmd, 9), java)


@pytest.mark.parametrize(
    ("cmd", "java_header"),
    [
        (frames.query_consumer_offset("CG", MQ),
         '{"code":14,"extFields":{"consumerGroup":"CG","queueId":"1","topic":"T"},"flag":0,'
         '"language":"JAVA","opaque":3,"serializeTypeCurrentRPC":"JSON","version":407}'),
        (frames.update_consumer_offset("CG", MQ, 42),
         '{"code":15,"extFields":{"commitOffset":"42","consumerGroup":"CG","queueId":"1",'
         '"topic":"T"},"flag":2,"language":"JAVA","opaque":3,'
         '"serializeTypeCurrentRPC":"JSON","version":407}'),
        (frames.get_max_offset(MQ),
         '{"code":30,"extFields":{"queueId":"1","topic":"T"},"flag":0,"language":"JAVA",'
         '"opaque":3,"serializeTypeCurrentRPC":"JSON","version":407}'),
        (frames.search_offset(MQ, 1700000000000),
         '{"code":29,"extFields":{"queueId":"1","timestamp":"1700000000000","topic":"T"},'
         '"flag":0,"language":"JAVA","opaque":3,"serializeTypeCurrentRPC":"JSON",'
         '"version":407}'),
        (frames.get_consumer_list("CG"),
         '{"code":38,"extFields":{"consumerGroup":"CG"},"flag":0,"language":"JAVA","opaque":3,'
         '"serializeTypeCurrentRPC":"JSON","version":407}'),
        (frames.get_route("T"),
         '{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":3,'
         '"serializeTypeCurrentRPC":"JSON","version":407}'),
        (frames.unregister_client("127.0.0.1@1#2", "PG", None),
         '{"code":35,"extFields":{"clientID":"127.0.0.1@1#2","producerGroup":"PG"},"flag":0,'
         '"language":"JAVA","opaque":3,"serializeTypeCurrentRPC":"JSON","version":407}'),
        (frames.send_back(commitlog_offset=1234, group="CG", delay_level=0,
                          origin_msg_id="7F00000100002A9F0000000000000000", origin_topic="T",
                          max_reconsume_times=16),
         '{"code":36,"extFields":{"delayLevel":"0","group":"CG","maxReconsumeTimes":"16",'
         '"offset":"1234","originMsgId":"7F00000100002A9F0000000000000000",'
         '"originTopic":"T","unitMode":"false"},"flag":0,"language":"JAVA","opaque":3,'
         '"serializeTypeCurrentRPC":"JSON","version":407}'),
        (frames.end_transaction(group="TXG", tran_state_table_offset=3, commitlog_offset=999,
                                commit_or_rollback=8, from_check=False,
                                msg_id="7F00000100002A9F0000000000000000", transaction_id=None),
         '{"code":37,"extFields":{"commitLogOffset":"999","commitOrRollback":"8",'
         '"fromTransactionCheck":"false","msgId":"7F00000100002A9F0000000000000000",'
         '"producerGroup":"TXG","tranStateTableOffset":"3"},"flag":2,"language":"JAVA",'
         '"opaque":3,"serializeTypeCurrentRPC":"JSON","version":407}'),
    ],
    ids=["query_offset", "update_offset_oneway", "max_offset", "search_offset",
         "consumer_list", "route", "unregister", "send_back", "end_transaction"],
)
def test_small_request_frames(cmd: Any, java_header: str) -> None:
    assert_same_frame(encode(cmd, 3), java_frame(java_header))


def test_heartbeat_frame_producer_only_is_byte_exact() -> None:
    java_body = (b'{"clientID":"10.0.0.5@1234#8876","consumerDataSet":[],'
                 b'"producerDataSet":[{"groupName":"P"},{"groupName":"CLIENT_INNER_PRODUCER"}]}')
    java = java_frame('{"code":34,"flag":0,"language":"JAVA","opaque":4,'
                      '"serializeTypeCurrentRPC":"JSON","version":407}', java_body)
    body = heartbeat_body("10.0.0.5@1234#8876", ["P", "CLIENT_INNER_PRODUCER"], [])
    assert_same_frame(encode(frames.heartbeat(body), 4), java)


def test_heartbeat_body_with_consumer_matches_java() -> None:
    # §4.6, with the retry subscription a clustering push consumer adds
    java = json.loads(
        '{"clientID":"10.0.0.5@1234#8876","consumerDataSet":[{"consumeFromWhere":'
        '"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"G",'
        '"messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,'
        '"codeSet":[2598919],"expressionType":"TAG","subString":"TagA","subVersion":'
        '1700000000000,"tagsSet":["TagA"],"topic":"T"},{"classFilterMode":false,"codeSet":[],'
        '"expressionType":"TAG","subString":"*","subVersion":1700000000001,"tagsSet":[],'
        '"topic":"%RETRY%G"}],"unitMode":false}],"producerDataSet":[{"groupName":"P"},'
        '{"groupName":"CLIENT_INNER_PRODUCER"}]}'
    )
    cd = ConsumerData(
        "G", "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET",
        (build_subscription("T", "TagA", 1700000000000),
         build_subscription("%RETRY%G", "*", 1700000000001)),
    )
    ours_bytes = heartbeat_body("10.0.0.5@1234#8876", ["P", "CLIENT_INNER_PRODUCER"], [cd])
    assert b" " not in ours_bytes  # compact, as fastjson writes it
    ours = json.loads(ours_bytes)
    assert ours == java
    assert list(ours) == sorted(ours)  # keys sorted


def test_subscription_sets_follow_java_hashset_order() -> None:
    sub = build_subscription("T", " TagB || TagA ||  || TagC ", 1)
    assert sub.sub_string == "TagB || TagA ||  || TagC"
    assert list(sub.tags_set) == java_hashmap_iteration(["TagB", "TagA", "TagC"])
    assert set(sub.code_set) == {2598919, 2598920, 2598921}


def test_lock_batch_body() -> None:
    java_body = (b'{"clientId":"c1","consumerGroup":"G","mqSet":[{"brokerName":"broker-a",'
                 b'"queueId":0,"topic":"T"},{"brokerName":"broker-a","queueId":1,"topic":"T"}]}')
    java = java_frame('{"code":41,"flag":0,"language":"JAVA","opaque":5,'
                      '"serializeTypeCurrentRPC":"JSON","version":407}', java_body)
    cmd = frames.lock_batch("G", "c1", [MQ, MessageQueue("T", "broker-a", 0)])
    assert_same_frame(encode(cmd, 5), java)
