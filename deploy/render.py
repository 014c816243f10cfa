"""Per-node RocketMQ ``.properties`` files and start commands (pure: text in, text out).

Key names are RocketMQ 4.x's own (``BrokerConfig``, ``NettyServerConfig``,
``MessageStoreConfig``, DLedger's ``dLeger*``), so the same file feeds our ``mqbroker -c`` and
Apache RocketMQ's. Keys a real RocketMQ does not know are ignored by it
(``MixAll.properties2Object`` only sets known fields), and ours reports and ignores the ones it
does not know, so nothing here needs two variants.

Every rendered file is created with ``file_mode(path)``: properties owner-only (with
``up --acl`` a broker's holds the admin's ``aclSecretKey``), scripts executable.

Two uses:

* ``local_files`` - one cluster on this machine (``rmq-cluster up``): every node binds
  127.0.0.1, stores under the cluster directory, and CommitLog files are kept small;
* ``host_files`` - ``rmq-cluster render PROFILE --hosts h1,h2 --out DIR``: per host a
  ``conf/`` directory and a ``start.sh`` with ``python -m rmq_cluster.namesrv|broker`` lines and the
  equivalent ``mqnamesrv``/``mqbroker`` lines; ``brokerIP1`` is the host.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Final

from rmq_cluster.cluster.config import format_properties
from rmq_cluster.deploy.topology import (
    KIND_NAMESRV,
    ROLE_DLEDGER,
    NodeSpec,
    Topology,
)

#: Multi-host nodes listen on every interface (RocketMQ's default; ours is loopback).
HOSTS_BIND_ADDRESS: Final = "0.0.0.0"
#: ``metricsPort=auto`` in a profile's broker_properties: each broker gets listenPort + this.
METRICS_PORT_AUTO: Final = "auto"
METRICS_PORT_OFFSET: Final = 4
#: Local clusters keep CommitLog files small (RocketMQ's default is 1 GiB per file).
LOCAL_COMMITLOG_FILE_BYTES: Final = 64 * 1024 * 1024
#: RocketMQ's sample broker.conf values.
DELETE_WHEN: Final = "04"
FILE_RESERVED_TIME_HOURS: Final = 48


def namesrv_properties(
    node: NodeSpec,
    *,
    data_dir: str,
    bind_address: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A NameServer's properties (``mqnamesrv -c``); ``extra``: the profile's
    ``namesrv_properties`` (``up --acl``: aclEnable, aclFile)."""
    props = {
        "listenPort": str(node.port),
        "kvConfigPath": str(PurePosixPath(data_dir) / "kvConfig.json"),
    }
    if bind_address is not None:
        props["bindAddress"] = bind_address
    if extra:
        props.update(extra)
    return props


def dledger_peers(topo: Topology, group: str) -> str:
    """``dLegerPeers``: ``n0-host:port;n1-host:port;...`` for one DLedger group."""
    return ";".join(
        f"{n.dledger_id}-{n.host}:{n.dledger_port}"
        for n in topo.group_members(group)
        if n.dledger_id is not None
    )


