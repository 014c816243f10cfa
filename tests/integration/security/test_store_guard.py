"""The store's path guard holds on its own (hostile names through the store API, a hostile
record written straight into the CommitLog) and through a real broker process: a rejected
DELETE_TOPIC_IN_BROKER / CONSUMER_SEND_MSG_BACK attack deletes and creates nothing outside the
store, and a kill -9 afterwards restarts cleanly."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import orjson
import pytest
import trio

from rmq_cluster.cluster.protocol.message import RECORD_HEADER_SIZE, Message
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.store.message_store import GetMessageStatus, MessageStore
from tests.integration.broker.conftest import messages
from tests.integration.broker.test_broker_process import _start_broker, _stop
from tests.unit.store.store_testlib import small_config


def _plant_hostile_record(store: MessageStore, topic: str) -> int:
    """Append a record for a harmless topic of the same length, then rewrite its topic bytes
    in the mmap to ``topic`` (the CommitLog itself refuses such a topic): what a damaged
    file, an old version or a replica could hold. Returns the record's offset."""
    stand_in = "Q" * len(topic.encode())
    body = b"hostile"
    res = store.append_message(Message(topic=stand_in, body=body, queue_id=1))
    assert res.ok and res.result is not None
    phys = res.result.wrote_offset
    mf = store.commitlog.queue.find(phys)
    assert mf is not None
    at = phys - mf.file_from + RECORD_HEADER_SIZE + len(body) + 1
    assert bytes(mf.mm[at : at + len(stand_in)]) == stand_in.encode()
    mf.mm[at : at + len(stand_in)] = topic.encode()
    return phys


def _bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    got = store.get_message(topic, queue_id, 0, 64)
    if got.status is not GetMessageStatus.FOUND:
        return []
    out = []
    for view in got.buffers:
        raw = bytes(view)
        body_len = int.from_bytes(raw[84:88], "big")
        out.append(raw[RECORD_HEADER_SIZE : RECORD_HEADER_SIZE + body_len])
    got.release()
    return out


@pytest.mark.parametrize("hostile", ["../../evil", "/tmp/abs-evil", "..", "a\\b"])
def test_hostile_record_is_skipped_and_recovery_boots(tmp_path: Path, hostile: str) -> None:
    root = tmp_path / "store"
    cfg = small_config(root)
    store = MessageStore.open(cfg)
    try:
        assert store.append_message(Message(topic="Good", body=b"m0", queue_id=0)).ok
        bad_at = _plant_hostile_record(store, hostile)
        assert store.append_message(Message(topic="Good", body=b"m1", queue_id=0)).ok
        store.dispatch_all()
        assert store.dispatcher.skipped_records == 1
        assert store.dispatcher.stuck_at is None
        assert _bodies(store, "Good", 0) == [b"m0", b"m1"]
    finally:
        store.close()
    assert not (tmp_path / "evil").exists()
    assert sorted(os.listdir(root / "consumequeue")) == ["Good"]
    # a crash that lost the ConsumeQueues: abnormal recovery re-dispatches the hostile record
    # from the CommitLog; it is skipped again (logged, counted), the broker's store boots
    (root / "abort").write_bytes(b"")
    for name in os.listdir(root / "consumequeue"):
        for qid in os.listdir(root / "consumequeue" / name):
            for seg in os.listdir(root / "consumequeue" / name / qid):
                os.unlink(root / "consumequeue" / name / qid / seg)
    expected = [b"m0", b"m1"]
    for i in range(2):  # and again: the skip is not a one-off
        store = MessageStore.open(cfg)
        try:
            assert store.recovery is not None and store.recovery.abnormal
            assert store.dispatcher.skipped_records == 1
            assert store.recovery.commitlog_end > bad_at
            assert _bodies(store, "Good", 0) == expected
            body = f"after-{i}".encode()
            assert store.append_message(Message(topic="Good", body=body, queue_id=0)).ok
            store.dispatch_all()
            expected.append(body)
            assert _bodies(store, "Good", 0) == expected
        finally:
            store.close()
        (root / "abort").write_bytes(b"")
    assert not (tmp_path / "evil").exists()
    assert not Path("/tmp/abs-evil").exists()


