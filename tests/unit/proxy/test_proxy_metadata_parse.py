"""What mqproxy reads from the brokers' configs (proxy/convert.py's parsers, hostile bodies
included) and how proxy/metadata.py keeps it: fresh for a while, the last known when a broker
cannot answer, a bounded number of entries."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from rmq_cluster.client.errors import MQRemotingError
from rmq_cluster.cluster.protocol.route import BrokerData, QueueData, TopicRouteData
from rmq_cluster.cluster.protocol.topic_attributes import MessageType
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.proxy import convert
from rmq_cluster.proxy.metadata import ProxyMetadata
from rmq_cluster.proxy.pb import definition_pb2 as pb


def _table(**groups: Any) -> bytes:
    return orjson.dumps({"subscriptionGroupTable": groups})


def test_a_groups_policy_is_read_from_the_brokers_table() -> None:
    body = _table(G={"groupName": "G", "retryMaxTimes": 3, "consumeMessageOrderly": True},
                  H={"groupName": "H"})
    assert convert.group_policy(body, "G") == convert.GroupPolicy(True, 3)
    assert convert.group_policy(body, "H") == convert.GroupPolicy(False, 16)
    assert convert.group_policy(body, "Nope") is None


@pytest.mark.parametrize("body", [
    b"", b"[]", b"\xff", b'{"subscriptionGroupTable": []}', _table(G=[]),
    _table(G={"retryMaxTimes": -1}), _table(G={"retryMaxTimes": 2**31}),
    _table(G={"retryMaxTimes": "3"}), _table(G={"retryMaxTimes": True}),
    _table(G={"consumeMessageOrderly": "true"}),
])
def test_anything_else_from_a_broker_is_no_group_table(body: bytes) -> None:
    with pytest.raises(ValueError):
        convert.group_policy(body, "G")


@pytest.mark.parametrize(("attributes", "accepts"), [
    ({}, convert.ALL_TYPES), ({"message.type": "MIXED"}, convert.ALL_TYPES),
    ({"message.type": "FIFO"}, (pb.FIFO,)), ({"message.type": "DELAY"}, (pb.DELAY,)),
    ({"message.type": "UNSPECIFIED"}, (pb.MESSAGE_TYPE_UNSPECIFIED,)),
    ({"message.type": "nonsense"}, (pb.MESSAGE_TYPE_UNSPECIFIED,)),
])
def test_a_topics_declared_type_is_what_its_queues_accept(
        attributes: dict[str, str], accepts: tuple[int, ...]) -> None:
    info = convert.topic_info(orjson.dumps({"topicName": "T", "attributes": attributes}))
    assert info.exists
    assert convert.accept_message_types(info.message_type) == accepts


@pytest.mark.parametrize("body", [b"nope", b"[1]", b'{"attributes": {"a": 1}}',
                                  b'{"attributes": [1]}'])
def test_a_topic_config_that_is_none_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        convert.topic_info(body)


def test_a_consumer_of_an_unknown_group_keeps_its_own_long_poll_over_the_defaults() -> None:
    client = pb.Settings(client_type=pb.SIMPLE_CONSUMER,
                         subscription=pb.Subscription(group=pb.Resource(name="G")))
    client.subscription.long_polling_timeout.FromSeconds(5)
    unknown = convert.settings_reply(client, 1024)
    assert unknown.subscription.long_polling_timeout.seconds == 5
    assert unknown.backoff_policy.max_attempts == 17 and not unknown.subscription.fifo
    known = convert.settings_reply(client, 1024, convert.GroupPolicy(True, 0))
    assert known.subscription.long_polling_timeout.seconds == 20
    assert known.backoff_policy.max_attempts == 1 and known.subscription.fifo
    assert len(known.backoff_policy.customized_backoff.next) == 18  # not appended twice
    assert not known.HasField("publishing")


class FakeInstance:
    """A route with one master; its GET_ALL_SUBSCRIPTIONGROUP_CONFIG answers from ``bodies``
    (an exception is raised)."""

    def __init__(self, bodies: list[Any]) -> None:
        self.bodies = bodies
        self.calls = 0

    async def fetch_route(self, topic: str) -> TopicRouteData:
        return TopicRouteData(queue_datas=(QueueData("broker-a", 1, 1, 6),),
                              broker_datas=(BrokerData("C", "broker-a", {0: "127.0.0.1:1"}),))

    async def invoke_ok(self, addr: str, cmd: RemotingCommand, timeout: float | None = None
                        ) -> RemotingCommand:
        self.calls += 1
        body = self.bodies.pop(0)
        if isinstance(body, Exception):
            raise body
        return cmd.response(ResponseCode.SUCCESS, None, None, body)


async def test_a_group_is_kept_fresh_for_a_while_and_the_last_known_outlives_a_failure(
) -> None:
    now = [0.0]
    fake = FakeInstance([_table(G={"consumeMessageOrderly": True}),
                         MQRemotingError("down"), _table()])
    meta = ProxyMetadata(fake, ttl_s=10, missing_ttl_s=1, clock=lambda: now[0])  # type: ignore[arg-type]
    assert await meta.group("G", "T") == convert.GroupPolicy(True, 16)
    assert await meta.group("G", "T") == convert.GroupPolicy(True, 16) and fake.calls == 1
    now[0] = 11  # stale: read again; the broker does not answer: still orderly
    assert await meta.group("G", "T") == convert.GroupPolicy(True, 16) and fake.calls == 2
    assert await meta.group("G", "T") is None and fake.calls == 3  # the group went


def test_message_types_match_the_brokers_names() -> None:
    assert {t.value for t in MessageType} >= {"NORMAL", "FIFO", "DELAY", "TRANSACTION"}
