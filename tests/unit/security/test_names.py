"""Names on the wire (cluster/protocol/names.py): the rules and the one table of carried names."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.broker.topic_config import TopicConfigManager, validate_topic
from rmq_cluster.cluster.acl.permission import PUB, SUB
from rmq_cluster.cluster.acl.validator import parse_request
from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol import names as N
from rmq_cluster.cluster.protocol.route import TopicConfig
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.namesrv.processor import NAMESRV_REQUEST_CODES
from rmq_cluster.namesrv.server import NAMESRV_ACL_CODES

HOSTILE = [
    "", " ", "a\n", "a\r", "a\x00", "../commitlog", "/etc", "a/b", "a.b", ".", "..",
    "t\u00e9", "\u0661", "a b", "x" * 128, "%RETRY%", "%DLQ%", "%RETRY%../x", "%DLQ%a/b",
    "%RETRY%" + "g" * 256,
]


def _broker_codes(tmp_path: Path) -> set[int]:
    settings = load_broker_config(
        {"storePathRootDir": str(tmp_path / "store"), "brokerName": "b", "listenPort": "0"}
    ).settings
    return set(BrokerNode(settings).processors())


def test_every_served_code_is_in_the_table_or_listed_nameless(tmp_path: Path) -> None:
    served = _broker_codes(tmp_path) | set(NAMESRV_REQUEST_CODES)
    missing = {RC(c).name for c in served if c not in N.NAME_TABLE and c not in N.NO_NAME_CODES}
    assert not missing, f"codes with no entry in names.NAME_TABLE / NO_NAME_CODES: {missing}"
    assert not set(N.NAME_TABLE) & N.NO_NAME_CODES


def test_admin_names_belong_to_admin_codes() -> None:
    from rmq_cluster.cluster.acl.permission import ADMIN_CODES

    for code, specs in N.NAME_TABLE.items():
        for spec in specs:
            if isinstance(spec, N.H) and spec.access is N.Access.ADMIN:
                assert code in ADMIN_CODES | NAMESRV_ACL_CODES, RC(code).name


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_refused(name: str) -> None:
    assert N.validate_topic(name) is not None
    if not name.startswith("%") and not name.startswith("x"):
        assert N.validate_group(name) is not None


def test_rules_and_remarks() -> None:
    assert N.validate_topic("Topic_1-%|x") is None
    assert N.validate_topic("x" * 127) is None
    assert N.validate_topic("x" * 128) == "The specified topic is longer than topic max length."
    assert N.validate_topic("  ") == "The specified topic is blank."
    assert N.validate_topic("a\n") == (
        "The specified topic[a\\n] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    )
    # the old hole: re.match with "$" accepted a trailing newline
    assert validate_topic("a\n") is not None
    assert N.validate_group("g" * 255) is None
    assert N.validate_group("g" * 256) == "the specified group is longer than group max length 255."
    assert N.validate_group("") == "the specified group is blank"
    # retry / DLQ topics: only from a valid group, as long as the group may be
    assert N.validate_topic("%RETRY%" + "g" * 255) is None
    assert N.validate_topic("%DLQ%G") is None
    assert "not built from a valid group" in (N.validate_topic("%RETRY%") or "")
    with pytest.raises(ValueError):
        N.retry_topic("../x")
    with pytest.raises(ValueError):
        N.dlq_topic("a\n")
    assert N.retry_topic("G") == "%RETRY%G" and N.dlq_topic("G") == "%DLQ%G"
    long_remark = N.validate_topic("/" * 500) or ""
    assert len(long_remark) < 200  # a hostile name is quoted short


@pytest.mark.parametrize(
    ("value", "ok"),
    [("0", True), ("-1", True), ("1023", True), ("1024", False), ("-2", False),
     ("2147483647", False), ("x", False), (" 3 ", True), (5, True), (True, False), (None, False)],
)
def test_queue_ids(value: object, ok: bool) -> None:
    assert (N.validate_queue_id(value) is None) is ok


@given(st.text(max_size=300))
def test_valid_names_never_make_paths(text: str) -> None:
    if N.validate_topic(text) is None:
        assert "/" not in text and "." not in text and "\x00" not in text and "\n" not in text
        assert text.isascii() and text.strip() == text
    if N.validate_group(text) is None:
        assert len(text) <= N.GROUP_MAX_LENGTH and "/" not in text and "." not in text


def _req(code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, ext or {}, body)


def test_names_in_headers_and_bodies() -> None:
    hb = fastjson.dumps({
        "clientID": "c",
        "producerDataSet": [{"groupName": "PG"}],
        "consumerDataSet": [{"groupName": "CG", "subscriptionDataSet": [{"topic": "T1"}]}],
    })
    found = {(n.field, n.value) for n in N.names_in(_req(RC.HEART_BEAT, body=hb))}
    assert found == {
        ("producerDataSet[0].groupName", "PG"),
        ("consumerDataSet[0].groupName", "CG"),
        ("consumerDataSet[0].subscriptionDataSet[0].topic", "T1"),
    }
    lock = fastjson.dumps({"consumerGroup": "G", "clientId": "c",
                           "mqSet": [{"topic": "../x", "brokerName": "b", "queueId": 99999}]})
    remark = N.check_request(_req(RC.LOCK_BATCH_MQ, body=lock))
    assert remark is not None and "mqSet[0].topic" in remark
    assert N.check_request(_req(RC.HEART_BEAT, body=b"[1]")) == (
        "bad request body: body is not a JSON object"
    )
    sgc = fastjson.dumps({"groupName": "a/b"})
    remark = N.check_request(_req(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=sgc))
    assert remark is not None and remark.endswith("(field groupName)")
    assert N.check_request(_req(RC.SEND_MESSAGE_V2, {"a": "PG", "b": "T", "c": "TBW102",
                                                      "e": "3"})) is None
    bad_q = N.check_request(_req(RC.SEND_MESSAGE_V2, {"a": "PG", "b": "T", "e": "4096"}))
    assert bad_q is not None and "(field e)" in bad_q
    assert N.check_request(_req(RC.DELETE_TOPIC_IN_BROKER, {"topic": "/abs"})) is not None
    assert N.check_request(_req(RC.GET_ALL_TOPIC_CONFIG, {"topic": "../x"})) is None


def test_cache_is_bounded_and_answers_like_the_rules() -> None:
    cache = N.NameCache()
    for i in range(N.MAX_CACHED_NAMES + 10):
        assert cache.check(N.Kind.TOPIC, f"T{i}", "b") is None
    assert len(cache._valid[N.Kind.TOPIC]) <= N.MAX_CACHED_NAMES
    assert cache.check(N.Kind.TOPIC, "a\n", "b") is not None
    assert cache.check(N.Kind.TOPIC, ["x"], "b") is not None  # unhashable


def test_acl_resources_come_from_the_table() -> None:
    # a retry topic needs SUB on its group whatever "group" says (or without one)
    send = _req(RC.SEND_MESSAGE_V2, {"a": "PG", "b": "%RETRY%G", "c": "TBW102", "e": "0"})
    assert dict(parse_request(send, "1.1.1.1:1").resources) == {"%RETRY%G": SUB}
    dlq = _req(RC.SEND_MESSAGE, {"producerGroup": "PG", "topic": "%DLQ%G", "group": "Other"})
    assert dict(parse_request(dlq, "1.1.1.1:1").resources) == {"%RETRY%G": SUB}
    plain = _req(RC.SEND_MESSAGE_V2, {"a": "PG", "b": "T", "c": "TBW102", "e": "0"})
    assert dict(parse_request(plain, "1.1.1.1:1").resources) == {"T": PUB}
    stats = _req(RC.GET_CONSUME_STATS, {"consumerGroup": "G", "topic": "T"})
    assert dict(parse_request(stats, "1.1.1.1:1").resources) == {"%RETRY%G": SUB, "T": SUB}
    lock = fastjson.dumps({"consumerGroup": "G", "clientId": "c",
                           "mqSet": [{"topic": "T", "brokerName": "b", "queueId": 0}]})
    assert dict(parse_request(_req(RC.LOCK_BATCH_MQ, body=lock), "1.1.1.1:1").resources) == {
        "%RETRY%G": SUB, "T": SUB,
    }


def test_topic_table_caps_queue_counts(tmp_path: Path) -> None:
    cfg = load_broker_config({"storePathRootDir": str(tmp_path), "brokerName": "b"}).settings
    topics = TopicConfigManager(cfg.broker)
    with pytest.raises(ValueError):
        topics.update(TopicConfig("Big", 2**31 - 1, 2**31 - 1, 6))
    with pytest.raises(ValueError):
        topics.update(TopicConfig("a\n", 1, 1, 6))
    tc, _created = topics.create_in_send_message_back("%RETRY%G", 2**31 - 1, 6)
    assert tc.write_queue_nums == N.MAX_QUEUE_NUMS
    data = TopicConfigManager(cfg.broker)
    data.table["Huge"] = TopicConfig("Huge", 2**31 - 1, 2**31 - 1, 6)
    topics.load(data.encode())
    assert topics.select("Huge").read_queue_nums == N.MAX_QUEUE_NUMS  # type: ignore[union-attr]
