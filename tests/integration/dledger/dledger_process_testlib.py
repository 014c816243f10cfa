"""Helpers for tests of real ``rmq-cluster up dledger`` processes: an ``--acl`` cluster of
its own, signed sends and reads, raw frames to a member's dLegerPeers port."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.model import Message
from rmq_cluster.client.producer import Producer
from rmq_cluster.cluster.acl.local import Credentials, local_admin
from rmq_cluster.cluster.protocol.message import iter_records
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand, encode
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.testing import UP_TIMEOUT_S, become_subreaper, cli, kill_leftovers
from rmq_cluster.deploy.topology import resolve_profile

TOPIC: Final = "DlForgedTopic"
READ_QUEUES: Final = 8
WAIT_S: Final = 30.0
SEND_TIMEOUT_S: Final = 15.0
RAW_IO_TIMEOUT_S: Final = 3.0


@attrs.define
class ProcCluster:
    dir: Path
    namesrv_addr: str
    creds: Credentials | None

    def status(self) -> dict[str, Any]:
        """``status --json``'s object, computed in this process (a CLI call costs seconds
        of interpreter start on a loaded machine)."""
        return supervisor.status(supervisor.load_state(self.dir))

    def kill(self, names: list[str]) -> None:
        """SIGKILL the nodes ``names`` and wait until each is gone."""
        state = supervisor.load_state(self.dir)
        records = [state.node(n) for n in names]
        for rec in records:
            rec.signal(signal.SIGKILL)
        deadline = time.monotonic() + WAIT_S
        while any(r.alive for r in records):
            if time.monotonic() > deadline:
                raise AssertionError(f"still alive after SIGKILL: {names}")
            time.sleep(0.05)

    def brokers(self) -> dict[str, dict[str, Any]]:
        return {n["name"]: n for n in self.status()["nodes"] if n["kind"] == "broker"}

    def dledger_addrs(self) -> dict[str, tuple[str, str]]:
        """node name -> (dLegerSelfId, host:dLegerPort)."""
        topo = supervisor.load_state(self.dir).topology
        return {m.name: (m.dledger_id or "", f"{m.host}:{m.dledger_port}")
                for m in topo.brokers if m.dledger_id is not None}

    def wait_settled(self) -> dict[str, dict[str, Any]]:
        """Every broker alive, one leader, one term and one commit index across them."""
        deadline = time.monotonic() + WAIT_S
        while True:
            nodes = self.brokers()
            seen = {(n["leader"], n["term"], n["commit_index"]) for n in nodes.values()}
            if all(n["alive"] for n in nodes.values()) and len(seen) == 1 and None not in (
                next(iter(seen))
            ):
                return nodes
            if time.monotonic() > deadline:
                raise AssertionError(f"group did not settle: {nodes}")
            time.sleep(0.2)


@contextlib.contextmanager
def process_cluster(tmp_path: Path, *args: str, profile: str = "dledger") -> Iterator[ProcCluster]:
    """``rmq-cluster up PROFILE ARGS`` in a directory of its own; always stopped after."""
    become_subreaper()
    cluster_dir = tmp_path / "c"
    port = supervisor.free_base_port(resolve_profile(profile))
    pids: dict[str, int] = {}
    try:
        up = cli("up", profile, *args, "--dir", str(cluster_dir), "--base-port", str(port),
                 "--timeout", str(UP_TIMEOUT_S), "--json")
        assert up.returncode == 0, up.stderr
        info = json.loads(up.stdout)
        pids = {r.name: r.pid for r in supervisor.load_state(cluster_dir).records()
                if r.pid is not None}
        yield ProcCluster(cluster_dir, info["namesrv_addr"], local_admin(cluster_dir))
    finally:
        with contextlib.suppress(supervisor.SupervisorError, OSError):
            state = supervisor.load_state(cluster_dir)
            pids.update({r.name: r.pid for r in state.records() if r.pid is not None})
        cli("down", "--dir", str(cluster_dir), "--purge")
        kill_leftovers(cluster_dir, pids)


def produce(cluster: ProcCluster, prefix: str, count: int) -> list[bytes]:
    """Send ``count`` messages (signed when the cluster has ACL); the acknowledged bodies."""
    creds = cluster.creds
    cc = ClientConfig(namesrv_addr=cluster.namesrv_addr, poll_namesrv_interval_s=0.2,
                      access_key=creds.access_key if creds else None,
                      secret_key=creds.secret_key if creds else None)
    acked: list[bytes] = []

    async def run() -> None:
        async with Producer("PGForged", client_config=cc, send_timeout_s=SEND_TIMEOUT_S) as p:
            for i in range(count):
                body = f"{prefix}-{i:05d}".encode()
                await p.send(Message(TOPIC, body), timeout=SEND_TIMEOUT_S)
                acked.append(body)

    trio.run(run)
    return acked


def read_all(cluster: ProcCluster, addr: str) -> list[bytes]:
    """Every message body of TOPIC on the broker at ``addr`` (signed pulls under ACL)."""
    hook = cluster.creds.sign if cluster.creds else None

    async def run() -> list[bytes]:
        out: list[bytes] = []
        async with open_remoting_client(node="dl-forged-verify", rpc_hook=hook) as client:
            for q in range(READ_QUEUES):
                offset = 0
                while True:
                    ext = {
                        "consumerGroup": "CGForged", "topic": TOPIC, "queueId": str(q),
                        "queueOffset": str(offset), "maxMsgNums": "1000", "sysFlag": "4",
                        "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                        "subVersion": "0",
                    }
                    resp = await client.invoke(
                        addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext))
                    if resp.code != ResponseCode.SUCCESS:
                        break
                    out += [r.body for r in iter_records(bytes(resp.body))]
                    offset = int(resp.ext_fields["nextBeginOffset"])
        return out

    return trio.run(run)


def send_raw(addr: str, frames: list[RemotingCommand]) -> None:
    """Open a plain TCP connection to ``addr``, write ``frames``, close (no handshake)."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=RAW_IO_TIMEOUT_S) as sock:
        sock.sendall(b"".join(encode(f) for f in frames))
        sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):  # gated: closed at once; open port: we give up
            while sock.recv(65536):
                pass
