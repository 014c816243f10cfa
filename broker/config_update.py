"""UPDATE_BROKER_CONFIG (25), the pure part: a properties body applied to a broker's settings,
and the broker's config file rewritten with the new values.

RocketMQ's ``Configuration.update`` copies every key of the body into whichever config object
has that field (silently skipping the others) and rewrites the config file with every value.
Here the update is all or nothing and says what is wrong:

* an unknown key (no BrokerConfig, MessageStoreConfig, HA or DLedger field has it) refuses the
  whole update, naming it;
* a value that does not parse or is out of its range (``broker.config.NUMERIC_RANGES``)
  refuses the update with the key named;
* apply or refuse, never accept and ignore: only ``LIVE_KEYS`` take effect in the running
  broker; a change of any other key (identity, ports, paths, role, the store's, HA's and
  DLedger's keys, the periods of loops started at boot, the remoting limits) is refused with
  a remark saying it needs a restart -- edit the file and restart. Such a key given with the
  value it already has changes nothing and is accepted.

The file is edited in place: the keys' lines get their new value (comments, order and other
keys stay as they are), new keys are appended. A file that holds a secret
(``cluster.acl.secret_keys``: ``aclSecretKey``, ...) is written owner-only (``rewritten_mode``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from ..cluster.acl.local import PRIVATE_FILE_MODE
from ..cluster.acl.secret_keys import holds_secret
from ..cluster.config import (
    ConfigError,
    config_keys,
    format_properties,
    load_config,
    parse_properties,
    to_properties,
)
from ..dledger.config import DLedgerConfig
from ..ha.config import HAConfig
from ..store.config import MessageStoreConfig
from .apache_keys import broker_config_keys
from .config import BrokerConfig, BrokerSettings, check_settings

#: The keys a running broker follows at once (all others change only with a restart):
#: read per request from the installed config, or pushed to their holder when it changes
#: (``processors.broker_config.install_settings``: the TBW102 template's queue counts, the
#: transaction check loop's interval, the HA service's allowed slaves).
LIVE_KEYS: Final = frozenset({
    # read per request
    "namesrvAddr", "brokerPermission", "autoCreateTopicEnable", "autoCreateSubscriptionGroup",
    "rejectTransactionMessage", "storeReplyMessageEnable", "longPollingEnable",
    "enablePropertyFilter", "shortPollingTimeMills", "registerBrokerTimeoutMills",
    "slaveReadEnable", "accessMessageInMemoryMaxRatio", "maxMessageSize",
    "metricsCacheSeconds", "metricsToken",
    # read per transaction check round
    "transactionTimeOut", "transactionCheckMax",
    # pushed to their holder
    "defaultTopicQueueNums", "transactionCheckInterval", "haAllowedSlaveAddresses",
})

#: Mode of a config file written anew that holds no secret (before the umask).
PLAIN_FILE_MODE: Final = 0o644

_PARTS: Final[tuple[tuple[str, type], ...]] = (
    ("broker", BrokerConfig),
    ("store", MessageStoreConfig),
    ("ha", HAConfig),
    ("dledger", DLedgerConfig),
)


class ConfigUpdateError(ValueError):
    """The update is refused; the message is the response's remark."""


class BlackListedKeyError(ConfigUpdateError):
    """The update names a key of ``configBlackList`` (answered NO_PERMISSION, as RocketMQ)."""


def black_listed(black_list: str, keys: Iterable[str]) -> list[str]:
    """The keys of ``keys`` that ``black_list`` (``configBlackList``: names separated by
    ``;``) forbids updating, sorted."""
    names = {name.strip() for name in black_list.split(";") if name.strip()}
    return sorted(k for k in keys if k in names)


def refuse_black_listed(black_list: str, keys: Iterable[str]) -> None:
    """BlackListedKeyError naming the keys ``black_list`` forbids updating, if any."""
    refused = black_listed(black_list, keys)
    if refused:
        raise BlackListedKeyError(
            f"{', '.join(refused)} cannot be updated by a request (configBlackList): "
            "edit the config file and restart"
        )


def parse_update_body(body: bytes) -> dict[str, str]:
    """The request body (``key=value`` lines, RocketMQ ``MixAll.properties2String``)."""
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigUpdateError(f"the body is not UTF-8 text: {exc}") from None
    values = parse_properties(text)
    if not values:
        raise ConfigUpdateError("no key=value line in the body")
    return values


