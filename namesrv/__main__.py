"""``mqnamesrv [-c namesrv.properties] [-p]``: run a NameServer like ``mqnamesrv``.

* ``-c FILE`` reads RocketMQ namesrv property keys (``listenPort``, ``rocketmqHome``,
  ``kvConfigPath``, ...); unknown keys are reported and ignored.
* ``-p`` prints the effective config as ``key=value`` lines (secrets masked) and exits.

Prints ``The Name Server boot success. serializeType=JSON`` once listening, and stops cleanly on
SIGTERM or SIGINT (exit status 0); a service that fails while running stops the whole node
(reason logged, exit status 1; see cluster/node_main.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import trio

from ..cluster.config import ConfigError, load_config, read_properties
from ..cluster.logging import configure_logging, get_logger
from ..cluster.node_main import NodeSupervisor, serve_until_signal
from .config import NamesrvConfig
from .processor import format_config
from .server import NamesrvServer

BOOT_LINE = "The Name Server boot success. serializeType=JSON"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqnamesrv", description="RocketMQ-compatible NameServer")
    parser.add_argument(
        "-c", "--configFile", metavar="FILE", help="Name server config properties file"
    )
    parser.add_argument(
        "-p", "--printConfigItem", action="store_true", help="Print all config items and exit"
    )
    parser.add_argument(
        "-n", "--namesrvAddr", metavar="ADDR", help="accepted for mqnamesrv compatibility; unused"
    )
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error")
    return parser


def load(args: argparse.Namespace) -> NamesrvConfig:
    props: dict[str, str] = {}
    overrides = {}
    if args.configFile:
        props = read_properties(args.configFile)
        overrides["config_store_path"] = args.configFile
    loaded = load_config(NamesrvConfig, props, **overrides)
    if args.configFile:
        print(f"load config properties file OK, {args.configFile}", flush=True)
    if loaded.unknown:
        get_logger(node="namesrv").warning(
            "unknown config keys ignored", keys=sorted(loaded.unknown)
        )
    return loaded.config


async def _run(config: NamesrvConfig) -> int:
    supervisor = NodeSupervisor(node="namesrv", role="namesrv", hard_exit=os._exit)
    server = NamesrvServer(config, supervisor=supervisor)
    return await serve_until_signal(
        server.serve, lambda: BOOT_LINE, node="namesrv", role="namesrv", supervisor=supervisor
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        configure_logging(args.log_level)
    except ValueError as exc:
        print(f"mqnamesrv: {exc}", file=sys.stderr)
        return 2
    try:
        config = load(args)
    except ConfigError as exc:
        print(f"mqnamesrv: {exc}", file=sys.stderr)
        return 2
    if args.printConfigItem:
        sys.stdout.write(format_config(config))
        return 0
    try:
        return int(trio.run(_run, config))
    except (OSError, BaseExceptionGroup) as exc:
        error = _os_error(exc)
        if error is None:
            raise
        print(f"mqnamesrv: cannot start: {error}", file=sys.stderr)
        return 1


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError (e.g. port in use) inside ``exc``, however deep in exception groups."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _os_error(inner)
            if found is not None:
                return found
    return None


if __name__ == "__main__":
    sys.exit(main())
