"""DLedger benchmark: a 3-node DLedger group beside a single master, and leader failover time.

    python3 bench/dledger.py [--seconds 3] [--body 1024] [--inflight 256] [--kills 10]

Every node is a real process (``mqbroker`` / ``mqnamesrv``) on loopback.
Cases:
  * baseline: a single ASYNC_FLUSH master, SEND_MESSAGE_V2 of ``--body`` bytes with
    ``--inflight`` requests in flight over one connection (bench/produce.py's raw driver);
  * dledger: the same load against the leader of a 3-node group (each send answered once its
    entry is committed on a majority);
  * failover: ``--kills`` times, SIGKILL the leader while a client sends one message at a time
    through the routes (a NameServer's GET_BROKER_CLUSTER_INFO, polled every
    ``ROUTE_POLL_S``); failover time = kill -> the next acknowledged send, via the new leader.
    The killed node is restarted and caught up before the next kill.
Prints one JSON object; each throughput case also reports the CPU each broker process used in
the measured window (``cpu_cores``, and ``cpu_us_per_msg``: CPU time per acknowledged message,
less noisy than the rate on a shared machine). Targets (issue 8): >= 29 000 msgs/s and
>= 0.5x the single master; failover p50 <= 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import _launch  # noqa: E402  (bench/_launch.py: the node processes)
import checkout  # noqa: E402, F401  (bench/checkout.py: this tree's rmq_cluster first)
import produce as produce_bench  # noqa: E402  (bench/produce.py: broker start + raw driver)

from rmq_cluster.cluster.logging import configure_logging  # noqa: E402
from rmq_cluster.cluster.protocol.route import ClusterInfo, KVTable  # noqa: E402
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client  # noqa: E402
from rmq_cluster.cluster.remoting.codec import RemotingCommand  # noqa: E402
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode  # noqa: E402

GROUP = "bench-dl"
TOPIC = produce_bench.TOPIC
LEADER_TIMEOUT_S = 30.0
FAILOVER_TIMEOUT_S = 30.0
ROUTE_POLL_S = 0.02
SEND_TIMEOUT_S = 1.0
WARMUP_S = 1.0


class Group:
    """A NameServer and a 3-node DLedger group of broker processes."""

    def __init__(self, root: Path, size: int = 3) -> None:
        self.root = root
        self.size = size
        taken: set[int] = set()
        self.ns_port = _launch.free_port(taken=taken)
        self.broker_ports = [_launch.broker_port(taken) for _ in range(size)]
        # each broker's DLedger port, a free one of its own (`rmq-cluster up` plans listenPort + 2)
        self.dl_ports = [_launch.free_port(taken=taken) for _ in range(size)]
        self.peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(self.dl_ports))
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self.ns: subprocess.Popen[str] | None = None

    @property
    def ns_addr(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    def addr(self, i: int) -> str:
        return f"127.0.0.1:{self.broker_ports[i]}"

    def start_ns(self) -> None:
        conf = self.root / "namesrv.properties"
        conf.write_text(f"listenPort={self.ns_port}\nbindAddress=127.0.0.1\n")
        self.ns = _launch.spawn([*_launch.NAMESRV, "-c", str(conf)])

    def start(self, i: int) -> None:
        conf = self.root / f"n{i}.properties"
        conf.write_text(
            "brokerClusterName=BenchCluster\n"
            f"brokerName={GROUP}\nbrokerIP1=127.0.0.1\nbindAddress=127.0.0.1\n"
            f"listenPort={self.broker_ports[i]}\nstorePathRootDir={self.root}/n{i}\n"
            f"namesrvAddr={self.ns_addr}\nflushDiskType=ASYNC_FLUSH\n"
            f"defaultTopicQueueNums={produce_bench.QUEUES}\n"
            f"enableDLegerCommitLog=true\ndLegerGroup={GROUP}\ndLegerPeers={self.peers}\n"
            f"dLegerSelfId=n{i}\n"
        )
        self.procs[i] = _launch.spawn([*_launch.BROKER, "-c", str(conf)])

    def kill(self, i: int) -> None:
        proc = self.procs.pop(i)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        procs = list(self.procs.values()) + ([self.ns] if self.ns else [])
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        self.ns = None


async def _runtime_info(client: RemotingClient, addr: str) -> dict[str, str] | None:
    try:
        resp = await client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 1.0
        )
    except Exception:
        return None
    if resp.code != ResponseCode.SUCCESS:
        return None
    return dict(KVTable.decode(resp.body).table)


async def _leader(client: RemotingClient, group: Group) -> int:
    with trio.fail_after(LEADER_TIMEOUT_S):
        while True:
            for i in list(group.procs):
                info = await _runtime_info(client, group.addr(i))
                if info and info.get("dLegerLeaderReady") == "true":
                    return i
            await trio.sleep(0.05)


async def _caught_up(client: RemotingClient, group: Group) -> None:
    """Every running member has applied what the leader committed."""
    with trio.fail_after(LEADER_TIMEOUT_S):
        while True:
            infos = [await _runtime_info(client, group.addr(i)) for i in group.procs]
            if all(infos):
                applied = {int(x["dLegerAppliedIndex"]) for x in infos if x}
                if len(applied) == 1:
                    return
            await trio.sleep(0.05)


async def _routed_master(client: RemotingClient, ns_addr: str) -> str | None:
    try:
        resp = await client.invoke(
            ns_addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 1.0
        )
    except Exception:
        return None
    if resp.code != ResponseCode.SUCCESS:
        return None
    data = ClusterInfo.decode(resp.body).broker_addr_table.get(GROUP)
    return None if data is None else data.broker_addrs.get(0)


async def _send_once(client: RemotingClient, addr: str, body: bytes) -> bool:
    req = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, produce_bench._send_ext(TOPIC, 0), body
    )
    try:
        resp = await client.invoke(addr, req, SEND_TIMEOUT_S)
    except Exception:
        return False
    return resp.code == ResponseCode.SUCCESS


async def _failovers(group: Group, kills: int, body: bytes) -> dict[str, Any]:
    times: list[float] = []
    async with open_remoting_client(node="bench-failover") as client:
        for _ in range(kills):
            leader = await _leader(client, group)
            old_addr = group.addr(leader)
            await _caught_up(client, group)
            while True:  # a warm, acked send first
                if await _send_once(client, old_addr, body):
                    break
                await trio.sleep(ROUTE_POLL_S)
            killed_at = time.perf_counter()
            group.kill(leader)
            with trio.fail_after(FAILOVER_TIMEOUT_S):
                while True:
                    addr = await _routed_master(client, group.ns_addr)
                    if addr and addr != old_addr and await _send_once(client, addr, body):
                        break
                    await trio.sleep(ROUTE_POLL_S)
            times.append(time.perf_counter() - killed_at)
            await trio.to_thread.run_sync(group.start, leader)
    ordered = sorted(times)
    return {
        "kills": kills,
        "p50_s": round(ordered[len(ordered) // 2], 3) if ordered else None,
        "max_s": round(ordered[-1], 3) if ordered else None,
        "all_s": [round(t, 3) for t in times],
    }


async def _batching(addr: str) -> dict[str, int]:
    """The DLedger leader's batching counters (GET_BROKER_RUNTIME_INFO)."""
    async with open_remoting_client(node="bench-info") as client:
        info = await _runtime_info(client, addr) or {}
    keys = ("dLegerReadies", "dLegerPushes", "dLegerPushedEntries")
    return {k: int(info.get(k, "0") or 0) for k in keys}


