"""Config values are checked as at boot, and no failure leaves a half-alive node (issue 19,
item 6).

* UPDATE_BROKER_CONFIG runs each value through the boot checks: ``namesrvAddr=not-an-address``
  and other bad values are refused with a code and a remark naming the key, all or nothing;
  the broker keeps serving and registering (it used to turn into a zombie: listeners closed,
  process alive).
* UPDATE_NAMESRV_CONFIG likewise.
* A real ``mqbroker`` / ``mqnamesrv`` process whose service fails while it runs exits non-zero
  within a deadline with the reason in its log; one whose stop then hangs is ended by the stop
  deadline. The failure is injected by a test-only wrapper of the node's entry (a patched
  service method), not by anything reachable from the wire.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.cluster.config import ConfigError, parse_properties
from rmq_cluster.cluster.node_main import EXIT_SERVICE_FAILED, EXIT_STOP_STUCK
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer
from tests.integration.broker.conftest import WAIT_S, ok, running_cluster

REPO = Path(__file__).resolve().parents[3]
#: How long a failed node process may take to exit (its stop deadline is patched to 2 s).
EXIT_WAIT_S = 15.0
BOOT_WAIT_S = 30.0

BAD_BROKER_VALUES = [
    "namesrvAddr=not-an-address",
    "namesrvAddr=127.0.0.1:0",
    "namesrvAddr=127.0.0.1:9876;nohost",
    "namesrvAddr=[::1:9876",
    "defaultTopicQueueNums=0",
    "maxMessageSize=-5",
    "deleteWhen=25",
    "messageDelayLevel=1x",
    "haAllowedSlaveAddresses=10.0.0.0/40",
    "haSendHeartbeatInterval=0",
    "accessMessageInMemoryMaxRatio=150",
    "autoCreateTopicEnable=maybe",
    "msgTraceTopicName=bad topic",
    "aclAccessKey=onlyhalf",
]


async def _broker_config(cluster) -> dict[str, str]:  # type: ignore[no-untyped-def]
    resp = ok(await cluster.call(RequestCode.GET_BROKER_CONFIG))
    return parse_properties(bytes(resp.body).decode())


def test_boot_refuses_the_same_values() -> None:
    for line in BAD_BROKER_VALUES:
        key, _, value = line.partition("=")
        with pytest.raises(ConfigError, match=key):
            load_broker_config({key: value})


async def test_update_broker_config_refuses_bad_values_and_keeps_serving(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        broker = cluster.broker
        before = await _broker_config(cluster)
        for line in BAD_BROKER_VALUES:
            key = line.partition("=")[0]
            # with a good key beside it: all or nothing
            body = f"brokerPermission=4\n{line}\n".encode()
            resp = await cluster.call(RequestCode.UPDATE_BROKER_CONFIG, body=body)
            assert resp.code == ResponseCode.SYSTEM_ERROR, (line, resp.code)
            assert key in (resp.remark or ""), (line, resp.remark)
        assert await _broker_config(cluster) == before  # nothing changed
        assert broker.settings.broker.namesrv_addr == cluster.ns_addr
        # still serving ...
        ok(await cluster.send("CfgTopic", b"after"))
        # ... and registering: a permission change re-registers at once
        registered = broker.register_count
        resp = await cluster.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=6\n")
        ok(resp)
        assert broker.register_count > registered
        with trio.fail_after(WAIT_S):
            await cluster.ns.wait_until(
                lambda st: "broker-a" in st.routes.broker_addr_table
            )
        assert broker.supervisor.failure is None
        # a good address list is taken (and parsed in full)
        good = f"namesrvAddr={cluster.ns_addr};localhost:9876\n".encode()
        ok(await cluster.call(RequestCode.UPDATE_BROKER_CONFIG, body=good))
        assert broker.bcfg.namesrv_addrs == [cluster.ns_addr, "localhost:9876"]


async def test_update_namesrv_config_refuses_bad_values(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    config = NamesrvConfig(
        kv_config_path=str(tmp_path / "kv.json"), config_store_path=str(tmp_path / "ns.props"),
        bind_address="127.0.0.1", listen_port=0,
    )
    ns = NamesrvServer(config)
    host, port = await nursery.start(ns.serve)
    addr = f"{host}:{port}"
    async with open_remoting_client() as client:
        for body in (b"listenPort=70000\n", b"scanNotActiveBrokerInterval=0\n",
                     b"clusterTest=perhaps\n", b"brokerChannelExpiredTime=-1\n",
                     b"bindAddress=not an address\n", b"metricsPort=70000\n",
                     b"orderMessageEnable=true\nlistenPort=-2\n"):
            req = RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, None, body)
            resp = await client.invoke(addr, req, WAIT_S)
            assert resp.code != ResponseCode.SUCCESS, body
            assert resp.remark, body
        assert ns.config == config
        get = RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG)
        assert (await client.invoke(addr, get, WAIT_S)).code == ResponseCode.SUCCESS
    assert ns.supervisor.failure is None


# ----------------------------------------------------------------------------- processes

#: The node's own entry, with one service replaced by one that fails on SIGUSR1 (and, with
#: "stuck", a shielded teardown step that never ends: the bug that made zombies).
WRAPPER = textwrap.dedent(
    """
    import signal, sys, trio
    from rmq_cluster.cluster import node_main
    node_main.NODE_STOP_DEADLINE_S = 2.0
    kind, mode, *argv = sys.argv[1:]

    async def failing_service(self, *args, **kwargs):
        with trio.open_signal_receiver(signal.SIGUSR1) as signals:
            print("fault armed", flush=True)
            async for _ in signals:
                raise RuntimeError("injected service failure")

    async def never_ends(self, *args, **kwargs):
        await trio.sleep_forever()

    if kind == "broker":
        from rmq_cluster.broker import __main__ as entry
        from rmq_cluster.broker.node import BrokerNode
        BrokerNode._persist_loop = failing_service
        if mode == "stuck":
            BrokerNode._unregister_all = never_ends
    else:
        from rmq_cluster.namesrv import __main__ as entry
        from rmq_cluster.namesrv.server import NamesrvServer
        NamesrvServer._scan_loop = failing_service
    sys.exit(entry.main(argv))
    """
)


async def _run_failing_node(tmp_path: Path, kind: str, mode: str, argv: list[str]
                            ) -> tuple[int, str, float]:
    """Start the wrapped node, wait for its boot line and the armed fault, fire the fault;
    (exit status, log, seconds from the fault to the exit)."""
    log = tmp_path / f"{kind}-{mode}.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log.open("wb") as err:  # (a local file: opening it does not block for long)
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-c", WRAPPER, kind, mode, *argv],
            stdout=subprocess.PIPE, stderr=err, cwd=str(tmp_path), env=env,
        )
    try:
        assert proc.stdout is not None
        seen = b""
        with trio.fail_after(BOOT_WAIT_S):
            while b"boot success" not in seen or b"fault armed" not in seen:
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, f"exited early: {seen!r} {log.read_text()[-2000:]}"
                seen += chunk
        fired = trio.current_time()
        proc.send_signal(signal.SIGUSR1)
        with trio.fail_after(EXIT_WAIT_S):
            status = await proc.wait()
        return status, log.read_text(), trio.current_time() - fired
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.move_on_after(EXIT_WAIT_S):
                await proc.wait()


def _broker_argv(tmp_path: Path, ns_addr: str) -> list[str]:
    conf = tmp_path / "broker.properties"
    conf.write_text(
        "brokerClusterName=FailCluster\nbrokerName=broker-f\nlistenPort=0\nfastListenPort=0\n"
        "haListenPort=0\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n"
        f"storePathRootDir={tmp_path}/store\nmappedFileSizeCommitLog=1048576\n"
    )
    return ["-c", str(conf), "-n", ns_addr]


async def test_broker_whose_service_fails_exits_non_zero_with_the_reason(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    ns = NamesrvServer(NamesrvConfig(
        kv_config_path=str(tmp_path / "kv.json"), config_store_path=str(tmp_path / "ns.props"),
        bind_address="127.0.0.1", listen_port=0,
    ))
    host, port = await nursery.start(ns.serve)
    argv = _broker_argv(tmp_path, f"{host}:{port}")
    with trio.fail_after(WAIT_S):
        status, log, _took = await _run_failing_node(tmp_path, "broker", "clean", argv)
    assert status == EXIT_SERVICE_FAILED, log[-3000:]
    assert "service failed, stopping the node" in log and "injected service failure" in log
    assert '"service":"persist"' in log, log[-3000:]
    assert "node stopped after a failure" in log
    # it unregistered on the way out: no half-alive broker left in the routes
    with trio.fail_after(WAIT_S):
        await ns.wait_until(lambda st: "broker-f" not in st.routes.broker_addr_table)


async def test_broker_whose_stop_hangs_is_ended_by_the_stop_deadline(tmp_path: Path) -> None:
    argv = _broker_argv(tmp_path, "127.0.0.1:9")  # (nobody there; registration just fails)
    status, log, took = await _run_failing_node(tmp_path, "broker", "stuck", argv)
    assert status == EXIT_STOP_STUCK, log[-3000:]
    assert "node did not stop in time, exiting now" in log
    assert took < EXIT_WAIT_S


async def test_namesrv_whose_service_fails_exits_non_zero(tmp_path: Path) -> None:
    props = tmp_path / "namesrv.properties"
    props.write_text(f"listenPort=0\nkvConfigPath={tmp_path}/kv.json\n")
    status, log, _took = await _run_failing_node(tmp_path, "namesrv", "clean",
                                                 ["-c", str(props)])
    assert status == EXIT_SERVICE_FAILED, log[-3000:]
    assert "injected service failure" in log and "scan_not_active_broker" in log
