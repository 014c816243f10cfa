"""``mqproxy -n 127.0.0.1:9876 [--grpc-port 8081] [--tls-cert PEM --tls-key PEM]
[--acl plain_acl.yml [--acl-account KEY]] [--min-invisible-time-ms-for-recv MS]
[--max-invisible-time-ms MS] [--default-invisible-time-ms MS]
[--enable-proxy-auto-renew true|false]``: run RocketMQ 5's gRPC
endpoint in front of a cluster (Apache's ``mqproxy`` in cluster mode). TLS when given a
certificate (else plain-text HTTP/2); under ``--acl`` every call must be signed by an account
of that file (5.x credentials) and the proxy signs its own remoting calls with
``--acl-account`` (default: the file's first admin account). Secrets are read from the file,
never from the command line. The invisible-time flags set the limits of a receive's invisible
time (proxy/invisible.py).

Prints ``The Proxy boot success. grpcPort=PORT`` once listening; stops cleanly on SIGTERM or
SIGINT (exit 0); bad arguments exit 2."""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs
import trio

from ..cluster.acl.rules import AclConfigError
from ..cluster.logging import configure_logging
from ..cluster.node_main import NodeSupervisor, serve_until_signal
from .config import DEFAULT_GRPC_PORT, INVISIBLE_FLAGS, ProxyConfig
from .node import run_proxy

BOOT_LINE = "The Proxy boot success. grpcPort="


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqproxy",
                                     description="RocketMQ 5 gRPC proxy")
    parser.add_argument("-n", "--namesrvAddr", metavar="ADDR",
                        default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"),
                        help="NameServer addresses, host:port;host:port")
    parser.add_argument("--grpc-port", type=int, default=DEFAULT_GRPC_PORT,
                        help="gRPC port (0: any free port)")
    parser.add_argument("--bind", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error")
    parser.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate")
    parser.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    parser.add_argument("--acl", metavar="FILE",
                        help="plain_acl.yml: every call must carry a 5.x signature of one of "
                             "its accounts")
    parser.add_argument("--acl-account", metavar="ACCESS_KEY",
                        help="the account the proxy signs its calls to the cluster with "
                             "(default: the file's first admin account)")
    for flag, (_setting, default, text) in INVISIBLE_FLAGS.items():
        parser.add_argument(flag, type=int, default=None, metavar="MS",
                            help=f"{text} (default {default})")
    # tests: a shorter deadline for the TLS handshake and the HTTP/2 preface
    parser.add_argument("--handshake-timeout", type=float, default=None, help=argparse.SUPPRESS)
    # tests: shorter idle and partial-frame timeouts, fewer connections, another deadline for
    # the calls to the cluster (ProxyConfig's names)
    for flag, kind in (("--idle-timeout", float), ("--partial-frame-timeout", float),
                       ("--max-connections", int), ("--max-connections-per-address", int),
                       ("--call-timeout", float), ("--min-long-polling-ms", int),
                       ("--max-long-polling-ms", int), ("--renew-ahead-time-ms", int),
                       ("--renew-schedule-period-ms", int), ("--renew-max-time-ms", int),
                       ("--channel-expired-timeout-ms", int)):
        parser.add_argument(flag, type=kind, default=None, help=argparse.SUPPRESS)
    # tests: the renewals' invisible times (ms, comma-separated) in place of Apache's
    parser.add_argument("--renew-policy-ms", type=_ms_list, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--enable-proxy-auto-renew", choices=("true", "false"), default=None,
                        help="renew the invisible time of what a receive asking auto_renew "
                             "(a PushConsumer's) pops until it is acked (enableProxyAutoRenew, "
                             "default true)")
    # rmq-cluster up --proxy: exit once no node of the cluster (pid files in DIR) is alive
    parser.add_argument("--until-down", metavar="DIR", help=argparse.SUPPRESS)
    return parser


def _ms_list(text: str) -> tuple[int, ...]:
    values = tuple(int(v) for v in text.split(","))
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"bad milliseconds {text!r}")
    return values


#: pid files in a cluster's run/ folder that are not its nodes
NOT_NODES: Final = frozenset({"proxy.pid", "dashboard.pid"})
CLUSTER_CHECK_S: Final = 1.0


