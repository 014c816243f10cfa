"""Pure client pieces: ids, allocation, fault tolerance, offset tables, routes, messages."""

from __future__ import annotations

import itertools
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.client.allocate import allocate_averagely, allocate_by_circle
from rmq_cluster.client.config import ClientConfig, split_namesrv
from rmq_cluster.client.fault import LatencyFaultTolerance
from rmq_cluster.client.ids import UniqIdGenerator, build_client_id
from rmq_cluster.client.instance import (
    object_key_map,
    parse_offset_table,
    publish_queues,
    subscribe_queues,
)
from rmq_cluster.client.model import Message, MessageQueue, ReceivedMessage
from rmq_cluster.client.subscription import build_subscription
from rmq_cluster.cluster.protocol.message import (
    SYSFLAG_COMPRESSED,
    RecordError,
    decode_record,
    encode_record,
    iter_records,
)
from rmq_cluster.cluster.protocol.message import (
    Message as StoreMessage,
)
from rmq_cluster.cluster.protocol.route import BrokerData, QueueData, TopicRouteData


def test_uniq_id_layout() -> None:
    gen = UniqIdGenerator(ip="10.1.2.3", pid=0x12345)
    a, b = gen.next_id(), gen.next_id()
    assert len(a) == 32 and a != b and a.isupper()
    assert a.startswith("0A010203" + "2345")  # IP, low 16 bits of the pid
    assert int(b[-4:], 16) == int(a[-4:], 16) + 1  # counter


def test_client_id_and_namesrv_list(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_client_id("1.2.3.4", "inst") == "1.2.3.4@inst"
    assert build_client_id("1.2.3.4", "inst", "u") == "1.2.3.4@inst@u"
    assert split_namesrv("a:1; b:2;;") == ("a:1", "b:2")
    monkeypatch.setenv("NAMESRV_ADDR", "x:9876;y:9876")
    assert ClientConfig().namesrv_list() == ("x:9876", "y:9876")
    assert ClientConfig(namesrv_addr="z:1").namesrv_list() == ("z:1",)


def _mqs(n: int) -> list[MessageQueue]:
    return [MessageQueue("T", f"b{i % 2}", i // 2) for i in range(n)]


def test_allocate_averagely_matches_java_examples() -> None:
    mqs = sorted(_mqs(8))
    cids = ["c1", "c2", "c3"]
    got = [allocate_averagely("G", c, mqs, cids) for c in cids]
    assert [len(g) for g in got] == [3, 3, 2]
    assert got[0] == mqs[0:3] and got[1] == mqs[3:6] and got[2] == mqs[6:8]
    assert allocate_averagely("G", "c9", mqs, cids) == []
    assert [len(allocate_averagely("G", c, mqs[:2], cids)) for c in cids] == [1, 1, 0]


@given(st.integers(0, 40), st.integers(1, 9))
def test_allocation_partitions_queues(n_mq: int, n_cid: int) -> None:
    mqs = _mqs(n_mq)
    cids = [f"c{i}" for i in range(n_cid)]
    for strategy in (allocate_averagely, allocate_by_circle):
        parts = [strategy("G", c, list(reversed(mqs)), cids) for c in cids]
        flat = list(itertools.chain.from_iterable(parts))
        assert sorted(flat) == sorted(mqs)  # every queue exactly once: none orphaned or shared


def test_latency_fault_tolerance() -> None:
    f = LatencyFaultTolerance()
    f.update("a", 40, False, now_ms=1000)
    assert f.is_available("a", 1000)
    f.update("b", 600, False, now_ms=1000)
    assert not f.is_available("b", 1000) and f.is_available("b", 31000)
    f.update("c", 0, True, now_ms=1000)  # isolated: counts as 30 s -> 600 s out
    assert not f.is_available("c", 500_000) and f.is_available("c", 601_000)
    assert f.pick_one_at_least(1000) == "a"


def test_offset_table_round_trip_and_cpp_form() -> None:
    mq = MessageQueue("T", "b", 3)
    body = b'{"offsetTable":' + object_key_map([(mq.to_json_obj(), 17)]) + b"}"
    assert parse_offset_table(body) == {mq: 17}
    cpp = b'{"offsetTable":[{"brokerName":"b","offset":5,"queueId":3,"topic":"T"}]}'
    assert parse_offset_table(cpp) == {mq: 5}


def test_route_to_queues() -> None:
    route = TopicRouteData(
        queue_datas=(QueueData("a", 4, 2, 6), QueueData("b", 2, 2, 4), QueueData("c", 2, 2, 6)),
        broker_datas=(BrokerData("C", "a", {0: "x:1"}), BrokerData("b", "b", {0: "y:1"}),
                      BrokerData("C", "c", {1: "z:1"})),
    )
    pub = publish_queues("T", route)
    assert pub == [MessageQueue("T", "a", 0), MessageQueue("T", "a", 1)]  # b read-only, c no master
    sub = subscribe_queues("T", route)
    assert len(sub) == 8
    ordered = TopicRouteData(order_topic_conf="a:2;c:1")
    assert publish_queues("T", ordered) == [MessageQueue("T", "a", 0), MessageQueue("T", "a", 1),
                                            MessageQueue("T", "c", 0)]


def test_message_properties_and_received_message() -> None:
    m = Message("T", b"x", tags="A", keys=["k1", "k2"], properties={"p": "v"}, delay_level=2)
    props = m.wire_properties()
    assert list(props) == ["TAGS", "KEYS", "WAIT", "DELAY", "p"]
    assert props["KEYS"] == "k1 k2" and props["DELAY"] == "2"
    body = zlib.compress(b"y" * 5000)
    rec = encode_record(
        StoreMessage("%RETRY%G", body, queue_id=0, properties={"RETRY_TOPIC": "T",
                                                               "UNIQ_KEY": "U" * 32},
                     sys_flag=SYSFLAG_COMPRESSED | 0x300, store_host=("127.0.0.1", 10911)),
        queue_offset=5, phys_offset=1000, store_timestamp=1,
    )
    rm = ReceivedMessage.from_stored(decode_record(rec), "b")
    assert rm.body == b"y" * 5000 and rm.msg_id == "U" * 32 and len(rm.offset_msg_id) == 32
    assert rm.restore_retry_topic("G").topic == "T"
    assert rm.restore_retry_topic("OTHER").topic == "%RETRY%G"


_records = st.lists(
    st.tuples(
        st.sampled_from(["T", "%RETRY%G", "Tópico"]),
        st.integers(0, 3),
        st.binary(max_size=64),
        st.booleans(),  # compressed
        st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a"]),
                        st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF),
                                min_size=1, max_size=8), max_size=3),
        st.sampled_from([("127.0.0.1", 10911), ("10.0.0.2", 10921)]),
    ),
    min_size=1,
    max_size=12,
)


