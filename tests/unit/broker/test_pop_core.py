"""The pure parts of POP and RocketMQ 5 topic attributes: receipt handles, revive records,
the revive ledger, orderly blocks, queue allocation, attribute rules, message types and the
FIFO message group's queue (checked against Guava's consistentHash as the 5.x proxy runs it)."""

from __future__ import annotations

from typing import Final

import pytest

from rmq_cluster.broker.pop.modes import RequestModeTable, allocate_averagely, allocate_for_pop
from rmq_cluster.broker.pop.service import _order_count_info
from rmq_cluster.broker.pop.state import (
    MAX_ATTEMPT_ID_CHARS,
    OrderBlock,
    OrderBlocks,
    ReviveLedger,
    attempt_or_none,
)
from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol import pop as wire
from rmq_cluster.cluster.protocol import topic_attributes as ta


def test_receipt_handle_round_trip_and_refusals() -> None:
    text = "12 1700000000000 60000 3 1 broker-a 2 14"
    h = wire.ReceiptHandle.parse(text)
    assert (h.ck_offset, h.revive_qid, h.flag, h.queue_id, h.queue_offset) == (12, 3, "1", 2, 14)
    assert h.encode() == text and not h.is_order
    for bad in ("", "1 2 3", "a 2 3 4 0 b 0 1", "1 2 3 4 9 b 0 1", "-1 2 3 4 0 b 0 1",
                "1 2 3 4 0 b 0 1 9", "1 2 3 99999999999 0 b 0 1", "x" * 600):
        with pytest.raises(wire.PopFormatError):
            wire.ReceiptHandle.parse(bad)


def test_revive_records_use_apache_keys() -> None:
    ck = wire.Checkpoint("T", "G", 1, 10, 1000, 500, (0, 2), "b")
    assert wire.Checkpoint.decode(ck.encode()) == ck
    assert b'"so":10' in ck.encode() and b'"d":[0,2]' in ck.encode()
    assert b'"reviveTime":1500' in ck.encode()  # Apache's getter: popTime + invisibleTime
    ack = wire.AckRecord("T", "G", 1, 10, 12, 1000, "b")
    assert wire.AckRecord.decode(ack.encode()) == ack
    # Apache's long names are read too
    assert wire.AckRecord.decode(b'{"ackOffset":3,"startOffset":1,"consumerGroup":"G",'
                                 b'"topic":"T","queueId":0,"popTime":5}').ack_offset == 3
    for bad in (b"[]", b"{", b'{"t":"T","c":"G","q":-1,"so":0,"pt":0,"it":0}',
                b'{"t":"T","c":"G","q":0,"so":0,"pt":0,"it":0,"d":[-1]}'):
        with pytest.raises(wire.PopFormatError):
            wire.Checkpoint.decode(bad)


def test_ledger_finishes_acked_and_revives_due() -> None:
    ledger = ReviveLedger()
    ck = wire.Checkpoint("T", "G", 0, 5, 1000, 500, (0, 1, 3), "b")
    ledger.add_checkpoint(ck, 2, 40)
    ledger.add_ack(wire.AckRecord("T", "G", 0, 5, 6, 1000, "b"))
    assert ledger.due(1499) == [] and ledger.revive_offset(2, 50) == 40
    (due,) = ledger.due(1500)
    assert due.unacked() == [5, 8]
    ledger.finish(due)
    assert len(ledger) == 0 and ledger.revive_offset(2, 50) == 50
    # fully acked (even before the checkpoint is read): nothing pending
    for off in (5, 6, 8):
        ledger.add_ack(wire.AckRecord("T", "G", 0, 5, off, 1000, "b"))
    ledger.add_checkpoint(ck, 2, 41)
    assert len(ledger) == 0


def test_ledger_waits_for_the_acks_of_a_checkpoint_a_timer_delivered() -> None:
    """Apache's checkpoints reach the revive log through its timer 1 s before their revive
    time, their acks at it: such a checkpoint waits until the timer has delivered every
    message due up to its revive time, however late that is, and not a moment longer."""
    ledger = ReviveLedger()
    ck = wire.Checkpoint("T", "G", 0, 5, 1000, 500, (0, 1), "b")
    ledger.add_checkpoint(ck, 0, 7, delayed=True)
    assert ledger.earliest_revive_time() == 1500
    assert ledger.due(1500, 1499) == [] and ledger.due(60_000, 1499) == []
    ledger.add_ack(wire.AckRecord("T", "G", 0, 5, 5, 1000, "b"))
    (due,) = ledger.due(1500, 1500)
    assert due.unacked() == [6]


