"""Request signatures of plain ACL (RocketMQ ``AclClientRPCHook`` / ``AclUtils`` / ``AclSigner``).

content   = the values of the request's extFields (``Signature`` and ``_UNIQUE_KEY_QUERY``
            excluded; ``AccessKey`` and ``SecurityToken`` included), in key order, concatenated
            as UTF-8, followed by the raw body;
Signature = Base64(HMAC-SHA1(secretKey, content)).

The client adds ``AccessKey`` (and ``SecurityToken`` when it has one) before signing, then
``Signature``. Pure: no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from typing import Final

import attrs

from rmq_cluster.cluster.remoting.codec import RemotingCommand

ACCESS_KEY: Final = "AccessKey"
SECRET_KEY: Final = "SecretKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
#: MixAll.UNIQUE_MSG_QUERY_FLAG: added by some query paths after signing; never signed.
UNIQUE_MSG_QUERY_FLAG: Final = "_UNIQUE_KEY_QUERY"
_UNSIGNED: Final = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})


def request_content(
    ext_fields: Mapping[str, str], body: bytes | bytearray | memoryview
) -> bytes:
    """The bytes a signature covers."""
    text = "".join([ext_fields[k] for k in sorted(ext_fields) if k not in _UNSIGNED])
    return text.encode("utf-8") + body


class SigningKey:
    """A secret with HMAC's key schedule done once: ``sign`` costs two SHA-1 passes."""

    __slots__ = ("_base",)

    def __init__(self, secret_key: str) -> None:
        self._base = hmac.new(secret_key.encode("utf-8"), digestmod=hashlib.sha1)

    def sign(self, content: bytes) -> str:
        h = self._base.copy()
        h.update(content)
        return base64.b64encode(h.digest()).decode("ascii")


def calc_signature(content: bytes, secret_key: str) -> str:
    digest = hmac.digest(secret_key.encode("utf-8"), content, "sha1")  # one-shot, in C
    return base64.b64encode(digest).decode("ascii")


@attrs.frozen
class Credentials:
    access_key: str
    secret_key: str = attrs.field(repr=False)
    security_token: str | None = None

    def sign(self, cmd: RemotingCommand) -> RemotingCommand:
        """``cmd`` with AccessKey (+ SecurityToken) and the Signature over them added."""
        ext = dict(cmd.ext_fields)
        ext.pop(SIGNATURE, None)
        ext[ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            ext[SECURITY_TOKEN] = self.security_token
        ext[SIGNATURE] = calc_signature(request_content(ext, cmd.body), self.secret_key)
        return attrs.evolve(cmd, ext_fields=ext)


def credentials_from(
    access_key: str | None, secret_key: str | None, security_token: str | None = None
) -> Credentials | None:
    """Credentials when both keys are given; None when neither; ValueError for just one."""
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise ValueError("ACL credentials need both accessKey and secretKey")
    return Credentials(access_key, secret_key, security_token)
