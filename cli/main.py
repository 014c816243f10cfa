"""``rmq-cluster``: the command line of the cluster in a box.

The entry module: it sits on top of every package and wires their commands together (cluster
lifecycle from ``deploy``, the client's ``produce``/``consume``/admin, ``chaos``, the Spark audit),
so that none of them imports another upward.

Global options (before or after the command): ``-v``/``--verbose`` (info; ``-vv`` debug; the
default is ``$RMQ_CLUSTER_LOG_LEVEL`` or warning) and ``--log-format json|console`` (default:
console on a TTY, JSON lines otherwise). Logs always go to stderr; stdout carries results only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from ..cluster.logging import LOG_FORMATS, configure_logging, level_for_verbosity

#: Exit statuses every command keeps (shown in each command's ``--help``).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CODES_EPILOG = (
    "exit status:\n"
    "  0  success\n"
    "  1  failure: an error, an unreachable NameServer, a missing topic, fewer messages than\n"
    "     --count, a cluster or node that is not healthy (one line on stderr says which)\n"
    "  2  usage: bad or missing arguments"
)


def _version() -> str:
    try:
        return metadata.version("rmq-cluster")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _add_log_options(p: argparse.ArgumentParser, *, top: bool) -> None:
    """``-v`` and ``--log-format``; on a command's own parser they default to SUPPRESS, so
    ``rmq-cluster -v produce ...`` and ``rmq-cluster produce -v ...`` both work."""
    default: dict[str, object] = {} if top else {"default": argparse.SUPPRESS}
    # a command that uses -v itself keeps it (the global form still works)
    with contextlib.suppress(argparse.ArgumentError):
        p.add_argument("-v", "--verbose", action="count", **({"default": 0} if top else default),
                       help="log more on stderr: -v info, -vv debug (default: warning, or "
                            "$RMQ_CLUSTER_LOG_LEVEL)")
    with contextlib.suppress(argparse.ArgumentError):
        p.add_argument("--log-format", choices=LOG_FORMATS[1:],
                       **({"default": None} if top else default),
                       help="log lines on stderr as JSON or for a console (default: console "
                            "on a TTY, JSON otherwise)")


def _with_epilog(p: argparse.ArgumentParser) -> None:
    """Every command documents the exit statuses in its ``--help``."""
    if "exit status:" not in (p.epilog or ""):  # a command's own table stays the only one
        p.epilog = f"{p.epilog}\n\n{EXIT_CODES_EPILOG}" if p.epilog else EXIT_CODES_EPILOG
        if p.formatter_class is argparse.HelpFormatter:
            p.formatter_class = argparse.RawDescriptionHelpFormatter


def _deploy(sub: Any) -> None:
    from ..deploy.commands import add_commands

    add_commands(sub)


def _mqadmin(sub: Any) -> None:
    from ..client.mqadmin_cli import add_commands

    add_commands(sub)


def _client(sub: Any) -> None:
    from ..client.cli import add_commands

    add_commands(sub)


def _dledger(sub: Any) -> None:
    from ..deploy.dledger_cli import add_commands

    add_commands(sub)


def _chaos(sub: Any) -> None:
    from ..chaos.cli import add_chaos_command

    add_chaos_command(sub)


def _spark(sub: Any) -> None:
    from ..spark_jobs.cli import add_commands
    from ..spark_jobs.mq_export import add_commands as add_source_commands

    add_commands(sub)
    add_source_commands(sub)


def _dashboard(sub: Any) -> None:
    from ..dashboard.cli import add_commands

    add_commands(sub)


def _up_flags(up: argparse.ArgumentParser) -> None:
    """``up --dashboard`` and ``up --proxy``: flags other packages add to ``up``."""
    from ..dashboard.cli import add_up_flag
    from ..deploy.proxy_up import add_up_flag as add_proxy_flag

    add_up_flag(up)
    add_proxy_flag(up)


#: Each package's commands, most used first: a command line imports only the packages up to
#: the one that has its command (an ``rmq-cluster`` call costs the imports it needs, not every
#: package's: half a second of CPU per call).
COMMAND_GROUPS: tuple[Callable[[Any], None], ...] = (
    _deploy, _mqadmin, _client, _dledger, _chaos, _spark, _dashboard)


def command_word(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is not an option or a global option's
    value), or None (``--help``, ``--version``, nothing)."""
    args = iter(argv)
    for arg in args:
        if arg == "--log-format":
            next(args, None)
        elif arg in ("-h", "--help", "--version"):
            return None
        elif not arg.startswith("-"):
            return arg
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; given ``command``, only as much of it as that command needs
    (every package when no package has it: the usage error lists every command)."""
    parser = argparse.ArgumentParser(
        prog="rmq-cluster",
        description=(
            "A RocketMQ 4.x-compatible cluster in a box: NameServers and Brokers as local "
            "processes that speak RocketMQ's remoting protocol and write its store layout."
        ),
        epilog=EXIT_CODES_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"rmq-cluster {_version()} (RocketMQ 4.9.7 protocol)"
    )
    _add_log_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_group in COMMAND_GROUPS:
        add_group(sub)
        if command is not None and command in sub.choices:
            break
    if command in (None, "up"):  # (another command never parses ``up``'s flags)
        _up_flags(sub.choices["up"])
    seen: set[int] = set()
    stack = list(sub.choices.values())
    while stack:  # commands and their own subcommands (chaos run | check ...)
        p = stack.pop()
        if id(p) in seen:
            continue
        seen.add(id(p))
        _with_epilog(p)
        _add_log_options(p, top=False)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
    return parser


def _configure_logs(args: argparse.Namespace) -> None:
    default = os.environ.get("RMQ_CLUSTER_LOG_LEVEL", "warning").strip().lower() or "warning"
    try:
        level = level_for_verbosity(getattr(args, "verbose", 0) or 0, default)
        fmt = getattr(args, "log_format", None)
        configure_logging(level, json=None if fmt is None else fmt == "json")
    except (ValueError, KeyError):
        sys.stderr.write(
            f"rmq-cluster: error: RMQ_CLUSTER_LOG_LEVEL={default!r} is not a log level "
            "(debug, info, warning, error, critical)\n"
        )
        raise SystemExit(EXIT_USAGE) from None


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(command_word(words))
    args = parser.parse_args(words)
    # stdout carries results only: logs go to stderr, warnings and up unless asked for more
    _configure_logs(args)
    if args.command is None:
        parser.print_help()
        return EXIT_OK
    func = getattr(args, "func", None)
    if func is not None:
        return int(func(args))
    parser.error(f"unknown command {args.command!r}")  # exits 2
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