def test_order_blocks_one_batch_in_flight() -> None:
    blocks = OrderBlocks()
    key = ("T", "G", 0)
    assert blocks.popped(key, [0, 1], 100, 50) == {0: 0, 1: 0}
    assert blocks.blocked(key, 120) and not blocks.blocked(key, 150)
    assert blocks.ack(key, 0, 999) is None  # stale handle
    assert blocks.ack(key, 0, 100) == 1 and blocks.blocked(key, 120)
    assert blocks.popped(key, [1], 160, 50) == {1: 1}  # popped again: counted
    assert blocks.ack(key, 1, 160) == 2 and not blocks.blocked(key, 170)


def test_order_blocks_a_retried_attempt_keeps_its_counts() -> None:
    """As Apache's ``OrderInfo.mergeOffsetConsumedCount`` (5.3.1): a pop retrying the attempt
    of the batch in flight (its client never got it) gets that batch again with its counts as
    they were, even once it turned visible; another attempt, or none, counts each message of
    the batch once more (a new message 0); the attempt id outlives a reload of the file."""
    blocks = OrderBlocks()
    key = ("T", "G", 0)
    assert blocks.popped(key, [0, 1], 100, 50, attempt_id="A") == {0: 0, 1: 0}
    assert not blocks.blocked(key, 120, "A")
    assert blocks.blocked(key, 120, "B") and blocks.blocked(key, 120)
    assert blocks.popped(key, [0, 1], 120, 50, attempt_id="A") == {0: 0, 1: 0}  # the retry
    assert blocks.ack(key, 0, 100) is None  # the lost pop's handles went with it
    assert blocks.blocked(key, 169, "B") and not blocks.blocked(key, 170, "B")
    assert blocks.popped(key, [0, 1, 2], 170, 50, attempt_id="B") == {0: 1, 1: 1, 2: 0}
    # B's retry after its batch turned visible, one more message in it: still B's counts
    assert blocks.popped(key, [0, 1, 2, 3], 230, 50, attempt_id="B") == {
        0: 1, 1: 1, 2: 0, 3: 0}
    assert blocks.popped(key, [0, 1], 290, 50) == {0: 2, 1: 2}  # no attempt id: counted
    assert blocks.popped(key, [0, 1], 350, 50) == {0: 3, 1: 3}  # none is no attempt
    assert blocks.popped(key, [0, 1], 410, 50, attempt_id="C") == {0: 4, 1: 4}
    reloaded = OrderBlocks()
    assert reloaded.load(blocks.encode()) == 0
    assert reloaded.popped(key, [0, 1], 420, 50, attempt_id="C") == {0: 4, 1: 4}
    assert reloaded.popped(key, [0, 1], 480, 50, attempt_id="D") == {0: 5, 1: 5}
    # acked, the block is gone: a later pop of the same attempt starts afresh
    assert reloaded.ack(key, 0, 480) == 1 and reloaded.ack(key, 1, 480) == 2
    assert reloaded.popped(key, [2], 500, 50, attempt_id="D") == {2: 0}


@pytest.mark.parametrize("text", [
    "", "x" * (MAX_ATTEMPT_ID_CHARS + 1), "tab\there", "new\nline", "caf\u00e9", None, 7])
def test_an_attempt_id_out_of_bounds_is_no_attempt(text: object) -> None:
    """Client text, from a request or the order info file: printable ASCII of 1 to 128
    characters, else no attempt (counted and blocked as any new pop)."""
    assert attempt_or_none(text) is None
    block = OrderBlock.from_json_obj({"popTime": 1, "i": 10, "o": [0], "a": text})
    assert block.attempt_id is None
    blocks = OrderBlocks()
    blocks.load(fastjson.dumps({"table": {"T@G": {0: {"popTime": 1, "i": 10, "o": [0],
                                                      "a": text}}}}))
    assert blocks.blocked(("T", "G", 0), 5, attempt_or_none(text))


