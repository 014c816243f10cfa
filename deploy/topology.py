"""Cluster profiles and the port plan (pure: no processes, no sockets, no files written).

A profile says how many NameServers, how many broker groups and how each group replicates:

* ``single``       1 NameServer, 1 master (broker-a);
* ``2m-noslave``   2 NameServers, masters broker-a and broker-b;
* ``2m-2s-async``  2 NameServers, ASYNC_MASTER broker-a/broker-b, SLAVE broker-a-s/broker-b-s;
* ``2m-2s-sync``   the same with SYNC_MASTER masters;
* ``dledger``      2 NameServers, one DLedger group of 3 (broker-a-n0..n2); ``groups`` for more;
* ``2m-2s-controller``  controller mode (RocketMQ 5.x RIP-44): 1 NameServer, 3 controllers
  (controller-0..2), groups broker-a/broker-b of two replicas each (broker-a = brokerId 1,
  broker-a-s = brokerId 2, role AUTO: the controller elects the master; SYNC replication).

A profile may also be a user's TOML file (or YAML when a YAML library is installed)::

    base = "2m-noslave"          # optional: start from a built-in profile
    namesrvs = 2
    masters = 2                  # broker groups: broker-a, broker-b, ...
    slaves_per_master = 0        # > 0 needs master/slave replication
    replication = "ASYNC"        # ASYNC | SYNC (master role ASYNC_MASTER | SYNC_MASTER)
    flush_disk_type = "ASYNC_FLUSH"
    dledger = false              # true: every group is a DLedger group of `group_size` nodes
    group_size = 3
    cluster_name = "DefaultCluster"
    controllers = 0              # > 0: controller mode (master/slave groups, roles elected)
    [broker_properties]          # extra broker.conf keys for every broker
    defaultTopicQueueNums = "8"
    [namesrv_properties]         # extra keys for every NameServer
    scanNotActiveBrokerInterval = "5000"

Port plan (``base_port`` defaults to RocketMQ's 9876): NameServer ``i`` listens on
``base_port + i``; broker ``j`` (masters first, then slaves, then DLedger nodes) listens on
``base_port + 1035 + 10 * j`` (10911, 10921, ...), its fast port is ``listenPort - 2``, its HA
port ``listenPort + 1`` and its DLedger port ``listenPort + 2``: a stride of 10 keeps them apart.
Controller ``i`` listens on ``base_port + 20 + 2 * i`` (9896, 9898, 9900) and talks Raft to the
other controllers on the port above it (``controllerDLegerPeers``).
"""

from __future__ import annotations

import string
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

DEFAULT_BASE_PORT: Final = 9876
#: The first broker's listen port minus the base port (10911 - 9876).
BROKER_PORT_OFFSET: Final = 1035
#: Listen ports of consecutive brokers are this far apart.
BROKER_PORT_STRIDE: Final = 10
FAST_PORT_OFFSET: Final = -2
HA_PORT_OFFSET: Final = 1
DLEDGER_PORT_OFFSET: Final = 2
#: Controller ``i`` listens on base + CONTROLLER_PORT_OFFSET + CONTROLLER_PORT_STRIDE * i; its
#: Raft peer port is the next one.
CONTROLLER_PORT_OFFSET: Final = 20
CONTROLLER_PORT_STRIDE: Final = 2
MAX_CONTROLLERS: Final = 7
MAX_NAMESRVS: Final = 10
MAX_BROKER_GROUPS: Final = 26
MAX_GROUP_SIZE: Final = 9
DEFAULT_CLUSTER_NAME: Final = "DefaultCluster"
#: Chaos proxy (``Topology.chaos_proxy``): a node binds its planned ports shifted by this and a
#: fault-injecting proxy (chaos/proxy.py) listens on the planned ones. Broker ports +5 stay
#: inside the broker's stride of 10 (-2..+2 planned, +3..+7 bound); NameServers move past
#: the ten NameServer ports, far below the first broker port.
PROXY_BROKER_PORT_SHIFT: Final = 5
PROXY_NAMESRV_PORT_SHIFT: Final = 500

#: Replication modes a profile may need beyond a plain master.
MODE_HA: Final = "ha"
MODE_DLEDGER: Final = "dledger"

