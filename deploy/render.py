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
  ``conf/`` directory, a ``start.sh`` with ``python -m rmq_cluster.namesrv|broker`` lines and the
  equivalent ``mqnamesrv``/``mqbroker`` lines (NameServers, then ``wait-namesrv.sh`` until they
  accept connections, then brokers), ``stop.sh`` and one systemd unit per node; ``brokerIP1``
  is the host, and ``per_host_plan`` gives each host its own port plan (9876, 10911, ...).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath
from typing import Final

import attrs

from ..cluster.config import format_properties
from ..cluster.remoting.peer_auth import CLUSTER_SECRET_KEY
from .topology import (
    KIND_CONTROLLER,
    KIND_NAMESRV,
    METRICS_PORT_AUTO,
    ROLE_AUTO,
    ROLE_DLEDGER,
    NodeSpec,
    Topology,
    metrics_port_of,
)

#: Multi-host nodes listen on every interface (RocketMQ's default; ours is loopback).
HOSTS_BIND_ADDRESS: Final = "0.0.0.0"
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
    if props.get("metricsPort") == METRICS_PORT_AUTO:
        props["metricsPort"] = str(metrics_port_of(node))
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
    elif node.role == ROLE_AUTO:  # controller mode (issue 25): the controller elects
        props["brokerId"] = str(node.broker_id or 1)
        props["brokerRole"] = "SYNC_MASTER" if spec.replication == "SYNC" else "ASYNC_MASTER"
        props["enableControllerMode"] = "true"
        props["controllerAddr"] = topo.controller_addr
        # every acked message is on each SyncStateSet member (RocketMQ's quick-start setting)
        props["allAckInSyncStateSet"] = "true"
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
    if topo.cluster_secret:
        props[CLUSTER_SECRET_KEY] = topo.cluster_secret
    props.update(spec.broker_properties)
    if props.get("metricsPort") == METRICS_PORT_AUTO:
        props["metricsPort"] = str(metrics_port_of(node))
    if extra:
        props.update(extra)
    return props


def node_properties(
    node: NodeSpec, topo: Topology, *, data_dir: str, bind_address: str | None, local: bool
) -> dict[str, str]:
    """The properties of any node; ``data_dir`` is that node's own data directory."""
    if node.kind == KIND_NAMESRV:
        props = namesrv_properties(
            node, data_dir=data_dir, bind_address=bind_address,
            extra=topo.spec.namesrv_properties,
        )
    elif node.kind == KIND_CONTROLLER:
        props = {
            "controllerDLegerGroup": f"{topo.spec.cluster_name}-controller",
            "controllerDLegerPeers": topo.controller_peers,
            "controllerDLegerSelfId": node.dledger_id or "n0",
            "controllerStorePath": data_dir,
            "listenPort": str(node.port),
        }
        if bind_address is not None:
            props["bindAddress"] = bind_address
        if topo.cluster_secret:
            props[CLUSTER_SECRET_KEY] = topo.cluster_secret
    else:
        extra = ({"mappedFileSizeCommitLog": str(LOCAL_COMMITLOG_FILE_BYTES)}
                 if local and "mappedFileSizeCommitLog" not in topo.spec.broker_properties
                 else None)
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
    if node.kind == KIND_CONTROLLER:
        # a controller binds its own controllerDLegerPeers entry (as a DLedger node does) and
        # announces the proxy's port as its listen address (GET_METADATA_INFO's leader address)
        props["advertisedListenPort"] = str(node.port)
        props["controllerDLegerPeers"] = ";".join(
            f"{n.dledger_id}-{n.host}:"
            f"{bound['controllerDLegerPort'] if n.name == node.name else n.controller_peer_port}"
            for n in topo.controllers
        )
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
    if node.kind == KIND_CONTROLLER:
        return [python, "-m", "rmq_cluster.controller", "-c", conf]
    return [python, "-m", "rmq_cluster.broker", "-c", conf, "-n", topo.namesrv_addr]


