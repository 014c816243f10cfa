"""``mqcontroller -c controller.properties``: a standalone controller (RocketMQ's
``mqcontroller``).  Keys: controller/config.py.  Prints ``The controller[<selfId>, <ip:port>]
boot success.`` once serving; stops cleanly on SIGTERM/SIGINT (exit 0).  Exit 2: a bad config
value (named on stderr); 1: it could not start (port in use, ...) or a service failed."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import trio

from ..cluster.config import ConfigError, load_config, read_properties
from ..cluster.logging import configure_logging, get_logger
from ..cluster.node_main import NodeSupervisor, serve_until_signal
from .config import ControllerConfig
from .node import ControllerNode


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqcontroller", description="RocketMQ-style controller")
    parser.add_argument("-c", "--configFile", metavar="FILE", help="controller properties file")
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error")
    return parser


def load(path: str | None) -> ControllerConfig:
    props = read_properties(path) if path else {}
    loaded = load_config(ControllerConfig, props)
    if loaded.unknown:
        get_logger(node="controller").warning("unknown config keys ignored",
                                              keys=sorted(loaded.unknown))
    loaded.config.validate()
    return loaded.config


async def _run(config: ControllerConfig) -> int:
    name = f"controller-{config.self_id}"
    supervisor = NodeSupervisor(node=name, role="controller", hard_exit=os._exit)
    node = ControllerNode(config)

    def boot_line() -> str:
        host, port = node.address or ("?", 0)
        return f"The controller[{config.self_id}, {host}:{port}] boot success."

    return await serve_until_signal(node.serve, boot_line, node=name, role="controller",
                                    supervisor=supervisor)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        configure_logging(args.log_level)
        config = load(args.configFile)
    except (ConfigError, ValueError) as exc:
        print(f"mqcontroller: {exc}", file=sys.stderr)
        return 2
    try:
        return int(trio.run(_run, config))
    except (OSError, BaseExceptionGroup) as exc:
        inner: BaseException | None = exc
        while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
            inner = inner.exceptions[0]
        if not isinstance(inner, OSError):
            raise
        print(f"mqcontroller: cannot start: {inner}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
