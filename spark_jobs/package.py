"""The job's Python archive for ``spark-submit --py-files``: everything the driver and the
workers import that a plain Spark installation lacks, in one zip.

The workers import ``rmq_cluster.spark_jobs`` (decoders, planning), the record layout module
``rmq_cluster.cluster.protocol.message`` with its ``crc`` (zlib-ng's crc32 where the worker has
it installed, else, imported from the zip, the standard library's), the remoting codec
(``cluster.remoting.codec``, its JSON through the standard library there; the driver also
``rmq_cluster.cluster.home``) and ``attrs`` (its ``attr`` half too): the stdlib and these, no
compiled wheel (no orjson, no zlib-ng).  ``rmq_cluster`` is a namespace package, so the zip
carries explicit directory entries: zipimport finds a namespace portion only through them.
"""

from __future__ import annotations

import importlib
import os
import zipfile
from typing import Final

#: (import name, files below it to take: None = every .py file)
CONTENTS: Final = (
    ("rmq_cluster.spark_jobs", None),
    ("rmq_cluster.cluster",
     ("__init__.py", "home.py", "protocol/__init__.py", "protocol/crc.py", "protocol/message.py",
      "remoting/__init__.py", "remoting/codec.py", "remoting/codes.py",
      "acl/signing.py")),  # acl/ without its __init__: the signing rule only
    ("attrs", None),
    ("attr", None),
)
_SKIP_EXT: Final = (".pyc", ".pyo")


def _package_dir(name: str) -> str:
    mod = importlib.import_module(name)
    paths = list(getattr(mod, "__path__", []))
    if len(paths) != 1:
        raise RuntimeError(f"cannot locate package {name} ({paths})")
    return str(paths[0])


def _members(name: str, only: tuple[str, ...] | None) -> list[tuple[str, str]]:
    """(source path, archive name) of every file to ship from package ``name``."""
    root = _package_dir(name)
    arc_root = name.replace(".", "/")
    out = []
    if only is not None:
        for rel in only:
            out.append((os.path.join(root, rel), f"{arc_root}/{rel}"))
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(_SKIP_EXT):
                continue
            if not (fn.endswith((".py", ".pyi")) or fn == "py.typed"):
                continue
            src = os.path.join(dirpath, fn)
            out.append((src, f"{arc_root}/{os.path.relpath(src, root).replace(os.sep, '/')}"))
    return out


def build_package(out_zip: str) -> list[str]:
    """Write ``out_zip``; returns its member names (directories end with ``/``)."""
    files: list[tuple[str, str]] = []
    for name, only in CONTENTS:
        files += _members(name, only)
    dirs: set[str] = set()
    for _, arc in files:
        parts = arc.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]) + "/")
    tmp = out_zip + ".tmp"
    names = []
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for d in sorted(dirs):
            z.writestr(zipfile.ZipInfo(d), b"")
            names.append(d)
        for src, arc in files:
            z.write(src, arc)
            names.append(arc)
    os.replace(tmp, out_zip)
    return names