def known_keys() -> frozenset[str]:
    keys: set[str] = set()
    for _name, cls in _PARTS:
        keys.update(config_keys(cls).values())
    return frozenset(keys)


def apply_update(settings: BrokerSettings, values: Mapping[str, str]) -> BrokerSettings:
    """``settings`` with ``values`` applied (ConfigUpdateError names what is refused)."""
    refuse_black_listed(settings.broker.config_black_list, values)
    known = known_keys()
    unknown = sorted(k for k in values if k not in known)
    inert = [k for k in unknown if k in broker_config_keys(1)]
    if inert:
        raise ConfigUpdateError(
            f"{', '.join(inert)}: Apache RocketMQ's setting(s), answered at Apache's default; "
            "nothing here follows them"
        )
    if unknown:
        raise ConfigUpdateError(f"unknown broker config key(s): {', '.join(unknown)}")
    changes: dict[str, Any] = {}
    for name, cls in _PARTS:
        mine = set(config_keys(cls).values())
        subset = {k: v for k, v in values.items() if k in mine}
        if not subset:
            continue
        current = getattr(settings, name)
        try:
            changes[name] = load_config(cls, {**to_properties(current), **subset}).config
        except ConfigError as exc:
            raise ConfigUpdateError(str(exc)) from None
    updated = check_updated(attrs.evolve(settings, **changes))
    _refuse_restart_only(settings, updated, values)
    return updated


def _refuse_restart_only(
    settings: BrokerSettings, updated: BrokerSettings, values: Mapping[str, str]
) -> None:
    """ConfigUpdateError when ``values`` change a key outside ``LIVE_KEYS``."""
    before = current_values(settings, list(values))
    after = current_values(updated, list(values))
    fixed = sorted(k for k in values if k not in LIVE_KEYS and before.get(k) != after.get(k))
    if fixed:
        raise ConfigUpdateError(
            f"{', '.join(fixed)} cannot change while the broker runs (it needs a restart): "
            "edit the broker's config file and restart it"
        )


def check_updated(settings: BrokerSettings) -> BrokerSettings:
    """The updated ``settings`` checked as the broker checks them at boot (addresses parsed in
    full, numbers in range, names usable, DLedger's rules): ConfigUpdateError naming the key
    otherwise, so nothing is installed or written."""
    try:
        check_settings(settings)
        settings.dledger.validate()
    except (ConfigError, ValueError) as exc:
        raise ConfigUpdateError(str(exc)) from None
    return settings


def current_values(settings: BrokerSettings, keys: list[str]) -> dict[str, str]:
    """The canonical text of ``keys`` in ``settings`` (what the config file gets)."""
    props: dict[str, str] = {}
    for name, _cls in reversed(_PARTS):
        props.update(to_properties(getattr(settings, name)))
    return {k: props[k] for k in keys if k in props}


def _continues(line: str) -> bool:
    stripped = line.rstrip("\\")
    return (len(line) - len(stripped)) % 2 == 1


def _entry(key: str, value: str) -> str:
    return format_properties({key: value}).rstrip("\n")


def rewrite_properties(text: str, updates: Mapping[str, str]) -> str:
    """``text`` (a .properties file) with each key of ``updates`` set: its first entry
    replaced in place, later duplicates dropped, missing keys appended."""
    out: list[str] = []
    done: set[str] = set()
    continuing = False  # the previous physical line ends in a continuation backslash
    dropping = False  # ... and belongs to an entry being replaced
    for raw in text.splitlines():
        line = raw.lstrip()
        if continuing:
            continuing = _continues(line)
            if not dropping:
                out.append(raw)
            continue
        dropping = False
        if not line or line[0] in "#!":
            out.append(raw)
            continue
        continuing = _continues(line)
        keys = list(parse_properties(line))
        key = keys[0] if keys else None
        if key is not None and key in updates:
            if key not in done:
                out.append(_entry(key, updates[key]))
                done.add(key)
            dropping = True
            continue
        out.append(raw)
    out.extend(_entry(k, v) for k, v in updates.items() if k not in done)
    return "\n".join(out) + "\n"


def rewritten_mode(text: str, current_mode: int | None) -> int:
    """The permission bits the rewritten config file ``text`` is created with: owner-only
    when it holds a secret, else the current file's (``PLAIN_FILE_MODE`` for a new file)."""
    if holds_secret(parse_properties(text)):
        return PRIVATE_FILE_MODE
    return PLAIN_FILE_MODE if current_mode is None else current_mode & 0o777
