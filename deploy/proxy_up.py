"""``up --proxy [PORT] [--proxy-plaintext] [--proxy-min-invisible-time-ms-for-recv MS ...]``:
once the cluster is ready, start ``mqproxy``
(RocketMQ 5's gRPC endpoint, rmq_cluster.proxy) for it in the background: pid in
run/proxy.pid, log in logs/proxy.log, on 127.0.0.1. It serves TLS with the cluster's
self-signed certificate (``conf/proxy-tls/proxy.crt``, its key ``proxy.key`` owner-only; made
on the first ``up --proxy`` and kept) unless ``--proxy-plaintext``; a cluster with ACL
(``up --acl``) has it check every call against ``conf/plain_acl.yml``. What was started is
written to ``run/proxy.json`` (address, TLS, certificate, pid) for ``status``. It exits by
itself once ``down`` has stopped every node of the cluster (``--until-down``). ``up`` returns
when the proxy has printed its boot line."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

from ..cluster.acl.local import acl_path
from ..proxy.config import DEFAULT_GRPC_PORT, INVISIBLE_FLAGS
from ..proxy.tls import CertFiles, ensure_certificate

PID_FILE: Final = "run/proxy.pid"
#: what ``up --proxy`` started, for ``status``
INFO_FILE: Final = "run/proxy.json"
LOG_FILE: Final = "logs/proxy.log"
BOOT_PREFIX: Final = b"The Proxy boot success. grpcPort="
#: how long ``up`` waits for the proxy's boot line
PROXY_START_TIMEOUT_S: Final = 60.0
POLL_S: Final = 0.1
#: ``status``: how long a TCP connect to the proxy may take before it counts as down
PROBE_TIMEOUT_S: Final = 1.0


def add_up_flag(up: argparse.ArgumentParser) -> None:
    up.add_argument("--proxy", nargs="?", type=int, const=DEFAULT_GRPC_PORT, default=None,
                    metavar="PORT", help=f"also start mqproxy, the gRPC endpoint of RocketMQ 5 "
                                         f"clients (default port {DEFAULT_GRPC_PORT}; TLS with "
                                         f"the cluster's self-signed certificate)")
    up.add_argument("--proxy-plaintext", action="store_true",
                    help="serve the proxy's gRPC port in plain text (no TLS)")
    for flag, (_setting, _default, text) in INVISIBLE_FLAGS.items():
        up.add_argument(f"--proxy-{flag[2:]}", type=int, default=None, metavar="MS",
                        help=f"mqproxy's {flag}: {text}")
    inner = up.get_default("func")

    def run(args: argparse.Namespace) -> int:
        status = int(inner(args))
        if status == 0 and args.proxy is not None:
            status = start_proxy(args)
        elif status == 0:  # this run has no proxy: forget one an earlier ``up`` started
            (_cluster_dir(args) / INFO_FILE).unlink(missing_ok=True)
        return status

    up.set_defaults(func=run)


def _command(args: argparse.Namespace, directory: Path, namesrv: str,
             tls: CertFiles | None) -> list[str]:
    cmd = [sys.executable, "-m", "rmq_cluster.proxy", "-n", namesrv,
           "--grpc-port", str(args.proxy), "--bind", "127.0.0.1",
           "--until-down", str(directory / "run")]
    if tls is not None:
        cmd += ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key)]
    if acl_path(directory).is_file():
        cmd += ["--acl", str(acl_path(directory))]
    for flag in INVISIBLE_FLAGS:  # (a Namespace made by hand may lack them)
        value = getattr(args, f"proxy_{flag[2:].replace('-', '_')}", None)
        if value is not None:
            cmd += [flag, str(value)]
    return cmd


def _cluster_dir(args: argparse.Namespace) -> Path:
    from . import supervisor

    return (Path(args.dir) if args.dir else supervisor.default_dir(args.name)).resolve()


def start_proxy(args: argparse.Namespace) -> int:
    from . import supervisor

    directory = _cluster_dir(args)
    state = supervisor.load_state(directory)
    (directory / "logs").mkdir(exist_ok=True)
    (directory / "run").mkdir(exist_ok=True)
    log_path = directory / LOG_FILE
    start = log_path.stat().st_size if log_path.exists() else 0
    plaintext = bool(getattr(args, "proxy_plaintext", False))
    tls = None if plaintext else ensure_certificate(directory)
    cert = None if tls is None else tls.cert
    cmd = _command(args, directory, state.topology.namesrv_addr, tls)
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
    info = {"proxy": f"127.0.0.1:{port}", "pid": proc.pid, "tls": cert is not None,
            "cert": None if cert is None else str(cert),
            "acl": acl_path(directory).is_file()}
    (directory / INFO_FILE).write_text(json.dumps(info) + "\n")
    if args.json:
        print(json.dumps(info))
    else:
        how = f"TLS, certificate {cert}" if cert is not None else "plain text"
        print(f"proxy: {info['proxy']} (gRPC, {how}; pid {proc.pid}, log {log_path})")
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


# --------------------------------------------------------------------------- status


def _pid_alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S):
            return True
    except (OSError, ValueError):
        return False


def proxy_rows(directory: Path) -> list[dict[str, Any]]:
    """The proxies ``up --proxy`` started for the cluster in ``directory`` (none or one):
    address, TLS or not, certificate, pid, and whether it is up (its pid alive and its port
    taking connections)."""
    try:
        info = json.loads((directory / INFO_FILE).read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(info, dict) or not isinstance(info.get("proxy"), str):
        return []
    up = _pid_alive(info.get("pid")) and _port_open(info["proxy"])
    return [{"name": "proxy", "address": info["proxy"], "tls": bool(info.get("tls")),
             "acl": bool(info.get("acl")), "cert": info.get("cert"), "pid": info.get("pid"),
             "state": "up" if up else "down"}]
