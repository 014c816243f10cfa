"""SYNC_MASTER answers without a task: the per-put state a waiting send keeps is small
(``_ReplicaDeferred``, ``_GroupToken``'s parallel lists), and the answer it gives is the one the
general path (``SendProcessor._answer_status``) builds, byte for byte."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.processors.send import SendProcessor, _ReplicaDeferred
from broker.transaction import HALF_TOPIC, TRANSACTION_ID_PROPERTY
from cluster.protocol.message import Message
from cluster.remoting.codec import RemotingCommand, encode
from cluster.remoting.codes import RequestCode
from ha.config import HAConfig
from ha.connection import HAService
from store.commitlog import AppendMessageResult, PutMessageResult, PutMessageStatus
from store.config import BrokerRole, MessageStoreConfig
from store.message_store import MessageStore

STATUSES = (
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,  # stored: the answer keeps msgId and queueOffset
    PutMessageStatus.SLAVE_NOT_AVAILABLE,  # not stored: code and remark only
)


def _processor() -> SendProcessor:
    """A SendProcessor whose ``_answer`` can run: it needs only ``ctrl.stats``."""
    proc = SendProcessor.__new__(SendProcessor)
    proc.ctrl = types.SimpleNamespace(stats=types.SimpleNamespace(put_total=0))  # type: ignore[assignment]
    return proc


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("topic", ["SyncTopic", HALF_TOPIC])
def test_replica_deferred_answers_like_the_general_path(
    status: PutMessageStatus, topic: str
) -> None:
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
    general = _processor()._answer_status(request, msg, result, status)

    proc = _processor()
    deferred = _ReplicaDeferred(proc._answer(request, msg, result), result.remark)
    got: list[RemotingCommand | None] = []
    deferred._attach(got.append)
    deferred(status)
    assert deferred.done and len(got) == 1 and got[0] is not None
    assert encode(got[0], 7) == encode(general, 7)
    # counted once, at append, whatever the replica outcome (the general path counts stored
    # answers when it builds them)
    assert proc.ctrl.stats.put_total == 1


async def test_group_token_answers_each_put_by_its_own_end(tmp_path: Path) -> None:
    """One group, three puts: a timeout answers PUT_OK to the puts the ack covers and
    FLUSH_SLAVE_TIMEOUT to the rest; an ack past the target answers PUT_OK to all."""
    store = MessageStore.open(MessageStoreConfig(
        store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=1024 * 1024,
        broker_role=BrokerRole.SYNC_MASTER,
    ))
    try:
        ha = HAService(store, HAConfig(ha_listen_port=0), host="127.0.0.1")
        ends = []
        for i in range(3):
            r = store.append_message(Message(topic="T", body=b"m%d" % i, queue_id=0))
            assert r.result is not None
            ends.append(r.result.end_offset)
        ha.table.add(1, "slave", 0)
        answers: dict[int, PutMessageStatus] = {}

        def answer_to(end: int) -> Callable[[PutMessageStatus], None]:
            return functools.partial(answers.__setitem__, end)

        for end in ends:
            assert ha.sync_status_nowait(end) is None  # must wait
            ha.on_replicated(end, answer_to(end))
        assert ha.groups.waiting_puts == 3
        ha.on_report(1, ends[1])  # covers the first two, not the group's target
        assert answers == {}
        for group in ha.groups.expire(float("inf")):
            group.token.set()
        assert answers == {
            ends[0]: PutMessageStatus.PUT_OK,
            ends[1]: PutMessageStatus.PUT_OK,
            ends[2]: PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        }

        answers.clear()
        for end in ends:
            ha.on_replicated(end, answer_to(end))
        ha.seal_group()
        ha.on_report(1, ends[2])
        assert answers == dict.fromkeys(ends, PutMessageStatus.PUT_OK)
        assert ha.groups.waiting_puts == 0
        assert ha.released_puts == 3 and ha.deferred_puts == 6
    finally:
        store.close()


async def test_on_replicated_joins_like_group_transfer_join(tmp_path: Path) -> None:
    """``on_replicated`` joins an open group inline; the groups it builds equal those of
    ``GroupTransfer.join`` with the same (end, deadline) sequence: members, target (the
    highest end), deadline (the latest), one token per group, and a group per seal."""
    store = MessageStore.open(MessageStoreConfig(
        store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=1024 * 1024,
        broker_role=BrokerRole.SYNC_MASTER,
    ))
    try:
        ha = HAService(store, HAConfig(ha_listen_port=0, sync_flush_timeout_ms=1000))
        reference = HAService(store, HAConfig(ha_listen_port=0, sync_flush_timeout_ms=1000))
        clock = iter([5.0, 4.0, 7.0, 6.5, 9.0, 8.0, 8.5])  # not monotonic: max must win
        joins = [(300, 0), (200, 0), (500, 0), (400, 1), (900, 0), (700, 2), (800, 0)]
        for end, seal_after in joins:
            now = next(clock)
            ha._now = lambda now=now: now  # type: ignore[misc]
            ha.on_replicated(end, lambda status: None)
            reference.groups.join(end, now + 1.0)
            if seal_after:
                ha.seal_group()
                reference.seal_group()

        def shape(svc: HAService) -> list[tuple[int, int, float, int]]:
            groups = [*svc.groups._sealed, svc.groups.open_group]
            return [(g.members, g.target, g.deadline, len(g.token.ends)) for g in groups if g]

        assert shape(ha) == [(4, 500, 8.0, 4), (2, 900, 10.0, 2), (1, 800, 9.5, 1)]
        assert [(m, t, d) for m, t, d, _ in shape(ha)] == [
            (m, t, d) for m, t, d, _ in shape(reference)
        ]
        assert ha.deferred_puts == len(joins) and ha.groups.waiting_puts == len(joins)
    finally:
        store.close()