@given(_records)
def test_decode_all_matches_record_by_record(records: list[tuple[Any, ...]]) -> None:
    """The per-body decoder (what consumers use) gives what the general path gives."""
    data, pos = b"", 0
    for i, (topic, queue_id, body, compressed, props, host) in enumerate(records):
        rec = encode_record(
            StoreMessage(topic, zlib.compress(body) if compressed else body, queue_id=queue_id,
                         properties=props, sys_flag=SYSFLAG_COMPRESSED if compressed else 0,
                         store_host=host, born_host=("127.0.0.9", 5000 + i)),
            queue_offset=i, phys_offset=pos, store_timestamp=1000 + i,
        )
        data += rec
        pos += len(rec)
    general = [ReceivedMessage.from_stored(r, "b") for r in iter_records(data, check_crc=False)]
    assert ReceivedMessage.decode_all(data, "b") == general
    assert ReceivedMessage.decode_all(memoryview(data), "b", check_crc=True) == general
    with pytest.raises(RecordError):
        ReceivedMessage.decode_all(data[:-1], "b")


def test_subscription_matching() -> None:
    s = build_subscription("T", "A || B", 1)
    assert s.matches("A") and s.matches("B") and not s.matches("C") and not s.matches(None)
    assert build_subscription("T", "*", 1).matches(None)
    assert build_subscription("T", "", 1).is_all


async def test_pull_follows_suggested_broker_and_never_commits_on_a_slave() -> None:
    """PullApi sends the next pull of a queue to ``suggestWhichBrokerId`` and clears the
    COMMIT_OFFSET bit when the target is a slave (Java PullAPIWrapper)."""
    from rmq_cluster.client.consumer import PullApi
    from rmq_cluster.client.instance import ClientInstance
    from rmq_cluster.cluster.remoting.codec import RemotingCommand

    inst = ClientInstance(ClientConfig(namesrv_addr="127.0.0.1:1", client_ip="127.0.0.1"))
    inst.broker_addrs["b"] = {0: "master:1", 1: "slave:1"}
    calls: list[tuple[str, dict[str, str]]] = []

    async def invoke(addr: str, cmd: RemotingCommand, timeout: float | None = None
                     ) -> RemotingCommand:
        calls.append((addr, dict(cmd.ext_fields)))
        return RemotingCommand(code=19, ext_fields={
            "suggestWhichBrokerId": "1", "nextBeginOffset": "5", "minOffset": "0",
            "maxOffset": "5"})

    inst.invoke = invoke  # type: ignore[method-assign]
    api = PullApi(inst, "G")
    mq = MessageQueue("T", "b", 0)
    sub = build_subscription("T", "*", 1)
    await api.pull(mq, 5, sub=sub, commit_offset=3, suspend_s=1.0)
    await api.pull(mq, 5, sub=sub, commit_offset=3, suspend_s=1.0)
    assert [a for a, _ in calls] == ["master:1", "slave:1"]
    assert int(calls[0][1]["sysFlag"]) & 0x1 and calls[0][1]["commitOffset"] == "3"
    assert not int(calls[1][1]["sysFlag"]) & 0x1 and calls[1][1]["commitOffset"] == "0"
    del inst.broker_addrs["b"][0]  # master gone: any broker of the group serves the pull
    api.suggested.clear()
    await api.pull(mq, 5, sub=sub)
    assert calls[-1][0] == "slave:1"
