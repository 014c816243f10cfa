"""A non-editable ``pip install .`` into a fresh venv: one top-level import package
(``rmq_cluster``), and ``mqnamesrv`` / ``mqbroker`` / ``rmq-cluster up`` work from a directory that
holds ``store/``, ``broker/`` and ``cluster/`` packages of its own (RocketMQ's default store root is
``~/store``; an application may have its own ``cluster`` module)."""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.topology import resolve_profile

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def _shadowing_cwd(where: Path) -> Path:
    """A directory whose own ``store``/``broker``/``cluster`` packages fail loudly on import."""
    for name in ("store", "broker", "cluster", "deploy", "namesrv"):
        pkg = where / name
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(f"raise ImportError('the cwd {name} was imported')\n")
    (where / "store" / "commitlog").mkdir()  # and a RocketMQ store root's folders
    return where


def _run(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_fresh_venv_install_has_one_package_and_runs_from_any_directory(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    py = str(bin_dir / "python")
    done = _run([py, "-m", "pip", "install", "--quiet", str(ROOT)], tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    # the distribution's files: all under rmq_cluster/ (plus its metadata and scripts)
    listing = _run(
        [py, "-c", "import importlib.metadata as m, json;"
         "print(json.dumps([str(f) for f in m.files('rmq-cluster')]))"],
        tmp_path,
    )
    files = json.loads(listing.stdout)
    tops = {f.split("/")[0] for f in files if f.endswith(".py")}
    assert tops == {"rmq_cluster"}, tops

    cwd = _shadowing_cwd(tmp_path / "app")
    for script in ("mqnamesrv", "mqbroker"):
        done = _run([str(bin_dir / script), "-p"], cwd)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "listenPort=" in done.stdout

    base = supervisor.free_base_port(resolve_profile("single"))
    cluster_dir = tmp_path / "cluster"
    rmq = str(bin_dir / "rmq-cluster")
    try:
        up = _run([rmq, "up", "single", "--dir", str(cluster_dir), "--base-port", str(base)], cwd)
        assert up.returncode == 0, up.stderr[-3000:]
        demo = _run([rmq, "demo", "--dir", str(cluster_dir)], cwd)
        assert demo.returncode == 0, demo.stderr[-3000:]
    finally:
        down = _run([rmq, "down", "--purge", "--dir", str(cluster_dir)], cwd)
    assert down.returncode == 0, down.stderr[-2000:]
