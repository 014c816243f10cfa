"""ACL credentials of a local cluster (``rmq-cluster up --acl``): generate, write, read back.

The cluster directory holds ``conf/plain_acl.yml`` with one admin account; the tools that
probe the cluster (``up``'s readiness checks, ``status``, ``demo``) sign with it. Blocking
file I/O, no trio.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Final

import yaml

from rmq_cluster.cluster.acl.rules import render_plain_acl
from rmq_cluster.cluster.acl.signing import Credentials

#: Where ``up --acl`` keeps the rules, relative to the cluster directory.
LOCAL_ACL_FILE: Final = "conf/plain_acl.yml"
#: Random bytes in generated keys (token_hex doubles them into characters).
ACCESS_KEY_BYTES: Final = 8
SECRET_KEY_BYTES: Final = 16


def acl_path(cluster_dir: Path) -> Path:
    return cluster_dir / LOCAL_ACL_FILE


def generate_admin() -> Credentials:
    return Credentials(
        "rmq" + secrets.token_hex(ACCESS_KEY_BYTES), secrets.token_hex(SECRET_KEY_BYTES)
    )


def write_local_acl(cluster_dir: Path, admin: Credentials) -> Path:
    """Write the rules (owner-only permissions) with ``admin`` as the one admin account."""
    path = acl_path(cluster_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render_plain_acl(
        [
            {
                "accessKey": admin.access_key,
                "secretKey": admin.secret_key,
                "whiteRemoteAddress": "",
                "admin": True,
                "defaultTopicPerm": "PUB|SUB",
                "defaultGroupPerm": "PUB|SUB",
            }
        ]
    )
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


def local_admin(cluster_dir: Path) -> Credentials | None:
    """The first admin account of the cluster's rules, or None when it has no ACL."""
    path = acl_path(cluster_dir)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    for account in (data or {}).get("accounts") or []:
        if isinstance(account, dict) and account.get("admin") is True:
            return Credentials(str(account["accessKey"]), str(account["secretKey"]))
    return None