KIND_NAMESRV: Final = "namesrv"
KIND_BROKER: Final = "broker"
KIND_CONTROLLER: Final = "controller"
ROLE_ASYNC_MASTER: Final = "ASYNC_MASTER"
ROLE_SYNC_MASTER: Final = "SYNC_MASTER"
ROLE_SLAVE: Final = "SLAVE"
#: A DLedger node's configured role: the group elects; the live role is read at status time.
ROLE_DLEDGER: Final = "DLEDGER"
#: A controller-mode replica's configured role: the controller elects; read live at status time.
ROLE_AUTO: Final = "AUTO"


class ProfileError(ValueError):
    """An unknown profile, a bad profile file or an impossible port plan; says which."""


#: ``metricsPort=auto`` in a profile's broker_properties (namesrv_properties): each broker
#: serves /metrics on listenPort + METRICS_PORT_OFFSET, each NameServer on its listenPort +
#: NAMESRV_METRICS_PORT_OFFSET (9976, 9977, ...: clear of the NameServer and controller ports
#: and of a chaos proxy's shifted NameServer binds).
METRICS_PORT_AUTO: Final = "auto"
METRICS_PORT_OFFSET: Final = 4
NAMESRV_METRICS_PORT_OFFSET: Final = 100


@attrs.frozen
class ProfileSpec:
    """What a profile asks for (a built-in one or a user's file)."""

    name: str
    namesrvs: int = 1
    masters: int = 1
    slaves_per_master: int = 0
    replication: str = "ASYNC"
    flush_disk_type: str = "ASYNC_FLUSH"
    dledger: bool = False
    group_size: int = 3
    cluster_name: str = DEFAULT_CLUSTER_NAME
    #: controller mode: this many controllers elect each group's master (0: off)
    controllers: int = 0
    broker_properties: Mapping[str, str] = attrs.field(factory=dict)
    #: extra namesrv keys for every NameServer (``up --acl``: aclEnable, aclFile)
    namesrv_properties: Mapping[str, str] = attrs.field(factory=dict)

    def validate(self) -> None:
        if not 1 <= self.namesrvs <= MAX_NAMESRVS:
            raise ProfileError(f"profile {self.name}: namesrvs must be 1..{MAX_NAMESRVS}")
        if not 1 <= self.masters <= MAX_BROKER_GROUPS:
            raise ProfileError(f"profile {self.name}: masters must be 1..{MAX_BROKER_GROUPS}")
        if not 0 <= self.slaves_per_master <= MAX_GROUP_SIZE:
            raise ProfileError(
                f"profile {self.name}: slaves_per_master must be 0..{MAX_GROUP_SIZE}"
            )
        if self.replication not in ("ASYNC", "SYNC"):
            raise ProfileError(f"profile {self.name}: replication must be ASYNC or SYNC")
        if self.flush_disk_type not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            raise ProfileError(
                f"profile {self.name}: flush_disk_type must be ASYNC_FLUSH or SYNC_FLUSH"
            )
        if self.dledger and not 1 <= self.group_size <= MAX_GROUP_SIZE:
            raise ProfileError(f"profile {self.name}: group_size must be 1..{MAX_GROUP_SIZE}")
        if self.dledger and self.slaves_per_master:
            raise ProfileError(f"profile {self.name}: dledger groups have no slaves_per_master")
        if not 0 <= self.controllers <= MAX_CONTROLLERS:
            raise ProfileError(f"profile {self.name}: controllers must be 0..{MAX_CONTROLLERS}")
        if self.controllers and self.dledger:
            raise ProfileError(f"profile {self.name}: controller mode is for master/slave groups")
        if self.controllers and self.slaves_per_master < 1:
            raise ProfileError(f"profile {self.name}: controller mode needs slaves_per_master")
        if not self.cluster_name or any(c.isspace() for c in self.cluster_name):
            raise ProfileError(f"profile {self.name}: cluster_name must be a non-empty word")

    @property
    def required_modes(self) -> tuple[str, ...]:
        """Replication modes the broker must support to run this profile."""
        if self.dledger:
            return (MODE_DLEDGER,)
        if self.slaves_per_master > 0 or self.replication == "SYNC":
            # a SYNC_MASTER acknowledges only what a slave has; without HA every send fails
            return (MODE_HA,)
        return ()


