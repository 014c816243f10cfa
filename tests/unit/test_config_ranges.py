"""Every numeric config key of every node has a bounded range in its node's one table, and
every default lies in it (issue 31, item 10)."""

from __future__ import annotations

import math

import attrs
import pytest

from rmq_cluster.broker import config as broker_config
from rmq_cluster.broker.config import BrokerConfig, load_broker_config
from rmq_cluster.broker.config_update import LIVE_KEYS, known_keys
from rmq_cluster.broker.controller_mode import ControllerModeConfig
from rmq_cluster.cluster.config import ConfigError, check_range, numeric_keys
from rmq_cluster.controller import config as controller_config
from rmq_cluster.dledger.config import DLedgerConfig
from rmq_cluster.ha.config import HAConfig
from rmq_cluster.namesrv import config as namesrv_config
from rmq_cluster.store.config import MessageStoreConfig

BROKER_PARTS = (BrokerConfig, MessageStoreConfig, HAConfig, DLedgerConfig, ControllerModeConfig)
TABLES = [
    (broker_config.NUMERIC_RANGES, BROKER_PARTS),
    (namesrv_config.NUMERIC_RANGES, (namesrv_config.NamesrvConfig,)),
    (controller_config.NUMERIC_RANGES, (controller_config.ControllerConfig,)),
]


@pytest.mark.parametrize(("table", "classes"), TABLES)
def test_every_numeric_key_has_a_bounded_range(table, classes) -> None:  # type: ignore[no-untyped-def]
    keys = {k for cls in classes for k in numeric_keys(cls)}
    assert sorted(keys - set(table)) == []  # a new numeric key needs its range here
    assert sorted(set(table) - keys) == []  # ... and a removed one leaves no stale row
    for key, (low, high) in table.items():
        assert math.isfinite(low) and math.isfinite(high) and low <= high, key


@pytest.mark.parametrize(("table", "classes"), TABLES)
def test_every_default_is_in_range(table, classes) -> None:  # type: ignore[no-untyped-def]
    for cls in classes:
        defaults = cls()
        for field in attrs.fields(cls):
            key = field.metadata.get("key")
            if key in table:
                check_range(key, getattr(defaults, field.name), *table[key])


def test_nan_and_infinity_are_out_of_every_range() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ConfigError, match="accessMessageInMemoryMaxRatio"):
            check_range("accessMessageInMemoryMaxRatio", bad, 0, 100)
    with pytest.raises(ConfigError, match="serverPartialFrameTimeoutSeconds"):
        load_broker_config({"serverPartialFrameTimeoutSeconds": "inf"})


def test_live_keys_are_broker_keys() -> None:
    assert known_keys() >= LIVE_KEYS


def test_namesrv_live_keys_are_namesrv_keys() -> None:
    keys = set(namesrv_config.config_keys(namesrv_config.NamesrvConfig).values())
    assert keys >= namesrv_config.LIVE_KEYS
    assert not namesrv_config.LIVE_KEYS & namesrv_config.CONFIG_BLACK_LIST
