"""``rmq-cluster dashboard`` and ``rmq-cluster up --dashboard``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from .settings import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ClusterRef,
    DashboardSettings,
)

#: Where ``up --dashboard`` keeps the dashboard's pid and log, inside the cluster directory.
PID_FILE = "run/dashboard.pid"
LOG_FILE = "logs/dashboard.log"


def _cluster_refs(args: argparse.Namespace) -> tuple[ClusterRef, ...]:
    """``-n`` given (repeatable; ``NAME=ADDR`` names it), else $NAMESRV_ADDR, else the local
    cluster's (``--dir``/``--name``)."""
    out = []
    for i, raw in enumerate(args.namesrv or []):
        name, sep, addr = raw.partition("=")
        out.append(ClusterRef(name if sep else f"cluster-{i}", addr if sep else raw))
    if out and args.controller:
        out[0] = ClusterRef(out[0].name, out[0].namesrv_addr, args.controller)
    if out:
        return tuple(out)
    env = os.environ.get("NAMESRV_ADDR")
    if env:
        return (ClusterRef("cluster-0", env),)
    from ..deploy import supervisor

    directory = Path(args.dir) if args.dir else supervisor.default_dir(args.name)
    state = supervisor.load_state(directory.resolve())
    controllers = state.topology.controller_addr if state.topology.controllers else None
    return (ClusterRef(state.name, state.topology.namesrv_addr, args.controller or controllers),)


def lean_argv(args: argparse.Namespace) -> list[str]:
    """The options of ``args`` again, for ``python -m rmq_cluster.dashboard``."""
    argv = [f"--namesrv={n}" for n in args.namesrv or []]
    argv += [f"--chaos-dir={d}" for d in args.chaos_dir or []]
    argv += [f"--host={args.host}", f"--port={args.port}", f"--name={args.name}"]
    argv += [f"--dir={args.dir}"] if args.dir else []
    argv += [f"--until-down={args.until_down}"] if args.until_down else []
    argv += [f"--controller={args.controller}"] if args.controller else []
    argv += ["--acl"] if args.acl else []
    argv += ["-v"] * int(getattr(args, "verbose", 0) or 0)
    fmt = getattr(args, "log_format", None)
    return argv + ([f"--log-format={fmt}"] if fmt else [])


def cmd_dashboard(args: argparse.Namespace, *, lean: bool = False) -> int:
    """Serve until SIGINT/SIGTERM. From ``rmq-cluster`` (``lean`` false) the process first
    execs ``python -m rmq_cluster.dashboard``: the whole CLI's imports would cost ~14 MB."""
    if not lean:
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-m", "rmq_cluster.dashboard",
                                  *lean_argv(args)])
    try:
        clusters = _cluster_refs(args)
    except Exception as exc:  # no cluster to show: say which and why
        sys.stderr.write(f"rmq-cluster dashboard: error: no NameServer address (-n): {exc}\n")
        return 1
    if not 0 <= args.port < 65536:
        sys.stderr.write("rmq-cluster dashboard: error: --port must be within [0, 65535]\n")
        return 2
    settings = DashboardSettings(clusters=clusters, host=args.host, port=args.port,
                                 acl=args.acl, chaos_dirs=tuple(args.chaos_dir or ()),
                                 cluster_secret=os.environ.get("RMQ_CLUSTER_SECRET") or None)
    from .server import serve

    async def main() -> None:
        async def until_stopped() -> None:
            async with trio.open_nursery() as n:
                n.start_soon(_until_signal, n.cancel_scope)
                if args.until_down:
                    n.start_soon(_until_cluster_down, Path(args.until_down), n.cancel_scope)

        async with trio.open_nursery() as n:
            binds = await n.start(serve, settings, until_stopped)
            for url in binds:
                print(f"dashboard: {url}/", flush=True)

    try:
        trio.run(main)
    except OSError as exc:
        sys.stderr.write(f"rmq-cluster dashboard: error: {exc}\n")
        return 1
    return 0


