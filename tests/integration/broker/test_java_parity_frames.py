"""The frames and records in which Apache RocketMQ 4.9.7 (tests/interop) showed us answering or
storing differently (issue 22 follow-up), one test per finding, through a real broker on a real
socket: each would fail on the old behaviour."""

from __future__ import annotations

from pathlib import Path

import orjson

from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol.message import encode_batch, encode_properties
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import Cluster, messages, ok, running_cluster

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


async def _create(c: Cluster, topic: str, queues: int = 4) -> None:
    ok(await c.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
        "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0", "order": "false",
    }))


async def _heartbeat(c: Cluster, group: str = "CG") -> None:
    body = orjson.dumps({"clientID": "cid", "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "T", "subString": "*", "tagsSet": [], "codeSet": [],
                                 "subVersion": 1, "expressionType": "TAG"}]}]})
    ok(await c.call(RequestCode.HEART_BEAT, {}, body))


async def test_batch_items_carry_the_header_properties(tmp_path: Path) -> None:
    """Finding 1: WAIT=true (and CLUSTER) of the batch header in every stored item."""
    async with running_cluster(tmp_path) as c:
        await _create(c, "T")
        body = encode_batch([(0, b"b%d" % i, {"TAGS": "TagBatch", "KEYS": f"bk{i}"})
                             for i in range(3)])
        ext = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "2", "f": "0",
               "g": "1700000000000", "h": "0", "i": encode_properties({"WAIT": "true"}).decode(),
               "j": "0", "k": "false", "m": "true"}
        ok(await c.call(RequestCode.SEND_BATCH_MESSAGE, ext, body))
        got = messages(ok(await c.pull("T", queue_id=2)))
        assert [m.properties for m in got] == [
            {"TAGS": "TagBatch", "KEYS": f"bk{i}", "CLUSTER": "TestCluster", "WAIT": "true"}
            for i in range(3)
        ]


async def test_pull_past_the_end_moves_to_max_and_records_the_event(tmp_path: Path) -> None:
    """Findings 2, 3, 4: nextBeginOffset is the max offset; a master writes one
    OFFSET_MOVED_EVENT per PULL_OFFSET_MOVED; a never-written queue is NO_MESSAGE_IN_QUEUE."""
    async with running_cluster(tmp_path) as c:
        await _create(c, "T")
        for _ in range(2):
            ok(await c.send("T", b"x"))
        moved = await c.pull("T", 100)
        assert moved.code == ResponseCode.PULL_OFFSET_MOVED
        assert moved.ext_fields["nextBeginOffset"] == "2"
        empty = await c.pull("T", 5, queue_id=3)
        assert (empty.code, empty.remark) == (ResponseCode.PULL_OFFSET_MOVED, "NO_MESSAGE_IN_QUEUE")
        assert (await c.pull("T", 0, queue_id=3)).remark == "NO_MESSAGE_IN_QUEUE"
        # (a pull dispatches what the reput has not yet)
        first, second = messages(ok(await c.pull("OFFSET_MOVED_EVENT", group="G2")))
        assert fastjson.loads(first.body) == {
            "consumerGroup": "CG", "offsetRequest": 100, "offsetNew": 2,
            "messageQueue": {"topic": "T", "brokerName": "broker-a", "queueId": 0},
        }
        assert first.properties == {"KEYS": "CG", "DELAY": "0", "TAGS": "CG"}
        assert list(first.properties) == ["KEYS", "DELAY", "TAGS"]  # Java's HashMap order
        assert first.born_host == first.store_host == c.broker.store_host
        assert fastjson.loads(second.body)["offsetNew"] == 0


async def test_pull_remarks_in_java_words(tmp_path: Path) -> None:
    """Finding 5: FAQ suffix and the consumer printed as Netty prints it."""
    async with running_cluster(tmp_path) as c:
        await _create(c, "T")
        unknown = await c.pull("NoSuchTopic")
        assert unknown.remark == f"topic[NoSuchTopic] not exist, apply first please! {FAQ}"
        no_group = await c.pull("T", sys_flag=0, group="NoHeartbeat")
        assert no_group.remark == f"the consumer's group info not exist{FAQ}"
        bad_queue = await c.pull("T", queue_id=99)
        assert "consumer:[/127.0.0.1:" in (bad_queue.remark or "")


async def test_refused_sends_as_java_answers_them(tmp_path: Path) -> None:
    """Finding 11: MSG_REGION/TRACE_ON on refusals, Java's remarks."""
    async with running_cluster(tmp_path, maxMessageSize="1024") as c:
        await _create(c, "T")
        region = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        cases = {
            "bad topic!": "The specified topic contains illegal characters, "
                          "allowing only ^[%|a-zA-Z0-9_-]+$",
            "T" * 128: "The specified topic is longer than topic max length.",
        }
        for topic, remark in cases.items():
            resp = await c.send(topic)
            assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, remark)
            assert resp.ext_fields == region
        big = await c.send("T", b"x" * 1025)
        assert big.code == ResponseCode.MESSAGE_ILLEGAL and big.ext_fields == region
        assert big.remark == (
            "the message is illegal, maybe msg body or properties length not matched. "
            "msg body length limit 1024B, msg properties length limit 32KB."
        )
        queue = await c.send("T", queue_id=99)
        assert (queue.remark or "").startswith(
            "request queueId[99] is illegal, TopicConfig [topicName=T, readQueueNums=4, "
            "writeQueueNums=4, perm=RW-, topicFilterType=SINGLE_TAG, topicSysFlag=0, "
            "order=false] Producer: 127.0.0.1:"
        )
        blank = await c.send("")
        assert (blank.remark, blank.ext_fields) == ("The specified topic is blank.", region)
        missing = await c.call(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "e": "0"}, b"x")
        assert (missing.code, missing.remark) == (
            ResponseCode.SYSTEM_ERROR, "The specified topic is blank."
        )
        assert missing.ext_fields == region