def _any_node_alive(run_dir: Path) -> bool:
    for pid_file in run_dir.glob("*.pid"):
        if pid_file.name in NOT_NODES:
            continue
        try:
            os.kill(int(pid_file.read_text().strip()), 0)
        except (ValueError, OSError):
            continue
        return True
    return False


async def _until_down(run_dir: Path, scope: trio.CancelScope) -> None:
    # other processes' pid files: nothing to wait on but the clock
    while _any_node_alive(run_dir):  # noqa: ASYNC110
        await trio.sleep(CLUSTER_CHECK_S)
    scope.cancel()


#: the hidden test flags (argparse dests) and the ProxyConfig settings they set
_OVERRIDES: Final = {
    "handshake_timeout": "handshake_timeout_s", "idle_timeout": "idle_timeout_s",
    "partial_frame_timeout": "partial_frame_timeout_s", "max_connections": "max_connections",
    "max_connections_per_address": "max_connections_per_address",
    "call_timeout": "call_timeout_s",
    "min_long_polling_ms": "grpc_client_consumer_min_long_polling_timeout_ms",
    "max_long_polling_ms": "grpc_client_consumer_max_long_polling_timeout_ms",
    "renew_ahead_time_ms": "renew_ahead_time_ms",
    "renew_schedule_period_ms": "renew_schedule_period_ms",
    "renew_max_time_ms": "renew_max_time_ms",
    "channel_expired_timeout_ms": "channel_expired_timeout_ms",
}


def _overrides(config: ProxyConfig, args: argparse.Namespace) -> ProxyConfig:
    """``config`` with the positive values of the hidden test flags given, and the auto-renew
    flags."""
    values = {setting: getattr(args, dest) for dest, setting in _OVERRIDES.items()
              if getattr(args, dest) is not None and getattr(args, dest) > 0}
    config = attrs.evolve(config, **values)
    if args.renew_policy_ms is not None:
        config = attrs.evolve(config, renew_policy_ms=args.renew_policy_ms)
    if args.enable_proxy_auto_renew is not None:
        config = attrs.evolve(config,
                              enable_proxy_auto_renew=args.enable_proxy_auto_renew == "true")
    return config


def _invisible_settings(config: ProxyConfig, args: argparse.Namespace) -> ProxyConfig:
    """``config`` with the invisible-time flags given; ValueError naming a flag out of range."""
    values = {}
    for flag, (setting, _default, _text) in INVISIBLE_FLAGS.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is None:
            continue
        if value < 0 or (value == 0 and setting == "default_invisible_time_ms"):
            raise ValueError(f"bad {flag} {value}")
        values[setting] = value
    return attrs.evolve(config, **values)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        configure_logging(args.log_level)
    except ValueError as exc:
        print(f"mqproxy: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.grpc_port <= 65535:
        print(f"mqproxy: bad --grpc-port {args.grpc_port}", file=sys.stderr)
        return 2
    if (args.tls_cert is None) != (args.tls_key is None):
        print("mqproxy: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    config = ProxyConfig(namesrv_addr=args.namesrvAddr, bind_address=args.bind,
                         grpc_port=args.grpc_port, tls_cert_file=args.tls_cert,
                         tls_key_file=args.tls_key, acl_file=args.acl,
                         acl_account=args.acl_account)
    config = _overrides(config, args)
    try:
        config = _invisible_settings(config, args)
    except ValueError as exc:
        print(f"mqproxy: {exc}", file=sys.stderr)
        return 2
    port: list[int] = []

    async def start(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            port.append(await nursery.start(run_proxy, config))
            if args.until_down:
                nursery.start_soon(_until_down, Path(args.until_down), nursery.cancel_scope)
            task_status.started()

    async def run() -> int:
        supervisor = NodeSupervisor(node="proxy", role="proxy", hard_exit=os._exit)
        return await serve_until_signal(
            start, lambda: f"{BOOT_LINE}{port[0]}", node="proxy", role="proxy",
            supervisor=supervisor,
        )

    try:
        return trio.run(run)
    except (OSError, ssl.SSLError, AclConfigError) as exc:
        # the port is taken, the address is not ours, the TLS or ACL files are unusable
        print(f"mqproxy: cannot start: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