def broker_properties(
    node: NodeSpec,
    topo: Topology,
    *,
    store_dir: str,
    bind_address: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A broker's properties (``mqbroker -c``), RocketMQ's sample-config order."""
    spec = topo.spec
    props: dict[str, str] = {
        "brokerClusterName": spec.cluster_name,
        "brokerName": node.group or node.name,
    }
    if node.role == ROLE_DLEDGER:
        props.update(
            {
                "enableDLegerCommitLog": "true",
                "dLegerGroup": node.group or node.name,
                "dLegerPeers": dledger_peers(topo, node.group or node.name),
                "dLegerSelfId": node.dledger_id or "n0",
                "sendMessageThreadPoolNums": "16",
            }
        )
    else:
        props["brokerId"] = str(node.broker_id or 0)
        props["brokerRole"] = node.role or "ASYNC_MASTER"
    props.update(
        {
            "flushDiskType": spec.flush_disk_type,
            "deleteWhen": DELETE_WHEN,
            "fileReservedTime": str(FILE_RESERVED_TIME_HOURS),
            "listenPort": str(node.port),
            "namesrvAddr": topo.namesrv_addr,
            "brokerIP1": node.host,
            "storePathRootDir": store_dir,
            "storePathCommitLog": str(PurePosixPath(store_dir) / "commitlog"),
            "autoCreateTopicEnable": "true",
        }
    )
    if bind_address is not None:
        props["bindAddress"] = bind_address
    props.update(spec.broker_properties)
    if props.get("metricsPort") == METRICS_PORT_AUTO:
        props["metricsPort"] = str(metrics_port_of(node))
    if extra:
        props.update(extra)
    return props


def metrics_port_of(node: NodeSpec) -> int:
    """Where a broker of ``up --metrics`` serves /metrics: its listen port + 4 (the port plan
    leaves listen-2 .. listen+2 to the broker and listen+3 .. +7 to a chaos proxy's shifted
    binds, of which +4 is unused)."""
    return node.port + METRICS_PORT_OFFSET


def node_properties(
    node: NodeSpec, topo: Topology, *, data_dir: str, bind_address: str | None, local: bool
) -> dict[str, str]:
    """The properties of any node; ``data_dir`` is that node's own data directory."""
    if node.kind == KIND_NAMESRV:
        props = namesrv_properties(
            node, data_dir=data_dir, bind_address=bind_address,
            extra=topo.spec.namesrv_properties,
        )
    else:
        extra = {"mappedFileSizeCommitLog": str(LOCAL_COMMITLOG_FILE_BYTES)} if local else None
        props = broker_properties(
            node, topo, store_dir=data_dir, bind_address=bind_address, extra=extra
        )
    if topo.chaos_proxy:
        props.update(chaos_proxy_properties(node, topo))
    return props


def chaos_proxy_properties(node: NodeSpec, topo: Topology) -> dict[str, str]:
    """Behind a chaos proxy a node binds shifted ports and advertises the planned ones (the
    proxy's): ``advertisedListenPort`` / ``advertisedHaListenPort`` are this project's
    extension keys (broker/config.py). A DLedger node binds its own ``dLegerPeers`` entry,
    so each node's ``dLegerPeers`` names its own shifted port and the others' planned ones."""
    bound = topo.bind_ports(node)
    props = {"listenPort": str(bound["listenPort"])}
    if node.is_broker:
        props["fastListenPort"] = str(bound["fastListenPort"])
        props["haListenPort"] = str(bound["haListenPort"])
        props["advertisedListenPort"] = str(node.port)
        props["advertisedHaListenPort"] = str(node.ha_port)
        if "dLegerPort" in bound and node.group is not None:
            props["dLegerPeers"] = ";".join(
                f"{n.dledger_id}-{n.host}:"
                f"{bound['dLegerPort'] if n.name == node.name else n.dledger_port}"
                for n in topo.group_members(node.group)
                if n.dledger_id is not None
            )
    return props


#: Rendered properties files: owner read/write only (they may hold secrets).
PROPERTIES_FILE_MODE: Final = 0o600
SCRIPT_FILE_MODE: Final = 0o755


def file_mode(path: str) -> int:
    """The mode a rendered file is created with (``start.sh``/``stop.sh`` are run by sh)."""
    return SCRIPT_FILE_MODE if path.endswith(".sh") else PROPERTIES_FILE_MODE


def render_properties(props: Mapping[str, str], *, header: str = "") -> str:
    text = format_properties(props)
    if header:
        text = "".join(f"# {line}\n" for line in header.splitlines()) + text
    return text


def python_command(node: NodeSpec, topo: Topology, conf: str, python: str) -> list[str]:
    """The ``python -m rmq_cluster.namesrv|broker`` command line of ``node``."""
    if node.kind == KIND_NAMESRV:
        return [python, "-m", "rmq_cluster.namesrv", "-c", conf]
    return [python, "-m", "rmq_cluster.broker", "-c", conf, "-n", topo.namesrv_addr]


def rocketmq_command(node: NodeSpec, topo: Topology, conf: str) -> list[str]:
    """The Apache RocketMQ 4.x equivalent (``bin/mqnamesrv`` / ``bin/mqbroker``)."""
    if node.kind == KIND_NAMESRV:
        return ["sh", "$ROCKETMQ_HOME/bin/mqnamesrv", "-c", conf]
    return ["sh", "$ROCKETMQ_HOME/bin/mqbroker", "-c", conf, "-n", topo.namesrv_addr]


# --------------------------------------------------------------------------- local cluster


def local_files(topo: Topology, cluster_dir: str) -> dict[str, str]:
    """``{relative path: text}`` of every node's properties for a cluster in ``cluster_dir``."""
    files: dict[str, str] = {}
    for node in topo.nodes:
        data_dir = str(PurePosixPath(cluster_dir) / "store" / node.name)
        props = node_properties(
            node, topo, data_dir=data_dir, bind_address="127.0.0.1", local=True
        )
        header = f"rmq-cluster {topo.profile}: {node.name} ({node.kind}); written by rmq-cluster up"
        files[f"conf/{node.name}.properties"] = render_properties(props, header=header)
    return files


# --------------------------------------------------------------------------- multi-host


def _sh(argv: list[str]) -> str:
    """Quote for sh, leaving ``$ROCKETMQ_HOME``/``$PYTHON`` for the shell to expand."""
    out = []
    for arg in argv:
        if arg.startswith("$"):
            out.append(f'"{arg}"')
        else:
            out.append(shlex.quote(arg))
    return " ".join(out)


def host_start_script(topo: Topology, host: str, nodes: list[NodeSpec]) -> str:
    lines = [
        "#!/bin/sh",
        f"# rmq-cluster render: host {host}, profile {topo.profile}, "
        f"NameServers {topo.namesrv_addr}",
        "#   sh start.sh            start with the Python nodes (pip install rmq-cluster)",
        "#   sh start.sh rocketmq   start with Apache RocketMQ 4.x ($ROCKETMQ_HOME/bin)",
        "# NameServers first; brokers on other hosts retry registration until they answer.",
        "set -e",
        'cd "$(dirname "$0")"',
        "mkdir -p logs run",
        'PYTHON="${PYTHON:-python3}"',
        'if [ "${1:-python}" = rocketmq ]; then',
        '  : "${ROCKETMQ_HOME:?set ROCKETMQ_HOME to an Apache RocketMQ 4.x install}"',
    ]
    ordered = sorted(nodes, key=lambda n: n.kind != KIND_NAMESRV)
    for node in ordered:
        conf = f"conf/{node.name}.properties"
        lines.append(f"  nohup {_sh(rocketmq_command(node, topo, conf))} "
                     f"> logs/{node.name}.log 2>&1 &")
        lines.append(f"  echo $! > run/{node.name}.pid")
    lines.append("else")
    for node in ordered:
        conf = f"conf/{node.name}.properties"
        lines.append(f"  nohup {_sh(python_command(node, topo, conf, '$PYTHON'))} "
                     f"> logs/{node.name}.log 2>&1 &")
        lines.append(f"  echo $! > run/{node.name}.pid")
    lines.append("fi")
    lines.append(f'echo "started {" ".join(n.name for n in ordered)} on {host}"')
    return "\n".join(lines) + "\n"


def host_stop_script(nodes: list[NodeSpec]) -> str:
    lines = [
        "#!/bin/sh",
        "# stop what start.sh started (brokers first, so they unregister while NameServers run)",
        'cd "$(dirname "$0")"',
    ]
    for node in sorted(nodes, key=lambda n: n.kind == KIND_NAMESRV):
        lines.append(
            f'[ -f run/{node.name}.pid ] && kill "$(cat run/{node.name}.pid)" 2>/dev/null; '
            f"rm -f run/{node.name}.pid"
        )
    return "\n".join(lines) + "\n"


def host_files(topo: Topology, *, data_root: str = "data") -> dict[str, str]:
    """``{"<host>/conf/<node>.properties" | "<host>/start.sh" | ...: text}`` for every host.

    ``data_root`` is each node's data parent directory (relative paths are relative to the
    host's directory, which ``start.sh`` changes into).
    """
    files: dict[str, str] = {}
    by_host: dict[str, list[NodeSpec]] = {}
    for node in topo.nodes:
        by_host.setdefault(node.host, []).append(node)
    for host, nodes in by_host.items():
        for node in nodes:
            data_dir = str(PurePosixPath(data_root) / node.name)
            props = node_properties(
                node, topo, data_dir=data_dir, bind_address=HOSTS_BIND_ADDRESS, local=False
            )
            header = f"rmq-cluster {topo.profile}: {node.name} ({node.kind}) on {host}"
            files[f"{host}/conf/{node.name}.properties"] = render_properties(props, header=header)
        files[f"{host}/start.sh"] = host_start_script(topo, host, nodes)
        files[f"{host}/stop.sh"] = host_stop_script(nodes)
    return files
