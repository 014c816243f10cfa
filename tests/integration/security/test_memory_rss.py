"""Real memory of a real broker process (issue 31, item 6): rounds of many connections that each
hold a partial 15 MiB frame. The broker's resident set (VmRSS in /proc/<pid>/status, not its own
accounting) stays within its input budget during every round and returns to within a margin of
where it started once the connections close -- the rounds do not pile up."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio

from rmq_cluster.cluster.protocol.route import KVTable
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand, encode_into
from rmq_cluster.cluster.remoting.codes import RequestCode
from tests.integration.broker.test_broker_process import _start_broker, _stop

MIB = 1024 * 1024
#: Each connection sends this much of a frame this long, and then nothing more.
FRAME_BYTES = 15 * MIB
PARTIAL_BYTES = 14 * MIB
CONNECTIONS = 32  # about twice what the default 256 MiB budget admits at once
ROUNDS = 3
#: Frames of FRAME_BYTES the default budget holds at once, at least (the rest wait unread).
ADMITTED_AT_LEAST = 12
#: How far above its starting point the broker's RSS may be once a round's connections closed,
#: and above starting point + input budget while they hold their frames.
RSS_MARGIN_BYTES = 64 * MIB
#: Deadline for each thing a round waits for (frames arriving, RSS coming back).
ROUND_WAIT_S = 30.0
POLL_S = 0.02


def _rss(pid: int) -> int:
    """The resident set of process ``pid`` in bytes (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _broker_conf(tmp_path: Path) -> Callable[[int], str]:
    def text(port: int) -> str:
        return (
            f"brokerName=broker-mem\nlistenPort={port}\nhaListenPort=0\n"
            f"bindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\nstorePathRootDir={tmp_path}/store\n"
            "mappedFileSizeCommitLog=1048576\nmappedFileSizeConsumeQueue=60000\n"
            "maxHashSlotNum=1024\nmaxIndexNum=4096\n"
        )

    return text


async def _remoting_info(rc, addr: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    r = await rc.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    table = KVTable.decode(bytes(r.body)).table
    return {k: int(v) for k, v in table.items() if k.startswith("remoting")}


async def _round(pid: int, port: int, partial: memoryview, baseline: int, cap: int) -> int:
    """One round: CONNECTIONS hold a partial frame until ADMITTED_AT_LEAST of them were read;
    RSS is sampled all along and must stay under baseline + cap + margin. The peak RSS."""
    done = 0
    peak = _rss(pid)

    async def send(stream: trio.SocketStream) -> None:
        nonlocal done
        await stream.send_all(partial)  # the unadmitted ones block here (TCP backpressure)
        done += 1

    streams = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(CONNECTIONS)]
    try:
        async with trio.open_nursery() as nursery:
            for stream in streams:
                nursery.start_soon(send, stream)
            held = baseline + ADMITTED_AT_LEAST * PARTIAL_BYTES
            with trio.fail_after(ROUND_WAIT_S):
                while done < ADMITTED_AT_LEAST or peak < held:
                    await trio.sleep(POLL_S)  # RSS has no event to wait on: sample it
                    peak = max(peak, _rss(pid))
                    assert peak <= baseline + cap + RSS_MARGIN_BYTES, (peak, baseline, cap)
            nursery.cancel_scope.cancel()
    finally:
        for stream in streams:
            await stream.aclose()
    return peak


async def test_broker_rss_stays_in_budget_and_comes_back_round_after_round(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "broker.properties"
    frame = bytearray()
    encode_into(frame, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2,
                                               body=bytes(FRAME_BYTES - 256)), 1)
    assert len(frame) <= FRAME_BYTES
    partial = memoryview(bytes(frame))[:PARTIAL_BYTES]
    proc = None
    try:
        proc, port = await _start_broker(
            conf, _broker_conf(tmp_path), ["-m", "rmq_cluster.broker", "-c", str(conf)],
            tmp_path / "broker.log", b"boot success",
        )
        addr = f"127.0.0.1:{port}"
        async with open_remoting_client() as rc:
            cap = (await _remoting_info(rc, addr))["remotingMaxBufferedInputBytes"]
            baseline = _rss(proc.pid)
            figures = []
            for _ in range(ROUNDS):
                peak = await _round(proc.pid, port, partial, baseline, cap)
                with trio.fail_after(ROUND_WAIT_S):  # the broker saw every connection close
                    while True:
                        info = await _remoting_info(rc, addr)
                        if info["remotingConnections"] == 1 and not info[
                                "remotingBufferedInputBytes"]:
                            break
                        await trio.sleep(POLL_S)
                assert info["remotingBufferedInputPeakBytes"] <= cap
                after = _rss(proc.pid)
                with trio.move_on_after(ROUND_WAIT_S):
                    while after > baseline + RSS_MARGIN_BYTES:
                        await trio.sleep(POLL_S)
                        after = _rss(proc.pid)
                figures.append((peak // MIB, after // MIB))
                assert after <= baseline + RSS_MARGIN_BYTES, (
                    f"RSS not given back: baseline {baseline // MIB} MiB, (peak, after) per "
                    f"round {figures} MiB, budget {cap // MIB} MiB")
            print(f"broker RSS baseline {baseline // MIB} MiB; (peak, after close) per round: "
                  f"{figures} MiB; input budget {cap // MIB} MiB")
    finally:
        await _stop(proc)
