"""The chaos-proxy port plan and rendering: nodes bind shifted ports, advertise planned ones."""

from __future__ import annotations

import attrs

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.cluster.config import parse_properties
from rmq_cluster.deploy import render
from rmq_cluster.deploy.topology import (
    BUILTIN_PROFILES,
    PROXY_BROKER_PORT_SHIFT,
    PROXY_NAMESRV_PORT_SHIFT,
    Topology,
    build_topology,
    plan_span,
)


def _proxied(profile: str, base: int = 20000) -> Topology:
    return attrs.evolve(build_topology(BUILTIN_PROFILES[profile], base_port=base),
                        chaos_proxy=True)


def test_bound_ports_never_collide_with_planned_ones() -> None:
    for profile in BUILTIN_PROFILES:
        topo = _proxied(profile)
        planned = {p for n in topo.nodes for p in n.ports().values()}
        bound = [p for n in topo.nodes for p in topo.bind_ports(n).values()]
        assert len(bound) == len(set(bound))
        assert not planned & set(bound)
        assert max(bound) < topo.base_port + plan_span(topo.spec)
        routes = topo.proxy_routes()
        assert len(routes) == len(planned)


def test_default_topology_is_unchanged() -> None:
    topo = build_topology(BUILTIN_PROFILES["2m-2s-sync"], base_port=20000)
    assert not topo.chaos_proxy
    assert all(topo.bind_ports(n) == n.ports() for n in topo.nodes)
    for rel, text in render.local_files(topo, "/tmp/x").items():
        assert "advertised" not in text, rel


def test_json_round_trip_keeps_the_flag() -> None:
    topo = _proxied("dledger")
    assert Topology.from_json(topo.to_json()) == topo
    legacy = topo.to_json()
    del legacy["chaos_proxy"]
    assert not Topology.from_json(legacy).chaos_proxy


def test_rendered_broker_binds_shifted_and_advertises_planned_ports() -> None:
    topo = _proxied("2m-2s-sync")
    node = topo.node("broker-a")
    files = render.local_files(topo, "/tmp/x")
    props = parse_properties(files["conf/broker-a.properties"])
    assert int(props["listenPort"]) == node.port + PROXY_BROKER_PORT_SHIFT
    assert int(props["advertisedListenPort"]) == node.port
    assert int(props["advertisedHaListenPort"]) == node.ha_port
    assert props["namesrvAddr"] == topo.namesrv_addr  # the proxies' addresses
    cfg = load_broker_config(props).settings.broker
    assert cfg.advertised_listen_port == node.port
    assert cfg.fast_port == node.fast_port + PROXY_BROKER_PORT_SHIFT
    ns = parse_properties(files["conf/namesrv-0.properties"])
    assert int(ns["listenPort"]) == topo.node("namesrv-0").port + PROXY_NAMESRV_PORT_SHIFT


def test_dledger_peers_name_own_bound_port_and_peers_planned_ports() -> None:
    topo = _proxied("dledger")
    files = render.local_files(topo, "/tmp/x")
    n0, n1 = topo.node("broker-a-n0"), topo.node("broker-a-n1")
    peers = parse_properties(files["conf/broker-a-n0.properties"])["dLegerPeers"]
    assert f"n0-127.0.0.1:{n0.dledger_port + PROXY_BROKER_PORT_SHIFT}" in peers
    assert f"n1-127.0.0.1:{n1.dledger_port}" in peers
