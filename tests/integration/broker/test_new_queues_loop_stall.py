"""A topic of 1024 queues created under load does not stall the broker's event loop (issue 39
item 1): a real ``mqbroker`` process; one connection sends one message to each of 1024 new
queues (auto-created topic), while a probe connection sends one message at a time to another
topic and records each round trip. Before, every new ConsumeQueue cost the loop a file
creation, a first-page fault and a directory fsync (~7-15 ms each on a busy disk): the reput
round that met ~400 new queues held the loop for seconds, and the probe's sends waited."""

from __future__ import annotations

import math
import time
from pathlib import Path

import trio

from rmq_cluster.cluster.protocol.message import encode_properties
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .test_broker_process import _start_broker, _stop

QUEUES = 1024
#: the probe's longest round trip allowed while the 1024 queues are made. Before: over 3 s (the
#: stall of one reput round; load average ~24). After: 0.17-0.64 s on this 2-core machine at
#: load averages 6-24 (its median RT there: 30-50 ms: the CPU is shared, not the loop stalled).
MAX_PROBE_RT_S = 1.0
PROBE_EVERY_S = 0.005
WIDE_IN_FLIGHT = 256
DONE_WITHIN_S = 60.0
CALL_TIMEOUT_S = 30.0  # (main's stalls outlasted the default 3 s: seen as the RT, not an error)


def _send(topic: str, queue_id: int, queues: int) -> RemotingCommand:
    ext = {
        "a": "StallPG", "b": topic, "c": "TBW102", "d": str(queues), "e": str(queue_id),
        "f": "0", "g": str(int(time.time() * 1000)), "h": "0",
        "i": encode_properties({"WAIT": "true"}).decode(), "j": "0", "k": "false",
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"m" * 1024)


async def _dispatched(client: RemotingClient, addr: str, queue_id: int) -> bool:
    ext = {"topic": "Wide", "queueId": str(queue_id)}
    resp = await client.invoke(
        addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, ext), CALL_TIMEOUT_S
    )
    return resp.code == ResponseCode.SUCCESS and int((resp.ext_fields or {}).get("offset", 0)) > 0


async def test_a_topic_of_1024_new_queues_does_not_stall_other_sends(tmp_path: Path) -> None:
    conf = tmp_path / "broker.properties"

    def conf_text(port: int) -> str:
        return (
            "brokerName=stall\nbrokerIP1=127.0.0.1\nbindAddress=127.0.0.1\n"
            f"listenPort={port}\nhaListenPort=0\nstorePathRootDir={tmp_path}/store\n"
            "flushDiskType=ASYNC_FLUSH\nmappedFileSizeCommitLog=16777216\n"
            f"autoCreateTopicEnable=true\ndefaultTopicQueueNums={QUEUES}\n"
        )

    proc = None
    try:
        proc, port = await _start_broker(
            conf, conf_text, ["-m", "rmq_cluster.broker", "-c", str(conf)],
            tmp_path / "broker.log", b"boot success",
        )
        addr = f"127.0.0.1:{port}"
        async with open_remoting_client() as probe_client, open_remoting_client() as client:
            # the probe's topic and its queue exist first (its own files are not what is timed)
            first = await probe_client.invoke(addr, _send("Probe", 0, 1))
            assert first.code == ResponseCode.SUCCESS, first.remark
            rts: list[float] = []
            marks: list[tuple[float, float]] = []
            phases: list[tuple[str, float]] = []
            t0 = time.monotonic()
            done = trio.Event()

            async def probe() -> None:
                while not done.is_set():
                    started = time.monotonic()
                    resp = await probe_client.invoke(addr, _send("Probe", 0, 1), CALL_TIMEOUT_S)
                    rts.append(time.monotonic() - started)
                    marks.append((started - t0, rts[-1]))
                    assert resp.code == ResponseCode.SUCCESS, resp.remark
                    await trio.sleep(PROBE_EVERY_S)  # (the probe's cadence, not a wait)

            async def wide() -> None:
                # the first send creates the topic; then the other 1023 queues, 256 in flight
                resp = await client.invoke(addr, _send("Wide", 0, QUEUES), CALL_TIMEOUT_S)
                phases.append(("created", time.monotonic() - t0))
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                limiter = trio.Semaphore(WIDE_IN_FLIGHT)

                async def one(q: int) -> None:
                    async with limiter:
                        got = await client.invoke(addr, _send("Wide", q, QUEUES), CALL_TIMEOUT_S)
                        assert got.code == ResponseCode.SUCCESS, got.remark

                async with trio.open_nursery() as sends:
                    for q in range(1, QUEUES):
                        await limiter.acquire()
                        limiter.release()
                        sends.start_soon(one, q)
                phases.append(("sent", time.monotonic() - t0))
                # every queue's unit written (dispatch is in CommitLog order: the last one)
                while not await _dispatched(client, addr, QUEUES - 1):  # noqa: ASYNC110 - another process: only asking tells
                    await trio.sleep(0.05)
                phases.append(("dispatched", time.monotonic() - t0))
                done.set()

            with trio.fail_after(DONE_WITHIN_S):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(probe)
                    nursery.start_soon(wide)
            for q in (0, 1, QUEUES // 2, QUEUES - 2):
                assert await _dispatched(client, addr, q)
        longest = max(rts, default=math.inf)
        assert len(rts) >= 3
        assert longest < MAX_PROBE_RT_S, (
            f"a probe send waited {longest * 1000:.0f} ms while 1024 queues were made "
            f"({len(rts)} probes, median {sorted(rts)[len(rts) // 2] * 1000:.1f} ms; phases "
            f"{phases}; longest (at, rt) {sorted(marks, key=lambda m: -m[1])[:5]})"
        )
    finally:
        await _stop(proc)
