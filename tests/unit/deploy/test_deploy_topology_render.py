"""Profiles, the port plan and rendering: pure, for every profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.cluster.config import load_config, parse_properties
from rmq_cluster.controller.config import ControllerConfig
from rmq_cluster.deploy import render
from rmq_cluster.deploy.commands import format_table
from rmq_cluster.deploy.topology import (
    BUILTIN_PROFILES,
    MODE_DLEDGER,
    MODE_HA,
    ProfileError,
    Topology,
    build_topology,
    plan_span,
    resolve_profile,
)
from rmq_cluster.namesrv.config import NamesrvConfig

DLEDGER_KEYS = {"enableDLegerCommitLog", "dLegerGroup", "dLegerPeers", "dLegerSelfId",
                "sendMessageThreadPoolNums"}

EXPECTED = {
    "single": [("namesrv-0", None, None), ("broker-a", "ASYNC_MASTER", 0)],
    "2m-noslave": [
        ("namesrv-0", None, None), ("namesrv-1", None, None),
        ("broker-a", "ASYNC_MASTER", 0), ("broker-b", "ASYNC_MASTER", 0),
    ],
    "2m-2s-async": [
        ("namesrv-0", None, None), ("namesrv-1", None, None),
        ("broker-a", "ASYNC_MASTER", 0), ("broker-b", "ASYNC_MASTER", 0),
        ("broker-a-s", "SLAVE", 1), ("broker-b-s", "SLAVE", 1),
    ],
    "2m-2s-sync": [
        ("namesrv-0", None, None), ("namesrv-1", None, None),
        ("broker-a", "SYNC_MASTER", 0), ("broker-b", "SYNC_MASTER", 0),
        ("broker-a-s", "SLAVE", 1), ("broker-b-s", "SLAVE", 1),
    ],
    "dledger": [
        ("namesrv-0", None, None), ("namesrv-1", None, None),
        ("broker-a-n0", "DLEDGER", 0), ("broker-a-n1", "DLEDGER", 1),
        ("broker-a-n2", "DLEDGER", 2),
    ],
    "2m-2s-controller": [
        ("namesrv-0", None, None), ("controller-0", None, None), ("controller-1", None, None),
        ("controller-2", None, None),
        ("broker-a", "AUTO", 1), ("broker-b", "AUTO", 1),
        ("broker-a-s", "AUTO", 2), ("broker-b-s", "AUTO", 2),
    ],
}


@pytest.mark.parametrize("profile", list(BUILTIN_PROFILES))
def test_builtin_profiles_have_rocketmq_names_roles_and_default_ports(profile: str) -> None:
    topo = build_topology(resolve_profile(profile))
    assert [(n.name, n.role, n.broker_id) for n in topo.nodes] == EXPECTED[profile]
    assert topo.namesrvs[0].port == 9876
    assert topo.brokers[0].port == 10911
    assert topo.brokers[0].fast_port == 10909 and topo.brokers[0].ha_port == 10912
    assert [b.port for b in topo.brokers] == [10911 + 10 * i for i in range(len(topo.brokers))]
    ports = [p for p, _ in topo.ports()]
    assert len(ports) == len(set(ports)), "no port is planned twice"
    assert max(ports) - topo.base_port < plan_span(topo.spec)
    assert topo.namesrv_addr == ";".join(f"127.0.0.1:{9876 + i}" for i in range(len(topo.namesrvs)))
    assert Topology.from_json(topo.to_json()) == topo


def test_base_port_shifts_the_whole_plan() -> None:
    spec = resolve_profile("2m-2s-async")
    a = build_topology(spec)
    b = build_topology(spec, base_port=20000)
    assert [p + 20000 - 9876 for p, _ in a.ports()] == [p for p, _ in b.ports()]
    assert b.namesrv_addr == "127.0.0.1:20000;127.0.0.1:20001"
    with pytest.raises(ProfileError, match="outside"):
        build_topology(spec, base_port=65000)


def test_required_modes() -> None:
    assert resolve_profile("single").required_modes == ()
    assert resolve_profile("2m-noslave").required_modes == ()
    assert resolve_profile("2m-2s-async").required_modes == (MODE_HA,)
    assert resolve_profile("2m-2s-sync").required_modes == (MODE_HA,)
    assert resolve_profile("dledger").required_modes == (MODE_DLEDGER,)


def test_dledger_groups_option() -> None:
    topo = build_topology(resolve_profile("dledger", groups=2))
    assert [n.name for n in topo.brokers] == [
        "broker-a-n0", "broker-a-n1", "broker-a-n2", "broker-b-n0", "broker-b-n1", "broker-b-n2",
    ]
    assert topo.groups == ["broker-a", "broker-b"]


def test_toml_profile_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        'base = "2m-noslave"\nmasters = 3\nnamesrvs = 1\ncluster_name = "MyCluster"\n'
        "[broker_properties]\ndefaultTopicQueueNums = 2\nautoCreateTopicEnable = false\n"
    )
    spec = resolve_profile(str(path))
    assert spec.name == "mine" and spec.masters == 3 and spec.namesrvs == 1
    topo = build_topology(spec)
    assert [n.name for n in topo.brokers] == ["broker-a", "broker-b", "broker-c"]
    props = render.broker_properties(topo.brokers[0], topo, store_dir="/s")
    assert props["brokerClusterName"] == "MyCluster"
    assert props["defaultTopicQueueNums"] == "2"
    assert props["autoCreateTopicEnable"] == "false"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("masters = 0\n", "masters"),
        ("bogus = 1\n", "unknown key 'bogus'"),
        ('replication = "QUORUM"\n', "replication"),
        ('masters = "two"\n', "integer"),
        ("not toml [", "not valid TOML"),
        ('base = "nope"\n', "not a built-in"),
    ],
)
def test_bad_profile_files_say_what_is_wrong(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=match):
        resolve_profile(str(path))


def test_unknown_profile() -> None:
    with pytest.raises(ProfileError, match="unknown profile 'nope'"):
        resolve_profile("nope")


@pytest.mark.parametrize("profile", list(BUILTIN_PROFILES))
def test_local_properties_load_in_our_nodes(profile: str, tmp_path: Path) -> None:
    topo = build_topology(resolve_profile(profile), base_port=30000)
    files = render.local_files(topo, str(tmp_path))
    assert sorted(files) == sorted(f"conf/{n.name}.properties" for n in topo.nodes)
    for node in topo.nodes:
        props = parse_properties(files[f"conf/{node.name}.properties"])
        if node.kind == "namesrv":
            loaded_ns = load_config(NamesrvConfig, props)
            assert not loaded_ns.unknown
            assert loaded_ns.config.listen_port == node.port
            assert loaded_ns.config.bind_address == "127.0.0.1"
            continue
        if node.kind == "controller":
            loaded_ctl = load_config(ControllerConfig, props)
            assert not loaded_ctl.unknown
            loaded_ctl.config.validate()
            assert loaded_ctl.config.listen_port == node.port
            assert loaded_ctl.config.peer_map()[node.dledger_id or ""].endswith(
                f":{node.controller_peer_port}")
            continue
        loaded = load_broker_config(props)
        unknown = set(loaded.unknown)
        assert unknown <= DLEDGER_KEYS, unknown
        bcfg, scfg = loaded.settings.broker, loaded.settings.store
        assert bcfg.broker_name == node.group
        assert bcfg.listen_port == node.port and bcfg.fast_port == node.fast_port
        assert bcfg.ha_port == node.ha_port
        assert bcfg.namesrv_addr == topo.namesrv_addr
        assert bcfg.broker_ip1 == "127.0.0.1"
        assert scfg.store_path_root_dir == f"{tmp_path}/store/{node.name}"
        if node.role == "DLEDGER":
            assert props["dLegerSelfId"] == node.dledger_id
            assert props["dLegerPeers"].count(";") == 2
        elif node.role == "AUTO":  # controller mode: the controller elects the role
            assert bcfg.broker_id == node.broker_id
            assert loaded.settings.controller_mode.addrs == topo.controller_addr.split(";")
        else:
            assert bcfg.broker_id == node.broker_id
            assert scfg.broker_role.value == node.role


@pytest.mark.parametrize("profile", list(BUILTIN_PROFILES))
def test_render_for_hosts(profile: str) -> None:
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    topo = build_topology(resolve_profile(profile), hosts=hosts)
    files = render.host_files(topo)
    for node in topo.nodes:
        conf = files[f"{node.host}/conf/{node.name}.properties"]
        props = parse_properties(conf)
        assert props["listenPort"] == str(node.port)
        assert props["bindAddress"] == "0.0.0.0"  # our nodes default to loopback
        if node.kind == "broker":
            assert props["brokerIP1"] == node.host
            assert props["namesrvAddr"] == topo.namesrv_addr
            assert props["storePathRootDir"] == f"data/{node.name}"
        start = files[f"{node.host}/start.sh"]
        module = node.kind if node.kind in ("namesrv", "controller") else "broker"
        assert f'"$PYTHON" -m rmq_cluster.{module} -c conf/{node.name}.properties' in start
        real = {"namesrv": "mqnamesrv", "controller": "mqcontroller"}.get(node.kind, "mqbroker")
        assert f'"$ROCKETMQ_HOME/bin/{real}" -c conf/{node.name}.properties' in start
        assert f"run/{node.name}.pid" in files[f"{node.host}/stop.sh"]
    # a master and its slave (or a DLedger group's nodes) never share a host here
    for group in topo.groups:
        members = topo.group_members(group)
        assert len({m.host for m in members}) == len(members)


def test_start_script_starts_namesrvs_first() -> None:
    topo = build_topology(resolve_profile("2m-noslave"), hosts=["h1"])
    start = render.host_files(topo)["h1/start.sh"]
    python_part = start.split("else", 1)[1]
    assert python_part.index("-m rmq_cluster.namesrv") < python_part.index("-m rmq_cluster.broker")
    assert "-n '127.0.0.1" not in start and "-n 'h1:9876;h1:9877'" in start


def test_format_table() -> None:
    text = format_table(
        [{"name": "broker-a", "pid": None, "alive": True}], [("name", "NAME"), ("pid", "PID"),
                                                              ("alive", "UP")]
    )
    assert text.splitlines() == ["NAME      PID  UP", "broker-a  -    yes"]


def test_promote_needs_a_slave(tmp_path: Path) -> None:
    from rmq_cluster.deploy import supervisor

    topo = build_topology(resolve_profile("2m-2s-async"), base_port=30000)
    state = supervisor.new_state("t", tmp_path, topo, "python3")
    with pytest.raises(supervisor.SupervisorError, match="is not a slave"):
        supervisor.promote_node(state, state.node("broker-a"))


def test_cluster_lock_is_exclusive(tmp_path: Path) -> None:
    from rmq_cluster.deploy import supervisor

    with supervisor.locked(tmp_path), pytest.raises(
        supervisor.SupervisorError, match="another rmq-cluster command"
    ), supervisor.locked(tmp_path):
        pass
    with supervisor.locked(tmp_path):  # released
        pass


def test_render_command_writes_per_host_files(tmp_path: Path) -> None:
    from rmq_cluster.cli.main import main

    out = tmp_path / "out"
    assert main(["render", "2m-2s-async", "--hosts", "h1,h2", "--out", str(out)]) == 0
    assert sorted(p.name for p in (out / "h1" / "conf").iterdir()) == [
        "broker-a.properties", "broker-b-s.properties", "namesrv-0.properties",
    ]
    assert sorted(p.name for p in (out / "h2" / "conf").iterdir()) == [
        "broker-a-s.properties", "broker-b.properties", "namesrv-1.properties",
    ]
    start = out / "h1" / "start.sh"
    assert start.stat().st_mode & 0o111
    props = parse_properties((out / "h2" / "conf" / "broker-a-s.properties").read_text())
    assert props["brokerIP1"] == "h2" and props["brokerRole"] == "SLAVE"
    assert props["namesrvAddr"] == "h1:9876;h2:9876"  # each host its own plan


def test_cli_has_both_command_sets() -> None:
    from rmq_cluster.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    names = set(sub.choices)  # type: ignore[arg-type]
    assert {"up", "down", "status", "kill", "pause", "resume", "restart", "promote", "logs",
            "nodes", "render", "demo"} <= names
    assert {"produce", "consume"} <= names
