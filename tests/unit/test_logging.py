"""Logging: JSON lines when not on a TTY, with bound context."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import structlog

from rmq_cluster.cluster.logging import configure_logging, get_logger


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()


def test_json_lines_off_a_tty() -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)
    log = get_logger(node="broker-a", role="master")
    log.info("registered", remote="127.0.0.1:9876")
    log.debug("not shown at info")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["event"] == "registered"
    assert record["node"] == "broker-a"
    assert record["role"] == "master"
    assert record["remote"] == "127.0.0.1:9876"
    assert record["level"] == "info"
    assert "timestamp" in record


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("loud")


def test_a_field_with_int_keys_is_logged_not_raised() -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)
    get_logger().info("consumer offsets reset", offsets={0: 12, 3: 40})
    record = json.loads(out.getvalue().splitlines()[0])
    assert record["offsets"] == {"0": 12, "3": 40}


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RMQ_CLUSTER_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env, check=False)


def test_an_unconfigured_process_logs_warnings_to_stderr_only() -> None:
    """An application that uses the client and never configures logging: no debug or info
    line anywhere, nothing on stdout (structlog's own default prints debug to stdout)."""
    done = _run(
        "import rmq_cluster.client\n"
        "from rmq_cluster.cluster.logging import get_logger\n"
        "log = get_logger(node='app')\n"
        "log.debug('quiet-debug'); log.info('quiet-info'); log.warning('loud-warning')\n"
        "print('result')\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "result\n"
    assert "loud-warning" in done.stderr
    assert "quiet-debug" not in done.stderr and "quiet-info" not in done.stderr


def test_the_cli_prints_results_on_stdout_and_logs_on_stderr() -> None:
    """A client command against nothing: a one-line error on stderr, a failure exit, and not a
    log line on stdout (``| jq`` must see results only)."""
    done = subprocess.run(
        [sys.executable, "-m", "rmq_cluster.cli", "topicRoute", "-n", "127.0.0.1:1",
         "-t", "T"],
        capture_output=True, text=True, timeout=60, check=False,
        env={k: v for k, v in os.environ.items() if k != "RMQ_CLUSTER_LOG_LEVEL"},
    )
    assert done.returncode != 0
    assert "[debug" not in done.stdout and '"level"' not in done.stdout
    assert "[debug" not in done.stderr and '"level": "debug"' not in done.stderr
