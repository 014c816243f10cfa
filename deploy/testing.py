"""A real cluster for your own tests: ``rmq_cluster(profile)``.

As a context manager::

    from rmq_cluster.deploy.testing import rmq_cluster

    def test_my_app():
        with rmq_cluster("2m-noslave") as cluster:
            run_my_app(namesrv_addr=cluster.namesrv_addr)

or as pytest fixtures (``pytest_plugins = ["rmq_cluster.deploy.testing"]`` in your conftest.py)::

    def test_my_app(rmq_cluster_factory):
        cluster = rmq_cluster_factory("single")
        ...

The cluster runs as real processes (``rmq-cluster up`` in a subprocess) in a temporary
directory, on a base port whose whole plan was free a moment before, and is always stopped
(``down --purge``, then SIGKILL by pid for anything left) when the block or the test ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import attrs

from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.topology import resolve_profile

#: ``up`` in the subprocess waits this long for readiness; the subprocess gets a bit more.
UP_TIMEOUT_S: Final = 30.0
CLI_TIMEOUT_S: Final = 60.0
_PR_SET_CHILD_SUBREAPER: Final = 36


def become_subreaper() -> bool:
    """Make this process the reaper of orphaned descendants (Linux), so nodes started through
    a CLI subprocess are collected here instead of lingering as zombies under a PID 1 that
    does not reap. Returns whether it worked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def pid_running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (reaping it first when it is our child)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return False
    state = raw[raw.rfind(")") + 2 :].split()[0]
    return state not in ("Z", "X", "x")


def cli(*args: str, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run ``rmq-cluster ARGS`` (as ``python -m rmq_cluster.deploy``) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "rmq_cluster.deploy", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@attrs.define
class RunningCluster:
    """A cluster started by ``rmq_cluster``: where it is and how to reach it."""

    name: str
    profile: str
    dir: Path
    base_port: int
    namesrv_addr: str
    nodes: list[dict[str, Any]]
    ready_s: float

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``rmq-cluster ARGS --dir <this cluster>``."""
        return cli(*args, "--dir", str(self.dir))

    def status(self) -> dict[str, Any]:
        done = self.cli("status", "--json")
        if done.returncode != 0:
            raise RuntimeError(f"rmq-cluster status failed: {done.stderr.strip()}")
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def node(self, name: str) -> dict[str, Any]:
        for n in self.status()["nodes"]:
            if n["name"] == name:
                return n
        raise KeyError(name)

    def pids(self) -> dict[str, int]:
        """Every pid the cluster's state file has ever named for a node (now)."""
        try:
            state = supervisor.load_state(self.dir)
        except supervisor.SupervisorError:
            return {}
        return {r.name: r.pid for r in state.records() if r.pid is not None}

    def broker_addrs(self) -> dict[str, str]:
        return {n["name"]: n["addr"] for n in self.nodes if n["kind"] == "broker"}


def pids_running_from(conf_dir: str) -> list[int]:
    """Pids whose command line names a file in ``conf_dir`` (a node of that cluster, even one
    whose pid the state file no longer holds)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if any(a.startswith(conf_dir + os.sep) for a in args):
            found.append(int(entry))
    return found


def kill_leftovers(directory: Path, pids: dict[str, int]) -> None:
    """SIGKILL anything still ours: the state file's pids (checked to be our nodes) and the
    pids seen earlier (checked by command line, as the state file may be gone)."""
    try:
        state = supervisor.load_state(directory)
        for rec in state.records():
            rec.signal(signal.SIGKILL)
    except supervisor.SupervisorError:
        pass
    conf_dir = str(directory.resolve() / "conf")
    pids = {**pids, **{f"scan@{pid}": pid for pid in pids_running_from(conf_dir)}}
    for pid in pids.values():
        if pid_running(pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().decode("utf-8", "replace")
            except OSError:
                continue
            if conf_dir in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + supervisor.KILL_WAIT_S
    while time.monotonic() < deadline and any(pid_running(p) for p in pids.values()):
        time.sleep(supervisor.EXIT_POLL_INTERVAL_S)


@contextlib.contextmanager
def rmq_cluster(
    profile: str = "single",
    *,
    directory: str | os.PathLike[str] | None = None,
    base_port: int | None = None,
    purge: bool = True,
    reap: bool = True,
) -> Iterator[RunningCluster]:
    """Start ``profile`` as real processes, yield a RunningCluster, always stop it.

    ``directory``: where the cluster lives (default: a new temporary directory); with
    ``purge`` (the default) it is deleted afterwards, so pass a directory of its own.
    ``reap``: become the reaper of the nodes (see ``become_subreaper``)."""
    spec = resolve_profile(profile)
    if reap:
        become_subreaper()
    own_tmp = directory is None
    root = Path(tempfile.mkdtemp(prefix="rmq-cluster-")) if own_tmp else Path(directory or ".")
    cluster_dir = root / "cluster" if own_tmp else root
    port = base_port if base_port is not None else supervisor.free_base_port(spec)
    seen: dict[str, int] = {}
    try:
        done = cli(
            "up", profile, "--dir", str(cluster_dir), "--base-port", str(port),
            "--timeout", str(UP_TIMEOUT_S), "--json",
        )
        if done.returncode != 0:
            raise RuntimeError(f"rmq-cluster up {profile} failed: {done.stderr.strip()}")
        info = json.loads(done.stdout)
        cluster = RunningCluster(
            name=info["name"],
            profile=info["profile"],
            dir=Path(info["dir"]),
            base_port=port,
            namesrv_addr=info["namesrv_addr"],
            nodes=info["nodes"],
            ready_s=float(info["ready_s"]),
        )
        seen.update(cluster.pids())
        try:
            yield cluster
        finally:
            seen.update(cluster.pids())
    finally:
        args = ["down", "--dir", str(cluster_dir)] + (["--purge"] if purge else [])
        if (cluster_dir / supervisor.STATE_FILE).exists():
            cli(*args)
        kill_leftovers(cluster_dir, seen)
        if own_tmp and purge:
            shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- pytest plugin

try:
    import pytest
except ImportError:  # pytest is only needed for the fixtures
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def rmq_cluster_factory(tmp_path: Path) -> Iterator[Any]:
        """``factory(profile="single") -> RunningCluster``; every cluster is downed at the end."""
        with contextlib.ExitStack() as stack:
            count = 0

            def start(profile: str = "single") -> RunningCluster:
                nonlocal count
                count += 1
                where = tmp_path / f"rmq-cluster-{count}"
                return stack.enter_context(rmq_cluster(profile, directory=where))

            yield start
