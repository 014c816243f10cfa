"""CHECK_TRANSACTION_STATE cannot make a producer do unbounded work (issue 31 item 5): a
half message whose body is a compression bomb is checked without inflating it (the check is
skipped, logged, the local check never runs), and at most ``max_pending_transaction_checks``
checks run at once (the broker's further checks are dropped and come again later)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from rmq_cluster.client import Message, ReceivedMessage, TransactionProducer, TransactionState
from rmq_cluster.cluster.protocol.message import MessageConst as MC
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.cluster.remoting.connection import Connection
from rmq_cluster.cluster.remoting.headers import CheckTransactionStateRequestHeader

from .conftest import WAIT_S, Cluster
from .test_client_bombs import _raw, _raw_send, zlib_bomb

#: Enough past the producer's 4 MiB bound to show the bound; small enough for a main run.
HALF_BOMB_INFLATED_BYTES = 64 << 20
BOMB_ID = "B0B0B0B0B0B0B0B0B0B0B0B0B0B0B0B0"
#: SYSFLAG_TRANSACTION_PREPARED_TYPE on top of COMPRESSED | ZLIB.
PREPARED = 0x4


class CheckedProducer(TransactionProducer):
    """A TransactionProducer that says which checks it finished (by transaction id)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.finished: list[str | None] = []
        self.changed = trio.Event()

    async def check_transaction(self, conn: Connection,
                                header: CheckTransactionStateRequestHeader, body: bytes) -> None:
        await super().check_transaction(conn, header, body)
        self.finished.append(header.transaction_id)
        self.changed.set()
        self.changed = trio.Event()


async def test_half_message_bomb_is_not_inflated_by_its_check(cluster: Cluster) -> None:
    seen: list[bytes] = []

    def check(msg: ReceivedMessage) -> TransactionState:
        seen.append(msg.body[:64])
        return TransactionState.ROLLBACK_MESSAGE

    cc = cluster.client_config()
    async with CheckedProducer("TxBombPG", client_config=cc, check_local=check,
                               execute_local=lambda m, a: TransactionState.UNKNOW) as tp:
        await tp.send(Message("TxBombT", b"create"))
        await tp.instance.send_heartbeat_to_all()
        cmd = _raw_send("TxBombT", "broker-a", 0, zlib_bomb(HALF_BOMB_INFLATED_BYTES), {
            MC.PROPERTY_TRANSACTION_PREPARED: "true", MC.PROPERTY_PRODUCER_GROUP: "TxBombPG",
            MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: BOMB_ID})
        cmd.ext_fields["f"] = str(int(cmd.ext_fields["f"]) | PREPARED)
        resp = await _raw(cluster.addr, cmd)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        normal, _state = await tp.send_in_transaction(Message("TxBombT", b"normal"))
        with trio.fail_after(WAIT_S):
            # the broker's transaction id of a half message is its UNIQ_KEY
            while not {BOMB_ID, normal.msg_id} <= set(tp.finished):
                await tp.changed.wait()
    assert seen and set(seen) == {b"normal"}


async def test_transaction_checks_in_flight_are_bounded(cluster: Cluster) -> None:
    release = trio.Event()
    hold_calls = 0

    async def check(msg: ReceivedMessage) -> TransactionState:
        nonlocal hold_calls
        hold_calls += 1
        await release.wait()
        return TransactionState.ROLLBACK_MESSAGE

    cc = cluster.client_config(max_pending_transaction_checks=1)
    async with CheckedProducer("TxHoldPG", client_config=cc, check_local=check,
                               execute_local=lambda m, a: TransactionState.UNKNOW) as tp:
        await tp.send_in_transaction(Message("TxHoldT", b"hold"))
        with trio.fail_after(WAIT_S):
            while tp.instance.dropped_transaction_checks < 2:  # noqa: ASYNC110
                await trio.sleep(0.05)  # the broker's check rounds: polled under a deadline
        assert hold_calls == 1  # the held check is not run again while it runs
        release.set()
        with trio.fail_after(WAIT_S):
            while not tp.finished:
                await tp.changed.wait()


def test_max_pending_transaction_checks_is_positive() -> None:
    from rmq_cluster.client.config import ClientConfig

    with pytest.raises(ValueError):
        ClientConfig(max_pending_transaction_checks=0)
