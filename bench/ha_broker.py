"""Broker-level HA benchmark (real processes): prints one JSON object.

    python3 bench/ha_broker.py [--seconds 3] [--body 1024] [--inflight 256]

For each case a NameServer, a master ``mqbroker`` and (except ``none``) a slave
``mqbroker`` run as child processes on loopback with temp stores; SEND_MESSAGE_V2
requests (``--body`` bytes) are pipelined to the master over one connection with ``--inflight``
outstanding (bench/produce.py's raw driver):
  * none:  ASYNC_MASTER, no slave;
  * async: ASYNC_MASTER + 1 slave;
  * sync:  SYNC_MASTER + 1 slave (a send is answered once the slave acked it).
While the load runs the master's GET_BROKER_RUNTIME_INFO is sampled every 20 ms for
``slaveFallBehindMuch`` (bytes the slave has not acked yet): p50/p99/max per case.
Every process is one Python process; master, slave and client compete for the machine's cores.
Target (issue 7): sync >= 0.9x async throughput with 256 in flight.

``python -m bench.ha`` (its default ``brokers`` setup) runs the same clusters through this
file's helpers, with the cases interleaved and repeated, and adds CPU per message, run-queue
waits, HA counters and the replication lag at half load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import _launch  # noqa: E402  (bench/_launch.py: the node processes)
import checkout  # noqa: E402, F401  (bench/checkout.py: this tree's rmq_cluster first)
import produce as produce_bench  # noqa: E402  (bench/produce.py: the raw pipelined driver)

from rmq_cluster.cluster.logging import configure_logging  # noqa: E402
from rmq_cluster.cluster.protocol.route import KVTable  # noqa: E402
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client  # noqa: E402
from rmq_cluster.cluster.remoting.codec import RemotingCommand  # noqa: E402
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode  # noqa: E402

READY_TIMEOUT_S = 30.0
SAMPLE_S = 0.02
TOPIC = produce_bench.TOPIC


# (bench/ha.py calls these four on the ha_broker.py of the tree it measures: keep their names)


def _free_port(taken: set[int]) -> int:
    """A port whose -2 (fast) and +1 (HA) neighbours are free too."""
    return _launch.broker_port(taken)


def _spawn(args: list[str], boot: str) -> subprocess.Popen[str]:
    return _launch.spawn(args, root=ROOT, boot=boot)


def _stop(proc: subprocess.Popen[str] | None) -> None:
    _launch.stop(proc)


def _broker_conf(root: Path, name: str, port: int, broker_id: int, role: str) -> Path:
    return _launch.broker_conf(
        root / f"{name}.properties", port=port, store=root / name, cluster="BenchHa",
        queues=produce_bench.QUEUES, brokerId=broker_id, brokerRole=role,
    )


async def _runtime_info(client: RemotingClient, addr: str) -> dict[str, str]:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    if resp.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"runtime info: {resp.code} {resp.remark}")
    return dict(KVTable.decode(resp.body).table)


async def _case(
    master_port: int, with_slave: bool, args: argparse.Namespace
) -> dict[str, Any]:
    addr = f"127.0.0.1:{master_port}"
    body = os.urandom(args.body)
    frames = produce_bench._frames(RequestCode.SEND_MESSAGE_V2, TOPIC, body)
    behind: list[int] = []
    async with open_remoting_client(node="bench-ha") as client:
        with trio.fail_after(READY_TIMEOUT_S):
            while with_slave:
                if (await _runtime_info(client, addr)).get("haConnectionCount") == "1":
                    break
                await trio.sleep(SAMPLE_S)
        # create the topic (auto-create from TBW102) before measuring
        first = await client.invoke(
            addr,
            RemotingCommand.request(
                RequestCode.SEND_MESSAGE_V2, produce_bench._send_ext(TOPIC, 0), body
            ),
            10,
        )
        if first.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"send failed: {first.code} {first.remark}")
        result: dict[str, float] = {}

        async def load(cancel: trio.CancelScope) -> None:
            result.update(
                await produce_bench._raw_case(master_port, frames, args.inflight, args.seconds, 0.5)
            )
            cancel.cancel()

        async with trio.open_nursery() as n:
            n.start_soon(load, n.cancel_scope)
            if with_slave:
                while True:
                    info = await _runtime_info(client, addr)
                    behind.append(int(info.get("slaveFallBehindMuch", "0")))
                    await trio.sleep(SAMPLE_S)
    out: dict[str, Any] = {
        "msgs_per_s": result["req_per_s"],
        "p50_us": result["p50_us"],
        "p99_us": result["p99_us"],
    }
    if behind:
        s = sorted(behind)
        out["slave_fall_behind_bytes"] = {
            "samples": len(s),
            "p50": int(statistics.median(s)),
            "p99": s[min(len(s) - 1, int(0.99 * len(s)))],
            "max": s[-1],
        }
    return out


def _run_case(name: str, args: argparse.Namespace) -> dict[str, Any]:
    role = "SYNC_MASTER" if name == "sync" else "ASYNC_MASTER"
    with_slave = name != "none"
    taken: set[int] = set()
    ns_port, master_port, slave_port = (_free_port(taken) for _ in range(3))
    ns_addr = f"127.0.0.1:{ns_port}"
    procs: list[subprocess.Popen[str]] = []
    with tempfile.TemporaryDirectory(prefix=f"bench-ha-{name}-") as tmp:
        root = Path(tmp)
        ns_conf = root / "ns.properties"
        ns_conf.write_text(
            f"listenPort={ns_port}\nbindAddress=127.0.0.1\nkvConfigPath={root}/kv.json\n"
        )
        try:
            procs.append(_spawn(["-m", "rmq_cluster.namesrv", "-c", str(ns_conf)], "boot success"))
            conf = _broker_conf(root, "master", master_port, 0, role)
            procs.append(
                _spawn(["-m", "rmq_cluster.broker", "-c", str(conf), "-n", ns_addr], "boot success")
            )
            if with_slave:
                conf = _broker_conf(root, "slave", slave_port, 1, "SLAVE")
                broker = ["-m", "rmq_cluster.broker", "-c", str(conf), "-n", ns_addr]
                procs.append(_spawn(broker, "boot success"))
            return trio.run(_case, master_port, with_slave, args)
        finally:
            for proc in reversed(procs):
                _stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=256)
    args = parser.parse_args()
    configure_logging("warning")
    cases = {name: _run_case(name, args) for name in ("none", "async", "sync")}
    ratio = cases["sync"]["msgs_per_s"] / max(1, cases["async"]["msgs_per_s"])
    report = {
        "benchmark": "broker-level HA produce (real processes)",
        "body_bytes": args.body,
        "in_flight": args.inflight,
        "seconds_per_case": args.seconds,
        "python": sys.version.split()[0],
        "trio": trio.__version__,
        "cpus": os.cpu_count(),
        **cases,
        "ratios": {"sync_vs_async": round(ratio, 3)},
        "targets": {"sync_ge_0.9x_async": ratio >= 0.9},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
