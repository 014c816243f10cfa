"""ACL credentials of a local cluster (``rmq-cluster up --acl``): generate, write, read back.

The cluster directory holds ``conf/plain_acl.yml`` with one admin account; the tools that
probe the cluster (``up``'s readiness checks, ``status``, ``demo``) sign with it, and its
NameServers and brokers enforce it (brokers sign their NameServer calls with it).
``write_private`` is how every file holding a secret is written: created owner-only
(``PRIVATE_FILE_MODE``) under a temporary name and renamed over the old one, so the secret is
never readable by group or others, not even for a moment. Blocking file I/O, no trio.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Final

import yaml

from .rules import render_plain_acl
from .signing import Credentials

#: Where ``up --acl`` keeps the rules, relative to the cluster directory.
LOCAL_ACL_FILE: Final = "conf/plain_acl.yml"
#: Files holding a secret: owner read/write only.
PRIVATE_FILE_MODE: Final = 0o600
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
    write_private(path, text)
    return path


def write_private(
    path: str | os.PathLike[str],
    data: bytes | str,
    *,
    mode: int = PRIVATE_FILE_MODE,
    durable: bool = True,
) -> None:
    """Write ``data`` to ``path`` atomically, the file created with ``mode`` (default 0600).

    A fresh temporary file beside ``path`` is created with the mode (never widened, never
    chmod-ed afterwards), written (fsync-ed when ``durable``) and renamed over ``path``; a
    reader sees the old file or the new one. The temporary file is removed on failure.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


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
