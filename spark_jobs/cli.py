"""``rmq-cluster replica-diff`` wiring: ``add_commands(subparsers)`` from cli/main.py.

The parser's ``func`` takes the parsed namespace and returns the exit code (0/1/2).
"""

from __future__ import annotations

import argparse
from typing import Any


def _run(args: argparse.Namespace) -> int:
    from .replica_diff import run_from_args

    return run_from_args(args)


def add_commands(subparsers: Any) -> None:
    from .replica_diff import add_arguments

    p = subparsers.add_parser(
        "replica-diff",
        help="audit every replica's store against its master, byte for byte (PySpark; "
             "exit 0/1/2)",
        description="Compare every replica's CommitLog/ConsumeQueue with its group's master.",
    )
    add_arguments(p)
    p.set_defaults(func=_run)
