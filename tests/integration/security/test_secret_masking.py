"""Secrets never leave a node, and never sit in a file others can read (issue 19 item 2).

* GET_BROKER_CONFIG / GET_NAMESRV_CONFIG under ACL: admin accounts only (others get
  RocketMQ's ``AclException`` answer); the admin's answer masks every secret
  (``cluster.acl.secret_keys``), the broker's own ``aclSecretKey`` included.
* UPDATE_BROKER_CONFIG rewrites the broker's ``-c`` file owner-only once it holds a secret.
* ``mqbroker -p`` masks; ``rmq-cluster getBrokerConfig`` masks.
* ``rmq-cluster up --acl``: every file the cluster wrote that holds the admin's secret is
  mode 0600 (``os.stat``), and no log holds it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.broker.processors.broker_config import _rewrite_file
from rmq_cluster.client.admin import Admin
from rmq_cluster.client.errors import MQBrokerError
from rmq_cluster.cluster.acl.local import local_admin
from rmq_cluster.cluster.acl.secret_keys import MASK, is_secret_key, mask_secrets
from rmq_cluster.cluster.acl.signing import Credentials
from rmq_cluster.cluster.acl.validator import ACL_EXCEPTION
from rmq_cluster.cluster.config import format_properties, parse_properties
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.testing import UP_TIMEOUT_S, become_subreaper, cli, kill_leftovers
from rmq_cluster.deploy.topology import resolve_profile
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer
from tests.integration.client.conftest import WAIT_S, broker_settings

ADMIN = Credentials("maskAdmin01", "maskAdminSecret-7f3a9c")
USER = Credentials("maskUser001", "maskUserSecret-2b8e41")
RULES = f"""
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
  - accessKey: {USER.access_key}
    secretKey: {USER.secret_key}
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""


def private(path: Path) -> bool:
    return stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0


def need_admin(code: int) -> str:
    return (f"{ACL_EXCEPTION}: Need admin permission for request code={code}, "
            f"but accessKey={USER.access_key} is not")


# --------------------------------------------------------------------------- the rule


def test_secret_keys_are_named_once() -> None:
    for key in ("aclSecretKey", "secretKey", "SecretKey", "securityToken", "sslPassword",
                "dbPasswd", "clientSecret"):
        assert is_secret_key(key), key
    for key in ("aclAccessKey", "aclEnable", "aclFile", "brokerName", "listenPort",
                "tokenBucketSize"):
        assert not is_secret_key(key), key


@given(st.dictionaries(
    st.sampled_from(["aclSecretKey", "secretKey", "fooPassword", "aclAccessKey", "brokerName",
                     "x", "authToken"]),
    st.text(min_size=0, max_size=20),
))
def test_masking_hides_every_secret_value_and_keeps_the_rest(props: dict[str, str]) -> None:
    shown = mask_secrets(props)
    assert list(shown) == list(props)
    for key, value in props.items():
        if is_secret_key(key) and value:
            assert shown[key] == MASK
        else:
            assert shown[key] == value


# --------------------------------------------------------------------------- answers


async def test_config_reads_are_admin_only_and_masked(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(RULES)
    conf = tmp_path / "broker-a.properties"
    async with trio.open_nursery() as nursery, open_remoting_client() as rc:
        ns = NamesrvServer(NamesrvConfig(
            kv_config_path=str(tmp_path / "ns" / "kv.json"),
            config_store_path=str(tmp_path / "ns" / "ns.properties"),
            bind_address="127.0.0.1", listen_port=0, acl_enable=True, acl_file=str(acl_file),
        ))
        host, port = await nursery.start(ns.serve)
        ns_addr = f"{host}:{port}"
        props = {"aclEnable": "true", "aclFile": str(acl_file),
                 "aclAccessKey": ADMIN.access_key, "aclSecretKey": ADMIN.secret_key}
        # the -c file as rmq-cluster writes it: owner-only, holding the secret
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, format_properties({"brokerName": "broker-a", **props}).encode())
        os.close(fd)
        broker = BrokerNode(
            broker_settings(tmp_path / "b", ns_addr, **props), config_file=str(conf)
        )
        await nursery.start(broker.run)
        with trio.fail_after(WAIT_S):
            await ns.wait_until(lambda s: "broker-a" in s.routes.broker_addr_table)
        addr = broker.broker_addr

        for target, code in ((addr, RequestCode.GET_BROKER_CONFIG),
                             (ns_addr, RequestCode.GET_NAMESRV_CONFIG)):
            request = RemotingCommand.request(code)
            resp = await rc.invoke(target, request)
            assert (resp.code, resp.remark) == (
                ResponseCode.SYSTEM_ERROR, f"{ACL_EXCEPTION}: No accessKey is configured"
            )
            resp = await rc.invoke(target, USER.sign(request))
            assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, need_admin(code))
            assert USER.secret_key.encode() not in bytes(resp.body)
            resp = await rc.invoke(target, ADMIN.sign(request))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            raw = bytes(resp.body) + repr(resp.ext_fields).encode() + (resp.remark or "").encode()
            assert ADMIN.secret_key.encode() not in raw
            shown = parse_properties(bytes(resp.body).decode())
            assert all(v in ("", MASK) for k, v in shown.items() if is_secret_key(k))
            assert shown["aclEnable"] == "true"
        assert broker.acl is not None and broker.acl.denials == 2
        assert ns.acl is not None and ns.acl.denials == 2

        broker_shown = parse_properties(
            bytes((await rc.invoke(addr, ADMIN.sign(
                RemotingCommand.request(RequestCode.GET_BROKER_CONFIG)))).body).decode()
        )
        assert broker_shown["aclSecretKey"] == MASK
        assert broker_shown["aclAccessKey"] == ADMIN.access_key

        # the real admin client: masked for the admin, refused for the user
        async with Admin(namesrv_addr=ns_addr, access_key=ADMIN.access_key,
                         secret_key=ADMIN.secret_key) as admin:
            got = await admin.get_broker_config(addr)
            assert got["aclSecretKey"] == MASK
            assert ADMIN.secret_key not in repr(got)
            # an update rewrites the -c file; it stays owner-only (created so, not chmod-ed)
            await admin.update_broker_config(
                addr, {"aclSecretKey": ADMIN.secret_key, "defaultTopicQueueNums": "5"}
            )
        assert private(conf)
        assert parse_properties(conf.read_text())["defaultTopicQueueNums"] == "5"
        assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
        async with Admin(namesrv_addr=ns_addr, access_key=USER.access_key,
                         secret_key=USER.secret_key) as user_admin:
            with pytest.raises(MQBrokerError) as err:
                await user_admin.get_broker_config(addr)
            assert err.value.remark == need_admin(RequestCode.GET_BROKER_CONFIG)
        nursery.cancel_scope.cancel()