async def test_transaction_frames_and_records(tmp_path: Path) -> None:
    """Finding 12: the half send answers the producer's queue and no transactionId; the half
    keeps WAIT, has no __transactionId__; the commit keeps REAL_*/TRAN_MSG/WAIT; the op record
    is born in the broker with WAIT=true."""
    async with running_cluster(tmp_path) as c:
        await _create(c, "T")
        props = {"TAGS": "TagA", "WAIT": "true", "UNIQ_KEY": "A" * 32, "TRAN_MSG": "true",
                 "PGROUP": "PG"}
        half = ok(await c.send("T", b"tx", queue_id=3, props=props, extra={"f": "4"}))
        assert half.ext_fields["queueId"] == "3" and "transactionId" not in half.ext_fields
        offset = int(half.ext_fields["msgId"][16:], 16)
        stored = c.broker.store.lookup_message_by_offset(offset)
        assert stored is not None and stored.properties["WAIT"] == "true"
        assert "__transactionId__" not in stored.properties
        ok(await c.call(RequestCode.END_TRANSACTION, {
            "producerGroup": "PG", "tranStateTableOffset": half.ext_fields["queueOffset"],
            "commitLogOffset": str(offset), "commitOrRollback": "8",
            "fromTransactionCheck": "false", "msgId": "A" * 32}))
        (committed,) = messages(ok(await c.pull("T", queue_id=3)))
        assert committed.properties == stored.properties
        assert {"REAL_TOPIC": "T", "REAL_QID": "3", "TRAN_MSG": "true", "WAIT": "true"}.items() \
            <= committed.properties.items()
        ops = messages(ok(await c.pull("RMQ_SYS_TRANS_OP_HALF_TOPIC")))
        assert ops[0].properties == {"WAIT": "true", "TAGS": "d"}
        assert ops[0].born_host == c.broker.store_host


async def test_send_back_stores_wait_false(tmp_path: Path) -> None:
    """Finding 13: the retry record carries WAIT=false."""
    async with running_cluster(tmp_path) as c:
        await _create(c, "T")
        await _heartbeat(c)
        sent = ok(await c.send("T", props={"WAIT": "true"}))
        offset = int(sent.ext_fields["msgId"][16:], 16)
        ok(await c.call(RequestCode.CONSUMER_SEND_MSG_BACK, {
            "group": "CG", "offset": str(offset), "delayLevel": "0", "originTopic": "T",
            "unitMode": "false", "maxReconsumeTimes": "16"}))
        (retry,) = messages(ok(await c.pull("SCHEDULE_TOPIC_XXXX", queue_id=2)))
        assert retry.properties["WAIT"] == "false"
        assert retry.properties["REAL_TOPIC"] == "%RETRY%CG"


async def test_admin_answers_as_java(tmp_path: Path) -> None:
    """Findings 6-10: search past the end, query order, config ints, the broker-name topic,
    runtime keys mqadmin and rocketmq-exporter read."""
    async with running_cluster(tmp_path) as c:
        await _create(c, "T")
        offsets = []
        for i in range(3):
            sent = ok(await c.send("T", b"m%d" % i, props={"KEYS": "k"}))
            offsets.append(int(sent.ext_fields["msgId"][16:], 16))
        future = ok(await c.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                 {"topic": "T", "queueId": "0", "timestamp": str(2**62)}))
        assert future.ext_fields["offset"] == "2"
        query = {"topic": "T", "key": "k", "maxNum": "32", "beginTimestamp": "0",
                 "endTimestamp": str(2**63 - 1)}
        c.broker.store.dispatch_all()  # the index is built by the reput: build it now
        found = ok(await c.call(RequestCode.QUERY_MESSAGE, query))
        assert [m.commitlog_offset for m in messages(found)] == offsets
        missing = await c.call(RequestCode.QUERY_MESSAGE, {**query, "key": "none"})
        assert missing.code == ResponseCode.QUERY_NOT_FOUND
        assert missing.ext_fields["indexLastUpdateTimestamp"] == "0"
        assert missing.ext_fields["indexLastUpdatePhyoffset"] == "0"
        config = bytes(ok(await c.call(RequestCode.GET_BROKER_CONFIG)).body).decode()
        assert "accessMessageInMemoryMaxRatio=40\n" in config
        topics = fastjson.loads(ok(await c.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body)
        own = topics["topicConfigTable"]["broker-a"]
        assert (own["readQueueNums"], own["writeQueueNums"]) == (1, 1)
        table = fastjson.loads(ok(await c.call(RequestCode.GET_BROKER_RUNTIME_INFO)).body)["table"]
        assert table["putMessageTimesTotal"] == "3"
        assert int(table["putMessageSizeTotal"]) == offsets[-1] + (offsets[-1] - offsets[-2])
        assert 0.0 <= float(table["commitLogDiskRatio"]) <= 1.0
        assert len(table["getTotalTps"].split(" ")) == 3
        assert int(table["earliestMessageTimeStamp"]) > 0
        for key in ("consumeQueueDiskRatio", "commitLogDirCapacity", "getFoundTps", "getMissTps",
                    "putLatency99", "putLatency999", "putMessageAverageSize",
                    "putMessageDistributeTime", "putMessageEntireTimeMax",
                    "putMessageFailedTimes", "remainHowManyDataToFlush",
                    "getMessageEntireTimeMax", "startAcceptSendRequestTimeStamp"):
            assert key in table, key
