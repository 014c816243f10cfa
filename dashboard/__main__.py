"""``python -m rmq_cluster.dashboard [options]``: the dashboard in a lean process (only what it
serves is imported; ``rmq-cluster dashboard`` execs this)."""

from __future__ import annotations

import argparse
import os
import sys

from ..cluster.logging import configure_logging, level_for_verbosity
from .cli import add_options, cmd_dashboard


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rmq-cluster dashboard")
    add_options(parser)
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("--log-format", choices=("json", "console"), default=None)
    args = parser.parse_args(argv)
    default = os.environ.get("RMQ_CLUSTER_LOG_LEVEL", "warning").strip().lower() or "warning"
    fmt = args.log_format
    configure_logging(level_for_verbosity(args.verbose, default),
                      json=None if fmt is None else fmt == "json")
    return cmd_dashboard(args, lean=True)


if __name__ == "__main__":
    sys.exit(main())
