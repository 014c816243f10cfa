"""Properties files -> frozen attrs configs with RocketMQ key names."""

from __future__ import annotations

import enum
from pathlib import Path

import attrs
import pytest

from rmq_cluster.cluster.config import (
    ConfigError,
    format_properties,
    load_config,
    load_config_file,
    parse_properties,
    setting,
    to_properties,
)


class Role(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@attrs.frozen
class SampleConfig:
    broker_name: str = setting("brokerName", "broker-a")
    broker_ip1: str = setting("brokerIP1", "127.0.0.1")
    listen_port: int = setting("listenPort", 10911)
    broker_role: Role = setting("brokerRole", Role.ASYNC_MASTER)
    auto_create: bool = setting("autoCreateTopicEnable", True)
    ratio: float = setting("accessMessageInMemoryMaxRatio", 40.0)
    ha_master: str | None = setting("haMasterAddress", None)


BROKER_A = """\
# broker-a.properties as RocketMQ ships it
brokerClusterName = DefaultCluster
brokerName = broker-b
brokerId = 0
deleteWhen = 04
brokerRole = SYNC_MASTER
listenPort=10921
autoCreateTopicEnable: false
brokerIP1 127.0.0.2
haMasterAddress=
"""


def test_loads_rocketmq_keys_and_reports_unknown(tmp_path: Path) -> None:
    path = tmp_path / "broker-a.properties"
    path.write_text(BROKER_A)
    loaded = load_config_file(SampleConfig, path)
    cfg = loaded.config
    assert cfg.broker_name == "broker-b"
    assert cfg.listen_port == 10921
    assert cfg.broker_role is Role.SYNC_MASTER
    assert cfg.auto_create is False
    assert cfg.broker_ip1 == "127.0.0.2"
    assert cfg.ha_master == ""
    assert cfg.ratio == 40.0
    assert dict(loaded.unknown) == {
        "brokerClusterName": "DefaultCluster",
        "brokerId": "0",
        "deleteWhen": "04",
    }
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        cfg.listen_port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("listenPort", "ten", "listenPort: expected an integer"),
        ("autoCreateTopicEnable", "yes", "autoCreateTopicEnable: expected true or false"),
        ("brokerRole", "MASTER", "brokerRole: expected one of ASYNC_MASTER, SYNC_MASTER, SLAVE"),
        ("accessMessageInMemoryMaxRatio", "x", "accessMessageInMemoryMaxRatio: expected a number"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(SampleConfig, {key: value})


def test_overrides_win_and_round_trip_through_text() -> None:
    loaded = load_config(SampleConfig, {"listenPort": "1"}, listen_port=2)
    assert loaded.config.listen_port == 2
    text = format_properties(to_properties(loaded.config))
    again = load_config(SampleConfig, parse_properties(text)).config
    assert again == loaded.config


def test_properties_syntax() -> None:
    text = "a=1\n  b : two words \nc\\:d=e\\u0041\nlong=x\\\n    y\n! comment\n#x=y\nempty\n"
    assert parse_properties(text) == {
        "a": "1",
        "b": "two words",
        "c:d": "eA",
        "long": "xy",
        "empty": "",
    }


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config_file(SampleConfig, tmp_path / "nope.properties")
