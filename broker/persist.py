"""Config files of a broker (``<storePathRootDir>/config/*.json``): read, and write atomically.

Blocking; the shell calls these through ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Final

from ..store.paths import StoreRoot

TOPICS_FILE: Final = "topics.json"
CONSUMER_OFFSET_FILE: Final = "consumerOffset.json"
SUBSCRIPTION_GROUP_FILE: Final = "subscriptionGroup.json"
DELAY_OFFSET_FILE: Final = "delayOffset.json"


def config_dir(store_root: str) -> str:
    """``<store_root>/config``, through the store's path guard (a ``config`` symlink leading
    out of the store is refused with StorePathError)."""
    return StoreRoot(store_root).child("config")


def config_file(store_root: str, name: str) -> str:
    """``<store_root>/config/<name>``: ``name`` must be one file name, and the path (symlinks
    resolved) must stay inside the store root; StorePathError otherwise."""
    return StoreRoot(store_root).child("config", name)


def read_file(path: str) -> bytes:
    """The file's bytes; b"" if absent. Falls back to ``<path>.bak`` when the file is missing."""
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, "rb") as f:
                return f.read()
        except FileNotFoundError:
            continue
    return b""


def write_atomically(path: str, data: bytes) -> None:
    """temp file + fsync + rename + fsync of the directory; keeps the previous file as .bak (a
    hard link, so ``path`` exists at every moment: a reader or a crash never finds it missing)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(path):  # the previous file stays in place until the new one replaces it
        bak = path + ".bak"
        with contextlib.suppress(OSError):
            os.unlink(bak)
        with contextlib.suppress(OSError):
            os.link(path, bak)
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