BUILTIN_PROFILES: Final[Mapping[str, ProfileSpec]] = {
    "single": ProfileSpec("single", namesrvs=1, masters=1),
    "2m-noslave": ProfileSpec("2m-noslave", namesrvs=2, masters=2),
    "2m-2s-async": ProfileSpec("2m-2s-async", namesrvs=2, masters=2, slaves_per_master=1),
    "2m-2s-sync": ProfileSpec(
        "2m-2s-sync", namesrvs=2, masters=2, slaves_per_master=1, replication="SYNC"
    ),
    "dledger": ProfileSpec("dledger", namesrvs=2, masters=1, dledger=True, group_size=3),
    "2m-2s-controller": ProfileSpec(
        "2m-2s-controller", namesrvs=1, masters=2, slaves_per_master=1, replication="SYNC",
        controllers=3,
    ),
}


@attrs.frozen
class NodeSpec:
    """One node of the plan: a NameServer or a broker, with every port it will bind."""

    name: str
    kind: str
    host: str
    port: int
    #: brokerName for brokers; None for NameServers.
    group: str | None = None
    #: ASYNC_MASTER | SYNC_MASTER | SLAVE | DLEDGER (configured); None for NameServers.
    role: str | None = None
    broker_id: int | None = None
    #: DLedger: this node's id in the group (n0, n1, ...).
    dledger_id: str | None = None

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_broker(self) -> bool:
        return self.kind == KIND_BROKER

    @property
    def fast_port(self) -> int:
        return self.port + FAST_PORT_OFFSET

    @property
    def ha_port(self) -> int:
        return self.port + HA_PORT_OFFSET

    @property
    def dledger_port(self) -> int:
        return self.port + DLEDGER_PORT_OFFSET

    @property
    def controller_peer_port(self) -> int:
        return self.port + 1

    def ports(self) -> dict[str, int]:
        """Every port this node binds, by RocketMQ's name for it."""
        if self.kind == KIND_CONTROLLER:
            return {"listenPort": self.port, "controllerDLegerPort": self.controller_peer_port}
        if not self.is_broker:
            return {"listenPort": self.port}
        ports = {
            "fastListenPort": self.fast_port,
            "listenPort": self.port,
            "haListenPort": self.ha_port,
        }
        if self.dledger_id is not None:
            ports["dLegerPort"] = self.dledger_port
        return ports

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "host": self.host,
            "port": self.port,
            "group": self.group,
            "role": self.role,
            "broker_id": self.broker_id,
            "dledger_id": self.dledger_id,
            "addr": self.addr,
            "ports": self.ports(),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> NodeSpec:
        return cls(
            name=str(obj["name"]),
            kind=str(obj["kind"]),
            host=str(obj["host"]),
            port=int(obj["port"]),
            group=obj.get("group"),
            role=obj.get("role"),
            broker_id=obj.get("broker_id"),
            dledger_id=obj.get("dledger_id"),
        )


