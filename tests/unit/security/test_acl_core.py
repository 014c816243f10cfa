"""Plain ACL core: white-list patterns, permissions, plain_acl.yml, signatures, decisions."""

from __future__ import annotations

import base64
import hashlib
import hmac

import attrs
import pytest

from rmq_cluster.cluster.acl.address import AclConfigError, compile_pattern, peer_ip
from rmq_cluster.cluster.acl.permission import ANY, DENY, PUB, SUB, check_permission, parse_perm
from rmq_cluster.cluster.acl.rules import parse_plain_acl, render_plain_acl
from rmq_cluster.cluster.acl.signing import (
    Credentials,
    SigningKey,
    calc_signature,
    credentials_from,
    request_content,
)
from rmq_cluster.cluster.acl.validator import ACL_EXCEPTION, check, parse_request
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode

RULES = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: "12345678"
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("*", ["1.2.3.4", "127.0.0.1"], []),
        ("*.*.*.*", ["8.8.8.8"], []),
        ("", [], ["127.0.0.1"]),
        ("192.168.0.*", ["192.168.0.1", "192.168.0.255"], ["192.168.1.1", "10.0.0.1"]),
        ("192.168.*.*", ["192.168.7.9"], ["192.169.0.1"]),
        ("192.168.1.1-200", ["192.168.1.1", "192.168.1.200"], ["192.168.1.201", "192.168.2.5"]),
        ("192.168.10-20.*", ["192.168.15.99"], ["192.168.21.1"]),
        ("192.168.1.{1,2,3}", ["192.168.1.2"], ["192.168.1.4"]),
        ("10.0.0.1,10.0.0.9", ["10.0.0.9"], ["10.0.0.2"]),
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
        ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
    ],
)
def test_white_list_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    compiled = compile_pattern(pattern)
    for ip in yes:
        assert compiled.match(ip), (pattern, ip)
    for ip in no:
        assert not compiled.match(ip), (pattern, ip)


@pytest.mark.parametrize(
    "bad", ["192.168.1.300", "192.168.1.20-10", "192.168.-5.1", "not-an-ip", "1.2.3", "1.2.3.4.5"]
)
def test_bad_white_list_patterns_refused(bad: str) -> None:
    with pytest.raises(AclConfigError):
        compile_pattern(bad)


def test_peer_ip() -> None:
    assert peer_ip("127.0.0.1:5555") == "127.0.0.1"
    assert peer_ip("[::1]:5555") == "::1"


def test_permissions() -> None:
    assert parse_perm("PUB") == PUB and parse_perm(" SUB|PUB ") == PUB | SUB
    assert parse_perm(None) == DENY and parse_perm("nonsense") == DENY
    assert check_permission(PUB, PUB | SUB) and not check_permission(PUB, SUB)
    assert check_permission(ANY, SUB) and not check_permission(ANY, DENY)
    assert not check_permission(SUB, DENY | SUB)


def test_rules_parse() -> None:
    rules = parse_plain_acl(RULES)
    assert len(rules.global_white) == 2
    a = rules.accounts["RocketMQ"]
    assert a.secret_key == "12345678" and not a.admin
    assert a.resource_perms is not None
    assert a.resource_perms["topicB"] == PUB | SUB
    assert a.resource_perms["%RETRY%groupA"] == DENY
    assert rules.accounts["rocketmq2"].admin and rules.accounts["rocketmq2"].resource_perms is None


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("", "is not data"),
        ("accounts: [{accessKey: short, secretKey: 12345678}]", "longer than 6"),
        ("accounts: [{accessKey: longenough, secretKey: 123}]", "longer than 6"),
        ("accounts: [{accessKey: longenough, secretKey: 1234567, topicPerms: [x]}]",
         "Parse resource permission failed for topic:x"),
        ("globalWhiteRemoteAddresses: [1.2.3.999]", "netaddress"),
        ("accounts: {a: b}", "accounts must be a list"),
        ("a: [", "not YAML"),
    ],
)
def test_rules_errors(text: str, msg: str) -> None:
    with pytest.raises(AclConfigError, match=msg.replace("[", r"\[").replace("|", r"\|")):
        parse_plain_acl(text)


def test_render_round_trips() -> None:
    text = render_plain_acl(
        [{"accessKey": "adminKey1", "secretKey": "secret123", "admin": True}], ["10.0.0.*"]
    )
    rules = parse_plain_acl(text)
    assert rules.accounts["adminKey1"].admin


