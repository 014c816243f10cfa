"""The NameServer's KV config (RocketMQ's ``KVConfigManager``) and its file.

The table is pure state. The file is RocketMQ's ``kvConfig.json``:
``{"configTable":{"<namespace>":{"<key>":"<value>"}}}``. ``write_atomically`` and ``load_file`` are
blocking file calls; the shell runs them in a worker thread.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ..cluster.protocol import fastjson
from ..cluster.protocol.route import KVTable

#: Largest kvConfig.json we read at start.
MAX_KV_FILE_BYTES: Final = 64 * 1024 * 1024


class KVConfigError(ValueError):
    """kvConfig.json exists but does not hold RocketMQ's shape."""


class KVConfigManager:
    """namespace -> key -> value."""

    def __init__(self, table: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self._table: dict[str, dict[str, str]] = {
            ns: dict(kv) for ns, kv in (table or {}).items()
        }

    @property
    def table(self) -> dict[str, dict[str, str]]:
        return {ns: dict(kv) for ns, kv in self._table.items()}

    def put(self, namespace: str, key: str, value: str) -> None:
        self._table.setdefault(namespace, {})[key] = value

    def get(self, namespace: str, key: str) -> str | None:
        kv = self._table.get(namespace)
        return None if kv is None else kv.get(key)

    def delete(self, namespace: str, key: str) -> None:
        """Remove one key; the namespace stays, possibly empty (as in RocketMQ)."""
        kv = self._table.get(namespace)
        if kv is not None:
            kv.pop(key, None)

    def list_namespace(self, namespace: str) -> KVTable | None:
        kv = self._table.get(namespace)
        return None if kv is None else KVTable(dict(kv))

    def encode(self) -> bytes:
        return fastjson.dumps({"configTable": self._table})

    @classmethod
    def decode(cls, data: bytes | str) -> KVConfigManager:
        try:
            obj = fastjson.loads(data)
        except fastjson.FastjsonError as exc:
            raise KVConfigError(str(exc)) from None
        if not isinstance(obj, dict):
            raise KVConfigError("kvConfig.json is not a JSON object")
        table = obj.get("configTable") or {}
        if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
            raise KVConfigError("configTable must map namespaces to objects")
        return cls({str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items()})


def load_file(path: str | os.PathLike[str]) -> KVConfigManager:
    """Read kvConfig.json; a missing or empty file is an empty table."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = f.read(MAX_KV_FILE_BYTES + 1)
    except FileNotFoundError:
        return KVConfigManager()
    if len(data) > MAX_KV_FILE_BYTES:
        raise KVConfigError(f"{p} is larger than {MAX_KV_FILE_BYTES} bytes")
    if not data.strip():
        return KVConfigManager()
    return KVConfigManager.decode(data)


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so a reader sees the old or the new file, never a torn one:
    temp file in the same directory, fsync, rename, fsync the directory."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(p.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
