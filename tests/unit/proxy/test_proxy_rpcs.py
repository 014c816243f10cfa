"""The pure parts of mqproxy's transaction, assignment and dead-letter RPCs: transaction ids,
receipt handles with their CommitLog offset, QueryAssignment's answer, half messages."""

from __future__ import annotations

import hashlib

import attrs
import pytest

from rmq_cluster.client.errors import MQBrokerError
from rmq_cluster.cluster.protocol.message import StoredMessage
from rmq_cluster.cluster.protocol.route import BrokerData, PermName, QueueData, TopicRouteData
from rmq_cluster.cluster.protocol.topic_attributes import MessageType, type_mismatch
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.proxy import convert
from rmq_cluster.proxy.consume import parse_handle, to_pb
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.transaction import MAX_TRANSACTION_ID_CHARS, TransactionRef

EXTRA_INFO = "12 1700000000000 30000 0 0 broker-a 3 77"


def test_a_transaction_id_names_its_half_message_and_reads_back() -> None:
    ref = TransactionRef("broker-a:x", 5, 123456)
    assert TransactionRef.parse(ref.encode()) == ref


@pytest.mark.parametrize("text", [
    "", "TX1", "TX1:1:2:", "TX2:1:2:b", "TX1:-1:2:b", "TX1:1:x:b", "TX1:1:2:b\n",
    "TX1:" + "9" * 20 + ":2:b", "TX1:1:2:" + "b" * MAX_TRANSACTION_ID_CHARS,
    "TX1:١:2:b",  # a non-ASCII digit
])
def test_anything_else_is_an_invalid_transaction_id(text: str) -> None:
    with pytest.raises(convert.ProxyError) as err:
        TransactionRef.parse(text)
    assert err.value.code == pb.INVALID_TRANSACTION_ID


def test_a_receipt_handle_carries_the_commitlog_offset_after_the_brokers_extra_info() -> None:
    handle, offset = parse_handle(f"{EXTRA_INFO} 4096")
    assert (handle.broker_name, handle.queue_id, handle.queue_offset, offset) == (
        "broker-a", 3, 77, 4096)
    assert handle.encode() == EXTRA_INFO
    assert parse_handle(EXTRA_INFO)[1] is None  # the broker's own extraInfo alone
    for bad in ("", "x", f"{EXTRA_INFO} 1 2", f"{EXTRA_INFO} -1", "1 2 3 4 9 b 0 0 5"):
        with pytest.raises(convert.ProxyError) as err:
            parse_handle(bad)
        assert err.value.code == pb.INVALID_RECEIPT_HANDLE


def test_query_assignment_hands_out_each_readable_broker_whole() -> None:
    route = TopicRouteData(
        queue_datas=(QueueData("b", 4, 4, PermName.PERM_READ | PermName.PERM_WRITE),
                     QueueData("a", 2, 2, PermName.PERM_READ),
                     QueueData("c", 4, 4, PermName.PERM_WRITE),
                     QueueData("d", 4, 4, PermName.PERM_READ | PermName.PERM_WRITE)),
        broker_datas=(BrokerData("C", "a", {0: "h:1"}), BrokerData("C", "b", {0: "h:2"}),
                      BrokerData("C", "c", {0: "h:3"}), BrokerData("C", "d", {1: "h:4"})),
    )
    endpoints = pb.Endpoints(addresses=[pb.Address(host="127.0.0.1", port=8081)])
    got = convert.assignments("T", route, endpoints)
    # c cannot be read; d has no master
    assert [(a.message_queue.broker.name, a.message_queue.id, a.message_queue.permission)
            for a in got] == [("a", -1, pb.READ), ("b", -1, pb.READ_WRITE)]
    assert all(a.message_queue.broker.endpoints == endpoints for a in got)
    # accepted message types are a producer's matter: Apache's proxy names none here
    assert all(not a.message_queue.accept_message_types for a in got)


def _message(**system: object) -> pb.Message:
    m = pb.Message(topic=pb.Resource(name="T"), body=b"x")
    m.system_properties.message_id = "01"
    for key, value in system.items():
        setattr(m.system_properties, key, value)
    return m


def test_a_transaction_message_is_a_half_message_of_its_topics_producer_group() -> None:
    msg, group = convert.message_from_pb(_message(message_type=pb.TRANSACTION), 1024)
    assert group is None
    assert msg.properties["TRAN_MSG"] == "true" and msg.properties["PGROUP"] == "T"
    plain, _ = convert.message_from_pb(_message(), 1024)
    assert "TRAN_MSG" not in plain.properties


def test_a_transaction_message_with_a_message_group_or_a_user_system_key_is_refused() -> None:
    with pytest.raises(convert.ProxyError) as err:
        convert.message_from_pb(_message(message_type=pb.TRANSACTION, message_group="g"), 1024)
    assert err.value.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    sneaky = _message()
    sneaky.user_properties["TRAN_MSG"] = "true"
    with pytest.raises(convert.ProxyError) as err:
        convert.message_from_pb(sneaky, 1024)
    assert err.value.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_body_digests_are_md5_in_upper_case_hex() -> None:
    body = b"push 0"  # its CRC-32 starts with a zero digit
    assert convert.body_digest(body) == pb.Digest(
        type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper())


def test_the_brokers_message_type_refusal_is_message_property_conflict_with_type() -> None:
    """As Apache's 5.3.1 proxy answers a FIFO message sent to a NORMAL topic
    (tests/interop/test_proxy_differential.py); any other illegal message stays BAD_REQUEST."""
    remark = type_mismatch(MessageType.NORMAL, MessageType.FIFO)
    refused = MQBrokerError(ResponseCode.MESSAGE_ILLEGAL, remark, "127.0.0.1:10911")
    assert convert.error_status(refused).code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    other = MQBrokerError(ResponseCode.MESSAGE_ILLEGAL, "the message body is empty", None)
    assert convert.error_status(other).code == pb.BAD_REQUEST


def test_the_sdks_born_host_is_kept_and_the_brokers_own_properties_are_not_user_ones() -> None:
    """As Apache's 5.3.1 proxy (tests/interop/test_proxy_differential.py): a received message
    carries the born_host its SDK sent, and not the broker's CLUSTER or timer-wheel times as
    user properties."""
    sent = _message(born_host="sdk-host")
    sent.user_properties["idx"] = "1"
    msg, _ = convert.message_from_pb(sent, 1024)
    assert msg.properties[convert.PROPERTY_BORN_HOST] == "sdk-host"
    props = {**msg.properties, "CLUSTER": "C", "TIMER_ENQUEUE_MS": "1", "TIMER_DEQUEUE_MS": "2"}
    stored = StoredMessage(
        store_size=0, magic=0, body_crc=0, queue_id=0, flag=0, queue_offset=0,
        commitlog_offset=0, sys_flag=0, born_timestamp=1, born_host=("10.0.0.1", 5),
        store_timestamp=2, store_host=("10.0.0.2", 6), reconsume_times=0,
        prepared_transaction_offset=0, body=b"x", topic="T", properties=props)
    got = to_pb(stored, "T", "handle", 30_000)
    assert got.system_properties.born_host == "sdk-host"
    assert dict(got.user_properties) == {"idx": "1"}
    stored = attrs.evolve(stored, properties={})
    assert to_pb(stored, "T", "handle", 30_000).system_properties.born_host == "10.0.0.1:5"
