"""``rmq-cluster``: the command line of the cluster in a box.

The entry module: it sits on top of every package and wires their commands together (cluster
lifecycle from ``deploy``, the client's ``produce``/``consume``/admin, ``chaos``, the Spark audit),
so that none of them imports another upward.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata

from rmq_cluster.cluster.logging import configure_logging


def _version() -> str:
    try:
        return metadata.version("rmq-cluster")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rmq-cluster",
        description=(
            "A RocketMQ 4.x-compatible cluster in a box: NameServers and Brokers as local "
            "processes that speak RocketMQ's remoting protocol and write its store layout."
        ),
    )
    parser.add_argument(
        "--version", action="version", version=f"rmq-cluster {_version()} (RocketMQ 4.9.7 protocol)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from rmq_cluster.deploy.commands import add_commands as add_cluster_commands

    add_cluster_commands(sub)
    from rmq_cluster.client.cli import add_commands as add_client_commands

    add_client_commands(sub)
    from rmq_cluster.client.mqadmin_cli import add_commands as add_mqadmin_commands

    add_mqadmin_commands(sub)
    from rmq_cluster.chaos.cli import add_chaos_command

    add_chaos_command(sub)
    from rmq_cluster.spark_jobs.cli import add_commands as add_spark_commands

    add_spark_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # stdout carries results only: logs go to stderr, warnings and up unless asked for more
    configure_logging(os.environ.get("RMQ_CLUSTER_LOG_LEVEL", "warning"))
    if args.command is None:
        parser.print_help()
        return 0
    func = getattr(args, "func", None)
    if func is not None:
        return int(func(args))
    parser.error(f"unknown command {args.command!r}")  # exits 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
