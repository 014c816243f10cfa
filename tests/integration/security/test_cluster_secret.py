"""Peer authentication is on by default (issue 31, item 3): ``rmq-cluster up`` gives every
broker and controller of a cluster one generated ``clusterSecret``, on every profile, with or
without ``--acl``; the HA port then challenges every peer; ``up 2m-2s-controller --acl``
starts (its slaves' GET_BROKER_EPOCH_CACHE calls are signed)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import attrs
import pytest

from rmq_cluster.broker.config import BrokerConfig
from rmq_cluster.cluster.config import parse_properties
from rmq_cluster.deploy import render, supervisor
from rmq_cluster.deploy.testing import UP_TIMEOUT_S, become_subreaper, cli, kill_leftovers
from rmq_cluster.deploy.topology import (
    BUILTIN_PROFILES,
    KIND_NAMESRV,
    build_topology,
    resolve_profile,
)
from rmq_cluster.ha.access import HA_AUTH_CHALLENGE_BYTES, HA_AUTH_MAGIC
from rmq_cluster.ha.protocol import encode_offset_report

SECRET = "0123456789abcdef-cluster"


def test_ha_secret_precedence() -> None:
    assert BrokerConfig().ha_secret is None  # RocketMQ's open HA port
    assert BrokerConfig(acl_enable=True, acl_secret_key="acl-key").ha_secret == "acl-key"
    assert BrokerConfig(acl_enable=True).ha_secret == ""  # ACL on, no key: nobody
    both = BrokerConfig(acl_enable=True, acl_secret_key="acl-key", cluster_secret=SECRET)
    assert both.ha_secret == SECRET
    assert BrokerConfig(cluster_secret=SECRET).ha_secret == SECRET
    with pytest.raises(ValueError, match="clusterSecret"):
        BrokerConfig(cluster_secret="short")


@pytest.mark.parametrize("profile", sorted(BUILTIN_PROFILES))
def test_every_broker_and_controller_gets_the_secret(profile: str, tmp_path: Path) -> None:
    topo = attrs.evolve(build_topology(resolve_profile(profile), base_port=9876),
                        cluster_secret=SECRET)
    files = render.local_files(topo, str(tmp_path))
    seen = 0
    for node in topo.nodes:
        props = parse_properties(files[f"conf/{node.name}.properties"])
        if node.kind == KIND_NAMESRV:
            assert "clusterSecret" not in props
        else:
            assert props["clusterSecret"] == SECRET
            seen += 1
    assert seen == len(topo.nodes) - len(topo.namesrvs)
    assert type(topo).from_json(topo.to_json()).cluster_secret == SECRET


def _ha_greeting(port: int) -> bytes:
    """What a stranger that asks the HA port for everything from offset 0 gets back."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encode_offset_report(0))
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return got


def test_up_controller_mode_acl_starts_with_peer_auth(tmp_path: Path) -> None:
    become_subreaper()
    cluster_dir = tmp_path / "c"
    port = supervisor.free_base_port(resolve_profile("2m-2s-controller"))
    pids: dict[str, int] = {}
    try:
        up = cli("up", "2m-2s-controller", "--acl", "--dir",
                 str(cluster_dir), "--base-port", str(port), "--timeout", str(UP_TIMEOUT_S))
        state = supervisor.load_state(cluster_dir)
        pids = {r.name: r.pid for r in state.records() if r.pid is not None}
        assert up.returncode == 0, up.stderr
        secret = json.loads((cluster_dir / "cluster.json").read_text())["topology"][
            "cluster_secret"]
        assert len(secret) >= 32
        assert (cluster_dir / "cluster.json").stat().st_mode & 0o077 == 0
        for rec in state.records():
            conf = Path(rec.conf)
            assert conf.stat().st_mode & 0o077 == 0
            has = parse_properties(conf.read_text()).get("clusterSecret")
            assert has == (None if rec.spec.kind == KIND_NAMESRV else secret)
        demo = cli("demo", "--dir", str(cluster_dir), "--json")
        assert demo.returncode == 0, demo.stderr
        assert json.loads(demo.stdout)["ok"]
        status = cli("status", "--dir", str(cluster_dir), "--json")
        assert status.returncode == 0, status.stderr
        # a stranger on any broker's HA port gets the challenge and nothing of the CommitLog
        for node in state.topology.brokers:
            got = _ha_greeting(node.ports()["haListenPort"])
            assert got.startswith(HA_AUTH_MAGIC) and len(got) == HA_AUTH_CHALLENGE_BYTES, (
                node.name, got[:64])
    finally:
        cli("down", "--dir", str(cluster_dir), "--purge")
        kill_leftovers(cluster_dir, pids)
