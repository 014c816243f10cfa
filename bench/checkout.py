"""Run a benchmark against the checkout it lives in, not the installed ``rmq_cluster``.

Importing this module does it for the importing process (``import checkout`` right after
putting ``bench/`` on ``sys.path``, before any ``rmq_cluster`` import).

The repository's top-level folders are the ``rmq_cluster`` package only once installed
(pyproject.toml maps them). A benchmark that compares two checkouts (``--base-tree``, an A/B of a
``git worktree``) must import each tree's own code, in its own process and in the nodes it
spawns. ``use(root)`` builds ``<root>/.ns/rmq_cluster/<folder>`` (symlinks to the tree's
folders; gitignored) and puts it first on ``sys.path``; ``child_env(root)`` is the environment
that does the same for a child process (``python -m rmq_cluster.broker ...``). mypy checks the
package through the same directory (``mypy_path`` in pyproject.toml): run this file once first.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

#: the top-level folders pyproject.toml installs as ``rmq_cluster.<folder>``
FOLDERS = (
    "cluster", "client", "namesrv", "broker", "ha", "dledger", "store", "deploy", "chaos",
    "spark_jobs", "controller", "dashboard", "cli", "proxy",
)
#: the checkout this module belongs to
ROOT = Path(__file__).resolve().parents[1]


def namespace_dir(root: Path) -> Path:
    """``<root>/.ns``, holding ``rmq_cluster/<folder>`` -> ``<root>/<folder>``."""
    base = root / ".ns"
    pkg = base / "rmq_cluster"
    pkg.mkdir(parents=True, exist_ok=True)
    for folder in FOLDERS:
        link = pkg / folder
        if (root / folder).is_dir() and not link.exists():
            with contextlib.suppress(FileExistsError):  # another process made it first
                link.symlink_to(Path("..", "..", folder))
    return base


def use(root: Path) -> None:
    """Import ``rmq_cluster`` (and the tree's ``bench`` modules) from ``root`` in this process."""
    for entry in (str(root), str(root / "bench"), str(namespace_dir(root))):
        if entry in sys.path:
            sys.path.remove(entry)
        sys.path.insert(0, entry)


def child_env(root: Path) -> dict[str, str]:
    """The environment of a child process that imports ``rmq_cluster`` from ``root``."""
    env = dict(os.environ)
    parts = [str(namespace_dir(root)), str(root)]
    parts += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in parts]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


if __name__ == "__main__":  # python3 bench/checkout.py: make <root>/.ns (mypy reads it too)
    print(namespace_dir(ROOT))
else:
    use(ROOT)
