"""Live audits: each group's confirmed replication offset, asked from its brokers.

Every broker of a deploy cluster directory (``cluster.json``: ``host``, ``port``) is asked
GET_BROKER_RUNTIME_INFO over remoting; its ``commitLogMaxOffset`` is what it holds.  A group's
confirmed offset is the least of its members' (each member holds every byte below it, and a
CommitLog is append-only: those bytes no longer change), so the audit reads nothing beyond it
while the brokers keep writing.  Driver side only (blocking sockets, one request per broker).
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import attrs

from rmq_cluster.cluster.protocol.route import KVTable
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.spark_jobs.model import BadInput, Replica

ASK_TIMEOUT_S = 10.0


def broker_addrs(directory: str) -> dict[str, str]:
    """node name -> ``host:port`` of every broker in ``directory/cluster.json``."""
    path = os.path.join(directory, "cluster.json")
    try:
        with open(path) as f:
            nodes = json.load(f)["topology"]["nodes"]
        return {str(n["name"]): f"{n['host']}:{int(n['port'])}" for n in nodes
                if n.get("kind") == "broker"}  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"cannot read broker addresses from {path}: {exc!r}") from exc


def runtime_info(addr: str, timeout: float = ASK_TIMEOUT_S) -> dict[str, str]:
    """One GET_BROKER_RUNTIME_INFO round trip; BadInput when the broker cannot answer."""
    host, _, port = addr.rpartition(":")
    req = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.sendall(encode(req, opaque=1))
            dec = FrameDecoder(max_frame_bytes=16 << 20)
            while True:
                data = s.recv(65536)
                if not data:
                    raise BadInput(f"broker {addr} closed the connection")
                for cmd in dec.feed(data):
                    if cmd.is_response and cmd.opaque == 1:
                        if cmd.code != ResponseCode.SUCCESS:
                            raise BadInput(f"broker {addr}: code {cmd.code} {cmd.remark}")
                        return dict(KVTable.decode(bytes(cmd.body)).table)
    except (OSError, ValueError) as exc:
        raise BadInput(f"broker {addr} did not answer GET_BROKER_RUNTIME_INFO: {exc!r}") from exc


def confirmed_limits(
    replicas: list[Replica], directory: str, timeout: float = ASK_TIMEOUT_S
) -> tuple[list[Replica], dict[str, dict[str, Any]]]:
    """The replicas, each limited to its group's confirmed offset, and what each broker said."""
    addrs = broker_addrs(directory)
    said: dict[str, dict[str, Any]] = {}
    for r in replicas:
        addr = addrs.get(r.node)
        if addr is None:
            raise BadInput(f"{r.group}:{r.node}: not a broker of {directory}")
        info = runtime_info(addr, timeout)
        try:
            mx = int(info["commitLogMaxOffset"])
        except (KeyError, ValueError):
            raise BadInput(f"broker {addr} gave no commitLogMaxOffset") from None
        said[r.node] = {"addr": addr, "commitLogMaxOffset": mx,
                        "slaveFallBehindMuch": info.get("slaveFallBehindMuch")}  # fmt: skip
    limits: dict[str, int] = {}
    for r in replicas:
        mx = said[r.node]["commitLogMaxOffset"]
        limits[r.group] = min(limits.get(r.group, mx), mx)
    return [attrs.evolve(r, limit=limits[r.group]) for r in replicas], said