def rocketmq_command(node: NodeSpec, topo: Topology, conf: str) -> list[str]:
    """The Apache RocketMQ 4.x equivalent (``bin/mqnamesrv`` / ``bin/mqbroker``)."""
    if node.kind == KIND_NAMESRV:
        return ["sh", "$ROCKETMQ_HOME/bin/mqnamesrv", "-c", conf]
    if node.kind == KIND_CONTROLLER:
        return ["sh", "$ROCKETMQ_HOME/bin/mqcontroller", "-c", conf]
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


#: ``wait-namesrv.sh``: seconds this host's NameServers get to accept connections before the
#: brokers start (``NAMESRV_WAIT_S`` overrides), and the extra seconds given to the others'.
NAMESRV_WAIT_S: Final = 60
NAMESRV_WAIT_REMOTE_S: Final = 10
#: Where ``render``'s systemd units expect a host's directory (``render --install-dir``).
DEFAULT_INSTALL_DIR: Final = "/opt/rmq-cluster"
SYSTEMD_UNIT_PREFIX: Final = "rmq-cluster-"
SYSTEMD_RESTART_SEC: Final = 5
SYSTEMD_LIMIT_NOFILE: Final = 65536


def per_host_plan(topo: Topology) -> Topology:
    """The port plan per host: on every host its first NameServer listens on ``base_port``
    (9876), the next on ``base_port + 1``, its first broker on ``base_port + 1035`` (10911),
    the next 10 higher, ... (and so for every kind of node: the k-th of a kind on a host gets
    the k-th port of that kind in the plan) - as if each host ran its own single-host plan,
    instead of the one-machine plan (second NameServer on 9877 everywhere) carried to every
    host. On one host this is the plan itself. DLedger peers and ``namesrvAddr`` follow."""
    ports_of: dict[str, list[int]] = {}
    for node in topo.nodes:
        ports_of.setdefault(node.kind, []).append(node.port)
    for ports in ports_of.values():
        ports.sort()
    seen: dict[tuple[str, str], int] = {}
    nodes: list[NodeSpec] = []
    for node in topo.nodes:
        k = seen.get((node.host, node.kind), 0)
        seen[(node.host, node.kind)] = k + 1
        nodes.append(attrs.evolve(node, port=ports_of[node.kind][k]))
    return attrs.evolve(topo, nodes=tuple(nodes))


def wait_namesrv_script(topo: Topology, host: str) -> str:
    """``wait-namesrv.sh`` of ``host``: ``wait_script`` for its NameServers (probed on
    127.0.0.1) and the other hosts'."""
    local = [f"127.0.0.1:{n.port}" for n in topo.namesrvs if n.host == host]
    remote = [n.addr for n in topo.namesrvs if n.host != host]
    return wait_script(local, remote, title=f"host {host}")


def wait_script(local: list[str], remote: list[str], *, title: str = "") -> str:
    """A script that waits (with a deadline) until NameServers accept TCP connections.

    Required: every ``local`` one (or, with none, any one of ``remote``) within
    ``NAMESRV_WAIT_S`` seconds; exit 1 otherwise. Then the rest of ``remote`` get
    ``NAMESRV_WAIT_REMOTE_S`` more (a warning only: a broker registers with each NameServer
    again every 30 s). Needs a Python 3 (``$PYTHON``, default python3)."""
    lines = [
        "#!/bin/sh",
        f"# rmq-cluster render{': ' + title if title else ''}: wait until NameServers accept "
        "connections",
        "# (this host's within NAMESRV_WAIT_S seconds, or exit 1; the others' within",
        "# NAMESRV_WAIT_REMOTE_S more, a warning only). start.sh and the broker units run it.",
        'PYTHON="${PYTHON:-python3}"',
        f'exec "$PYTHON" - "${{NAMESRV_WAIT_S:-{NAMESRV_WAIT_S}}}" '
        f'"${{NAMESRV_WAIT_REMOTE_S:-{NAMESRV_WAIT_REMOTE_S}}}" '
        f"{shlex.quote(','.join(local))} {shlex.quote(','.join(remote))} <<'EOF'",
        _WAIT_PY.strip(),
        "EOF",
    ]
    return "\n".join(lines) + "\n"