def test_rewritten_config_file_mode(tmp_path: Path) -> None:
    plain = tmp_path / "plain.properties"
    plain.write_text("brokerName=broker-a\n")
    os.chmod(plain, 0o644)
    _rewrite_file(str(plain), {"defaultTopicQueueNums": "5"})
    assert stat.S_IMODE(os.stat(plain).st_mode) == 0o644 & ~_umask()  # nothing secret: kept
    _rewrite_file(str(plain), {"aclSecretKey": "s3cret-value"})
    assert private(plain)  # it holds a secret now: owner-only
    _rewrite_file(str(plain), {"defaultTopicQueueNums": "6"})
    assert private(plain)
    fresh = tmp_path / "fresh.properties"
    _rewrite_file(str(fresh), {"aclAccessKey": "abcdefg", "aclSecretKey": "hijklmn"})
    assert private(fresh)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_mqbroker_print_masks_secrets(tmp_path: Path) -> None:
    conf = tmp_path / "b.properties"
    conf.write_text(format_properties({
        "brokerName": "broker-a", "aclAccessKey": ADMIN.access_key,
        "aclSecretKey": ADMIN.secret_key, "storePathRootDir": str(tmp_path / "store"),
    }))
    out = subprocess.run(
        [sys.executable, "-m", "rmq_cluster.broker", "-c", str(conf), "-p"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert ADMIN.secret_key not in out.stdout + out.stderr
    shown = parse_properties(out.stdout.split("\n", 1)[1])  # after "load config ... OK"
    assert shown["aclSecretKey"] == MASK and shown["aclAccessKey"] == ADMIN.access_key


# --------------------------------------------------------------------------- up --acl


@pytest.mark.slow
def test_up_acl_files_are_private_and_answers_masked(tmp_path: Path) -> None:
    become_subreaper()
    cluster_dir = tmp_path / "c"
    port = supervisor.free_base_port(resolve_profile("single"))
    pids: dict[str, int] = {}
    try:
        up = cli("up", "single", "--acl", "--dir", str(cluster_dir),
                 "--base-port", str(port), "--timeout", str(UP_TIMEOUT_S))
        assert up.returncode == 0, up.stderr
        state = supervisor.load_state(cluster_dir)
        pids = {r.name: r.pid for r in state.records() if r.pid is not None}
        admin = local_admin(cluster_dir.resolve())
        assert admin is not None
        ns = state.topology.namesrv_addr
        (broker,) = state.records("broker")
        keys = ("--access-key", admin.access_key, "--secret-key", admin.secret_key)

        shown = cli("getBrokerConfig", "-n", ns, "-b", broker.spec.addr, "--json", *keys)
        assert shown.returncode == 0, shown.stderr
        assert admin.secret_key not in shown.stdout and MASK in shown.stdout
        anonymous = cli("getBrokerConfig", "-n", ns, "-b", broker.spec.addr)
        assert anonymous.returncode != 0 and "No accessKey is configured" in anonymous.stderr
        updated = cli("updateBrokerConfig", "-n", ns, "-b", broker.spec.addr,
                      "-k", "aclSecretKey", "-v", admin.secret_key, *keys)
        assert updated.returncode == 0, updated.stderr  # logged, and the -c file rewritten

        secret = admin.secret_key.encode()
        holders = set()
        for path in sorted(p for p in cluster_dir.rglob("*") if p.is_file()):
            rel = str(path.relative_to(cluster_dir))
            if secret in path.read_bytes():
                holders.add(rel)
                assert private(path), f"{rel} holds the secret but is {oct(path.stat().st_mode)}"
            assert not rel.startswith("logs/") or secret not in path.read_bytes(), rel
        assert {"conf/plain_acl.yml", "conf/broker-a.properties", "cluster.json"} <= holders
        for path in (cluster_dir / "conf").iterdir():
            assert private(path), path
    finally:
        cli("down", "--dir", str(cluster_dir), "--purge")
        kill_leftovers(cluster_dir, pids)
