"""The ``_UNIQUE_KEY_QUERY`` signature trap (issue 21 part 6).

Java clients since 4.9.4 sign every extField of QUERY_MESSAGE, ``_UNIQUE_KEY_QUERY`` included,
when ``viewMessage``/``queryMessage`` looks a message up by its unique key; RocketMQ's broker
verifies without the flag and answers "no message". We accept either signature. The frame below
is the one Apache's rocketmq-client 4.9.8 sent (tests/compat/test_java_client.py), with a fixed
account."""

from __future__ import annotations

import base64
import hashlib
import hmac

import attrs
import pytest

from rmq_cluster.cluster.acl.rules import parse_plain_acl
from rmq_cluster.cluster.acl.signing import SigningKey, request_content, signature_holds
from rmq_cluster.cluster.acl.validator import check
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode

RULES = parse_plain_acl(
    """
accounts:
  - accessKey: rmqjava
    secretKey: s3cr3t-s3cr3t
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""
)
REMOTE = "127.0.0.1:50000"
FIELDS = {
    "topic": "T",
    "key": "FD000000000000000000000000000002516A30946E09869887720000",
    "maxNum": "32",
    "beginTimestamp": "0",
    "endTimestamp": "9223372036854775807",
    "_UNIQUE_KEY_QUERY": "true",
    "AccessKey": "rmqjava",
}


def java_sign(fields: dict[str, str], secret: str) -> str:
    """As AclClientRPCHook >= 4.9.4: every field but Signature, sorted by key, then the body."""
    content = "".join(fields[k] for k in sorted(fields)).encode()
    return base64.b64encode(hmac.digest(secret.encode(), content, hashlib.sha1)).decode()


def frame(signature: str, **extra: str) -> RemotingCommand:
    cmd = RemotingCommand.request(RequestCode.QUERY_MESSAGE)
    return attrs.evolve(cmd, ext_fields={**FIELDS, **extra, "Signature": signature})


def test_signature_over_the_unique_key_flag_is_accepted() -> None:
    assert check(RULES, frame(java_sign(FIELDS, "s3cr3t-s3cr3t")), REMOTE) is None


def test_signature_without_the_flag_is_accepted() -> None:
    without = {k: v for k, v in FIELDS.items() if k != "_UNIQUE_KEY_QUERY"}
    assert check(RULES, frame(java_sign(without, "s3cr3t-s3cr3t")), REMOTE) is None


@pytest.mark.parametrize("secret", ["wrong", "s3cr3t-s3cr3"])
def test_a_wrong_secret_still_fails_either_way(secret: str) -> None:
    denied = check(RULES, frame(java_sign(FIELDS, secret)), REMOTE)
    assert denied is not None and "Check signature failed" in str(denied)


def test_the_flag_counts_only_when_the_request_carries_it() -> None:
    key = SigningKey("s3cr3t-s3cr3t")
    without = {k: v for k, v in FIELDS.items() if k != "_UNIQUE_KEY_QUERY"}
    # a signature that covers a "true" the request does not carry must not verify
    forged = java_sign({**without, "_UNIQUE_KEY_QUERY": "true"}, "s3cr3t-s3cr3t")
    assert not signature_holds(key, without, b"", forged)
    assert signature_holds(key, FIELDS, b"", forged)
    assert not signature_holds(key, FIELDS, b"", None)
    assert request_content(FIELDS, b"x") != request_content(FIELDS, b"x", with_unique_flag=True)


def test_a_tampered_flag_value_fails() -> None:
    signed = java_sign(FIELDS, "s3cr3t-s3cr3t")
    denied = check(RULES, frame(signed, _UNIQUE_KEY_QUERY="false"), REMOTE)
    assert denied is not None
