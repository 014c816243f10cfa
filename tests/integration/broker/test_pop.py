"""RocketMQ 5 POP consumption on a live broker over real sockets: pop with checkpoints, ack,
invisible-time redelivery through the pop retry topic, change-invisible, retry -> DLQ, orderly
pop, a restart that keeps acked state, and the QUERY_ASSIGNMENT / SET_MESSAGE_REQUEST_MODE pair.
Frames and receipt handles are those of Apache's 5.x client (pop_testlib.py)."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol.pop import (
    POLLING_TIMEOUT,
    PROPERTY_POP_CK,
    ReceiptHandle,
    encode_bits,
)
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import Cluster, messages, ok, running_cluster
from .pop_testlib import (
    POP_PROPS,
    ack,
    change_invisible,
    handle_of,
    pop,
    pop_fields,
    pop_until,
    popped,
    set_group,
    with_new_handle,
)


async def _topic(cluster: Cluster, topic: str, queues: int = 4, attrs: str = "") -> None:
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
           "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
           "topicSysFlag": "0", "order": "false"}
    if attrs:
        ext["attributes"] = attrs
    ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))


async def test_pop_ack_and_invisible_time_redelivery(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        await _topic(cluster, "PopT", 2)
        for i in range(4):
            ok(await cluster.send("PopT", f"m{i}".encode(), queue_id=i % 2, tags="A"))
        resp = await pop(cluster, "PopT", "PopG", invisible_ms=1500)
        got = popped(resp)
        assert sorted(m.body for m in got) == [b"m0", b"m1", b"m2", b"m3"]
        ext = resp.ext_fields
        assert int(ext["reviveQid"]) in range(8) and ext["invisibleTime"] == "1500"
        assert sorted(ext["startOffsetInfo"].split(";")) == ["0 0 0", "0 1 0"]
        assert sorted(ext["msgOffsetInfo"].split(";")) == ["0 0 0,1", "0 1 0,1"]
        # popped messages are invisible: a second pop finds nothing
        again = await pop(cluster, "PopT", "PopG")
        assert again.code == POLLING_TIMEOUT
        keep = [m for m in got if m.body != b"m2"]
        for m in keep:
            ok(await ack(cluster, m, "PopG"))
        # m2 comes back after its invisible time, from the pop retry topic
        back = await pop_until(cluster, "PopT", "PopG", 1)
        assert [m.body for m in back] == [b"m2"]
        m = back[0]
        assert m.topic == "PopT" and m.reconsume_times == 1
        h = handle_of(m)
        assert h.flag == "1" and h.queue_id == 0
        assert m.properties["1ST_POP_TIME"] == ext["popTime"]
        ok(await ack(cluster, m, "PopG"))
        assert cluster.broker.pop.service.revived == 1
        # every checkpoint is finished once the scan read the acks: nothing can come back
        service = cluster.broker.pop.service
        service.scan()
        assert len(service.ledger) == 0 and service.revived == 1


async def test_change_invisible_time(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        await _topic(cluster, "ChgT", 1)
        ok(await cluster.send("ChgT", b"a"))
        ok(await cluster.send("ChgT", b"b"))
        got = popped(await pop(cluster, "ChgT", "ChgG", invisible_ms=60_000))
        a, b = sorted(got, key=lambda m: m.body)
        # a: visible again at once; b: invisible for longer
        ca = ok(await change_invisible(cluster, a, "ChgG", 0))
        assert int(ca.ext_fields["popTime"]) >= int(handle_of(a).pop_time)
        cb = ok(await change_invisible(cluster, b, "ChgG", 60_000))
        with_new_handle(b, cb)
        back = await pop_until(cluster, "ChgT", "ChgG", 1)
        assert [m.body for m in back] == [b"a"]
        # the new handle of b acks it
        ok(await ack(cluster, b, "ChgG"))
        ok(await ack(cluster, back[0], "ChgG"))


async def test_max_reconsume_goes_to_dlq(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        await _topic(cluster, "DlqT", 1)
        await set_group(cluster, "DlqG", retryMaxTimes=1)
        ok(await cluster.send("DlqT", b"poison"))
        first = popped(await pop(cluster, "DlqT", "DlqG", invisible_ms=500))
        assert [m.reconsume_times for m in first] == [0]
        second = await pop_until(cluster, "DlqT", "DlqG", 1, invisible_ms=500)
        assert [m.reconsume_times for m in second] == [1]
        # not acked again: reconsume 2 > retryMaxTimes 1 -> %DLQ%DlqG
        with trio.fail_after(10):
            await cluster.broker.wait_until(lambda b: b.pop.service.dead_lettered >= 1)
        dlq = await cluster.pull("%DLQ%DlqG", 0, group="Inspect")
        assert [m.body for m in messages(dlq)] == [b"poison"]
        assert messages(dlq)[0].reconsume_times == 2


async def test_orderly_pop_one_batch_in_flight(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        await _topic(cluster, "OrdT", 1)
        for i in range(4):
            ok(await cluster.send("OrdT", f"o{i}".encode()))
        first = popped(await pop(cluster, "OrdT", "OrdG", queue_id=0, max_nums=2,
                                 order=True, invisible_ms=800))
        assert [m.body for m in first] == [b"o0", b"o1"]
        assert handle_of(first[0]).revive_qid == 999
        # blocked until both are acked
        assert (await pop(cluster, "OrdT", "OrdG", queue_id=0, order=True)).code == POLLING_TIMEOUT
        ok(await ack(cluster, first[0], "OrdG"))
        assert (await pop(cluster, "OrdT", "OrdG", queue_id=0, order=True)).code == POLLING_TIMEOUT
        ok(await ack(cluster, first[1], "OrdG"))
        nxt = popped(await pop(cluster, "OrdT", "OrdG", queue_id=0, max_nums=2, order=True,
                               invisible_ms=800))
        assert [m.body for m in nxt] == [b"o2", b"o3"]
        # not acked: after the invisible time the same batch, in order, counted once more
        again = await pop_until(cluster, "OrdT", "OrdG", 2, queue_id=0, max_nums=2, order=True,
                                invisible_ms=800)
        assert [m.body for m in again] == [b"o2", b"o3"]
        resp_counts = [m.reconsume_times for m in again]
        assert resp_counts == [0, 0]  # the count rides in orderCountInfo (checked below)
        third = await pop(cluster, "OrdT", "OrdG", queue_id=0, max_nums=2, order=True,
                          poll_ms=3000, invisible_ms=800)
        # Apache's form: each message handed out before, then the queue's least count
        assert third.ext_fields["orderCountInfo"].split(";") == [
            "0 qo0%2 2", "0 qo0%3 2", "0 0 2"]


async def test_orderly_pop_retried_with_its_attempt_id_keeps_the_counts(
        tmp_path: Path) -> None:
    """A receive whose answer was lost is retried with the same attempt id (as the 5.x SDKs
    retry one, through the proxy): it gets the same batch with the same delivery counts
    (``orderCountInfo``, which clients turn into each message's reconsume times), as Apache's
    broker answers it. Another attempt waits while the batch is in flight and, once it turned
    visible, counts each message once more; that attempt's own retry keeps those counts."""
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        await _topic(cluster, "OrdAttT", 1)
        for i in range(2):
            ok(await cluster.send("OrdAttT", f"a{i}".encode()))

        async def pop_as(attempt: str | None, invisible_ms: int = 60_000,
                         poll_ms: int = 0) -> RemotingCommand:
            return await pop(cluster, "OrdAttT", "OrdAttG", queue_id=0, max_nums=2,
                             order=True, attempt_id=attempt, invisible_ms=invisible_ms,
                             poll_ms=poll_ms, timeout=poll_ms / 1000 + 10)

        def seen(resp: RemotingCommand) -> tuple[list[bytes], list[str]]:
            return ([m.body for m in popped(resp)],
                    resp.ext_fields["orderCountInfo"].split(";"))

        fresh = ([b"a0", b"a1"], ["0 0 0"])
        once = ([b"a0", b"a1"], ["0 qo0%0 1", "0 qo0%1 1", "0 0 1"])
        assert seen(await pop_as("attempt-A")) == fresh
        assert (await pop_as("attempt-B")).code == POLLING_TIMEOUT  # in flight: blocked
        assert (await pop_as(None)).code == POLLING_TIMEOUT
        # A's answer was lost: A again gets the batch, not counted (now invisible for 1 s)
        assert seen(await pop_as("attempt-A", invisible_ms=1000)) == fresh
        # B, parked until that batch turns visible: handed out again, counted once more
        assert seen(await pop_as("attempt-B", poll_ms=8000)) == once
        assert seen(await pop_as("attempt-B")) == once  # B's answer lost: B keeps its counts
        assert (await pop_as("attempt-A")).code == POLLING_TIMEOUT  # A is no longer the batch's


async def test_orderly_pop_attempt_ids_out_of_bounds_are_no_attempt(tmp_path: Path) -> None:
    """An attempt id is client text: an empty one, one past 128 characters or one not
    printable ASCII is no attempt, so sending it again is not a retry that gets the batch in
    flight (an empty one sent by every pop would otherwise pass every block)."""
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        for n, attempt in enumerate(["", "x" * 129, "tab\there"]):
            topic = f"OrdBadAttT{n}"
            await _topic(cluster, topic, 1)
            ok(await cluster.send(topic, b"m"))
            first = await pop(cluster, topic, "OrdBadAttG", queue_id=0, order=True,
                              attempt_id=attempt)
            assert [m.body for m in popped(first)] == [b"m"]
            again = await pop(cluster, topic, "OrdBadAttG", queue_id=0, order=True,
                              attempt_id=attempt)
            assert again.code == POLLING_TIMEOUT, (attempt, again.code)


async def test_orderly_change_invisible_wakes_the_pops_parked_on_the_queue(
        tmp_path: Path) -> None:
    """A batch made visible sooner (change-invisible, as the proxy gives back a batch its
    client did not take) frees its queue then: a pop parked until the batch's old deadline
    takes it within a second, not at the end of its long poll."""
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        await _topic(cluster, "OrdWakeT", 1)
        ok(await cluster.send("OrdWakeT", b"w0"))
        [m] = popped(await pop(cluster, "OrdWakeT", "OrdWakeG", queue_id=0, order=True,
                               invisible_ms=30_000))
        polling = cluster.broker.pop.polling
        answers: list[RemotingCommand] = []

        async def parked() -> None:
            answers.append(await pop(cluster, "OrdWakeT", "OrdWakeG", queue_id=0, order=True,
                                     poll_ms=20_000, invisible_ms=30_000, timeout=30))

        with trio.fail_after(8):  # woken at once: a second past the change, not at 20 s
            async with trio.open_nursery() as n:
                n.start_soon(parked)
                while polling.parked < 1:
                    await trio.testing.wait_all_tasks_blocked(0.01)
                ok(await change_invisible(cluster, m, "OrdWakeG", 1000))
        [resp] = answers
        assert [x.body for x in popped(resp)] == [b"w0"]


async def test_a_pop_is_parked_until_its_born_time_plus_poll_time(tmp_path: Path) -> None:
    """As Apache's broker: a pop that took 6 s to get here (bornTime 6 s ago) with an 8 s
    pollTime is answered POLLING_TIMEOUT 2 s after it came, not 8 s (its client gives up
    around bornTime + pollTime: an answer after that pops for no one)."""
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        await _topic(cluster, "BornT", 1)
        ext = pop_fields("BornT", "BornG", poll_ms=8000,
                         born_ms=cluster.broker.now_ms() - 6000)
        start = trio.current_time()
        with trio.fail_after(5):
            resp = await cluster.call(RequestCode.POP_MESSAGE, ext, timeout=15)
        assert resp.code == POLLING_TIMEOUT
        assert trio.current_time() - start >= 1.5  # it did wait for the 2 s left


async def test_restart_keeps_acked_state(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        await _topic(cluster, "RsT", 1)
        for i in range(3):
            ok(await cluster.send("RsT", f"r{i}".encode()))
        got = popped(await pop(cluster, "RsT", "RsG", invisible_ms=2000))
        assert len(got) == 3
        for m in got:
            if m.body != b"r1":
                ok(await ack(cluster, m, "RsG"))
        await cluster.stop_broker()
        await cluster.start_broker(cluster.broker.settings)
        back = await pop_until(cluster, "RsT", "RsG", 1)
        assert [m.body for m in back] == [b"r1"]
        ok(await ack(cluster, back[0], "RsG"))
        service = cluster.broker.pop.service
        service.scan()
        assert len(service.ledger) == 0 and service.revived == 1
        # the revive offsets reached the end of the log (a second restart rescans nothing):
        # each names the last record done with, as Apache's do
        service.revive_once()
        offsets = cluster.broker.offsets
        assert all(offsets.query("CID_RMQ_SYS_REVIVE_GROUP", service.revive_topic, q)
                   == cluster.broker.store.get_max_offset_in_queue(service.revive_topic, q) - 1
                   for q in range(8))


async def test_query_assignment_follows_set_mode(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        await _topic(cluster, "AsT", 2)
        query = fastjson.dumps({"topic": "AsT", "consumerGroup": "AsG", "clientId": "c1",
                                "strategyName": "AVG", "messageModel": "CLUSTERING"})
        pull_mode = ok(await cluster.call(RequestCode.QUERY_ASSIGNMENT, {}, query))
        assigned = fastjson.loads(bytes(pull_mode.body))["messageQueueAssignments"]
        assert assigned == []  # no consumer of AsG is connected: nothing to allocate
        body = fastjson.dumps({"topic": "AsT", "consumerGroup": "AsG", "mode": "POP",
                               "popShareQueueNum": 0})
        ok(await cluster.call(RequestCode.SET_MESSAGE_REQUEST_MODE, {}, body))
        pop_mode = ok(await cluster.call(RequestCode.QUERY_ASSIGNMENT, {}, query))
        assigned = fastjson.loads(bytes(pop_mode.body))["messageQueueAssignments"]
        assert assigned == [{"messageQueue": {"brokerName": "broker-a", "queueId": -1,
                                              "topic": "AsT"}, "mode": "POP"}]
        retry = fastjson.dumps({"topic": "%RETRY%AsG", "consumerGroup": "AsG", "mode": "POP"})
        refused = await cluster.call(RequestCode.SET_MESSAGE_REQUEST_MODE, {}, retry)
        assert refused.code == ResponseCode.NO_PERMISSION


async def test_bad_receipt_handles_are_answered(cluster: Cluster) -> None:
    await _topic(cluster, "BadT", 1)
    ok(await cluster.send("BadT", b"x"))
    good = ReceiptHandle(0, 1, 1000, 0, "0", "broker-a", 0, 0).encode()
    base = {"consumerGroup": "BadG", "topic": "BadT", "queueId": "0", "offset": "0"}
    for extra in ("", "1 2 3", "a b c d e f g h", good.replace(" 0 broker", " 9 broker"),
                  "0 1 1000 77 0 broker-a 0 0", "x" * 5000):
        resp = await cluster.call(RequestCode.ACK_MESSAGE, {**base, "extraInfo": extra})
        assert resp.code != ResponseCode.SUCCESS, extra
    resp = await cluster.call(RequestCode.ACK_MESSAGE, {**base, "extraInfo": good,
                                                        "offset": "5"})
    assert resp.code == ResponseCode.NO_MESSAGE
    assert PROPERTY_POP_CK == "POP_CK"


async def test_batch_ack(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, **POP_PROPS) as cluster:
        await _topic(cluster, "BaT", 1)
        for i in range(3):
            ok(await cluster.send("BaT", f"b{i}".encode()))
        got = popped(await pop(cluster, "BaT", "BaG", invisible_ms=800))
        h = handle_of(got[0])
        body = fastjson.dumps({"brokerName": "broker-a", "acks": [{
            "c": "BaG", "t": "BaT", "r": "0", "so": h.ck_offset, "q": 0, "rq": h.revive_qid,
            "pt": h.pop_time, "it": 800,
            "b": encode_bits([handle_of(m).queue_offset - h.ck_offset for m in got
                              if m.body != b"b1"]),
        }]})
        ok(await cluster.call(RequestCode.BATCH_ACK_MESSAGE, {}, body))
        back = await pop_until(cluster, "BaT", "BaG", 1)
        assert [m.body for m in back] == [b"b1"]
        bad = await cluster.call(RequestCode.BATCH_ACK_MESSAGE, {}, b'{"acks": [{"b": "!"}]}')
        assert bad.code == ResponseCode.NO_MESSAGE