@attrs.frozen
class Topology:
    """A profile laid out on hosts and ports."""

    spec: ProfileSpec
    base_port: int
    nodes: tuple[NodeSpec, ...]
    #: Every node binds shifted ports behind a chaos proxy on its planned ones (chaos/proxy.py).
    chaos_proxy: bool = False
    #: ``clusterSecret`` of every broker and controller: their peer ports (HA, DLedger, the
    #: controller's) serve only nodes that prove it (cluster/remoting/peer_auth.py). ``up``
    #: generates one per cluster; kept in the owner-only cluster.json.
    cluster_secret: str = attrs.field(default="", repr=False)

    def bind_ports(self, node: NodeSpec) -> dict[str, int]:
        """The ports ``node`` itself binds: its planned ones, or shifted behind the proxy; and
        its /metrics port when the profile asks for ``metricsPort=auto`` (never proxied)."""
        ports = node.ports()
        if self.chaos_proxy:
            shift = PROXY_BROKER_PORT_SHIFT if node.is_broker else PROXY_NAMESRV_PORT_SHIFT
            ports = {key: port + shift for key, port in ports.items()}
        if self._serves_metrics(node):
            ports["metricsPort"] = metrics_port_of(node)
        return ports

    def _serves_metrics(self, node: NodeSpec) -> bool:
        if node.is_broker:
            props = self.spec.broker_properties
        elif node.kind == KIND_NAMESRV:
            props = self.spec.namesrv_properties
        else:
            return False
        return props.get("metricsPort") == METRICS_PORT_AUTO

    def proxy_routes(self) -> list[tuple[str, str, int, int]]:
        """``(node, portName, public port, bound port)`` for every port a proxy fronts."""
        out: list[tuple[str, str, int, int]] = []
        for n in self.nodes:
            bound = self.bind_ports(n)
            out.extend((n.name, key, port, bound[key]) for key, port in n.ports().items())
        return out

    @property
    def profile(self) -> str:
        return self.spec.name

    @property
    def namesrvs(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.kind == KIND_NAMESRV]

    @property
    def brokers(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.kind == KIND_BROKER]

    @property
    def controllers(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.kind == KIND_CONTROLLER]

    @property
    def controller_addr(self) -> str:
        """``controllerAddr`` of controller-mode brokers: ``h:p;h:p;h:p``."""
        return ";".join(n.addr for n in self.controllers)

    @property
    def controller_peers(self) -> str:
        """``controllerDLegerPeers``: ``n0-h:p;n1-h:p;...`` (the Raft ports)."""
        return ";".join(f"{n.dledger_id}-{n.host}:{n.controller_peer_port}"
                        for n in self.controllers)

    @property
    def namesrv_addr(self) -> str:
        """RocketMQ's ``namesrvAddr``: ``h:p;h:p``."""
        return ";".join(n.addr for n in self.namesrvs)

    @property
    def groups(self) -> list[str]:
        seen: list[str] = []
        for n in self.brokers:
            if n.group is not None and n.group not in seen:
                seen.append(n.group)
        return seen

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def group_members(self, group: str) -> list[NodeSpec]:
        return [n for n in self.brokers if n.group == group]

    def master_of(self, node: NodeSpec) -> NodeSpec | None:
        """A slave's master (brokerId 0 of its group); None for masters and DLedger nodes."""
        if node.role != ROLE_SLAVE:
            return None
        for n in self.group_members(node.group or ""):
            if n.broker_id == 0:
                return n
        return None

    def ports(self) -> list[tuple[int, str]]:
        """``(port, "node portName")`` for every port of the plan, in node order."""
        out: list[tuple[int, str]] = []
        for n in self.nodes:
            out.extend((port, f"{n.name} {key}") for key, port in self.bind_ports(n).items())
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.spec.name,
            "spec": spec_to_json(self.spec),
            "base_port": self.base_port,
            "namesrv_addr": self.namesrv_addr,
            "nodes": [n.to_json() for n in self.nodes],
            "chaos_proxy": self.chaos_proxy,
            "cluster_secret": self.cluster_secret,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Topology:
        return cls(
            spec=spec_from_mapping(obj["spec"], name=str(obj["profile"])),
            base_port=int(obj["base_port"]),
            nodes=tuple(NodeSpec.from_json(n) for n in obj["nodes"]),
            chaos_proxy=bool(obj.get("chaos_proxy", False)),
            cluster_secret=str(obj.get("cluster_secret") or ""),
        )


def group_name(index: int) -> str:
    """broker-a, broker-b, ... (RocketMQ's sample configs)."""
    return f"broker-{string.ascii_lowercase[index]}"