def test_signature_is_hmac_sha1_base64_over_sorted_values_and_body() -> None:
    ext = {"b": "2", "a": "1", "Signature": "ignored", "_UNIQUE_KEY_QUERY": "x", "AccessKey": "ak"}
    content = request_content(ext, b"BODY")
    assert content == b"ak12BODY"  # "AccessKey" < "a" < "b" (ASCII order)
    expected = base64.b64encode(hmac.new(b"sk", content, hashlib.sha1).digest()).decode()
    assert calc_signature(content, "sk") == expected


def test_signature_matches_rocketmq_vector() -> None:
    """RocketMQ's own AclSignerTest: calSignature("RocketMQ", "12345678")."""
    assert calc_signature(b"RocketMQ", "12345678") == "IUc8rrO/0gDch8CjObLQsW2rsiA="
    assert SigningKey("12345678").sign(b"RocketMQ") == "IUc8rrO/0gDch8CjObLQsW2rsiA="


def test_credentials_sign_adds_fields() -> None:
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"x")
    signed = Credentials("akakakak", "sksksksk", "tok").sign(cmd)
    ext = signed.ext_fields
    assert ext["AccessKey"] == "akakakak" and ext["SecurityToken"] == "tok"
    assert ext["Signature"] == calc_signature(request_content(ext, b"x"), "sksksksk")
    assert credentials_from(None, None) is None
    with pytest.raises(ValueError, match="both"):
        credentials_from("ak", None)


def _send(topic: str, creds: Credentials | None, **ext: str) -> RemotingCommand:
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": topic, **ext}, b"m")
    return creds.sign(cmd) if creds else cmd


def test_decisions() -> None:
    rules = parse_plain_acl(RULES)
    user = Credentials("RocketMQ", "12345678")
    here = "127.0.0.1:40000"
    assert check(rules, _send("topicB", user), here) is None
    denied = check(rules, _send("topicB", None), here)
    assert denied is not None and str(denied) == "No accessKey is configured"
    assert denied.remark == f"{ACL_EXCEPTION}: No accessKey is configured"
    wrong = check(rules, _send("topicB", Credentials("RocketMQ", "wrongwrong")), here)
    assert wrong is not None and str(wrong) == "Check signature failed for accessKey=RocketMQ"
    unknown = check(rules, _send("topicB", Credentials("nobody12", "12345678")), here)
    assert unknown is not None and str(unknown) == "No acl config for nobody12"
    no_perm = check(rules, _send("topicA", user), here)
    assert no_perm is not None and str(no_perm) == "No default permission for topic:topicA"
    default_deny = check(rules, _send("other", user), here)
    assert default_deny is not None and "topic:other" in str(default_deny)
    sub_only = check(rules, _send("topicC", user), here)
    assert sub_only is not None
    # the global white list lets anything through unsigned
    assert check(rules, _send("topicA", None), "192.168.0.77:1") is None
    # a tampered body breaks the signature
    tampered = attrs_evolve_body(_send("topicB", user), b"other")
    assert check(rules, tampered, here) is not None


def attrs_evolve_body(cmd: RemotingCommand, body: bytes) -> RemotingCommand:
    return attrs.evolve(cmd, body=body)


def test_admin_codes_need_admin() -> None:
    rules = parse_plain_acl(
        RULES
        + """
  - accessKey: adminUser
    secretKey: adminSecret
    admin: true
"""
    )
    create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T"})
    denied = check(rules, Credentials("RocketMQ", "12345678").sign(create), "127.0.0.1:1")
    assert denied is not None
    assert str(denied) == (
        "Need admin permission for request code=17, but accessKey=RocketMQ is not"
    )
    assert check(rules, Credentials("adminUser", "adminSecret").sign(create), "127.0.0.1:1") is None


def test_request_resources() -> None:
    pull = RemotingCommand.request(
        RequestCode.PULL_MESSAGE, {"topic": "T", "consumerGroup": "G"}
    )
    assert dict(parse_request(pull, "1.1.1.1:1").resources) == {"T": SUB, "%RETRY%G": SUB}
    retry = RemotingCommand.request(
        RequestCode.SEND_MESSAGE, {"topic": "%RETRY%G", "group": "G"}
    )
    assert dict(parse_request(retry, "1.1.1.1:1").resources) == {"%RETRY%G": SUB}
    back = RemotingCommand.request(
        RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "G", "originTopic": "T"}
    )
    assert dict(parse_request(back, "1.1.1.1:1").resources) == {"%RETRY%G": SUB, "T": PUB}
    hb_body = (
        b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":'
        b'[{"topic":"T1"},{"topic":"T2"}]}],"producerDataSet":[]}'
    )
    hb = RemotingCommand.request(RequestCode.HEART_BEAT, {}, hb_body)
    assert dict(parse_request(hb, "1.1.1.1:1").resources) == {
        "%RETRY%G": SUB, "T1": SUB, "T2": SUB,
    }
