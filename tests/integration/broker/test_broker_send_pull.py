"""Send and pull through real sockets with raw remoting frames."""

from __future__ import annotations

import pytest
import trio

from rmq_cluster.cluster.protocol.message import encode_batch, tags_code
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import WAIT_S, Cluster, messages, ok


async def test_send_pull_round_trip(cluster: Cluster) -> None:
    resp = ok(await cluster.send("TopicA", b"hello world", tags="TagA"))
    ext = resp.ext_fields
    assert set(ext) >= {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}
    assert ext["MSG_REGION"] == "DefaultRegion" and ext["TRACE_ON"] == "true"
    assert ext["queueId"] == "0" and ext["queueOffset"] == "0"
    assert len(ext["msgId"]) == 32
    ok(await cluster.send("TopicA", b"second"))
    pulled = ok(await cluster.pull("TopicA"))
    msgs = messages(pulled)
    assert [m.body for m in msgs] == [b"hello world", b"second"]
    assert msgs[0].properties["TAGS"] == "TagA"
    assert msgs[0].properties["CLUSTER"] == "TestCluster"
    assert msgs[0].msg_id == ext["msgId"]
    assert pulled.ext_fields["nextBeginOffset"] == "2"
    assert pulled.ext_fields["maxOffset"] == "2"
    assert pulled.ext_fields["suggestWhichBrokerId"] == "0"
    # at the end: nothing new
    empty = await cluster.pull("TopicA", 2)
    assert empty.code == ResponseCode.PULL_NOT_FOUND
    assert empty.ext_fields["nextBeginOffset"] == "2"
    # offsets
    mx = ok(await cluster.call(RequestCode.GET_MAX_OFFSET, {"topic": "TopicA", "queueId": "0"}))
    assert mx.ext_fields["offset"] == "2"
    mn = ok(await cluster.call(RequestCode.GET_MIN_OFFSET, {"topic": "TopicA", "queueId": "0"}))
    assert mn.ext_fields["offset"] == "0"
    # view by id (offset from the msgId)
    phys = int(ext["msgId"][16:], 16)
    view = ok(await cluster.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys)}))
    assert messages(view)[0].body == b"hello world"
    # V1 header (long names) works too
    v1 = {
        "producerGroup": "PG",
        "topic": "TopicA",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "1",
        "sysFlag": "0",
        "bornTimestamp": "1",
        "flag": "0",
    }
    r = ok(await cluster.call(RequestCode.SEND_MESSAGE, v1, b"v1"))
    assert r.ext_fields["queueId"] == "1"


async def test_auto_created_topic_registers_with_nameserver(cluster: Cluster) -> None:
    ok(await cluster.send("FreshTopic", b"x"))
    tc = cluster.broker.topics.select("FreshTopic")
    assert tc is not None and tc.write_queue_nums == 4 and tc.perm == 6

    def has_route(state) -> bool:  # type: ignore[no-untyped-def]
        return "FreshTopic" in state.routes.topic_queue_table

    with trio.fail_after(WAIT_S):
        await cluster.ns.wait_until(has_route)


async def test_long_poll_wakes_on_arrival(cluster: Cluster) -> None:
    ok(await cluster.send("LP", b"first"))
    result: dict[str, object] = {}

    async def parked_pull() -> None:
        resp = await cluster.pull("LP", 1, suspend_ms=10_000, timeout=15)
        result["resp"] = resp
        result["at"] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked_pull)
        with trio.fail_after(WAIT_S):
            await cluster.broker.wait_until(lambda b: b.hold.parked > 0)
        sent_at = trio.current_time()
        ok(await cluster.send("LP", b"second"))
    resp = result["resp"]
    assert resp.code == ResponseCode.SUCCESS  # type: ignore[attr-defined]
    assert [m.body for m in messages(resp)] == [b"second"]  # type: ignore[arg-type]
    # woken by the arrival, not by its 10 s suspend (nothing rechecks on a tick): a bound far
    # below the suspend and far above a loaded machine's scheduling stalls (it was 50 ms)
    latency = float(result["at"]) - sent_at  # type: ignore[arg-type]
    assert latency < 2.0, latency


async def test_long_poll_times_out_with_pull_not_found(cluster: Cluster) -> None:
    ok(await cluster.send("LP2", b"first"))
    start = trio.current_time()
    resp = await cluster.pull("LP2", 1, suspend_ms=300)
    elapsed = trio.current_time() - start
    assert resp.code == ResponseCode.PULL_NOT_FOUND
    assert 0.25 < elapsed < 2.0


async def test_tag_filtering(cluster: Cluster) -> None:
    for tag in ["TagA", "TagB", "TagC", "TagA"]:
        ok(await cluster.send("Tags", tag.encode(), tags=tag))
    resp = ok(await cluster.pull("Tags", sub="TagA || TagC"))
    assert [m.body for m in messages(resp)] == [b"TagA", b"TagC", b"TagA"]
    resp = ok(await cluster.pull("Tags", sub="*"))
    assert len(messages(resp)) == 4
    none = await cluster.pull("Tags", sub="TagZ")
    assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert none.ext_fields["nextBeginOffset"] == "4"
    # a parked pull is not woken by a message of another tag
    assert tags_code("TagA") != tags_code("TagB")


async def test_batch_send(cluster: Cluster) -> None:
    items = [(0, f"m{i}".encode(), {"UNIQ_KEY": f"K{i:030d}"}) for i in range(10)]
    resp = ok(
        await cluster.send(
            "Batch",
            encode_batch(items),
            code=RequestCode.SEND_BATCH_MESSAGE,
            extra={"m": "true"},
        )
    )
    assert len(resp.ext_fields["msgId"].split(",")) == 10
    assert resp.ext_fields["queueOffset"] == "0"
    pulled = ok(await cluster.pull("Batch"))
    assert [m.body for m in messages(pulled)] == [f"m{i}".encode() for i in range(10)]
    assert all(m.properties["CLUSTER"] == "TestCluster" for m in messages(pulled))