def build_topology(
    spec: ProfileSpec,
    *,
    base_port: int = DEFAULT_BASE_PORT,
    hosts: list[str] | None = None,
) -> Topology:
    """Lay ``spec`` out: node names, roles, brokerIds, and ports from ``base_port``.

    ``hosts`` (multi-host rendering) are assigned round-robin: NameServer ``i`` on host ``i``,
    member ``k`` of group ``g`` on host ``g + k``, so a master and its slaves (or a DLedger
    group's nodes) land on different hosts whenever there are enough; without hosts every node
    is on 127.0.0.1.
    """
    spec.validate()
    hosts = [h.strip() for h in (hosts or ["127.0.0.1"]) if h.strip()]
    if not hosts:
        raise ProfileError("no hosts given")
    nodes: list[NodeSpec] = []
    for i in range(spec.namesrvs):
        nodes.append(
            NodeSpec(
                name=f"namesrv-{i}",
                kind=KIND_NAMESRV,
                host=hosts[i % len(hosts)],
                port=base_port + i,
            )
        )
    for i in range(spec.controllers):
        nodes.append(
            NodeSpec(
                name=f"controller-{i}",
                kind=KIND_CONTROLLER,
                host=hosts[i % len(hosts)],
                port=base_port + CONTROLLER_PORT_OFFSET + CONTROLLER_PORT_STRIDE * i,
                dledger_id=f"n{i}",
            )
        )
    # name, group, role, brokerId, dledger id, host slot (group index + member index)
    brokers: list[tuple[str, str, str, int, str | None, int]] = []
    master_role = ROLE_SYNC_MASTER if spec.replication == "SYNC" else ROLE_ASYNC_MASTER
    if spec.dledger:
        for g in range(spec.masters):
            group = group_name(g)
            for k in range(spec.group_size):
                # RocketMQ gives DLedger brokers brokerId by role at runtime; the plan says n0 = 0
                brokers.append((f"{group}-n{k}", group, ROLE_DLEDGER, k, f"n{k}", g + k))
    elif spec.controllers:
        # controller mode: brokerId is each replica's identity (>= 1); the controller elects
        for k in range(1 + spec.slaves_per_master):
            suffix = "" if k == 0 else ("-s" if spec.slaves_per_master == 1 else f"-s{k}")
            for g in range(spec.masters):
                brokers.append((group_name(g) + suffix, group_name(g), ROLE_AUTO, k + 1, None,
                                g + k))
    else:
        for g in range(spec.masters):
            brokers.append((group_name(g), group_name(g), master_role, 0, None, g))
        for s in range(1, spec.slaves_per_master + 1):
            suffix = "-s" if spec.slaves_per_master == 1 else f"-s{s}"
            for g in range(spec.masters):
                brokers.append((group_name(g) + suffix, group_name(g), ROLE_SLAVE, s, None, g + s))
    for j, (name, group, role, broker_id, dledger_id, slot) in enumerate(brokers):
        nodes.append(
            NodeSpec(
                name=name,
                kind=KIND_BROKER,
                host=hosts[slot % len(hosts)],
                port=base_port + BROKER_PORT_OFFSET + BROKER_PORT_STRIDE * j,
                group=group,
                role=role,
                broker_id=broker_id,
                dledger_id=dledger_id,
            )
        )
    topo = Topology(spec=spec, base_port=base_port, nodes=tuple(nodes))
    _check_ports(topo, single_host=len(set(hosts)) == 1)
    return topo


def _check_ports(topo: Topology, *, single_host: bool) -> None:
    seen: dict[tuple[str, int], str] = {}
    for n in topo.nodes:
        for key, port in n.ports().items():
            if not 1 <= port <= 65535:
                raise ProfileError(
                    f"--base-port {topo.base_port} puts {n.name} {key} at {port}, "
                    "outside 1..65535"
                )
            where = ("*" if single_host else n.host, port)
            if where in seen:
                raise ProfileError(f"port {port} planned twice: {seen[where]} and {n.name} {key}")
            seen[where] = f"{n.name} {key}"


def plan_span(spec: ProfileSpec) -> int:
    """How many consecutive ports from the base port the plan can touch (for picking a base)."""
    brokers = spec.masters * (spec.group_size if spec.dledger else 1 + spec.slaves_per_master)
    last = BROKER_PORT_OFFSET + BROKER_PORT_STRIDE * max(brokers - 1, 0) + DLEDGER_PORT_OFFSET
    return last + PROXY_BROKER_PORT_SHIFT + 1  # room for a chaos proxy's shifted ports too


# --------------------------------------------------------------------------- profile files

