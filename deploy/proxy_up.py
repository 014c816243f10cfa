"""``up --proxy [PORT]``: once the cluster is ready, start ``mqproxy`` (RocketMQ 5's gRPC
endpoint, rmq_cluster.proxy) for it in the background: pid in run/proxy.pid, log in
logs/proxy.log, plain text on 127.0.0.1. It exits by itself once ``down`` has stopped every node
of the cluster (``--until-down``). ``up`` returns when the proxy has printed its boot line."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

from ..proxy.config import DEFAULT_GRPC_PORT

PID_FILE: Final = "run/proxy.pid"
LOG_FILE: Final = "logs/proxy.log"
BOOT_PREFIX: Final = b"The Proxy boot success. grpcPort="
#: how long ``up`` waits for the proxy's boot line
PROXY_START_TIMEOUT_S: Final = 60.0
POLL_S: Final = 0.1


def add_up_flag(up: argparse.ArgumentParser) -> None:
    up.add_argument("--proxy", nargs="?", type=int, const=DEFAULT_GRPC_PORT, default=None,
                    metavar="PORT", help=f"also start mqproxy, the gRPC endpoint of RocketMQ 5 "
                                         f"clients (default port {DEFAULT_GRPC_PORT})")
    inner = up.get_default("func")

    def run(args: argparse.Namespace) -> int:
        status = int(inner(args))
        if status == 0 and args.proxy is not None:
            status = start_proxy(args)
        return status

    up.set_defaults(func=run)


def start_proxy(args: argparse.Namespace) -> int:
    from . import supervisor

    directory = (Path(args.dir) if args.dir else supervisor.default_dir(args.name)).resolve()
    state = supervisor.load_state(directory)
    (directory / "logs").mkdir(exist_ok=True)
    (directory / "run").mkdir(exist_ok=True)
    log_path = directory / LOG_FILE
    start = log_path.stat().st_size if log_path.exists() else 0
    cmd = [sys.executable, "-m", "rmq_cluster.proxy", "-n", state.topology.namesrv_addr,
           "--grpc-port", str(args.proxy), "--bind", "127.0.0.1",
           "--until-down", str(directory / "run")]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    (directory / PID_FILE).write_text(f"{proc.pid}\n")
    port = _wait_boot(proc, log_path, start)
    if port is None:
        proc.kill()
        proc.wait()
        print(f"rmq-cluster: mqproxy did not start; see {log_path}", file=sys.stderr)
        return 1
    endpoint = f"127.0.0.1:{port}"
    if args.json:
        print(json.dumps({"proxy": endpoint, "pid": proc.pid}))
    else:
        print(f"proxy: {endpoint} (gRPC, plain text; pid {proc.pid}, log {log_path})")
    return 0


def _wait_boot(proc: subprocess.Popen[bytes], log_path: Path, start: int) -> int | None:
    deadline = time.monotonic() + PROXY_START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        with open(log_path, "rb") as f:
            f.seek(start)
            for line in f.read().splitlines():
                if line.startswith(BOOT_PREFIX) and line[len(BOOT_PREFIX):].isdigit():
                    return int(line[len(BOOT_PREFIX):])
        time.sleep(POLL_S)
    return None
