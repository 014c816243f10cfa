"""One rule for broker, cluster and controller names (``cluster/protocol/names.py``): the
broker's config and the controller's replicated state accept and refuse the same names."""

from __future__ import annotations

import orjson
import pytest

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.cluster.config import ConfigError
from rmq_cluster.cluster.protocol.names import MAX_NODE_NAME_CHARS, node_name_problem
from rmq_cluster.controller.state import EventError, decode_event

SAMPLES = [
    "broker-a", "DefaultCluster", "b_1.x", "%weird|but-ok", "x" * MAX_NODE_NAME_CHARS,
    "", "x" * (MAX_NODE_NAME_CHARS + 1), "a b", "a;b", "a:b", "a=b", "a,b", "a/b", "a\\b",
    "tab\there", "bell\x07", "é-ü",
]


def _broker_accepts(name: str) -> bool:
    try:
        load_broker_config({"brokerName": name, "brokerClusterName": name,
                            "brokerIP1": "127.0.0.1"})
    except ConfigError:
        return False
    return True


def _controller_accepts(name: str) -> bool:
    body = {"t": "register", "cluster": name, "group": name, "id": 1, "addr": "127.0.0.1:10911"}
    try:
        decode_event(orjson.dumps(body))
    except EventError:
        return False
    return True


@pytest.mark.parametrize("name", SAMPLES)
def test_broker_config_and_controller_state_share_the_name_rule(name: str) -> None:
    valid = node_name_problem(name) is None
    assert _broker_accepts(name) is valid
    assert _controller_accepts(name) is valid


def test_the_rule_refuses_non_strings() -> None:
    assert node_name_problem(None) is not None
    assert node_name_problem(7) is not None