# Runs on the deployment host (stdlib only): poll TCP connects until a deadline.
_WAIT_PY: Final = r"""
import socket, sys, time
wait_s, remote_s = float(sys.argv[1]), float(sys.argv[2])
local = [a for a in sys.argv[3].split(",") if a]
remote = [a for a in sys.argv[4].split(",") if a]
def up(addr):
    host, _, port = addr.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1.0).close()
        return True
    except OSError:
        return False
def wait(addrs, seconds, need_all):
    pending, deadline = list(addrs), time.monotonic() + seconds
    while pending:
        pending = [a for a in pending if not up(a)]
        if not need_all and len(pending) < len(addrs):
            return []
        if not pending or time.monotonic() >= deadline:
            return pending
        time.sleep(0.2)
    return pending
required, rest = (local, remote) if local else (remote, [])
missing = wait(required, wait_s, need_all=bool(local))
if required and (missing if local else len(missing) == len(required)):
    print("NameServer not ready after %gs: %s" % (wait_s, " ".join(missing)), file=sys.stderr)
    sys.exit(1)
late = wait(rest, remote_s, need_all=True)
if late:
    print("note: NameServer not answering yet (brokers register again every 30 s): "
          + " ".join(late), file=sys.stderr)
print("NameServers ready: " + " ".join(a for a in required + rest if a not in late))
"""


def host_start_script(topo: Topology, host: str, nodes: list[NodeSpec]) -> str:
    """``start.sh``: this host's NameServers, then ``wait-namesrv.sh`` (NameServers ready,
    with a deadline), then its brokers; pids in ``run/``."""
    lines = [
        "#!/bin/sh",
        f"# rmq-cluster render: host {host}, profile {topo.profile}, "
        f"NameServers {topo.namesrv_addr}",
        "#   sh start.sh            start with the Python nodes (pip install rmq-cluster)",
        "#   sh start.sh rocketmq   start with Apache RocketMQ 4.x ($ROCKETMQ_HOME/bin)",
        "# NameServers first; brokers start once wait-namesrv.sh saw them accept connections.",
        "set -e",
        'cd "$(dirname "$0")"',
        "mkdir -p logs run",
        'PYTHON="${PYTHON:-python3}"',
        "export PYTHON",
        'if [ "${1:-python}" = rocketmq ]; then',
        '  : "${ROCKETMQ_HOME:?set ROCKETMQ_HOME to an Apache RocketMQ 4.x install}"',
    ]
    ordered = sorted(nodes, key=lambda n: n.kind != KIND_NAMESRV)
    has_brokers = any(n.is_broker for n in ordered)

    def branch(command: Callable[[NodeSpec, str], list[str]]) -> None:
        waited = False
        for node in ordered:
            if node.is_broker and not waited:
                lines.append("  sh ./wait-namesrv.sh")
                waited = True
            conf = f"conf/{node.name}.properties"
            lines.append(f"  nohup {_sh(command(node, conf))} > logs/{node.name}.log 2>&1 &")
            lines.append(f"  echo $! > run/{node.name}.pid")

    branch(lambda node, conf: rocketmq_command(node, topo, conf))
    lines.append("else")
    branch(lambda node, conf: python_command(node, topo, conf, "$PYTHON"))
    lines.append("fi")
    if not has_brokers:
        lines.append("sh ./wait-namesrv.sh")
    lines.append(f'echo "started {" ".join(n.name for n in ordered)} on {host}"')
    return "\n".join(lines) + "\n"


