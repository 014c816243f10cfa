"""Pure broker managers: topic table, offsets, subscription groups, heartbeats, locks, delays."""

from __future__ import annotations

import contextlib
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.broker.clients import (
    ClientChannelInfo,
    ClientManager,
    HeartbeatError,
    RebalanceLockManager,
    build_subscription,
    decode_heartbeat,
)
from rmq_cluster.broker.config import BrokerConfig, load_broker_config
from rmq_cluster.broker.offsets import (
    ConsumerOffsetManager,
    DelayOffsetTable,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from rmq_cluster.broker.persist import read_file, write_atomically
from rmq_cluster.broker.schedule import parse_delay_levels
from rmq_cluster.broker.topic_config import TopicConfigManager, validate_topic
from rmq_cluster.cluster.config import ConfigError
from rmq_cluster.cluster.protocol.message import java_string_hash
from rmq_cluster.cluster.protocol.route import TopicConfigSerializeWrapper
from rmq_cluster.store.config import BrokerRole, FlushDiskType


def _topics(**kw: object) -> TopicConfigManager:
    return TopicConfigManager(BrokerConfig(broker_name="b", **kw), clock_ms=lambda: 1000)


def test_system_topics_and_template() -> None:
    m = _topics()
    tbw = m.select("TBW102")
    assert tbw is not None and tbw.perm == 7 and tbw.write_queue_nums == 8
    assert m.select("SCHEDULE_TOPIC_XXXX").read_queue_nums == 18  # type: ignore[union-attr]
    assert m.select("DefaultCluster").perm == 7  # type: ignore[union-attr]
    assert m.select("DefaultCluster_REPLY_TOPIC") is not None
    assert _topics(auto_create_topic_enable=False).select("TBW102") is None


def test_auto_create_from_template() -> None:
    m = _topics()
    tc, created, _ = m.create_in_send_message("New", "TBW102", 4)
    assert created and tc is not None and (tc.read_queue_nums, tc.perm) == (4, 6)
    assert m.changed and m.data_version.counter == 1
    again, created2, _ = m.create_in_send_message("New", "TBW102", 16)
    assert again == tc and not created2
    big, _, _ = m.create_in_send_message("Big", "TBW102", 64)
    assert big is not None and big.write_queue_nums == 8  # capped by the template
    none, _, why = m.create_in_send_message("X", "NoTemplate", 4)
    assert none is None and "does not exist" in why
    off = _topics(auto_create_topic_enable=False)
    assert off.create_in_send_message("X", "TBW102", 4)[0] is None


def test_topics_json_round_trip() -> None:
    m = _topics()
    m.create_in_send_message("A", "TBW102", 4)
    data = m.encode()
    wrapper = TopicConfigSerializeWrapper.decode(data)
    assert "A" in wrapper.topic_config_table
    m2 = _topics()
    m2.load(data)
    assert m2.select("A") == m.select("A")
    assert m2.data_version == m.data_version


def test_read_only_broker_reports_its_perm() -> None:
    m = _topics(broker_permission=4)
    assert {tc.perm for tc in m.wrapper().topic_config_table.values()} == {4}


@pytest.mark.parametrize(
    ("topic", "ok"),
    [
        ("T", True),
        ("%RETRY%g", True),
        ("a|b_c-1", True),
        ("", False),
        ("a b", False),
        ("x" * 127, True),
        ("x" * 128, False),
        ("中文", False),
    ],
)
def test_validate_topic(topic: str, ok: bool) -> None:
    assert (validate_topic(topic) is None) is ok


def test_consumer_offsets_json() -> None:
    m = ConsumerOffsetManager()
    assert m.query("G", "T", 0) == -1
    m.commit("G", "T", 0, 12)
    m.commit("G", "T", 3, 5)
    data = m.encode()
    assert data == b'{"offsetTable":{"T@G":{0:12,3:5}}}'
    m2 = ConsumerOffsetManager()
    m2.load(data)
    assert m2.query("G", "T", 3) == 5
    assert m2.topics_of_group("G") == {"T"}


def test_subscription_groups() -> None:
    m = SubscriptionGroupManager(auto_create=True, clock_ms=lambda: 5)
    g = m.find("CG")
    assert g == SubscriptionGroupConfig("CG") and g.retry_max_times == 16
    assert SubscriptionGroupManager(auto_create=False).find("CG") is None
    m.update(SubscriptionGroupConfig("X", retry_max_times=3))
    m2 = SubscriptionGroupManager(auto_create=False)
    m2.load(m.encode())
    assert m2.find("X").retry_max_times == 3  # type: ignore[union-attr]
    assert "TOOLS_CONSUMER" in m2.table


def test_delay_offsets_and_levels() -> None:
    t = DelayOffsetTable()
    t.set(1, 5)
    t2 = DelayOffsetTable()
    t2.load(t.encode())
    assert t2.get(1) == 5 and t2.get(2) == 0
    levels = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    assert len(levels) == 18 and levels[0] == 1000 and levels[-1] == 7_200_000
    with pytest.raises(ValueError):
        parse_delay_levels("1x")


def test_subscription_expressions() -> None:
    sub = build_subscription("T", "TagA || TagB ||  ")
    assert sub.tags_set == ("TagA", "TagB")
    assert sub.is_matched_by_tags_code(java_string_hash("TagB"))
    assert not sub.is_matched_by_tags_code(java_string_hash("TagC"))
    assert build_subscription("T", "*").is_matched_by_tags_code(123)
    assert build_subscription("T", None).matches_all
    sql = build_subscription("T", "a > 1", expression_type="SQL92")
    assert sql.selector is not None and sql.selector.matches({"a": "2"})
    assert not sql.matches_all and not sql.is_tag_type
    with pytest.raises(ValueError, match="cannot be compared"):
        build_subscription("T", "a > 'x'", expression_type="SQL92")
    with pytest.raises(ValueError, match="can't be null"):
        build_subscription("T", " ", expression_type="SQL92")
    with pytest.raises(ValueError, match="does not support"):
        build_subscription("T", "x", expression_type="CLASS")


def test_heartbeat_java_and_cpp_forms() -> None:
    java = orjson.dumps(
        {
            "clientID": "1.2.3.4@1#2",
            "consumerDataSet": [
                {
                    "groupName": "G",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "subscriptionDataSet": [
                        {
                            "topic": "T",
                            "subString": "TagA",
                            "subVersion": 7,
                            "codeSet": [java_string_hash("TagA")],
                            "tagsSet": ["TagA"],
                        }
                    ],
                }
            ],
            "producerDataSet": [{"groupName": "P"}],
        }
    )
    hb = decode_heartbeat(java)
    assert hb.producer_groups == ("P",)
    (c,) = hb.consumers
    assert c.consume_from_where == "CONSUME_FROM_FIRST_OFFSET"
    assert c.subscriptions[0].sub_version == 7
    cpp = (
        orjson.dumps(
            {
                "clientID": "x",
                "consumerDataSet": [
                    {
                        "groupName": "G",
                        "consumeType": 0,
                        "messageModel": 0,
                        "consumeFromWhere": 5,
                        "subscriptionDataSet": [
                            {"topic": "T", "subString": "A || B", "subVersion": "99"}
                        ],
                    }
                ],
            }
        )
        + b"\n"
    )
    (c2,) = decode_heartbeat(cpp).consumers
    assert (c2.consume_type, c2.message_model) == ("CONSUME_ACTIVELY", "BROADCASTING")
    assert c2.consume_from_where == "CONSUME_FROM_TIMESTAMP"
    assert c2.subscriptions[0].sub_version == 99
    assert c2.subscriptions[0].code_set == {java_string_hash("A"), java_string_hash("B")}
    odd = orjson.dumps(
        {
            "clientID": "x",
            "consumerDataSet": [
                {
                    "groupName": "G",
                    "subscriptionDataSet": [
                        {"topic": "T", "subString": 123},
                        {"topic": "U", "subString": "||"},
                    ],
                }
            ],
        }
    )
    with pytest.raises(HeartbeatError):
        decode_heartbeat(odd)
    for bad in (
        b"[]",
        b"{}",
        b'{"clientID":"x","consumerDataSet":[{"groupName":"G","consumeType":9}]}',
        b"nope",
    ):
        with pytest.raises(HeartbeatError):
            decode_heartbeat(bad)


def test_client_manager_membership_and_expiry() -> None:
    m = ClientManager(channel_expired_ms=100)
    cpp = decode_heartbeat(
        orjson.dumps(
            {
                "clientID": "c1",
                "consumerDataSet": [{"groupName": "G", "subscriptionDataSet": [{"topic": "T"}]}],
            }
        )
    )
    data = cpp.consumers[0]
    assert m.register_consumer(data, ClientChannelInfo("ch1", "c1", "JAVA", 407, "a", 0))
    assert not m.register_consumer(data, ClientChannelInfo("ch1", "c1", "JAVA", 407, "a", 50))
    assert m.register_consumer(data, ClientChannelInfo("ch2", "c2", "CPP", 333, "b", 120))
    assert sorted(m.consumer_group("G").client_ids()) == ["c1", "c2"]  # type: ignore[union-attr]
    expired, groups = m.scan_not_active(151)
    assert expired == ["ch1"] and groups == ["G"]
    assert m.channel_closed("ch2") == ["G"]
    assert m.consumer_group("G") is None


def test_rebalance_locks_expire() -> None:
    locks = RebalanceLockManager(max_live_ms=60_000)
    mq = ("T", "b", 0)
    assert locks.try_lock_batch("G", [mq], "c1", 0) == [mq]
    assert locks.try_lock_batch("G", [mq], "c2", 1000) == []
    assert locks.try_lock_batch("G", [mq], "c1", 2000) == [mq]  # renewal
    assert locks.try_lock_batch("G", [mq], "c2", 62_001) == [mq]  # expired


def test_atomic_write(tmp_path: Path) -> None:
    path = str(tmp_path / "config" / "x.json")
    write_atomically(path, b"one")
    write_atomically(path, b"two")
    assert read_file(path) == b"two"
    assert read_file(path + ".bak") == b"one"
    assert read_file(str(tmp_path / "absent.json")) == b""


def test_load_broker_config_splits_keys() -> None:
    loaded = load_broker_config(
        {
            "brokerName": "broker-a",
            "brokerRole": "SYNC_MASTER",
            "flushDiskType": "SYNC_FLUSH",
            "listenPort": "10911",
            "namesrvAddr": "a:1;b:2",
            "whatever": "1",
        }
    )
    s = loaded.settings
    assert s.store.broker_role is BrokerRole.SYNC_MASTER
    assert s.store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert s.broker.fast_port == 10909 and s.broker.ha_port == 10912
    assert s.broker.namesrv_addrs == ["a:1", "b:2"]
    assert loaded.unknown == {"whatever": "1"}
    assert BrokerConfig(register_name_server_period_ms=1000).register_period_s == 10.0
    with pytest.raises(ConfigError):
        load_broker_config({"listenPort": "x"})


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "clientID",
                    "consumerDataSet",
                    "producerDataSet",
                    "groupName",
                    "consumeType",
                    "messageModel",
                    "consumeFromWhere",
                    "subscriptionDataSet",
                    "topic",
                    "subString",
                    "subVersion",
                    "codeSet",
                    "tagsSet",
                    "expressionType",
                    "unitMode",
                    "x",
                ]
            ),
            children,
            max_size=6,
        )
    ),
    max_leaves=20,
)


@given(_json)
def test_heartbeat_decoder_only_raises_heartbeat_error(value: object) -> None:
    body = orjson.dumps(value)
    with contextlib.suppress(HeartbeatError):
        decode_heartbeat(body)


@given(st.binary(max_size=64))
def test_heartbeat_decoder_on_garbage(body: bytes) -> None:
    with contextlib.suppress(HeartbeatError):
        decode_heartbeat(body)
