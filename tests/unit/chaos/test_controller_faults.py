"""Controller-mode faults: names, what they refuse without controllers (before touching any
process), and the proxied controllers' configs (each binds its own shifted Raft port)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from rmq_cluster.chaos.cluster import ChaosCluster
from rmq_cluster.chaos.faults import (
    FAULTS,
    FaultError,
    KillMasterInElection,
    PartitionMasterController,
    RestartControllerLeader,
    make_fault,
)
from rmq_cluster.chaos.nemesis import Window
from rmq_cluster.cluster.config import load_config, parse_properties
from rmq_cluster.controller.config import ControllerConfig
from rmq_cluster.deploy.render import node_properties, render_properties
from rmq_cluster.deploy.topology import build_topology, resolve_profile

CONTROLLER_FAULTS = ("kill-master-in-election", "partition-master-controller",
                     "restart-controller-leader")


def test_the_controller_faults_are_known_by_their_cli_names() -> None:
    for name in CONTROLLER_FAULTS:
        assert name in FAULTS
        assert make_fault(name).name == name
    assert make_fault("partition-master-controller").needs_proxy
    assert not make_fault("kill-master-in-election").needs_proxy
    assert not make_fault("restart-controller-leader").needs_proxy


@pytest.mark.parametrize("fault", [KillMasterInElection, PartitionMasterController,
                                   RestartControllerLeader])
async def test_without_controllers_the_fault_is_refused_before_any_signal(
    fault: type, tmp_path: Path
) -> None:
    spec = resolve_profile("2m-2s-sync")
    cc = ChaosCluster(spec, build_topology(spec, base_port=30000), tmp_path, None)
    with pytest.raises(FaultError, match="controller mode"):
        await fault().inject(cc, Window(0.0, 1.0, pick=0.0))


def test_proxied_controllers_bind_their_own_shifted_raft_port_and_advertise_the_public_one(
) -> None:
    spec = resolve_profile("2m-2s-controller")
    topo = attrs.evolve(build_topology(spec, base_port=30000), chaos_proxy=True)
    public = {n.dledger_id: n.controller_peer_port for n in topo.controllers}
    for node in topo.controllers:
        props = node_properties(node, topo, data_dir="/tmp/x", bind_address=None, local=True)
        loaded = load_config(ControllerConfig, parse_properties(render_properties(props)))
        assert not loaded.unknown
        cfg = loaded.config
        cfg.validate()
        peers = cfg.peer_map()
        bound = topo.bind_ports(node)
        assert peers[cfg.self_id].endswith(f":{bound['controllerDLegerPort']}")
        assert bound["controllerDLegerPort"] != public[cfg.self_id]
        for other, addr in peers.items():
            if other != cfg.self_id:
                assert addr.endswith(f":{public[other]}")  # the others: through their proxy
        assert cfg.listen_port == bound["listenPort"] != node.port
        assert cfg.advertised_listen_port == node.port