def test_an_attempt_id_in_bounds_is_kept() -> None:
    uuid = "0f6c5d0e-94a1-4c5e-9a3b-2c1d7e8f9a0b"  # what the 5.x SDKs send
    for text in (uuid, "x" * MAX_ATTEMPT_ID_CHARS, "a b~!"):
        assert attempt_or_none(text) == text
        block = OrderBlock.from_json_obj({"popTime": 1, "i": 10, "o": [0], "a": text})
        assert block.attempt_id == text


def test_allocation_for_pop_and_pull() -> None:
    queues = [("T", "a", q) for q in range(4)] + [("T", "b", q) for q in range(4)]
    cids = ["c0", "c1", "c2"]
    got = [allocate_averagely(queues, cids, c) for c in cids]
    assert [q for g in got for q in g] == queues and [len(g) for g in got] == [3, 3, 2]
    assert allocate_for_pop(queues, cids, "c1", 0) == [("T", "a", -1), ("T", "b", -1)]
    assert allocate_for_pop(queues[:2], cids, "c2", 1) == [("T", "a", 0)]
    table = RequestModeTable()
    table.set(wire.RequestModeSetting("T", "G", wire.RequestMode.POP, 2))
    again = RequestModeTable()
    again.load(table.encode())
    assert again.get("T", "G") == wire.RequestModeSetting("T", "G", wire.RequestMode.POP, 2)


def test_topic_attribute_rules() -> None:
    assert ta.alter(True, {}, "+message.type=FIFO") == {"message.type": "FIFO"}
    assert ta.alter(False, {"message.type": "FIFO"}, "-message.type") == {}
    assert ta.alter(False, {}, None) == {}
    for create, current, text in (
        (True, {}, "-message.type"), (True, {}, "+message.type=BAD"), (True, {}, "+foo=1"),
        (False, {}, "-message.type"), (False, {"queue.type": "SimpleCQ"}, "+queue.type=BatchCQ"),
        (True, {}, "message.type=FIFO"), (True, {}, "+message.type=FIFO,+message.type=DELAY"),
        (True, {}, "+reserve.time=x"),
    ):
        with pytest.raises(ta.AttributeError_):
            ta.alter(create, current, text)


def test_message_types_and_the_validator() -> None:
    assert ta.message_type({}) is ta.MessageType.NORMAL
    assert ta.message_type({"__SHARDINGKEY": "g"}) is ta.MessageType.FIFO
    assert ta.message_type({"DELAY": "3", "__SHARDINGKEY": "g"}) is ta.MessageType.DELAY
    assert ta.message_type({"TRAN_MSG": "true"}) is ta.MessageType.TRANSACTION
    assert ta.type_mismatch(None, ta.MessageType.DELAY) is None  # a 4.x topic takes anything
    assert ta.type_mismatch(ta.MessageType.MIXED, ta.MessageType.FIFO) is None
    assert ta.type_mismatch(ta.MessageType.FIFO, ta.MessageType.FIFO) is None
    assert ta.type_mismatch(ta.MessageType.FIFO, ta.MessageType.NORMAL) == (
        "TopicMessageType validate failed, the expected type is FIFO, but actual type is NORMAL")


@pytest.mark.parametrize(("group", "buckets", "want"), [
    # Guava 32.0.1's Hashing.consistentHash(group.hashCode(), buckets), run in a JVM
    ("order-1", 1, 0), ("order-1", 8, 3), ("order-1", 16, 3), ("order-1", 1024, 489),
    ("g", 2, 1), ("g", 8, 1), ("g", 16, 12), ("g", 1024, 223), ("", 16, 0),
    ("中文组", 8, 7), ("中文组", 16, 7), ("中文组", 1024, 52), ("x-99", 4, 0),
    ("abcdefghijklmnop", 4, 3),
])
def test_fifo_group_queue_matches_guava(group: str, buckets: int, want: int) -> None:
    assert ta.fifo_queue_index(group, buckets) == want


