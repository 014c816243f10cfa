"""Controller-mode keys on a broker and on a controller: bad values are refused at load, naming
the key; ``mqcontroller`` exits 2 on them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.cluster.config import ConfigError, load_config
from rmq_cluster.cluster.protocol.controller_client import is_host_port, parse_controller_addrs
from rmq_cluster.controller.config import ControllerConfig

BASE = {"brokerName": "broker-a", "listenPort": "10911", "brokerId": "1",
        "enableControllerMode": "true", "controllerAddr": "127.0.0.1:9878;127.0.0.1:9888"}


def test_controller_mode_keys_load() -> None:
    loaded = load_broker_config({**BASE, "brokerHeartbeatInterval": "100"})
    cm = loaded.settings.controller_mode
    assert cm.enable and cm.addrs == ["127.0.0.1:9878", "127.0.0.1:9888"]
    assert cm.heartbeat_interval_ms == 100
    assert not loaded.unknown
    assert not load_broker_config({"brokerName": "b"}).settings.controller_mode.enable


@pytest.mark.parametrize(("change", "key"), [
    ({"controllerAddr": ""}, "controllerAddr"),
    ({"controllerAddr": "nohost"}, "controllerAddr"),
    ({"controllerAddr": "h:99999"}, "controllerAddr"),
    ({"brokerId": "0"}, "brokerId"),
    ({"listenPort": "0"}, "listenPort"),
    ({"brokerHeartbeatInterval": "0"}, "brokerHeartbeatInterval"),
    ({"haMaxTimeSlaveNotCatchup": "-1"}, "haMaxTimeSlaveNotCatchup"),
])
def test_bad_controller_mode_values_are_refused(change: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_broker_config({**BASE, **change})


@pytest.mark.parametrize(("props", "key"), [
    ({"controllerDLegerPeers": "n0-127.0.0.1"}, "controllerDLegerPeers"),
    ({"controllerDLegerPeers": "n0-h:1;n0-h:2"}, "controllerDLegerPeers"),
    ({"controllerDLegerSelfId": "n9"}, "controllerDLegerSelfId"),
    ({"listenPort": "70000"}, "listenPort"),
    ({"controllerTickMs": "0"}, "controllerTickMs"),
])
def test_bad_controller_values_are_refused(props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config(ControllerConfig, props).config.validate()


def test_mqcontroller_exits_2_naming_the_bad_key(tmp_path: Path) -> None:
    conf = tmp_path / "controller.properties"
    conf.write_text("controllerDLegerPeers=n0-127.0.0.1:1\ncontrollerDLegerSelfId=n5\n")
    done = subprocess.run([sys.executable, "-m", "rmq_cluster.controller", "-c", str(conf)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "controllerDLegerSelfId" in done.stderr


def test_addresses() -> None:
    assert parse_controller_addrs("a:1, b:2;;") == ["a:1", "b:2"]
    assert is_host_port("127.0.0.1:10911") and is_host_port("[::1]:1")
    for bad in ("", "h", "h:", ":1", "h:0", "h:65536", "a:1;b:2", "h :1"):
        assert not is_host_port(bad), bad
