"""mqadmin resetOffsetByTime: online consumers are moved by their broker
(INVOKE_BROKER_TO_RESET_OFFSET -> RESET_CONSUMER_CLIENT_OFFSET) and consume again from there;
for an offline group the committed offsets are rewritten."""

from __future__ import annotations

from collections import Counter

import pytest
import trio

from rmq_cluster.client import (
    Admin,
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
)

from .conftest import WAIT_S, Cluster
from .test_cli_sync import run_cli


class Seen:
    def __init__(self) -> None:
        self.msgs: list[ReceivedMessage] = []
        self.changed = trio.Event()

    def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        self.msgs.extend(msgs)
        self.changed.set()
        self.changed = trio.Event()
        return ConsumeResult.SUCCESS

    async def until(self, n: int) -> None:
        with trio.fail_after(WAIT_S):
            while len(self.msgs) < n:
                await self.changed.wait()

    async def until_bodies(self, since: int, bodies: set[bytes]) -> None:
        """Until every one of ``bodies`` arrived after the first ``since`` messages."""
        with trio.fail_after(WAIT_S):
            while not bodies <= {m.body for m in self.msgs[since:]}:
                await self.changed.wait()


async def _send(cc: object, topic: str, names: list[str]) -> None:
    async with Producer("ResetPG", client_config=cc) as p:  # type: ignore[arg-type]
        for name in names:
            await p.send(Message(topic, name.encode()))


async def test_reset_online_consumer_replays_from_a_time(cluster: Cluster) -> None:
    cc = cluster.client_config()
    await _send(cc, "ResetT", [f"a{i}" for i in range(5)])
    await _send(cc, "ResetT", [f"b{i}" for i in range(5)])
    seen = Seen()
    consumer = PushConsumer("ResetCG", client_config=cc, listener=seen,
                            consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("ResetT")
    async with consumer, Admin(client_config=cc) as admin:
        await seen.until(10)
        first_b = min(m.store_timestamp for m in seen.msgs if m.body.startswith(b"b"))
        moved = await admin.reset_offset_by_time("ResetCG", "ResetT", first_b)
        assert moved and all(off >= 0 for off in moved.values())
        await seen.until_bodies(10, {f"b{i}".encode() for i in range(5)})
        replayed = seen.msgs[10:]
        # every b message again; before the reset time, per queue, at most the one message stored
        # just before it (a 4.9 broker, Apache's and ours, answers the nearer of the two
        # messages around the time: ConsumeQueue.getOffsetInQueueByTime)
        early = Counter(m.queue.queue_id for m in replayed if m.store_timestamp < first_b)
        assert all(n <= 1 for n in early.values()), early
        # back to the beginning: everything again
        count = len(seen.msgs)
        await admin.reset_offset_by_time("ResetCG", "ResetT", 0)
        await seen.until(count + 10)
        assert {m.body for m in seen.msgs[count:]} == {
            f"{p}{i}".encode() for p in "ab" for i in range(5)
        }


async def test_reset_offline_group_rewrites_committed_offsets(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cc = cluster.client_config()
    await _send(cc, "ResetOff", [f"m{i}" for i in range(8)])
    seen = Seen()
    consumer = PushConsumer("ResetOffCG", client_config=cc, listener=seen,
                            consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("ResetOff")
    async with consumer:
        await seen.until(8)
    # the group is offline now: the CLI rewrites its offsets to the start
    code, rows = await run_cli(capsys, "resetOffsetByTime", "-n", cluster.ns_addr,
                               "-g", "ResetOffCG", "-t", "ResetOff", "-s", "0", "--json")
    assert code == 0 and rows[0]["queues"] and all(q["offset"] == 0 for q in rows[0]["queues"])
    again = Seen()
    consumer = PushConsumer("ResetOffCG", client_config=cc, listener=again,
                            consume_from=ConsumeFromWhere.LAST_OFFSET)
    consumer.subscribe("ResetOff")
    async with consumer:
        await again.until(8)
    assert sorted(m.body for m in again.msgs) == sorted(f"m{i}".encode() for i in range(8))
    code, _rows = await run_cli(capsys, "resetOffsetByTime", "-n", cluster.ns_addr,
                                "-g", "ResetOffCG", "-t", "ResetOff", "-s", "yesterday")
    assert code != 0
