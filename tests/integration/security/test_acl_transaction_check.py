"""Transaction checks under ACL (issue 31, item 4), through real processes: ``rmq-cluster up
--acl`` with two accounts besides the admin, a victim allowed to publish to ``TxTopic`` and an
attacker denied everything. The attacker heartbeats as the victim's producer group first (so
it is the group's first connection), then the victim does and leaves a half message open
(UNKNOW: it never ends it). The broker's CHECK_TRANSACTION_STATE carries the half message's
body: it must reach the victim, round after round, and never the attacker; once the victim is
gone, the check is withheld (and logged) rather than handed to the attacker."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import orjson
import pytest
import trio

from rmq_cluster.broker.clients import ClientChannelInfo
from rmq_cluster.broker.transaction import (
    WITHHELD_CHECK_LOG_INTERVAL_MS,
    TransactionState,
    check_recipient,
)
from rmq_cluster.client import frames
from rmq_cluster.cluster.acl.signing import Credentials
from rmq_cluster.cluster.protocol.message import decode_record, encode_properties
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.connection import Connection
from tests.integration.security.acl_cluster_testlib import ADMIN, acl_cluster

VICTIM: Final = Credentials("victimKey01", "victimSecret01")
ATTACKER: Final = Credentials("attackKey01", "attackSecret01")
ACCOUNTS: Final = (
    {"accessKey": VICTIM.access_key, "secretKey": VICTIM.secret_key, "admin": False,
     "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY", "topicPerms": ["TxTopic=PUB|SUB"]},
    {"accessKey": ATTACKER.access_key, "secretKey": ATTACKER.secret_key, "admin": False,
     "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY"},
)
TOPIC: Final = "TxTopic"
GROUP: Final = "TxVictimPG"
BODY: Final = b"secret half-message body"
PREPARED: Final = 0x4
#: Checks the victim must receive (each a separate round of the check service).
ROUNDS: Final = 3
WAIT_S: Final = 30.0
LOG_POLL_S: Final = 0.05  # reading a real process's log file, always under a deadline
WITHHELD: Final = b"transaction check withheld"


def _ok(resp: RemotingCommand) -> RemotingCommand:
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    return resp


def _heartbeat(client_id: str) -> RemotingCommand:
    body = orjson.dumps({"clientID": client_id, "producerDataSet": [{"groupName": GROUP}]})
    return frames.heartbeat(body)


def _half_message() -> RemotingCommand:
    props = {"TRAN_MSG": "true", "PGROUP": GROUP, "UNIQ_KEY": "C" * 32}
    return frames.send_message(
        group=GROUP, topic=TOPIC, queue_id=0, sys_flag=PREPARED, born_timestamp=1, flag=0,
        properties=encode_properties(props).decode(), body=BODY, broker_name="broker-a",
    )


def _create_topic() -> RemotingCommand:
    return ADMIN.sign(RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
         "perm": "6", "topicFilterType": "SINGLE_TAG"},
    ))


async def _wait_in_log(log: Path, needle: bytes) -> None:
    with trio.fail_after(WAIT_S):
        while True:  # another process writes it: polled, under the deadline
            if needle in await trio.Path(log).read_bytes():
                return
            await trio.sleep(LOG_POLL_S)


async def _register(client: RemotingClient, addr: str, who: Credentials) -> None:
    _ok(await client.invoke(addr, who.sign(_heartbeat(who.access_key)), WAIT_S))


@pytest.mark.slow
async def test_check_reaches_only_a_producer_allowed_to_publish(tmp_path: Path) -> None:
    attacker_got: list[bytes] = []
    victim_got: list[bytes] = []
    decided = trio.Event()  # the victim got ROUNDS checks, or the attacker got one

    def on_attacker(conn: Connection, request: RemotingCommand) -> None:
        attacker_got.append(bytes(request.body))
        decided.set()

    def on_victim(conn: Connection, request: RemotingCommand) -> None:
        victim_got.append(bytes(request.body))
        if len(victim_got) >= ROUNDS:
            decided.set()

    props = {"transactionCheckInterval": "200", "transactionTimeOut": "100"}
    with acl_cluster(tmp_path, profile={"base": "single"}, broker_properties=props,
                     accounts=ACCOUNTS) as cluster:
        addr = cluster.addr("broker-a")
        async with open_remoting_client(
            {RequestCode.CHECK_TRANSACTION_STATE: on_attacker}
        ) as attacker:
            async with open_remoting_client(
                {RequestCode.CHECK_TRANSACTION_STATE: on_victim}
            ) as victim:
                _ok(await victim.invoke(addr, _create_topic(), WAIT_S))
                await _register(attacker, addr, ATTACKER)  # the group's first connection
                await _register(victim, addr, VICTIM)
                _ok(await victim.invoke(addr, VICTIM.sign(_half_message()), WAIT_S))
                with trio.fail_after(WAIT_S):
                    await decided.wait()
                # the attacker got none of these rounds' checks
                assert not attacker_got, f"the attacker received {attacker_got[0]!r}"
                assert len(victim_got) >= ROUNDS
                checked = decode_record(victim_got[0])
                assert checked.topic == TOPIC and checked.body == BODY
            # the victim is gone: the attacker is the group's only producer; the check is
            # withheld, and said in the broker's log
            await _register(attacker, addr, ATTACKER)
            await _wait_in_log(cluster.log("broker-a"), WITHHELD)
            assert attacker_got == []


def test_recipient_choice_and_withheld_log_rate() -> None:
    """The pure parts: ACL off, the group's first producer; on, the first allowed one, else
    none; withheld checks are logged once per WITHHELD_CHECK_LOG_INTERVAL_MS with a count."""
    first, second = (ClientChannelInfo(f"ch{i}", f"c{i}", "JAVA", 1, "127.0.0.1:1", 0,
                                       key) for i, key in enumerate(("deny", "allow")))
    allowed = {"allow"}

    def may(info: ClientChannelInfo, topic: str) -> bool:
        return topic == TOPIC and info.access_key in allowed

    assert check_recipient([first, second], TOPIC, None) is first
    assert check_recipient([first, second], TOPIC, may) is second
    assert check_recipient([first], TOPIC, may) is None
    assert check_recipient([first, second], "Other", may) is None
    state = TransactionState()
    step = WITHHELD_CHECK_LOG_INTERVAL_MS
    logged = [state.withhold(t) for t in (0, 1, step - 1, step, step + 1, 3 * step)]
    assert logged == [1, 0, 0, 3, 0, 2]
    assert state.withheld_checks == 6
