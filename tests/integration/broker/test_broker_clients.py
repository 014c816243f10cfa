"""Heartbeats, consumer groups, retry/DLQ, delay levels, restarts, bad input, admin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import trio

from rmq_cluster.client.admin import parse_consume_stats
from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol.route import TopicConfigSerializeWrapper
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.connection import Connection

from .conftest import WAIT_S, Cluster, messages, ok, running_cluster


def heartbeat_body(client_id: str, group: str, topic: str, cpp: bool = False) -> bytes:
    if cpp:  # C++ 2.0: integer enums, string subVersion, trailing newline
        sub = {"topic": topic, "subString": "*", "subVersion": "1700000000000"}
        data = {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": 1,
                    "messageModel": 1,
                    "consumeFromWhere": 0,
                    "subscriptionDataSet": [sub],
                }
            ],
        }
        return orjson.dumps(data) + b"\n"
    return orjson.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [
                        {
                            "classFilterMode": False,
                            "codeSet": [],
                            "expressionType": "TAG",
                            "subString": "*",
                            "subVersion": 1,
                            "tagsSet": [],
                            "topic": topic,
                        }
                    ],
                    "unitMode": False,
                }
            ],
            "producerDataSet": [{"groupName": "PG"}, {"groupName": "CLIENT_INNER_PRODUCER"}],
        }
    )


async def test_heartbeat_creates_retry_topic_and_notifies_group(cluster: Cluster) -> None:
    notified: list[str] = []
    got = trio.Event()

    def on_notify(conn: Connection, request: RemotingCommand) -> None:
        notified.append(request.ext_fields["consumerGroup"])
        got.set()

    async with open_remoting_client({RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify}) as c1:
        hb = RemotingCommand.request(RequestCode.HEART_BEAT, None, heartbeat_body("c1", "G1", "T"))
        ok(await c1.invoke(cluster.addr, hb, WAIT_S))
        producers = ok(
            await cluster.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG"})
        )
        assert fastjson.loads(producers.body)["connectionSet"][0]["clientId"] == "c1"
        assert cluster.broker.topics.select("%RETRY%G1") is not None

        def has_retry(state) -> bool:  # type: ignore[no-untyped-def]
            return "%RETRY%G1" in state.routes.topic_queue_table

        with trio.fail_after(WAIT_S):
            await cluster.ns.wait_until(has_retry)
        # a C++-form heartbeat from a second client joins the group: c1 is told
        got = trio.Event()
        notified.clear()
        hb2 = RemotingCommand.request(
            RequestCode.HEART_BEAT,
            None,
            heartbeat_body("c2", "G1", "T", cpp=True),
            language="CPP",
            version=333,
        )
        ok(await cluster.call(RequestCode.HEART_BEAT, None, hb2.body))
        with trio.fail_after(WAIT_S):
            await got.wait()
        assert notified[0] == "G1"
        lst = ok(
            await cluster.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G1"})
        )
        assert sorted(fastjson.loads(lst.body)["consumerIdList"]) == ["c1", "c2"]
        conns = ok(
            await cluster.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G1"})
        )
        assert len(fastjson.loads(conns.body)["connectionSet"]) == 2
    # c1's connection closed: it leaves the group at once
    with trio.fail_after(WAIT_S):
        await cluster.broker.wait_until(lambda b: len(b.clients.consumer_channels("G1")) == 1)
    ok(await cluster.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "c2", "consumerGroup": "G1"}))
    gone = await cluster.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G1"})
    assert gone.code == ResponseCode.SYSTEM_ERROR
    assert gone.remark == "no consumer for this group, G1"


async def test_pull_with_heartbeat_subscription(cluster: Cluster) -> None:
    ok(await cluster.call(RequestCode.HEART_BEAT, None, heartbeat_body("c1", "G2", "HT")))
    ok(await cluster.send("HT", b"x"))
    resp = ok(await cluster.pull("HT", group="G2", sys_flag=0))
    assert len(messages(resp)) == 1
    missing = await cluster.pull("HT", group="NoSuchGroupOnline", sys_flag=0)
    assert missing.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    other = await cluster.pull("OtherTopic", group="G2", sys_flag=0)
    assert other.code in (ResponseCode.SUBSCRIPTION_NOT_EXIST, ResponseCode.TOPIC_NOT_EXIST)
    # the request's subVersion is newer than the heartbeat's: the broker says so
    ext = {
        "consumerGroup": "G2",
        "topic": "HT",
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "0",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": "99",
    }
    stale = await cluster.call(RequestCode.PULL_MESSAGE, ext)
    assert stale.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
    as_tag = await cluster.pull("HT", sub="a > 1", sys_flag=0x4)
    assert as_tag.code == ResponseCode.PULL_RETRY_IMMEDIATELY  # a TAG named "a > 1": no match
    sql = await cluster.call(
        RequestCode.PULL_MESSAGE,
        {**ext, "sysFlag": "4", "subscription": "a > 1", "expressionType": "SQL92"},
    )
    # SQL92 needs enablePropertyFilter=true (tests/integration/client/test_sql92.py)
    assert sql.code == ResponseCode.SYSTEM_ERROR
    assert "does not support consumer to filter message by SQL92" in (sql.remark or "")


async def _dispatched(store: Any, topic: str, qid: int) -> None:
    """Until the queue holds a message. A queue new here may be past the store's inline
    allowance of new ConsumeQueue files a second: a worker makes the file and the dispatch
    follows (polled under a deadline)."""
    with trio.fail_after(WAIT_S):
        while store.dispatch() or store.get_max_offset_in_queue(topic, qid) < 1:  # noqa: ASYNC110
            await trio.sleep(0.01)


async def test_retry_then_dlq_after_16(cluster: Cluster) -> None:
    store = cluster.broker.store
    ok(await cluster.send("RT", b"payload", tags="T1"))
    offset = store.get_commitlog_offset_in_queue("RT", 0, 0)
    for i in range(16):
        ok(
            await cluster.call(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {
                    "offset": str(offset),
                    "group": "RG",
                    "delayLevel": "0",
                    "originMsgId": "X",
                    "maxReconsumeTimes": "16",
                },
            )
        )
        # each retry is delayed: it sits in SCHEDULE_TOPIC_XXXX at level 3 + reconsumeTimes
        level = min(3 + i, 18)
        qid = level - 1
        await _dispatched(store, "SCHEDULE_TOPIC_XXXX", qid)
        last = store.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", qid) - 1
        offset = store.get_commitlog_offset_in_queue("SCHEDULE_TOPIC_XXXX", qid, last)
        rec = store.lookup_message_by_offset(offset)
        assert rec is not None and rec.reconsume_times == i + 1
        assert rec.properties["REAL_TOPIC"] == "%RETRY%RG"
        assert rec.properties["RETRY_TOPIC"] == "RT"
    ok(
        await cluster.call(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {"offset": str(offset), "group": "RG", "delayLevel": "0", "maxReconsumeTimes": "16"},
        )
    )
    await _dispatched(store, "%DLQ%RG", 0)
    dlq = ok(await cluster.pull("%DLQ%RG", group="RG"))
    (msg,) = messages(dlq)
    assert msg.body == b"payload" and msg.reconsume_times == 17
    assert msg.properties["RETRY_TOPIC"] == "RT"
    bad = await cluster.call(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {"offset": str(10**12), "group": "RG", "delayLevel": "0"},
    )
    assert bad.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in bad.remark


async def test_delay_level_1_delivered_after_a_second(cluster: Cluster) -> None:
    start = trio.current_time()
    ok(await cluster.send("Delayed", b"later", props={"DELAY": "1"}))
    # a long poll that outlasts a stalled machine: woken when the message is delivered
    first = await cluster.pull("Delayed", suspend_ms=8000, timeout=15)
    assert first.code == ResponseCode.SUCCESS, first.remark
    elapsed = trio.current_time() - start
    assert 0.9 <= elapsed < 5.0, elapsed  # level 1 (1 s), not level 2 (5 s)
    (msg,) = messages(first)
    assert msg.body == b"later" and msg.properties["DELAY"] == "1"  # its level, as Apache
    assert cluster.broker.schedule.offsets.get(1) == 1


async def test_bad_input_answers_and_keeps_serving(cluster: Cluster) -> None:
    big = await cluster.send("Big", b"x" * (4 * 1024 * 1024 + 1))
    assert big.code == ResponseCode.MESSAGE_ILLEGAL and big.remark
    illegal = await cluster.send("bad topic!", b"x")
    assert illegal.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in illegal.remark
    forbidden = await cluster.send("SCHEDULE_TOPIC_XXXX", b"x")
    assert forbidden.code == ResponseCode.NO_PERMISSION
    missing = await cluster.call(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "T"}, b"x")
    assert missing.code == ResponseCode.SYSTEM_ERROR and "'c'" in missing.remark
    unknown_q = await cluster.send("QTopic", b"x", queue_id=99)
    assert unknown_q.code == ResponseCode.SYSTEM_ERROR and "queueId[99] is illegal" in (
        unknown_q.remark or ""
    )
    bad_pull = await cluster.pull("QTopic", queue_id=99)
    assert bad_pull.code == ResponseCode.SYSTEM_ERROR
    no_topic = await cluster.pull("NeverSeen")
    assert no_topic.code == ResponseCode.TOPIC_NOT_EXIST
    bad_hb = await cluster.call(RequestCode.HEART_BEAT, None, b"{not json")
    assert bad_hb.code == ResponseCode.SYSTEM_ERROR
    unsupported = await cluster.call(9999)
    assert unsupported.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    ok(await cluster.send("QTopic", b"still fine"))


async def test_no_auto_create_answers_topic_not_exist(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, autoCreateTopicEnable="false") as c:
        resp = await c.send("NoSuch", b"x")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "not exist" in (resp.remark or "")


async def test_offsets_and_topics_survive_restart(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as c:
        ok(await c.send("Persist", b"a"))
        ok(await c.send("Persist", b"b"))
        q = {"consumerGroup": "PGroup", "topic": "Persist", "queueId": "0"}
        ok(await c.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": "1"}))
        settings = c.broker.settings
        await c.stop_broker()

        def unregistered(state) -> bool:  # type: ignore[no-untyped-def]
            return not state.routes.live_brokers

        with trio.fail_after(WAIT_S):
            await c.ns.wait_until(unregistered)
        assert (c.store_dir / "config" / "consumerOffset.json").exists()
        await c.start_broker(settings)
        resp = ok(await c.call(RequestCode.QUERY_CONSUMER_OFFSET, q))
        assert resp.ext_fields["offset"] == "1"
        assert c.broker.topics.select("Persist") is not None
        pulled = ok(await c.pull("Persist", 1))
        assert [m.body for m in messages(pulled)] == [b"b"]


async def test_admin_requests(cluster: Cluster) -> None:
    create = {
        "topic": "AdminT",
        "defaultTopic": "TBW102",
        "readQueueNums": "2",
        "writeQueueNums": "2",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "order": "false",
    }
    ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create))
    wrapper = TopicConfigSerializeWrapper.decode(
        ok(await cluster.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body
    )
    assert wrapper.topic_config_table["AdminT"].read_queue_nums == 2
    assert "TBW102" in wrapper.topic_config_table
    ok(await cluster.send("AdminT", b"x", queue_id=1))
    stats = ok(await cluster.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "AdminT"}))
    assert b'"maxOffset":1' in bytes(stats.body)
    info = ok(await cluster.call(RequestCode.GET_BROKER_RUNTIME_INFO))
    table = fastjson.loads(info.body)["table"]
    assert int(table["msgPutTotalTodayNow"]) >= 1
    cfg = ok(await cluster.call(RequestCode.GET_BROKER_CONFIG))
    assert b"brokerName=broker-a" in bytes(cfg.body)
    ok(
        await cluster.call(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            None,
            orjson.dumps({"groupName": "AG", "retryMaxTimes": 3}),
        )
    )
    groups = fastjson.loads(
        ok(await cluster.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body
    )
    assert groups["subscriptionGroupTable"]["AG"]["retryMaxTimes"] == 3
    ok(
        await cluster.call(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "AG", "topic": "AdminT", "queueId": "1", "commitOffset": "1"},
        )
    )
    consume = ok(await cluster.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "AG"}))
    assert b'"consumerOffset":1' in bytes(consume.body)
    # the one message stored and committed within the minute: 1/60 per second
    assert parse_consume_stats(consume.body)[1] == 0.02
    offsets = fastjson.loads(ok(await cluster.call(RequestCode.GET_ALL_CONSUMER_OFFSET)).body)
    assert offsets["offsetTable"]["AdminT@AG"] == {"1": 1}
    ok(await cluster.call(RequestCode.GET_ALL_DELAY_OFFSET))
    not_online = await cluster.call(
        RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "AG"}
    )
    assert not_online.code == ResponseCode.CONSUMER_NOT_ONLINE
    who = fastjson.loads(
        ok(await cluster.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "AdminT"})).body
    )
    assert who == {"groupList": ["AG"]}
    sys_list = fastjson.loads(
        ok(await cluster.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER)).body
    )
    assert "SCHEDULE_TOPIC_XXXX" in sys_list["topicList"]
    ok(await cluster.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "AG"}))
    assert "AG" not in cluster.broker.groups.table
    ok(await cluster.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "AdminT"}))
    assert cluster.broker.topics.select("AdminT") is None
    sys_topic = await cluster.call(
        RequestCode.UPDATE_AND_CREATE_TOPIC, {**create, "topic": "TBW102"}
    )
    assert sys_topic.code == ResponseCode.SYSTEM_ERROR


async def test_lock_and_unlock_batch_mq(cluster: Cluster) -> None:
    mq = {"brokerName": "broker-a", "queueId": 0, "topic": "T"}
    body1 = orjson.dumps({"clientId": "c1", "consumerGroup": "LG", "mqSet": [mq]})
    body2 = orjson.dumps({"clientId": "c2", "consumerGroup": "LG", "mqSet": [mq]})
    r1 = ok(await cluster.call(RequestCode.LOCK_BATCH_MQ, None, body1))
    assert fastjson.loads(r1.body)["lockOKMQSet"] == [mq]
    r2 = ok(await cluster.call(RequestCode.LOCK_BATCH_MQ, None, body2))
    assert fastjson.loads(r2.body)["lockOKMQSet"] == []
    ok(await cluster.call(RequestCode.UNLOCK_BATCH_MQ, None, body1))
    r3 = ok(await cluster.call(RequestCode.LOCK_BATCH_MQ, None, body2))
    assert fastjson.loads(r3.body)["lockOKMQSet"] == [mq]


async def test_query_message_by_key(cluster: Cluster) -> None:
    ok(await cluster.send("Keys", b"k", props={"KEYS": "order-1 order-2"}))
    cluster.broker.store.dispatch()
    resp = ok(
        await cluster.call(
            RequestCode.QUERY_MESSAGE,
            {
                "topic": "Keys",
                "key": "order-2",
                "maxNum": "32",
                "beginTimestamp": "0",
                "endTimestamp": str(2**62),
            },
        )
    )
    assert [m.body for m in messages(resp)] == [b"k"]
    nothing = await cluster.call(
        RequestCode.QUERY_MESSAGE,
        {
            "topic": "Keys",
            "key": "nope",
            "maxNum": "32",
            "beginTimestamp": "0",
            "endTimestamp": str(2**62),
        },
    )
    assert nothing.code == ResponseCode.QUERY_NOT_FOUND


async def test_idle_client_is_dropped_and_group_notified(tmp_path: Path) -> None:
    notified = trio.Event()

    def on_notify(conn: Connection, request: RemotingCommand) -> None:
        notified.set()

    async with (
        # the active client heart-beats every ~0.1 s: a 1 s expiry is ten of its beats away
        # (at 300 ms, one loaded-machine stall of the shared loop could expire it too)
        running_cluster(
            tmp_path, clientChannelExpiredTime="1000", clientHousekeepingInterval="50"
        ) as c,
        open_remoting_client() as silent,
        open_remoting_client({RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify}) as active,
    ):
        hb1 = RemotingCommand.request(RequestCode.HEART_BEAT, None, heartbeat_body("s", "IG", "T"))
        ok(await silent.invoke(c.addr, hb1, WAIT_S))
        conn = await silent.connection(c.addr)
        hb2 = RemotingCommand.request(RequestCode.HEART_BEAT, None, heartbeat_body("a", "IG", "T"))
        ok(await active.invoke(c.addr, hb2, WAIT_S))
        notified = trio.Event()
        with trio.fail_after(WAIT_S):
            while not conn.is_closed:  # the active client keeps heart-beating; the silent one
                ok(await active.invoke(c.addr, hb2, WAIT_S))  # is expired and disconnected
                with trio.move_on_after(0.1):
                    await conn.closed.wait()
            await notified.wait()
        group = c.broker.clients.consumer_group("IG")
        assert group is not None and group.client_ids() == ["a"]


async def test_offset_moved_and_slave_refuses_sends(tmp_path: Path) -> None:
    async with running_cluster(tmp_path / "m") as c:
        ok(await c.send("Moved", b"a"))
        moved = await c.pull("Moved", 100)
        assert moved.code == ResponseCode.PULL_OFFSET_MOVED
        assert moved.ext_fields["nextBeginOffset"] == "1"  # Java 4.9.7: the max offset
    async with running_cluster(tmp_path / "s", brokerRole="SLAVE", brokerId="1") as s:
        refused = await s.send("AnyTopic", b"x")
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in (
            refused.remark or ""
        )

        def registered_as_slave(state) -> bool:  # type: ignore[no-untyped-def]
            data = state.routes.broker_addr_table.get("broker-a")
            return data is not None and 1 in data.broker_addrs

        with trio.fail_after(WAIT_S):
            await s.ns.wait_until(registered_as_slave)


async def test_permissions_and_client_config_check(cluster: Cluster) -> None:
    create = {
        "topic": "ReadOnly",
        "defaultTopic": "TBW102",
        "readQueueNums": "1",
        "writeQueueNums": "1",
        "perm": "4",
        "topicFilterType": "SINGLE_TAG",
    }
    ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create))
    denied = await cluster.send("ReadOnly", b"x")
    assert denied.code == ResponseCode.NO_PERMISSION and "forbidden" in (denied.remark or "")
    ok(
        await cluster.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC, {**create, "topic": "WriteOnly", "perm": "2"}
        )
    )
    no_read = await cluster.pull("WriteOnly")
    assert no_read.code == ResponseCode.NO_PERMISSION
    tag = {
        "clientId": "c",
        "group": "CG",
        "subscriptionData": {"topic": "T", "subString": "*", "expressionType": "TAG"},
    }
    ok(await cluster.call(RequestCode.CHECK_CLIENT_CONFIG, None, orjson.dumps(tag)))
    sql = {**tag, "subscriptionData": {"topic": "T", "subString": "a>1", "expressionType": "SQL92"}}
    refused = await cluster.call(RequestCode.CHECK_CLIENT_CONFIG, None, orjson.dumps(sql))
    assert refused.code == ResponseCode.SYSTEM_ERROR and "SQL92" in (refused.remark or "")


async def test_delete_topic_drops_its_consume_queues(cluster: Cluster) -> None:
    """DELETE_TOPIC_IN_BROKER removes the topic's ConsumeQueue files and queue offsets (as
    RocketMQ's cleanUnusedTopic); the same name created again starts at offset 0."""
    for i in range(3):
        ok(await cluster.send("DelT", f"old{i}".encode()))
    store = cluster.broker.store
    store.dispatch_all()
    cq_dir = cluster.store_dir / "consumequeue" / "DelT"
    assert (cq_dir / "0").is_dir()
    max_off = ok(await cluster.call(RequestCode.GET_MAX_OFFSET, {"topic": "DelT", "queueId": "0"}))
    assert max_off.ext_fields["offset"] == "3"

    ok(await cluster.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "DelT"}))
    assert cluster.broker.topics.select("DelT") is None
    assert not cq_dir.exists()
    max_off = ok(await cluster.call(RequestCode.GET_MAX_OFFSET, {"topic": "DelT", "queueId": "0"}))
    assert max_off.ext_fields["offset"] == "0"

    resp = ok(await cluster.send("DelT", b"new"))  # auto-created again
    assert resp.ext_fields["queueOffset"] == "0"
    store.dispatch_all()
    pull = ok(
        await cluster.call(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "DG", "topic": "DelT", "queueId": "0", "queueOffset": "0",
                "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
            },
        )
    )
    assert [bytes(m.body) for m in messages(pull)] == [b"new"]


