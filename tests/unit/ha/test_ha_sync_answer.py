"""SYNC_MASTER answers without a task: a waiting send's answer is encoded at append time and held
on the HA service's ack watermark until a slave's ack covers it; the answers it gives, released
or expired, are byte for byte those ``SendProcessor.answer`` builds for PUT_OK and
FLUSH_SLAVE_TIMEOUT, and the HA service releases them on acks, expires them after slaveTimeout
and when it stops."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import trio
import trio.testing

from rmq_cluster.broker.processors.send import SendProcessor, timeout_answer
from rmq_cluster.broker.transaction import HALF_TOPIC, TRANSACTION_ID_PROPERTY
from rmq_cluster.cluster.protocol.message import Message
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.ha.config import HAConfig
from rmq_cluster.ha.service import HAService
from rmq_cluster.store.commitlog import AppendMessageResult, PutMessageResult, PutMessageStatus
from rmq_cluster.store.config import BrokerRole, MessageStoreConfig
from rmq_cluster.store.message_store import MessageStore


def _processor() -> SendProcessor:
    """A SendProcessor whose ``answer`` can run: it needs only ``ctrl.stats``."""
    proc = SendProcessor.__new__(SendProcessor)
    proc.ctrl = types.SimpleNamespace(stats=types.SimpleNamespace(put_total=0))  # type: ignore[assignment]
    return proc


@pytest.mark.parametrize("status", [PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_SLAVE_TIMEOUT])
@pytest.mark.parametrize("topic", ["SyncTopic", HALF_TOPIC])
def test_held_answers_are_the_general_paths_answers(
    status: PutMessageStatus, topic: str
) -> None:
    """The held frame as it goes out on an ack, and its expired form (decoded again from the
    held frame), equal what ``answer`` builds for PUT_OK and FLUSH_SLAVE_TIMEOUT (the message
    is stored: msgId, queueOffset, transaction fields stay)."""
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": topic, "e": "3"})
    msg = Message(
        topic=topic, body=b"x" * 10, queue_id=3,
        properties={TRANSACTION_ID_PROPERTY: "TX-1", "UNIQ_KEY": "ABC"},
    )
    appended = AppendMessageResult(
        wrote_offset=4096, wrote_bytes=200, store_timestamp=1_700_000_000_000,
        logics_offset=41, msg_num=1, store_host_bytes=bytes([127, 0, 0, 1, 0, 0, 0x27, 0x1F]),
    )
    result = PutMessageResult(PutMessageStatus.PUT_OK, appended, "")
    general = _processor().answer(request, msg, PutMessageResult(status, appended, ""))

    proc = _processor()
    (held,) = FrameDecoder().feed(encode(proc.answer(request, msg, result), 7))
    late = timeout_answer(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
    got = held if status is PutMessageStatus.PUT_OK else late(held, appended.end_offset)
    assert encode(got, 7) == encode(general, 7)
    if status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT:
        assert got.code == ResponseCode.FLUSH_SLAVE_TIMEOUT and got.ext_fields["msgId"]
    # counted once, at append, whatever the replica outcome
    assert proc.ctrl.stats.put_total == 1


class _Conn:
    """What a held answer is released to (a connection)."""

    def __init__(self) -> None:
        self.answers: list[RemotingCommand] = []

    def _held_released(self, frames: bytearray, n: int) -> None:
        self.answers.extend(FrameDecoder().feed(bytes(frames)))


def _store(tmp_path: Path) -> MessageStore:
    store = MessageStore.open(MessageStoreConfig(
        store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=1024 * 1024,
        broker_role=BrokerRole.SYNC_MASTER,
    ))
    store.answer_timeouts_with(timeout_answer)  # as the broker does
    return store


def _hold(ha: HAService, conn: _Conn, store: MessageStore, i: int) -> int:
    """What the send processor does with a SYNC send that must wait for a slave."""
    r = store.append_message(Message(topic="T", body=b"m%d" % i, queue_id=0))
    assert r.result is not None
    end = r.result.end_offset
    status, mark = store.put_wait(end)
    assert status is PutMessageStatus.PUT_OK and mark is ha.ack_watermark
    ok = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2).response(0, None, {"i": i})
    mark.hold(conn, 100 + i, ok, end)
    return end


async def test_acks_release_held_answers_each_by_its_own_end(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        ha = HAService(store, HAConfig(ha_listen_port=0), host="127.0.0.1")
        store.attach_replicas(ha)  # (ha.run does it)
        ha.table.add(1, "slave", 0)
        conn = _Conn()
        ends = [_hold(ha, conn, store, i) for i in range(3)]
        assert all(ha.sync_status_nowait(end) is None for end in ends)  # all must wait
        assert ha.waiting_puts == 3 and ha.waited_puts == 3

        ha.on_report(1, ends[1] - 1)  # short of the second
        assert [a.opaque for a in conn.answers] == [100]
        ha.on_report(1, ends[1])
        assert [a.opaque for a in conn.answers] == [100, 101]
        assert ha.waiting_puts == 1 and ha.acked_puts == 2
        ha.on_report(1, ends[2])
        assert [(a.opaque, a.code) for a in conn.answers] == [(100, 0), (101, 0), (102, 0)]
        info = ha.runtime_info()
        assert (info["haSyncWaitedPuts"], info["haSyncReleasedPuts"]) == ("3", "3")
        assert info["haSyncWaitingPuts"] == "0"
    finally:
        store.close()


async def test_the_sweeper_expires_held_answers_and_a_stop_expires_the_rest(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """After slaveTimeout a held answer goes out as FLUSH_SLAVE_TIMEOUT (the sweeper wakes
    for it though it slept with nothing to watch); when the service stops, every answer still
    held does."""
    store = _store(tmp_path)
    try:
        ha = HAService(
            store, HAConfig(ha_listen_port=0, slave_timeout_ms=1000), host="127.0.0.1"
        )
        held = ha.ack_watermark.held
        conn = _Conn()
        async with trio.open_nursery() as nursery:
            await nursery.start(ha.run)
            ha.table.add(1, "slave", 0)
            await trio.testing.wait_all_tasks_blocked()
            t0 = trio.current_time()
            _hold(ha, conn, store, 0)
            with trio.fail_after(5):
                while not conn.answers:  # noqa: ASYNC110 - the sweeper answers; no event
                    await trio.sleep(0.1)
            assert trio.current_time() - t0 >= 1.0
            (expired,) = conn.answers
            assert (expired.opaque, expired.code) == (100, ResponseCode.FLUSH_SLAVE_TIMEOUT)
            assert expired.ext_fields == {"i": "0"}

            _hold(ha, conn, store, 1)
            _hold(ha, conn, store, 2)
            nursery.cancel_scope.cancel()
        assert [(a.opaque, a.code) for a in conn.answers[1:]] == [
            (101, ResponseCode.FLUSH_SLAVE_TIMEOUT), (102, ResponseCode.FLUSH_SLAVE_TIMEOUT),
        ]
        assert held.waiting == 0 and held.expired_total == 3
    finally:
        store.close()
