"""Which config keys hold secrets, and masking them wherever a config is shown.

The one place that decides: a key is secret when its name, ignoring case, ends in one of
``SECRET_KEY_SUFFIXES`` -- ``aclSecretKey``, ``secretKey``, ``securityToken``,
``sslPassword``, ``dbPasswd``, ``clientSecret`` ... Every config answer (GET_BROKER_CONFIG,
GET_NAMESRV_CONFIG), ``mqbroker -p`` / ``mqnamesrv -p``, ``rmq-cluster getBrokerConfig`` and
every log of config values show a secret's value as ``MASK`` (an unset, empty one stays empty:
that it is unset is no secret). ``aclAccessKey`` is an account name, not a secret, and is shown.

Files that hold a secret are written owner-only (``cluster.acl.local.write_private``).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

#: Lower-cased endings of secret key names.
SECRET_KEY_SUFFIXES: Final = ("secretkey", "secret", "password", "passwd", "token")
#: What a secret's value is shown as (fixed: not even its length shows).
MASK: Final = "******"


def is_secret_key(key: str) -> bool:
    return key.lower().endswith(SECRET_KEY_SUFFIXES)


def mask_value(key: str, value: str) -> str:
    return MASK if value and is_secret_key(key) else value


def mask_secrets(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` with every secret's value replaced by ``MASK`` (order kept)."""
    return {k: mask_value(k, v) for k, v in props.items()}


def holds_secret(props: Mapping[str, str]) -> bool:
    """Whether ``props`` has a secret key with a value (its file must be owner-only)."""
    return any(v and is_secret_key(k) for k, v in props.items())
