"""The controller-mode master's lease (masterLeaseMills): when it expires, the fenced
permission, and the key's bounds (a lease must end before the controller elects elsewhere)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.broker.replicas_manager import fenced_permission, lease_expired
from rmq_cluster.cluster.config import ConfigError
from rmq_cluster.cluster.protocol.route import PermName

BASE = {"brokerName": "broker-a", "listenPort": "10911", "brokerId": "1",
        "enableControllerMode": "true", "controllerAddr": "127.0.0.1:9878"}


def test_the_lease_expires_after_its_length_and_never_when_off() -> None:
    assert not lease_expired(10.0, 10.5, 0.6)
    assert lease_expired(10.0, 10.7, 0.6)
    assert lease_expired(None, 0.0, 0.6)  # never renewed: not a master to trust
    assert not lease_expired(None, 99.0, 0.0)  # 0: no lease (RocketMQ 5)


@given(perm=st.integers(min_value=0, max_value=15), fenced=st.booleans())
def test_fencing_removes_write_only(perm: int, fenced: bool) -> None:
    out = fenced_permission(perm, fenced)
    assert PermName.is_writeable(out) == (PermName.is_writeable(perm) and not fenced)
    assert out | PermName.PERM_WRITE == perm | PermName.PERM_WRITE


def test_the_default_lease_ends_a_heartbeat_before_the_controllers_timeout() -> None:
    cm = load_broker_config(BASE).settings.controller_mode
    assert cm.lease_ms == cm.heartbeat_timeout_ms - cm.heartbeat_interval_ms == 800
    cm = load_broker_config({**BASE, "masterLeaseMills": "0"}).settings.controller_mode
    assert cm.lease_ms == 0
    cm = load_broker_config({**BASE, "masterLeaseMills": "900"}).settings.controller_mode
    assert cm.lease_ms == 900


@pytest.mark.parametrize("value", ["1000", "5000", "-2"])
def test_a_lease_outliving_the_controllers_patience_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="masterLeaseMills"):
        load_broker_config({**BASE, "masterLeaseMills": value})