async def test_runtime_info_day_figures_turn_at_local_midnight(cluster: Cluster) -> None:
    """msg{Put,Get}Total{Today,Yesterday}Morning are the totals at the last local midnights, as
    RocketMQ's (they were a hard-coded 0: ``mqadmin clusterList -m`` counted every message
    since boot as today's, and none as yesterday's)."""

    async def table() -> dict[str, str]:
        info = ok(await cluster.call(RequestCode.GET_BROKER_RUNTIME_INFO))
        return fastjson.loads(info.body)["table"]  # type: ignore[no-any-return]

    for body in (b"a", b"b"):
        ok(await cluster.send("DayT", body))
    before = await table()
    assert before["msgPutTotalTodayNow"] == "2" and before["msgPutTotalTodayMorning"] == "0"
    tomorrow = cluster.broker.now_ms() + 86_400_000
    cluster.broker.now_ms = lambda: tomorrow  # the node's clock, read by its 1 s sampler
    with trio.fail_after(WAIT_S):
        while (after := await table())["msgPutTotalTodayMorning"] != "2":  # noqa: ASYNC110 - over the wire
            await trio.sleep(0.05)  # the sampler's next round: polled under the deadline
    assert after["msgPutTotalYesterdayMorning"] == "0"
    assert after["msgGetTotalTodayMorning"] == before["msgGetTotalTodayNow"]
    ok(await cluster.send("DayT", b"c"))
    now = await table()
    assert int(now["msgPutTotalTodayNow"]) - int(now["msgPutTotalTodayMorning"]) == 1
