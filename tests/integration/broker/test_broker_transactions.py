"""Transactional messages: half messages, END_TRANSACTION commit/rollback, check-backs."""

from __future__ import annotations

from pathlib import Path

import orjson
import trio

from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.connection import Connection

from .conftest import WAIT_S, messages, ok, running_cluster

PREPARED = 0x4


def _end(resp: RemotingCommand, kind: int, *, from_check: bool = False) -> dict[str, str]:
    msg_id = resp.ext_fields["msgId"]
    return {
        "producerGroup": "TXG",
        "tranStateTableOffset": resp.ext_fields["queueOffset"],
        "commitLogOffset": str(int(msg_id[16:], 16)),
        "commitOrRollback": str(kind),
        "fromTransactionCheck": "true" if from_check else "false",
        "msgId": msg_id,
    }


async def test_commit_rollback_and_check_back(tmp_path: Path) -> None:
    checks: list[RemotingCommand] = []
    checked = trio.Event()

    def on_check(conn: Connection, request: RemotingCommand) -> None:
        # Only the open half matters: on a saturated machine the first half can outlive the
        # 50 ms transaction timeout before its commit arrives and be checked too (harmless).
        if request.ext_fields.get("msgId") == "B" * 32:
            checks.append(request)
            checked.set()

    async with (
        running_cluster(tmp_path, transactionCheckInterval="100", transactionTimeOut="50") as c,
        open_remoting_client({RequestCode.CHECK_TRANSACTION_STATE: on_check}) as producer,
    ):
        hb = orjson.dumps({"clientID": "p1", "producerDataSet": [{"groupName": "TXG"}]})
        ok(
            await producer.invoke(
                c.addr, RemotingCommand.request(RequestCode.HEART_BEAT, None, hb), WAIT_S
            )
        )
        props = {"TRAN_MSG": "true", "PGROUP": "TXG", "UNIQ_KEY": "A" * 32}
        half = ok(await c.send("TxTopic", b"committed", props=props, extra={"f": str(PREPARED)}))
        # as RocketMQ answers: no transactionId (clients use the UNIQ_KEY) and the producer's
        # queue, not the half topic's
        assert "transactionId" not in half.ext_fields
        assert half.ext_fields["queueId"] == "0"
        # invisible until committed
        assert (await c.pull("TxTopic")).code == ResponseCode.PULL_NOT_FOUND
        ok(await c.call(RequestCode.END_TRANSACTION, _end(half, 8)))
        got = ok(await c.pull("TxTopic", suspend_ms=3000))  # waits for the dispatch of the commit
        (msg,) = messages(got)
        assert msg.body == b"committed" and msg.topic == "TxTopic"
        # a second half is left open: the broker asks the producer about it
        props2 = {"TRAN_MSG": "true", "PGROUP": "TXG", "UNIQ_KEY": "B" * 32}
        half2 = ok(
            await c.send("TxTopic", b"rolled back", props=props2, extra={"f": str(PREPARED)})
        )
        with trio.fail_after(WAIT_S):
            await checked.wait()
        check = checks[0]
        assert check.ext_fields["tranStateTableOffset"] == half2.ext_fields["queueOffset"]
        assert check.ext_fields["msgId"] == "B" * 32
        (checked_msg,) = messages(check)
        assert checked_msg.topic == "TxTopic" and checked_msg.body == b"rolled back"
        ok(await c.call(RequestCode.END_TRANSACTION, _end(half2, 12, from_check=True)))
        assert (await c.pull("TxTopic", 1)).code == ResponseCode.PULL_NOT_FOUND
        assert c.broker.transactions.is_resolved(int(half2.ext_fields["queueOffset"]))
        wrong = await c.call(
            RequestCode.END_TRANSACTION, {**_end(half2, 8), "producerGroup": "OTHER"}
        )
        assert wrong.code == ResponseCode.SYSTEM_ERROR


async def test_first_check_pass_creates_the_half_topic(tmp_path: Path) -> None:
    """As on Apache's broker, RMQ_SYS_TRANS_HALF_TOPIC exists once the transaction check has
    run, whether or not a transaction was ever sent (topic lists agree), and is routed."""
    async with running_cluster(tmp_path, transactionCheckInterval="100") as c:
        def half(resp: RemotingCommand) -> dict[str, object] | None:
            table = orjson.loads(bytes(resp.body))["topicConfigTable"]
            found: dict[str, object] | None = table.get("RMQ_SYS_TRANS_HALF_TOPIC")
            return found

        with trio.fail_after(WAIT_S):
            while (tc := half(ok(await c.call(RequestCode.GET_ALL_TOPIC_CONFIG)))) is None:  # noqa: ASYNC110
                await trio.sleep(0.05)  # polling a condition with a deadline
        assert (tc["readQueueNums"], tc["writeQueueNums"], tc["perm"]) == (1, 1, 6)