def test_store_api_refuses_hostile_names_alone(tmp_path: Path) -> None:
    """No broker-side gate: the store itself creates and deletes nothing outside its root."""
    root = tmp_path / "store"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data").write_bytes(b"keep")
    store = MessageStore.open(small_config(root))
    try:
        assert store.append_message(Message(topic="T", body=b"x", queue_id=0)).ok
        store.dispatch_all()
        for topic in [str(victim), "../commitlog", "../../victim", "%RETRY%../../../victim"]:
            assert store.delete_topic(topic) == 0
            res = store.append_message(Message(topic=topic, body=b"x", queue_id=0))
            assert not res.ok
        store.dispatch_all()
        assert (victim / "data").read_bytes() == b"keep"
        assert os.listdir(root / "commitlog")
        assert sorted(os.listdir(root / "consumequeue")) == ["T"]
    finally:
        store.close()


BOOT = b"boot success"


async def test_broker_process_attack_then_kill9_restarts_cleanly(tmp_path: Path) -> None:
    store = tmp_path / "store"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data").write_bytes(b"keep")
    conf = tmp_path / "broker.properties"

    def conf_text(port: int) -> str:
        return (
            f"brokerName=broker-g\nlistenPort={port}\nhaListenPort=0\nbindAddress=127.0.0.1\n"
            f"brokerIP1=127.0.0.1\nstorePathRootDir={store}\nmappedFileSizeCommitLog=1048576\n"
            "mappedFileSizeConsumeQueue=6000\nmaxHashSlotNum=1024\nmaxIndexNum=4096\n"
            "autoCreateTopicEnable=true\ndefaultTopicQueueNums=1\n"
        )

    args = ["-m", "rmq_cluster.broker", "-c", str(conf)]
    proc = None
    try:
        proc, port = await _start_broker(conf, conf_text, args, tmp_path / "1.log", BOOT)
        addr = f"127.0.0.1:{port}"
        async with open_remoting_client() as client:

            async def call(code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
                with trio.fail_after(10):
                    return await client.invoke(addr, RemotingCommand.request(code, ext, body))

            def send_ext(topic: str) -> dict[str, str]:
                return {"a": "PG", "b": topic, "c": "TBW102", "d": "1", "e": "0", "f": "0",
                        "g": "0", "h": "0"}

            sent = await call(RequestCode.SEND_MESSAGE_V2, send_ext("Good"), b"before")
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            phys = int(sent.ext_fields["msgId"][16:], 16)
            group = {"groupName": "G", "retryQueueNums": "1"}
            ok = await call(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, orjson.dumps(group)
            )
            assert ok.code == ResponseCode.SUCCESS, ok.remark
            for topic in [str(store / "commitlog"), "../commitlog", str(victim), "../../victim"]:
                await call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
                assert (store / "commitlog").is_dir()
            for g in ["../../victim", "../../../../../tmp/guard-evil", "/abs"]:
                resp = await call(
                    RequestCode.CONSUMER_SEND_MSG_BACK,
                    {"offset": str(phys), "group": g, "delayLevel": "0", "originTopic": "Good"},
                )
                assert resp.code != ResponseCode.SUCCESS, (g, resp.remark)
            for topic in ["../../victim", "/abs/x", ".."]:
                resp = await call(RequestCode.SEND_MESSAGE_V2, send_ext(topic), b"evil")
                assert resp.code != ResponseCode.SUCCESS, (topic, resp.remark)
            assert (victim / "data").read_bytes() == b"keep"
            assert len(os.listdir(store / "commitlog")) >= 1
            sent = await call(RequestCode.SEND_MESSAGE_V2, send_ext("Good"), b"after")
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        proc.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            await proc.wait()
        assert (store / "abort").exists()  # it did not get to shut down
        proc, port = await _start_broker(conf, conf_text, args, tmp_path / "2.log", BOOT)
        addr = f"127.0.0.1:{port}"
        async with open_remoting_client() as client:
            pull = {"consumerGroup": "CG", "topic": "Good", "queueId": "0", "queueOffset": "0",
                    "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                    "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}
            with trio.fail_after(10):
                got = await client.invoke(
                    addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, pull)
                )
            assert got.code == ResponseCode.SUCCESS, got.remark
            assert [m.body for m in messages(got)] == [b"before", b"after"]
        assert (victim / "data").read_bytes() == b"keep"
        assert not await trio.Path("/tmp/guard-evil").exists()
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            assert await proc.wait() == 0
    finally:
        await _stop(proc)