def systemd_unit_name(node: NodeSpec) -> str:
    return f"{SYSTEMD_UNIT_PREFIX}{node.name}.service"


def _systemd_quote(argv: list[str]) -> str:
    """An ExecStart= line's words: double-quoted where needed (``;`` in ``-n a;b`` too)."""
    out = []
    for arg in argv:
        if arg and all(c.isalnum() or c in "-_./=:@+," for c in arg):
            out.append(arg)
        else:
            escaped = arg.replace("\\", "\\\\").replace('"', '\\"')
            out.append(f'"{escaped}"')
    return " ".join(out)


def systemd_unit(topo: Topology, node: NodeSpec, *, install_dir: str, python: str) -> str:
    """One node's systemd unit: restarted on failure; a broker is ordered after (and wants)
    the NameServers of its host and waits for them to accept connections first."""
    local_ns = [systemd_unit_name(n) for n in topo.namesrvs if n.host == node.host]
    after = ["network-online.target"]
    wants = ["network-online.target"]
    if node.is_broker:
        after += local_ns
        wants += local_ns
    conf = f"conf/{node.name}.properties"
    lines = [
        "[Unit]",
        f"Description=rmq-cluster {topo.profile}: {node.name} ({node.kind}) on {node.host}",
        f"After={' '.join(after)}",
        f"Wants={' '.join(wants)}",
        "",
        "[Service]",
        "Type=simple",
        f"WorkingDirectory={install_dir}",
        f"Environment=PYTHON={python}",
    ]
    if node.is_broker:
        lines.append(f"ExecStartPre=/bin/sh {install_dir}/wait-namesrv.sh")
    lines += [
        f"ExecStart={_systemd_quote(python_command(node, topo, conf, python))}",
        "Restart=on-failure",
        f"RestartSec={SYSTEMD_RESTART_SEC}",
        f"LimitNOFILE={SYSTEMD_LIMIT_NOFILE}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
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


def host_files(
    topo: Topology,
    *,
    data_root: str = "data",
    install_dir: str = DEFAULT_INSTALL_DIR,
    python: str = "/usr/bin/python3",
    bind_address: str = HOSTS_BIND_ADDRESS,
) -> dict[str, str]:
    """``{"<host>/conf/<node>.properties" | "<host>/start.sh" | ...: text}`` for every host.

    Per host: ``conf/``, ``start.sh``, ``stop.sh``, ``wait-namesrv.sh`` and
    ``systemd/rmq-cluster-<node>.service`` (expecting the host's directory at ``install_dir``
    and a Python with rmq-cluster installed at ``python``). ``data_root`` is each node's data
    parent directory (relative paths are relative to the host's directory, which
    ``start.sh`` changes into). ``topo`` is rendered as given: pass ``per_host_plan(topo)``
    for each host's own port plan (``rmq-cluster render`` does).
    """
    files: dict[str, str] = {}
    by_host: dict[str, list[NodeSpec]] = {}
    for node in topo.nodes:
        by_host.setdefault(node.host, []).append(node)
    for host, nodes in by_host.items():
        for node in nodes:
            data_dir = str(PurePosixPath(data_root) / node.name)
            props = node_properties(
                node, topo, data_dir=data_dir, bind_address=bind_address, local=False
            )
            header = f"rmq-cluster {topo.profile}: {node.name} ({node.kind}) on {host}"
            files[f"{host}/conf/{node.name}.properties"] = render_properties(props, header=header)
            files[f"{host}/systemd/{systemd_unit_name(node)}"] = systemd_unit(
                topo, node, install_dir=install_dir, python=python
            )
        files[f"{host}/start.sh"] = host_start_script(topo, host, nodes)
        files[f"{host}/stop.sh"] = host_stop_script(nodes)
        files[f"{host}/wait-namesrv.sh"] = wait_namesrv_script(topo, host)
    return files
