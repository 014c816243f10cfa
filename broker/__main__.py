"""``mqbroker -c broker-a.properties -n "ns1:9876;ns2:9876"``: like ``mqbroker``.

* ``-c FILE`` reads RocketMQ broker.conf keys (BrokerConfig, NettyServerConfig and
  MessageStoreConfig names: ``brokerClusterName``, ``brokerName``, ``brokerId``, ``brokerRole``,
  ``flushDiskType``, ``listenPort``, ``storePathRootDir``, ``namesrvAddr``, ``brokerIP1``,
  ``autoCreateTopicEnable``, ``defaultTopicQueueNums``, ...); unknown keys are reported and ignored.
* ``-n ADDRS`` overrides ``namesrvAddr`` (``;``-separated).
* ``-p`` prints the effective config as ``key=value`` lines (secrets masked) and exits.

Prints ``The broker[<name>, <ip:port>] boot success. serializeType=JSON and name server is
<addrs>`` once serving, and stops cleanly on SIGTERM or SIGINT (exit status 0). Exit status 2:
a bad config value (named on stderr); 1: it could not start, or a service failed while
running (the reason is logged; the whole broker stops, never half of it); 3: its stop took
longer than ``NODE_STOP_DEADLINE_S`` and it was ended at once (cluster/node_main.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import trio

from ..cluster.config import ConfigError, read_properties
from ..cluster.logging import configure_logging, get_logger
from ..cluster.node_main import NodeSupervisor, serve_until_signal
from ..store.message_store import StoreLockedError
from .config import BrokerSettings, load_broker_config
from .node import BrokerNode
from .processors.broker_config import format_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqbroker", description="RocketMQ-compatible broker")
    parser.add_argument("-c", "--configFile", metavar="FILE", help="Broker config properties file")
    parser.add_argument("-n", "--namesrvAddr", metavar="ADDRS", help="Name server address list")
    parser.add_argument(
        "-p", "--printConfigItem", action="store_true", help="Print all config items and exit"
    )
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error")
    return parser


def load(args: argparse.Namespace) -> BrokerSettings:
    props: dict[str, str] = {}
    if args.configFile:
        props = read_properties(args.configFile)
    loaded = load_broker_config(props, namesrv_addr=args.namesrvAddr)
    if args.configFile:
        print(f"load config properties file OK, {args.configFile}", flush=True)
    if loaded.unknown:
        get_logger(node="broker").warning(
            "unknown config keys ignored", keys=sorted(loaded.unknown)
        )
    return loaded.settings


def boot_line(broker: BrokerNode) -> str:
    bcfg = broker.bcfg
    return (
        f"The broker[{bcfg.broker_name}, {broker.broker_addr}] boot success. "
        f"serializeType=JSON and name server is {bcfg.namesrv_addr}"
    )


async def _run(settings: BrokerSettings, config_file: str | None = None) -> int:
    node = settings.broker.broker_name
    supervisor = NodeSupervisor(node=node, role="broker", hard_exit=os._exit)
    broker = BrokerNode(settings, config_file=config_file, supervisor=supervisor)
    return await serve_until_signal(
        broker.run,
        lambda: boot_line(broker),
        node=node,
        role="broker",
        supervisor=supervisor,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        configure_logging(args.log_level)
    except ValueError as exc:
        print(f"mqbroker: {exc}", file=sys.stderr)
        return 2
    try:
        settings = load(args)
    except ConfigError as exc:
        print(f"mqbroker: {exc}", file=sys.stderr)
        return 2
    if args.printConfigItem:
        sys.stdout.write(format_config(settings))  # secrets masked
        return 0
    try:
        return int(trio.run(_run, settings, args.configFile))
    except (OSError, StoreLockedError, BaseExceptionGroup) as exc:
        error = _startup_error(exc)
        if error is None:
            raise
        print(f"mqbroker: cannot start: {error}", file=sys.stderr)
        return 1


def _startup_error(exc: BaseException) -> BaseException | None:
    """The OSError (port in use, ...) or StoreLockedError inside ``exc``, however deep."""
    if isinstance(exc, (OSError, StoreLockedError)):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _startup_error(inner)
            if found is not None:
                return found
    return None


if __name__ == "__main__":
    sys.exit(main())