def _throughput(
    port: int, body: bytes, args: argparse.Namespace, pids: dict[str, int],
    dledger: bool = False,
) -> dict[str, Any]:
    """The load against ``port``: a warm-up, then ``--seconds`` measured; the CPU each of
    ``pids`` used in the measured window, as cores and as microseconds per message; for a
    DLedger leader (``dledger``) also how many messages one Ready and one push carried."""
    async def run() -> dict[str, Any]:
        async with open_remoting_client(node="bench-client") as client:
            with trio.fail_after(10):
                while True:  # topic auto-created, leader ready
                    if await _send_once(client, f"127.0.0.1:{port}", body):
                        break
                    await trio.sleep(ROUTE_POLL_S)
        frames = produce_bench._frames(RequestCode.SEND_MESSAGE_V2, TOPIC, body)
        await produce_bench._raw_case(port, frames, args.inflight, WARMUP_S, 0.0)
        addr = f"127.0.0.1:{port}"
        counters = await _batching(addr) if dledger else {}
        cpu_seconds = produce_bench.remoting_bench.cpu_seconds
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        started = time.monotonic()
        stats = await produce_bench._raw_case(port, frames, args.inflight, args.seconds, 0.0)
        elapsed = time.monotonic() - started
        used = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
        done = max(1, int(stats["requests"]))
        out: dict[str, Any] = {
            "msgs_per_s": stats["req_per_s"], "p50_us": stats["p50_us"],
            "p99_us": stats["p99_us"], "in_flight": args.inflight,
            "cpu_cores": {name: round(cpu / elapsed, 2) for name, cpu in used.items()},
            "cpu_us_per_msg": {name: round(cpu / done * 1e6, 1) for name, cpu in used.items()},
        }
        if dledger:
            after = await _batching(addr)
            readies = after["dLegerReadies"] - counters["dLegerReadies"]
            pushes = after["dLegerPushes"] - counters["dLegerPushes"]
            pushed = after["dLegerPushedEntries"] - counters["dLegerPushedEntries"]
            out["leader_batching"] = {
                "msgs_per_ready": round(done / readies, 1) if readies else None,
                "entries_per_push": round(pushed / pushes, 1) if pushes else None,
            }
        return out

    return trio.run(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=256)
    parser.add_argument("--kills", type=int, default=10)
    args = parser.parse_args()
    configure_logging(level="warning")
    body = os.urandom(args.body)
    out: dict[str, Any] = {"body_bytes": args.body}
    with tempfile.TemporaryDirectory(prefix="bench-dledger-") as tmp:
        root = Path(tmp)
        single_dir = root / "single"
        single_dir.mkdir()
        proc, port = _launch.start_broker(single_dir, queues=produce_bench.QUEUES)
        try:
            out["single_master"] = _throughput(port, body, args, {"broker": proc.pid})
        finally:
            _launch.stop(proc)
        group_dir = root / "group"
        group_dir.mkdir()
        group = Group(group_dir)
        try:
            group.start_ns()
            for i in range(group.size):
                group.start(i)

            async def leader_port() -> int:
                async with open_remoting_client(node="bench-client") as client:
                    return group.broker_ports[await _leader(client, group)]

            port = trio.run(leader_port)
            leader = group.broker_ports.index(port)
            # where the time goes: CPU of each member in the measured window
            pids = {
                ("leader" if i == leader else f"follower_n{i}"): p.pid
                for i, p in group.procs.items()
            }
            out["dledger_3_nodes"] = _throughput(port, body, args, pids, dledger=True)
            if args.kills > 0:
                out["failover"] = trio.run(_failovers, group, args.kills, body)
        finally:
            group.stop_all()
    single = out["single_master"]["msgs_per_s"]
    dl = out["dledger_3_nodes"]["msgs_per_s"]
    out["ratio_vs_single_master"] = round(dl / single, 3) if single else None
    out["targets"] = {
        "msgs_per_s": 29_000,
        "ratio_vs_single_master": 0.5,
        "failover_p50_s": 2.0,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
