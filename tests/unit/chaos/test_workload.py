"""Workload pieces that need no cluster: outcome classification, config checks, history file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmq_cluster.chaos.checker import check, parse_history
from rmq_cluster.chaos.workload import History, WorkloadConfig, _classify
from rmq_cluster.client import MQBrokerError, MQClientError, MQRemotingError, MQTimeoutError
from rmq_cluster.cluster.remoting.errors import RemotingClosedError, RemotingConnectError


def _caused(exc: Exception, cause: Exception) -> Exception:
    exc.__cause__ = cause
    return exc


def test_outcome_classification() -> None:
    # nothing reached the broker: a certain failure
    assert _classify(_caused(MQRemotingError("x"), RemotingConnectError("refused"))) == "fail"
    assert _classify(MQBrokerError(14, "SERVICE_NOT_AVAILABLE")) == "fail"
    assert _classify(MQClientError("no route")) == "fail"
    # the request may have been written: unknown
    assert _classify(MQTimeoutError("timeout")) == "unknown"
    assert _classify(_caused(MQRemotingError("x"), RemotingClosedError("reset"))) == "unknown"


def test_config_validation() -> None:
    WorkloadConfig().validate()
    assert WorkloadConfig(orderly_topic=None).all_topics == WorkloadConfig().topics
    for bad in ({"rate": 0}, {"producers": 0}, {"queues": 0}, {"keys": 0}):
        with pytest.raises(ValueError):
            WorkloadConfig(**bad).validate()  # type: ignore[arg-type]


async def test_history_file_is_what_the_checker_reads(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    h = History(path)
    h.record("invoke", id="a", topic="T")
    h.record("ok", id="a", status="SEND_OK", broker="b", queue=0, offset=0, phy=0)
    h.record("receive", id="a", broker="b", queue=0, offset=0)
    h.close()
    events = parse_history(path.read_text().splitlines())
    assert events == [json.loads(json.dumps(e)) for e in h.events]
    assert h.acked == 1 and h.received == 1
    assert check(events, mode="SYNC").passed