async def test_cpp_style_batch_on_send_message_v1(cluster: Cluster) -> None:
    """The C++ client sends batches as SEND_MESSAGE (10) with long header names and batch="1":
    the header's flag, not the request code, makes the body a batch."""
    items = [(0, f"c{i}".encode(), {"UNIQ_KEY": f"C{i:030d}", "TAGS": "T"}) for i in range(3)]
    ext = {
        "producerGroup": "CppPG", "topic": "CppBatch", "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": "1",
        "flag": "0", "properties": "WAIT\x01true\x02", "reconsumeTimes": "0", "unitMode": "0",
        "batch": "1",
    }
    resp = ok(await cluster.call(RequestCode.SEND_MESSAGE, ext, encode_batch(items)))
    assert len(resp.ext_fields["msgId"].split(",")) == 3
    pulled = ok(await cluster.pull("CppBatch"))
    assert [m.body for m in messages(pulled)] == [b"c0", b"c1", b"c2"]
    # batch="0" is one message, whatever the body holds
    ok(await cluster.call(RequestCode.SEND_MESSAGE, {**ext, "batch": "0"}, b"plain"))
    pulled = ok(await cluster.pull("CppBatch", offset=3))
    assert [m.body for m in messages(pulled)] == [b"plain"]


async def test_query_consumer_offset_and_commit(cluster: Cluster) -> None:
    ok(await cluster.send("Off", b"a"))
    q = {"consumerGroup": "NewGroup", "topic": "Off", "queueId": "0"}
    resp = ok(await cluster.call(RequestCode.QUERY_CONSUMER_OFFSET, q))
    assert resp.ext_fields["offset"] == "0"
    ok(await cluster.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": "1"}))
    resp = ok(await cluster.call(RequestCode.QUERY_CONSUMER_OFFSET, q))
    assert resp.ext_fields["offset"] == "1"
    # the pull's commit-offset flag stores it too
    await cluster.pull("Off", 1, group="NewGroup", sys_flag=0x5, commit_offset=7)
    resp = ok(await cluster.call(RequestCode.QUERY_CONSUMER_OFFSET, q))
    assert resp.ext_fields["offset"] == "7"


async def test_query_consumer_offset_answers_without_a_dispatch_round(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group with no offset committed: answered from what is dispatched, as RocketMQ does
    (issue 39: a 4.x consumer asks once per queue it takes, one after the other, and each query
    ran a dispatch round of its own whenever a send load kept the reput behind)."""
    ok(await cluster.send("OffBehind", b"a"))
    store = cluster.broker.store
    rounds: list[int] = []
    real_dispatch = store.dispatch

    def counted(*args: int) -> int:
        rounds.append(1)
        return real_dispatch(*args)

    monkeypatch.setattr(type(store), "dispatch_behind_bytes", property(lambda _s: 1))
    monkeypatch.setattr(store, "dispatch", counted)
    q = {"consumerGroup": "NoOffsetYet", "topic": "OffBehind", "queueId": "0"}
    resp = ok(await cluster.call(RequestCode.QUERY_CONSUMER_OFFSET, q))
    assert resp.ext_fields["offset"] == "0"
    assert rounds == []


async def test_search_and_earliest_time(cluster: Cluster) -> None:
    ok(await cluster.send("Times", b"a"))
    resp = ok(
        await cluster.call(
            RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "Times", "queueId": "0"}
        )
    )
    ts = int(resp.ext_fields["timestamp"])
    assert ts > 0
    resp = ok(
        await cluster.call(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            {"topic": "Times", "queueId": "0", "timestamp": str(ts)},
        )
    )
    assert resp.ext_fields["offset"] == "0"


async def test_sync_flush_send_waits_and_answers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from .conftest import running_cluster

    async with running_cluster(tmp_path, flushDiskType="SYNC_FLUSH") as c:
        resp = ok(await c.send("SyncT", b"durable"))
        end = int(resp.ext_fields["msgId"][16:], 16)
        assert c.broker.store.flushed_offset > end
        no_wait = ok(await c.send("SyncT", b"x", props={"WAIT": "false"}))
        assert no_wait.ext_fields["queueOffset"] == "1"
        items = [(0, b"b1", {}), (0, b"b2", {})]
        ok(
            await c.send(
                "SyncT",
                encode_batch(items),
                code=RequestCode.SEND_BATCH_MESSAGE,
                extra={"m": "true"},
            )
        )
        pulled = ok(await c.pull("SyncT"))
        assert [m.body for m in messages(pulled)] == [b"durable", b"x", b"b1", b"b2"]
        assert "WAIT" not in messages(pulled)[0].properties


async def test_parked_pull_ignores_other_tags(cluster: Cluster) -> None:
    ok(await cluster.send("LPTag", b"zero", tags="TagA"))
    result: dict[str, object] = {}

    async def parked_pull() -> None:
        result["resp"] = await cluster.pull("LPTag", 1, sub="TagA", suspend_ms=10_000, timeout=15)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked_pull)
        with trio.fail_after(WAIT_S):
            await cluster.broker.wait_until(lambda b: b.hold.parked > 0)
        ok(await cluster.send("LPTag", b"other", tags="TagB"))
        cluster.broker.store.dispatch()
        assert cluster.broker.hold.parked == 1 and "resp" not in result
        ok(await cluster.send("LPTag", b"mine", tags="TagA"))
    resp = result["resp"]
    assert [m.body for m in messages(resp)] == [b"mine"]  # type: ignore[arg-type]
