"""UPDATE_BROKER_CONFIG's pure part: what is accepted, and the config file rewritten in place."""

from __future__ import annotations

import re

import pytest

from rmq_cluster.broker.apache_keys import processors
from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.broker.config_update import (
    BlackListedKeyError,
    ConfigUpdateError,
    apply_update,
    current_values,
    parse_update_body,
    rewrite_properties,
)
from rmq_cluster.broker.processors.broker_config import config_properties
from rmq_cluster.cluster.config import parse_properties


def _settings():  # type: ignore[no-untyped-def]
    return load_broker_config({"brokerName": "b", "brokerIP1": "127.0.0.1"}).settings


def test_apply_update_changes_broker_and_store_keys() -> None:
    s = _settings()
    new = apply_update(s, {"brokerPermission": "4", "maxMessageSize": "1024",
                           "haAllowedSlaveAddresses": "10.0.0.0/24",
                           "haSendHeartbeatInterval": "5000"})  # (unchanged: accepted)
    assert new.broker.broker_permission == 4 and s.broker.broker_permission == 6
    assert new.store.max_message_size == 1024
    assert new.broker.broker_name == "b"  # the rest is kept
    assert current_values(new, ["brokerPermission", "maxMessageSize"]) == {
        "brokerPermission": "4", "maxMessageSize": "1024"}


@pytest.mark.parametrize(("values", "remark"), [
    ({"fooBar": "1", "brokerPermission": "4"}, "unknown broker config key(s): fooBar"),
    ({"listenPort": "1"}, "listenPort cannot change while the broker runs"),
    ({"brokerPermission": "x"}, "brokerPermission"),
    ({"brokerPermission": "99"}, "brokerPermission: 99 is not a permission"),
    # a key the running broker does not follow: refused, never accepted and ignored
    ({"haSendHeartbeatInterval": "1000"}, "haSendHeartbeatInterval cannot change while the "
                                          "broker runs (it needs a restart)"),
    ({"registerNameServerPeriod": "20000", "brokerPermission": "4"},
     "registerNameServerPeriod cannot change"),
    ({"transactionCheckInterval": "0"}, "transactionCheckInterval: 0 is out of range"),
])
def test_apply_update_refuses(values: dict[str, str], remark: str) -> None:
    with pytest.raises(ConfigUpdateError, match=re.escape(remark)):
        apply_update(_settings(), values)


def test_parse_update_body() -> None:
    assert parse_update_body(b"a=1\nb : 2\n") == {"a": "1", "b": "2"}
    with pytest.raises(ConfigUpdateError):
        parse_update_body(b"# nothing\n")
    with pytest.raises(ConfigUpdateError):
        parse_update_body(b"\xff=1")


def test_rewrite_properties_in_place() -> None:
    text = ("# comment\nbrokerPermission = 6\nkeep=1\nlong=a\\\n  b\\\n  c\n"
            "brokerPermission=7\n! other comment\n")
    out = rewrite_properties(text, {"brokerPermission": "4", "long": "z", "new": "v w"})
    assert out == ("# comment\nbrokerPermission=4\nkeep=1\nlong=z\n! other comment\n"
                   "new=v w\n")
    assert parse_properties(out) == {"brokerPermission": "4", "keep": "1", "long": "z",
                                     "new": "v w"}
    assert rewrite_properties("", {"a": "1"}) == "a=1\n"


def test_config_black_list_refuses_its_keys_with_no_permission() -> None:
    """``configBlackList`` (RocketMQ 5's default: itself and brokerConfigPath) is honoured for
    updates; a broker may list more keys, and those are refused too."""
    with pytest.raises(BlackListedKeyError, match="configBlackList"):
        apply_update(_settings(), {"configBlackList": ""})
    with pytest.raises(BlackListedKeyError, match="brokerConfigPath"):
        apply_update(_settings(), {"brokerConfigPath": "/tmp/x"})
    strict = load_broker_config({"brokerName": "b", "brokerIP1": "127.0.0.1",
                                 "configBlackList": "brokerPermission;configBlackList"})
    with pytest.raises(BlackListedKeyError, match="brokerPermission"):
        apply_update(strict.settings, {"brokerPermission": "4"})
    assert apply_update(_settings(), {"brokerPermission": "4"}).broker.broker_permission == 4


def test_apache_only_keys_are_answered_and_refused_as_inert() -> None:
    """Every Apache key we answer at its default (thread pools, Netty options) is refused by an
    update with a remark saying nothing here follows it, not as an unknown key."""
    props = config_properties(_settings())
    assert props["sendMessageThreadPoolNums"] == str(min(processors(), 4))
    assert props["serverWorkerThreads"] == "8" and props["useTLS"] == "false"
    assert props["configBlackList"] == "configBlackList;brokerConfigPath"
    assert props["slaveTimeout"] == "3000" and props["enableDLegerCommitLog"] == "false"
    with pytest.raises(ConfigUpdateError, match="sendMessageThreadPoolNums: Apache RocketMQ"):
        apply_update(_settings(), {"sendMessageThreadPoolNums": "8"})