async def _until_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            scope.cancel()
            return


#: ``up --dashboard``: how often the background dashboard looks whether its cluster still runs.
CLUSTER_CHECK_S = 2.0


async def _until_cluster_down(directory: Path, scope: trio.CancelScope) -> None:
    from ..deploy import supervisor

    while True:
        await trio.sleep(CLUSTER_CHECK_S)
        try:
            alive = any(r.alive for r in supervisor.load_state(directory).records())
        except Exception:  # the cluster's state is gone (down --purge)
            alive = False
        if not alive:
            scope.cancel()
            return


def add_commands(sub: Any) -> None:
    p = sub.add_parser("dashboard", help="a web dashboard for one or more clusters",
                       description="Serves the dashboard (loopback by default) until Ctrl-C; "
                                   "prints its URL on stdout.")
    add_options(p)
    p.set_defaults(func=cmd_dashboard)


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namesrv", action="append", metavar="[NAME=]ADDR",
                   help="a cluster's NameServer address list (repeat for several clusters; "
                        "default $NAMESRV_ADDR or the local cluster's)")
    p.add_argument("--dir", help="the local cluster's directory (when no -n)")
    p.add_argument("--name", default="default", help="the local cluster's name (when no -n)")
    p.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (default "
                                                        "127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--acl", action="store_true",
                   help="every page needs a login with a cluster account; only admin "
                        "accounts act")
    p.add_argument("--chaos-dir", action="append", metavar="DIR",
                   help="where chaos runs are (repeatable; default the temp directory)")
    p.add_argument("--controller", metavar="ADDRS",
                   help="controller mode: the first cluster's controllers (h:p;h:p;h:p), asked "
                        "for SyncStateSets and epochs ($RMQ_CLUSTER_SECRET: the cluster secret "
                        "our controllers ask for)")
    p.add_argument("--until-down", metavar="DIR", help=argparse.SUPPRESS)


# ------------------------------------------------------------------ up --dashboard


def add_up_flag(up: argparse.ArgumentParser) -> None:
    """``up --dashboard [PORT]``: once the cluster is ready, start the dashboard for it in
    the background (pid in run/dashboard.pid, log in logs/dashboard.log); it exits by itself
    once ``down`` has stopped every node of the cluster."""
    up.add_argument("--dashboard", nargs="?", type=int, const=DEFAULT_PORT, default=None,
                    metavar="PORT", help=f"also start the dashboard (default port "
                                         f"{DEFAULT_PORT}) in the background")
    inner = up.get_default("func")

    def run(args: argparse.Namespace) -> int:
        status = int(inner(args))
        if status == 0 and args.dashboard is not None:
            status = _start_background(args)
        return status

    up.set_defaults(func=run)


def _start_background(args: argparse.Namespace) -> int:
    from ..deploy import supervisor

    directory = (Path(args.dir) if args.dir else supervisor.default_dir(args.name)).resolve()
    state = supervisor.load_state(directory)
    (directory / "logs").mkdir(exist_ok=True)
    (directory / "run").mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "rmq_cluster.dashboard", "-n",
           f"{state.name}={state.topology.namesrv_addr}", "--port", str(args.dashboard),
           "--until-down", str(directory)]
    if getattr(args, "acl", False):
        cmd.append("--acl")
    env = dict(os.environ)
    topo = state.topology
    if topo.controllers:
        cmd.append(f"--controller={topo.controller_addr}")
    if topo.cluster_secret:
        env["RMQ_CLUSTER_SECRET"] = topo.cluster_secret  # not on the command line
    with open(directory / LOG_FILE, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
    (directory / PID_FILE).write_text(f"{proc.pid}\n")
    url = f"http://127.0.0.1:{args.dashboard}/"
    if args.json:
        print(json.dumps({"dashboard": url, "pid": proc.pid}))
    else:
        print(f"dashboard: {url} (pid {proc.pid}, log {directory / LOG_FILE})")
    return 0
