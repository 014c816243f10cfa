"""Request signatures of plain ACL (RocketMQ ``AclClientRPCHook`` / ``AclUtils`` / ``AclSigner``).

content   = the values of the request's extFields (``Signature`` and ``_UNIQUE_KEY_QUERY``
            excluded; ``AccessKey`` and ``SecurityToken`` included), in key order, concatenated
            as UTF-8, followed by the raw body;
Signature = Base64(HMAC-SHA1(secretKey, content)).

Verification accepts a signature computed either way round ``_UNIQUE_KEY_QUERY``: Java clients
since 4.9.4 sign every extField they send, that flag included (it rides on QUERY_MESSAGE when a
message is looked up by its unique key), while RocketMQ's broker verifies without it and so
answers those lookups under ACL with no message. ``signature_holds`` tries the content without
the flag first, then, only when the request carries it, with it.

The client adds ``AccessKey`` (and ``SecurityToken`` when it has one) before signing, then
``Signature``. Pure: no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import attrs

if TYPE_CHECKING:  # only a type here: Spark workers import this module without the codec
    from ..remoting.codec import RemotingCommand

ACCESS_KEY: Final = "AccessKey"
SECRET_KEY: Final = "SecretKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
#: MixAll.UNIQUE_MSG_QUERY_FLAG: added by some query paths after signing; never signed.
UNIQUE_MSG_QUERY_FLAG: Final = "_UNIQUE_KEY_QUERY"
_UNSIGNED: Final = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})
_SIGNATURE_ONLY: Final = frozenset({SIGNATURE})


def request_content(
    ext_fields: Mapping[str, str],
    body: bytes | bytearray | memoryview,
    *,
    with_unique_flag: bool = False,
) -> bytes:
    """The bytes a signature covers (``with_unique_flag``: as Java clients >= 4.9.4 sign)."""
    unsigned = _SIGNATURE_ONLY if with_unique_flag else _UNSIGNED
    text = "".join([ext_fields[k] for k in sorted(ext_fields) if k not in unsigned])
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


def signature_holds(
    signer: SigningKey,
    ext_fields: Mapping[str, str],
    body: bytes | bytearray | memoryview,
    signature: str | None,
) -> bool:
    """True when ``signature`` is ``signer``'s over the request, with ``_UNIQUE_KEY_QUERY``
    left out (RocketMQ's rule) or, when the request carries it, signed too (Java >= 4.9.4)."""
    if signature is None:
        return False
    given = signature.encode()
    if hmac.compare_digest(signer.sign(request_content(ext_fields, body)).encode(), given):
        return True
    return UNIQUE_MSG_QUERY_FLAG in ext_fields and hmac.compare_digest(
        signer.sign(request_content(ext_fields, body, with_unique_flag=True)).encode(), given
    )


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
