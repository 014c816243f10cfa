"""An orderly pop's delivery attempts through the proxy: ``orderCountInfo`` read as Apache's
client reads it (``MQClientAPIImpl.processPopResponse``, ``ExtraInfoUtil.parseOrderCountInfo``,
5.3.1): a message's count is its own item's (``<flag> qo<queueId>%<offset> <count>``), else
its queue's (``<flag> <queueId> <count>``), taken when above 0; the record's reconsume times
otherwise, and for a plain pop, and for a message carrying its own ``POP_CK``. A malformed
header is ignored (Apache's client fails the pop on it)."""

from __future__ import annotations

import pytest

from rmq_cluster.cluster.protocol.message import Message, encode_record
from rmq_cluster.cluster.protocol.pop import (
    PROPERTY_POP_CK,
    OrderCounts,
    PopFormatError,
    order_count_item,
    parse_start_offset_info,
)
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.proxy.consume import _popped

RETRY = "%RETRY%G_T"


def test_a_messages_own_item_wins_over_its_queues() -> None:
    counts = OrderCounts.parse("0 qo1%7 3;0 1 2")
    assert counts.reconsume_times("T", 1, 7, 0) == 3
    assert counts.reconsume_times("T", 1, 8, 0) == 2  # no item of its own: the queue's
    assert counts.reconsume_times("T", 2, 7, 5) == 5  # another queue: the record's
    assert counts.reconsume_times(RETRY, 1, 7, 4) == 4  # the retry topic's keys are "1@..."


def test_a_count_of_0_or_below_keeps_the_records_reconsume_times() -> None:
    counts = OrderCounts.parse("0 qo0%4 0;0 0 -1;1 0 2")
    assert counts.reconsume_times("T", 0, 4, 6) == 6  # its own item says 0: not the queue's
    assert counts.reconsume_times("T", 0, 5, 6) == 6  # the queue's -1
    assert counts.reconsume_times(RETRY, 0, 5, 0) == 2


def test_the_items_the_broker_writes_read_back() -> None:
    text = ";".join([order_count_item("T", 3, 10, 2), order_count_item(RETRY, 3, 11, 1),
                     "0 3 0"])
    assert OrderCounts.parse(text).counts == {"0@qo3%10": 2, "1@qo3%11": 1, "0@3": 0}
    assert OrderCounts.parse(None).counts == OrderCounts.parse("").counts == {}


@pytest.mark.parametrize("text", [
    "0 0",  # two fields
    "0 0 1 2",  # four
    "0  0 1",  # an empty field in the middle
    ";0 0 1",  # an empty item first
    "0 0 1;0 0 2",  # a key twice
    "0 0 x", "0 0 1.5", "0 0 ", "0 0 2147483648", "0 0 ٣",  # not a Java int
    ";".join(f"0 {q} 1" for q in range(65)),  # more items than a pop can have
])
def test_a_malformed_order_count_info_is_refused(text: str) -> None:
    with pytest.raises(PopFormatError):
        OrderCounts.parse(text)


def test_java_split_rules_trailing_separators_are_dropped() -> None:
    assert OrderCounts.parse("0 0 +2;").counts == {"0@0": 2}
    assert OrderCounts.parse("0 0 2 ").counts == {"0@0": 2}
    assert parse_start_offset_info("0 1 9;1 1 4") == {"0@1": 9, "1@1": 4}
    with pytest.raises(PopFormatError):
        parse_start_offset_info("0 1 9,10")


def _pop_answer(order_count_info: str | None, *records: Message) -> RemotingCommand:
    body = b"".join(encode_record(m, queue_offset=10 + i, phys_offset=1000 * i,
                                  store_timestamp=1) for i, m in enumerate(records))
    ext = {"popTime": "1000", "invisibleTime": "30000", "reviveQid": "999", "restNum": "0",
           "startOffsetInfo": "0 0 10", "msgOffsetInfo": "0 0 10,11"}
    if order_count_info is not None:
        ext["orderCountInfo"] = order_count_info
    return RemotingCommand(code=ResponseCode.SUCCESS, ext_fields=ext, body=body)


def _attempts(resp: RemotingCommand, *, orderly: bool) -> list[int]:
    return [m.system_properties.delivery_attempt
            for m in _popped(resp, "T", "broker-a", orderly=orderly)]


def test_an_orderly_pops_delivery_attempts_come_from_order_count_info() -> None:
    msgs = [Message("T", b"a"), Message("T", b"b")]
    assert _attempts(_pop_answer("0 qo0%10 2;0 qo0%11 2;0 0 2", *msgs), orderly=True) == [3, 3]
    # one new message in the batch: the queue's item says 0, the other keeps its own count
    assert _attempts(_pop_answer("0 qo0%10 1;0 0 0", *msgs), orderly=True) == [2, 1]
    # an older broker writing only the queue's item
    assert _attempts(_pop_answer("0 0 4", *msgs), orderly=True) == [5, 5]


def test_a_plain_pop_and_a_malformed_header_keep_the_records_reconsume_times() -> None:
    msgs = [Message("T", b"a", reconsume_times=1), Message("T", b"b")]
    assert _attempts(_pop_answer("0 0 4", *msgs), orderly=False) == [2, 1]
    for bad in ("0 0 4;0 0 5", "0 0 four", "garbage", "0 qo0%10 9999999999"):
        assert _attempts(_pop_answer(bad, *msgs), orderly=True) == [2, 1], bad
    assert _attempts(_pop_answer(None, *msgs), orderly=True) == [2, 1]


def test_a_message_with_its_own_receipt_handle_keeps_its_records_count() -> None:
    """A message of the pop retry topic comes with the broker's ``POP_CK``: Apache's client
    sets no count from orderCountInfo on it."""
    own = Message(RETRY, b"r", reconsume_times=1,
                  properties={PROPERTY_POP_CK: "10 1000 30000 999 1 broker-a 0 10"})
    plain = Message(RETRY, b"s")
    assert _attempts(_pop_answer("1 0 3", own, plain), orderly=True) == [2, 4]
