"""Timer messages from our own client and CLI against an in-process cluster: ``rmq-cluster
produce --delay-ms`` / ``--deliver-at`` and ``Message(delay_ms=..., deliver_time_ms=...)``; each
arrives once, not before its time; batches and transactions refuse timers client-side."""

from __future__ import annotations

import time

import pytest

from rmq_cluster.client import Message, Producer
from rmq_cluster.client.errors import MQClientError
from tests.integration.client.conftest import Cluster
from tests.integration.client.test_cli_sync import run_cli


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_cli_and_client_send_timer_messages(cluster: Cluster,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ns = cluster.ns_addr
    code, _rows = await run_cli(capsys, "updateTopic", "-n", ns, "-t", "CLIT", "-c",
                                "TestCluster", "-r", "2", "-w", "2", "--json")
    assert code == 0
    started = _now_ms()
    code, rows = await run_cli(capsys, "produce", "-n", ns, "-t", "CLIT", "--count", "2",
                               "--delay-ms", "1500", "--json")
    assert code == 0 and rows[-1]["summary"]["sent"] == 2
    at = _now_ms() + 1200
    code, rows = await run_cli(capsys, "produce", "-n", ns, "-t", "CLIT", "--count", "1",
                               "--deliver-at", str(at), "--json")
    assert code == 0 and rows[-1]["summary"]["sent"] == 1
    async with Producer("TimerClient", client_config=cluster.client_config()) as producer:
        await producer.send(Message("CLIT", b"py", delay_ms=1000))
        with pytest.raises(MQClientError):
            await producer.send_batch([Message("CLIT", b"b", delay_ms=1000)])
    code, rows = await run_cli(capsys, "consume", "-n", ns, "-t", "CLIT", "-g", "CLITG",
                               "--count", "4", "--timeout", "15", "--json")
    got = rows[:-1]
    assert code == 0 and len(got) == 4 and len({r["msgId"] for r in got}) == 4
    # none was stored in CLIT before its time: the delivery is a new record of the broker's
    assert all(r["storeTimestamp"] >= started + 1000 for r in got), got
    assert all("TIMER_OUT_MS" in r["properties"] for r in got)
    timer = cluster.broker.timer
    assert timer is not None and timer.delivered == 4
