"""A real ``rmq-cluster up --acl`` cluster for security tests: a profile of the test's own
(a TOML file), and ``plain_acl.yml`` written before ``up`` with the admin account ``up``
signs with plus the test's accounts. Always stopped (``down --purge``, then SIGKILL by pid for
anything left), even when the test fails."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from rmq_cluster.cluster.acl.local import acl_path, write_private
from rmq_cluster.cluster.acl.rules import render_plain_acl
from rmq_cluster.cluster.acl.signing import Credentials
from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.testing import UP_TIMEOUT_S, become_subreaper, cli, kill_leftovers
from rmq_cluster.deploy.topology import HA_PORT_OFFSET, resolve_profile

ADMIN: Final = Credentials("secAdmin01", "secAdminSecret01")


@attrs.frozen
class AclCluster:
    dir: Path
    namesrv_addr: str
    #: ``rmq-cluster up --json``'s node rows (name, kind, role, addr, pid, log, ...)
    nodes: tuple[Mapping[str, Any], ...]

    def node(self, name: str) -> Mapping[str, Any]:
        for n in self.nodes:
            if n["name"] == name:
                return n
        raise KeyError(name)

    def addr(self, name: str) -> str:
        return str(self.node(name)["addr"])

    def ha_port(self, name: str) -> int:
        return int(self.addr(name).rsplit(":", 1)[1]) + HA_PORT_OFFSET

    def pid(self, name: str) -> int:
        return int(self.node(name)["pid"])

    def log(self, name: str) -> Path:
        return Path(self.node(name)["log"])


def _toml_value(value: str | int) -> str:
    return str(value) if isinstance(value, int) else json.dumps(value)


def _profile_text(profile: Mapping[str, str | int], broker_properties: Mapping[str, str]) -> str:
    lines = [f"{key} = {_toml_value(value)}" for key, value in profile.items()]
    lines.append("[broker_properties]")
    lines += [f"{key} = {json.dumps(value)}" for key, value in broker_properties.items()]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def acl_cluster(
    root: Path,
    *,
    profile: Mapping[str, str | int],
    broker_properties: Mapping[str, str] | None = None,
    accounts: Sequence[Mapping[str, Any]] = (),
) -> Iterator[AclCluster]:
    """``up <profile file> --acl`` in ``root``: ``profile``'s keys (``base = "single"``,
    ``slaves_per_master``, ...) with ``broker_properties``; ``accounts`` (plain_acl.yml
    entries) beside ``ADMIN``. Blocking."""
    become_subreaper()
    profile_file = root / "profile.toml"
    profile_file.write_text(_profile_text(profile, broker_properties or {}))
    cluster_dir = root / "cluster"
    admin = {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True,
             "defaultTopicPerm": "PUB|SUB", "defaultGroupPerm": "PUB|SUB"}
    write_private(acl_path(cluster_dir), render_plain_acl([admin, *accounts]))
    port = supervisor.free_base_port(resolve_profile(str(profile_file)))
    pids: dict[str, int] = {}
    try:
        up = cli("up", str(profile_file), "--acl", "--dir", str(cluster_dir), "--base-port",
                 str(port), "--timeout", str(UP_TIMEOUT_S), "--json")
        if up.returncode != 0:
            raise RuntimeError(f"rmq-cluster up failed: {up.stderr.strip()[-2000:]}")
        info = json.loads(up.stdout)
        cluster = AclCluster(cluster_dir, info["namesrv_addr"], tuple(info["nodes"]))
        pids = {n["name"]: int(n["pid"]) for n in cluster.nodes if n.get("pid")}
        yield cluster
    finally:
        if (cluster_dir / supervisor.STATE_FILE).exists():
            cli("down", "--dir", str(cluster_dir), "--purge")
        kill_leftovers(cluster_dir, pids)
