"""Timers through a failover (issue 33, item 4), real processes: our client sends timer messages to
one broker group; the first batch comes due and is consumed, then the group's master is killed
with SIGKILL while the second batch waits. The master the group gets next (a DLedger election, a
controller's election) delivers the second batch, and neither batch is delivered twice: one
stored copy per message (a consumer may read a copy again after a failover; a timer must not be
put twice). RocketMQ 5 syncs the master's timer checkpoint to slaves every 3 s and repeats what
was delivered since; ours finds those deliveries in the replicated consume queues."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import trio

from rmq_cluster.client import ConsumeFromWhere, ConsumeResult, Message, Producer, PushConsumer
from rmq_cluster.client.config import ClientConfig
from rmq_cluster.deploy.testing import RunningCluster, rmq_cluster

pytestmark = pytest.mark.slow

EARLY_MS = 1500
LATE_MS = 30_000
PER_BATCH = 5
FAILOVER_WAIT_S = 40.0
DELIVER_WAIT_S = 90.0


def masters(cluster: RunningCluster, group: str) -> set[str]:
    return {n["name"] for n in cluster.status()["nodes"]
            if n.get("alive") and str(n.get("role")).endswith("MASTER")
            and n["name"].startswith(group) and n.get("kind") == "broker"}


def wait_new_master(cluster: RunningCluster, group: str, old: str) -> None:
    deadline = time.monotonic() + FAILOVER_WAIT_S
    while not masters(cluster, group) - {old}:
        assert time.monotonic() < deadline, "no new master registered"
        time.sleep(0.5)  # another process elects: poll its status, with a deadline


async def run_scenario(cluster: RunningCluster) -> tuple[dict[str, set[Any]], float]:
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr, client_ip="127.0.0.1",
                       poll_namesrv_interval_s=0.5, heartbeat_interval_s=1.0,
                       persist_offset_interval_s=0.5, rebalance_interval_s=1.0)
    copies: dict[str, set[Any]] = defaultdict(set)
    changed = trio.Event()

    def on_messages(msgs: list[Any]) -> ConsumeResult:
        nonlocal changed
        for m in msgs:
            if "TIMER_OUT_MS" in m.properties:
                copies[m.msg_id].add((m.queue.broker_name, m.queue_id, m.queue_offset))
        changed.set()
        changed = trio.Event()
        return ConsumeResult.SUCCESS

    async def until(cond: Any, timeout: float) -> None:
        with trio.fail_after(timeout):
            while not cond():
                await changed.wait()

    async with Producer("TimerFailover", client_config=cfg) as producer:
        first = await producer.send(Message("TimerFo", b"warm"))
        group = first.queue.broker_name
        queue = first.queue
        early = [await producer.send(Message("TimerFo", b"e%d" % i, delay_ms=EARLY_MS),
                                     queue=queue) for i in range(PER_BATCH)]
        late = [await producer.send(Message("TimerFo", b"l%d" % i, delay_ms=LATE_MS),
                                    queue=queue) for i in range(PER_BATCH)]
        sent_at = time.monotonic()
    async with PushConsumer("TimerFailoverC", client_config=cfg, listener=on_messages,
                            consume_from=ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.subscribe("TimerFo", "*")
        await until(lambda: all(r.msg_id in copies for r in early), DELIVER_WAIT_S)
        (old,) = await trio.to_thread.run_sync(masters, cluster, group)
        killed = await trio.to_thread.run_sync(cluster.cli, "kill", old, "--wait")
        assert killed.returncode == 0, killed.stderr
        killed_s = time.monotonic() - sent_at
        await trio.to_thread.run_sync(wait_new_master, cluster, group, old)
        await until(lambda: all(r.msg_id in copies for r in late), DELIVER_WAIT_S)
    ids = {r.msg_id for r in early + late}
    return {k: v for k, v in copies.items() if k in ids}, killed_s


@pytest.mark.parametrize("profile", ["dledger", "2m-2s-controller"])
def test_a_new_master_delivers_pending_timers_once(profile: str, tmp_path: Path) -> None:
    with rmq_cluster(profile, directory=tmp_path / "cluster") as cluster:
        copies, killed_s = trio.run(run_scenario, cluster)
    assert len(copies) == 2 * PER_BATCH
    twice = {k: v for k, v in copies.items() if len(v) != 1}
    assert not twice, ("delivered more than once", twice)
    assert killed_s * 1000 < LATE_MS, f"the kill came {killed_s:.1f} s after the sends"
