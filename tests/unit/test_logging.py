"""Logging: JSON lines when not on a TTY, with bound context."""

from __future__ import annotations

import io
import json
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
