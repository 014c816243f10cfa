"""Hardening defaults: loopback binds, named input limits."""

from __future__ import annotations

import json
import struct

import pytest

from rmq_cluster.broker.config import DEFAULT_BIND_ADDRESS, BrokerConfig, load_broker_config
from rmq_cluster.broker.processors.pull import MAX_PULL_MSG_NUMS, MAX_SUSPEND_TIMEOUT_MS
from rmq_cluster.cluster.remoting.codec import (
    MAX_EXT_FIELDS,
    MAX_FRAME_BYTES,
    FrameDecoder,
    ProtocolError,
)
from rmq_cluster.cluster.remoting.connection_state import MAX_IN_FLIGHT_REQUESTS
from rmq_cluster.cluster.remoting.server import DEFAULT_IDLE_TIMEOUT_S
from rmq_cluster.namesrv.config import NamesrvConfig


def test_nodes_bind_loopback_unless_told() -> None:
    assert DEFAULT_BIND_ADDRESS == "127.0.0.1"
    assert BrokerConfig().bind_address == "127.0.0.1"
    assert NamesrvConfig().bind_address == "127.0.0.1"
    loaded = load_broker_config({"brokerName": "b"}).settings.broker
    assert loaded.bind_address == "127.0.0.1" and loaded.broker_ip1 == "127.0.0.1"
    wide = load_broker_config({"bindAddress": "0.0.0.0", "brokerIP1": "10.1.2.3"}).settings
    assert wide.broker.bind_address == "0.0.0.0" and wide.broker.broker_ip1 == "10.1.2.3"


def test_limits_are_named() -> None:
    assert MAX_FRAME_BYTES == 16 * 1024 * 1024
    assert MAX_PULL_MSG_NUMS == 32
    assert MAX_SUSPEND_TIMEOUT_MS == 120_000
    assert DEFAULT_IDLE_TIMEOUT_S == 120.0
    assert MAX_IN_FLIGHT_REQUESTS > 0 and MAX_EXT_FIELDS == 1024


def _frame(ext_count: int) -> bytes:
    header = json.dumps({"code": 34, "language": "JAVA", "version": 1, "opaque": 1, "flag": 0,
                         "extFields": {f"k{i}": "v" for i in range(ext_count)}}).encode()
    return struct.pack(">II", 4 + len(header), len(header)) + header


def test_ext_fields_cap() -> None:
    (cmd,) = FrameDecoder().feed(_frame(MAX_EXT_FIELDS))
    assert len(cmd.ext_fields) == MAX_EXT_FIELDS
    with pytest.raises(ProtocolError, match="extFields exceed"):
        FrameDecoder().feed(_frame(MAX_EXT_FIELDS + 1))