def test_order_count_info_as_apache_writes_it() -> None:
    """Apache 5.3.1 (tests/interop: pop_order): messages handed out before get an item each,
    then the queue's item carries the least count (0 while one of the batch is new)."""
    assert _order_count_info("T", 0, [0, 1], {0: 0, 1: 0}) == ["0 0 0"]
    assert _order_count_info("T", 0, [2, 3], {2: 2, 3: 2}) == [
        "0 qo0%2 2", "0 qo0%3 2", "0 0 2"]
    assert _order_count_info("%RETRY%G_T", 1, [4, 5], {4: 1, 5: 0}) == ["1 qo1%4 1", "1 1 0"]


def test_order_blocks_file_round_trip_in_apache_layout() -> None:
    blocks = OrderBlocks()
    key = ("T", "G", 2)
    blocks.popped(key, [7, 8, 10], 1000, 500, attempt_id="a1")
    blocks.change_invisible(key, 10, 1000, 1200, 900)
    assert blocks.ack(key, 8, 1000) == 7 and blocks.changed
    data = blocks.encode()
    assert b'"T@G":{2:{' in data  # the queue id an unquoted integer, as fastjson writes it
    info = fastjson.loads(data)["table"]["T@G"]["2"]
    assert info["o"] == [7, 1, 3] and info["cm"] == 0b010
    assert info["popTime"] == 1000 and info["i"] == 500
    assert info["ot"] == {"10": 2100} and info["a"] == "a1" and "oc" not in info
    again = OrderBlocks()
    assert again.load(data) == 0 and not again.changed
    assert again.blocked(key, 1400) and not again.blocked(key, 2200)
    assert again.ack(key, 7, 1000) == 10 and again.ack(key, 10, 1000) == 11
    # a re-pop after a reload keeps counting
    blocks.popped(key, [7, 10], 1600, 500)
    reloaded = OrderBlocks()
    reloaded.load(blocks.encode())
    assert reloaded.popped(key, [7, 10], 2200, 500) == {7: 2, 10: 2}


#: config/consumerOrderInfo.json as Apache 5.3.1's broker wrote it (tests/interop/
#: test_store_crossing5.py): a batch of offsets 0 and 1 popped orderly, the first acked. Its
#: fastjson annotations name the fields (``o``, ``cm``, ``i``, ``l``, ...), not the getters.
APACHE_ORDER_INFO: Final = b"""{
\t"table":{
\t\t"Cross5Fifo@Cross5OG":{0:{
\t\t\t\t"cm":1,
\t\t\t\t"i":30000,
\t\t\t\t"l":1795990543089,
\t\t\t\t"o":[
\t\t\t\t\t0,
\t\t\t\t\t1
\t\t\t\t],
\t\t\t\t"oc":{1:2},
\t\t\t\t"popTime":1795990543081
\t\t\t}
\t\t}
\t}
}"""


def test_order_blocks_read_apaches_file() -> None:
    blocks = OrderBlocks()
    assert blocks.load(APACHE_ORDER_INFO) == 0
    key = ("Cross5Fifo", "Cross5OG", 0)
    pop_time = 1795990543081
    assert blocks.blocked(key, pop_time + 29_999) and not blocks.blocked(key, pop_time + 30_000)
    assert blocks.count(key, 1) == 2 and blocks.count(key, 0) == 0
    assert blocks.ack(key, 1, pop_time) == 2  # offset 0 was acked already: the batch is done
    # popped again once visible: offset 0 had no count (handed out once), so it counts 1
    again = OrderBlocks()
    again.load(APACHE_ORDER_INFO)
    assert again.popped(key, [0, 1], pop_time + 30_000, 1000) == {0: 1, 1: 3}


def test_order_blocks_file_refuses_malformed_entries() -> None:
    blocks = OrderBlocks()
    bad = (b'{"table":{"T@G":{"0":{"popTime":-1,"offsetList":[1]},'
           b'"1":{"popTime":1,"offsetList":[]},"x":{"popTime":1,"offsetList":[1]},'
           b'"3":{"popTime":1,"offsetList":[1],"offsetConsumedCount":[1]},'
           b'"4":{"popTime":1,"invisibleTime":5,"offsetList":[4,1]}},'
           b'"nogroup":{"0":{}}}}')
    assert blocks.load(bad) == 5
    assert blocks.blocked(("T", "G", 4), 3) and not blocks.blocked(("T", "G", 0), 0)
    with pytest.raises(ValueError):
        blocks.load(b"[1]")