_SPEC_KEYS: Final = {
    "namesrvs": int,
    "masters": int,
    "slaves_per_master": int,
    "replication": str,
    "flush_disk_type": str,
    "dledger": bool,
    "group_size": int,
    "cluster_name": str,
    "controllers": int,
}


#: Profile tables of extra node properties (``key = "value"``).
_PROPERTY_TABLES: Final = ("broker_properties", "namesrv_properties")


def spec_to_json(spec: ProfileSpec) -> dict[str, Any]:
    out: dict[str, Any] = {key: getattr(spec, key) for key in _SPEC_KEYS}
    out["broker_properties"] = dict(spec.broker_properties)
    out["namesrv_properties"] = dict(spec.namesrv_properties)
    return out


def spec_from_mapping(
    data: Mapping[str, Any], *, name: str, base: ProfileSpec | None = None
) -> ProfileSpec:
    """A ProfileSpec from a parsed profile file (or cluster.json); unknown keys are errors."""
    values: dict[str, Any] = {}
    if base is not None:
        values = spec_to_json(base)
    for key, value in data.items():
        if key in ("base", "name", "profile"):
            continue
        if key in _PROPERTY_TABLES:
            if not isinstance(value, Mapping):
                raise ProfileError(f"profile {name}: {key} must be a table")
            values[key] = {str(k): _prop_value(v) for k, v in value.items()}
            continue
        kind = _SPEC_KEYS.get(key)
        if kind is None:
            known = ", ".join(sorted([*_SPEC_KEYS, "base", *_PROPERTY_TABLES]))
            raise ProfileError(f"profile {name}: unknown key {key!r} (known: {known})")
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ProfileError(f"profile {name}: {key} must be an integer, got {value!r}")
        if kind is bool and not isinstance(value, bool):
            raise ProfileError(f"profile {name}: {key} must be true or false, got {value!r}")
        if kind is str and not isinstance(value, str):
            raise ProfileError(f"profile {name}: {key} must be a string, got {value!r}")
        values[key] = value.upper() if key in ("replication", "flush_disk_type") else value
    spec = ProfileSpec(name=name, **values)
    spec.validate()
    return spec


def _prop_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _load_profile_file(path: Path) -> Mapping[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"cannot read profile file {path}: {exc.strerror}") from exc
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise ProfileError(
                f"{path}: YAML profiles need PyYAML, which is not installed; use TOML"
            ) from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ProfileError(f"{path}: not valid YAML: {exc}") from exc
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ProfileError(f"{path}: not valid TOML: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ProfileError(f"{path}: a profile file must hold a table of keys")
    return data


def resolve_profile(profile: str, *, groups: int | None = None) -> ProfileSpec:
    """A built-in profile by name, or a profile file by path; ``groups`` overrides masters."""
    if profile in BUILTIN_PROFILES:
        spec = BUILTIN_PROFILES[profile]
    else:
        path = Path(profile)
        if not (path.suffix in (".toml", ".yaml", ".yml") or path.exists()):
            names = ", ".join(BUILTIN_PROFILES)
            raise ProfileError(f"unknown profile {profile!r} (built-in: {names}; or a .toml file)")
        data = _load_profile_file(path)
        base_name = data.get("base")
        base = None
        if base_name is not None:
            if base_name not in BUILTIN_PROFILES:
                raise ProfileError(f"{path}: base {base_name!r} is not a built-in profile")
            base = BUILTIN_PROFILES[str(base_name)]
        name = str(data.get("name") or path.stem)
        spec = spec_from_mapping(data, name=name, base=base)
    if groups is not None:
        if groups < 1:
            raise ProfileError("--groups must be at least 1")
        spec = attrs.evolve(spec, masters=groups)
        spec.validate()
    return spec


def metrics_port_of(node: NodeSpec) -> int:
    """Where a node of ``up --metrics`` serves /metrics: a broker on its listen port + 4 (the
    port plan leaves listen-2 .. listen+2 to the broker and listen+3 .. +7 to a chaos proxy's
    shifted binds, of which +4 is unused), a NameServer on its listen port + 100."""
    if node.kind == KIND_NAMESRV:
        return node.port + NAMESRV_METRICS_PORT_OFFSET
    return node.port + METRICS_PORT_OFFSET
