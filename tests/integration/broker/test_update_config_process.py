"""A real ``mqbroker -c FILE`` process: UPDATE_BROKER_CONFIG applies at once (a read-only
broker refuses sends with NO_PERMISSION), is written into FILE, and survives a restart."""

from __future__ import annotations

import signal
from pathlib import Path

import trio

from rmq_cluster.broker.config_update import rewrite_properties
from rmq_cluster.cluster.config import parse_properties
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .test_broker_process import _free_port, _start, _stop

BOOT_ATTEMPTS = 3

SEND_EXT = {"a": "PG", "b": "CfgProcT", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0",
            "h": "0"}


async def _config(client, addr: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
    assert resp.code == ResponseCode.SUCCESS
    return parse_properties(bytes(resp.body).decode())


async def _boot(conf: Path, log: Path) -> tuple[trio.Process, str]:
    """Start the broker on a free port pair (HA port ephemeral); a port taken between the probe
    and the bind (another process's client socket) means another try on new ports."""
    for attempt in range(BOOT_ATTEMPTS):
        port = _free_port(with_fast_port=True)
        tconf = trio.Path(conf)
        await tconf.write_text(
            rewrite_properties(await tconf.read_text(), {"listenPort": str(port)})
        )
        try:
            proc = await _start(["-m", "rmq_cluster.broker", "-c", str(conf)], log, b"boot success")
        except AssertionError as exc:
            if "Address already in use" in str(exc) and attempt + 1 < BOOT_ATTEMPTS:
                continue
            raise
        return proc, f"127.0.0.1:{port}"
    raise AssertionError("unreachable")


async def test_update_broker_config_is_persisted_across_a_restart(tmp_path: Path) -> None:
    conf = tmp_path / "broker-a.properties"
    conf.write_text(
        "# hand-written\nbrokerClusterName=ProcCluster\nbrokerName=broker-a\n"
        "listenPort=0\nhaListenPort=0\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n"
        f"storePathRootDir={tmp_path}/store\nmappedFileSizeCommitLog=16777216\n"
    )
    proc = None
    try:
        proc, addr = await _boot(conf, tmp_path / "1.log")
        async with open_remoting_client() as client:
            send = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, SEND_EXT, b"x")
            assert (await client.invoke(addr, send)).code == ResponseCode.SUCCESS
            update = RemotingCommand.request(
                RequestCode.UPDATE_BROKER_CONFIG, None, b"brokerPermission=4\n")
            resp = await client.invoke(addr, update)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            refused = await client.invoke(addr, send)
            assert refused.code == ResponseCode.NO_PERMISSION
            bad = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, None, b"nope=1\n")
            resp = await client.invoke(addr, bad)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "nope" in (resp.remark or "")
        text = conf.read_text()
        assert text.startswith("# hand-written\n") and "brokerPermission=4\n" in text
        assert "nope" not in text
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            assert await proc.wait() == 0
        proc, addr = await _boot(conf, tmp_path / "2.log")  # (the listen port may change)
        async with open_remoting_client() as client:
            assert (await _config(client, addr))["brokerPermission"] == "4"
            send = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, SEND_EXT, b"y")
            assert (await client.invoke(addr, send)).code == ResponseCode.NO_PERMISSION
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            assert await proc.wait() == 0
    finally:
        await _stop(proc)
