"""Real processes: ``mqnamesrv`` and ``mqbroker -c ... -n ...``, a round trip, and a
clean SIGTERM stop that unregisters the broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

import trio

from rmq_cluster.cluster.protocol.route import ClusterInfo
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from tests import ports

from .conftest import messages

REPO = Path(__file__).resolve().parents[3]
#: A deadline, not a wait: a node that boots returns at once. Seen past 30 s on 2 cores at
#: load 20 beside two other -n 3 workers (the interpreter alone imports for seconds there).
BOOT_WAIT_S = 90.0


def _free_port(*, with_fast_port: bool = False) -> int:
    """A port of this worker's slice (tests/ports.py); with its fast port (-2) free too."""
    return ports.free_port(neighbours=(-2,) if with_fast_port else ())


def _open_log(path: Path) -> IO[bytes]:
    return open(path, "wb")


async def _start(args: list[str], log: Path, boot: bytes) -> trio.Process:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with _open_log(log) as err:
        proc = await trio.lowlevel.open_process(
            [sys.executable, *args], stdout=subprocess.PIPE, stderr=err, cwd=str(REPO), env=env
        )
    assert proc.stdout is not None
    seen = b""
    try:
        with trio.fail_after(BOOT_WAIT_S):
            while boot not in seen:
                chunk = await proc.stdout.receive_some(4096)
                if not chunk:
                    text = await trio.Path(log).read_text()
                    raise AssertionError(f"{args} exited early: {seen!r} {text[-2000:]}")
                seen += chunk
    except BaseException:
        proc.kill()
        raise
    return proc


#: Tries when a probed free port was taken by someone else before the broker bound it.
BOOT_ATTEMPTS = 3


async def _start_broker(
    conf: Path, text_for_port: Callable[[int], str], args: list[str], log: Path, boot: bytes
) -> tuple[trio.Process, int]:
    """Write ``text_for_port(port)`` to ``conf`` for a free listen/fast port pair and start the
    broker; on "Address already in use" (a port taken between the probe and the bind by
    another process of this shared machine) try again on new ports."""
    for attempt in range(BOOT_ATTEMPTS):
        port = _free_port(with_fast_port=True)
        await trio.Path(conf).write_text(text_for_port(port))
        try:
            return await _start(args, log, boot), port
        except AssertionError as exc:
            if "Address already in use" in str(exc) and attempt + 1 < BOOT_ATTEMPTS:
                continue
            raise
    raise AssertionError("unreachable")


async def _stop(proc: trio.Process | None) -> None:
    if proc is not None and proc.returncode is None:
        proc.kill()
        with trio.move_on_after(5):
            await proc.wait()


async def _cluster_info(client, ns_addr: str) -> ClusterInfo:  # type: ignore[no-untyped-def]
    resp = await client.invoke(
        ns_addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
    )
    assert resp.code == ResponseCode.SUCCESS
    return ClusterInfo.decode(resp.body)


async def test_real_processes_round_trip_and_clean_stop(tmp_path: Path) -> None:
    ns_port = _free_port()
    ns_addr = f"127.0.0.1:{ns_port}"
    ns_conf = tmp_path / "namesrv.properties"
    ns_conf.write_text(
        f"listenPort={ns_port}\nbindAddress=127.0.0.1\nkvConfigPath={tmp_path}/kvConfig.json\n"
    )
    conf = tmp_path / "broker-a.properties"

    def broker_conf(port: int) -> str:
        return (
            "brokerClusterName=ProcCluster\nbrokerName=broker-a\nbrokerId=0\n"
            "brokerRole=ASYNC_MASTER\nflushDiskType=ASYNC_FLUSH\n"
            f"listenPort={port}\nhaListenPort=0\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n"
            f"storePathRootDir={tmp_path}/store\nmappedFileSizeCommitLog=16777216\n"
            "autoCreateTopicEnable=true\ndefaultTopicQueueNums=4\n"
        )
    ns_proc = broker_proc = None
    try:
        ns_proc = await _start(
            ["-m", "rmq_cluster.namesrv", "-c", str(ns_conf)],
            tmp_path / "ns.log",
            b"The Name Server boot success",
        )
        broker_proc, broker_port = await _start_broker(
            conf,
            broker_conf,
            ["-m", "rmq_cluster.broker", "-c", str(conf), "-n", ns_addr],
            tmp_path / "broker.log",
            b"boot success. serializeType=JSON and name server is " + ns_addr.encode(),
        )
        addr = f"127.0.0.1:{broker_port}"
        fast = f"127.0.0.1:{broker_port - 2}"
        async with open_remoting_client() as client:
            info = await _cluster_info(client, ns_addr)
            assert info.broker_addr_table["broker-a"].broker_addrs == {0: addr}
            ext = {
                "a": "PG",
                "b": "ProcTopic",
                "c": "TBW102",
                "d": "4",
                "e": "0",
                "f": "0",
                "g": "0",
                "h": "0",
            }
            sent = await client.invoke(
                fast,
                RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"over the fast port"),
            )
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            pull = {
                "consumerGroup": "CG",
                "topic": "ProcTopic",
                "queueId": "0",
                "queueOffset": "0",
                "maxMsgNums": "32",
                "sysFlag": "4",
                "commitOffset": "0",
                "suspendTimeoutMillis": "0",
                "subscription": "*",
                "subVersion": "0",
            }
            got = await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, pull))
            assert got.code == ResponseCode.SUCCESS
            assert [m.body for m in messages(got)] == [b"over the fast port"]
            broker_proc.send_signal(signal.SIGTERM)
            with trio.fail_after(15):
                assert await broker_proc.wait() == 0
            info = await _cluster_info(client, ns_addr)
            assert "broker-a" not in info.broker_addr_table
        assert "unregistered" in await trio.Path(tmp_path / "broker.log").read_text()
        assert not await trio.Path(tmp_path / "store" / "abort").exists()  # a clean shutdown
        ns_proc.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await ns_proc.wait() == 0
    finally:
        await _stop(broker_proc)
        await _stop(ns_proc)


async def test_second_broker_on_the_same_store_refuses_to_start(tmp_path: Path) -> None:
    conf = tmp_path / "b.properties"

    def conf_text(port: int) -> str:
        return (
            f"brokerName=broker-a\nlistenPort={port}\nhaListenPort=0\nbindAddress=127.0.0.1\n"
            f"brokerIP1=127.0.0.1\nstorePathRootDir={tmp_path}/store\n"
            "mappedFileSizeCommitLog=1048576\n"
        )

    first = None
    try:
        first, port = await _start_broker(
            conf, conf_text, ["-m", "rmq_cluster.broker", "-c", str(conf)], tmp_path / "1.log",
            b"boot success",
        )
        other = _free_port(with_fast_port=True)
        conf2 = tmp_path / "b2.properties"
        conf2.write_text(conf.read_text().replace(f"listenPort={port}", f"listenPort={other}"))
        with trio.fail_after(BOOT_WAIT_S):
            done = await trio.run_process(
                [sys.executable, "-m", "rmq_cluster.broker", "-c", str(conf2)],
                cwd=str(REPO),
                env={**os.environ, "PYTHONPATH": str(REPO)},
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        assert done.returncode == 1
        assert b"cannot start" in done.stderr and b"in use by another process" in done.stderr
        first.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            assert await first.wait() == 0
    finally:
        await _stop(first)


async def test_topic_missing_from_topics_json_is_adopted_from_the_store(tmp_path: Path) -> None:
    """A send auto-creates its topic and is answered; the broker dies before topics.json is
    written (simulated: the topic is taken out of the file). On restart the master adopts the
    topic its store holds, so the acknowledged message stays readable."""
    conf = tmp_path / "b.properties"
    store = tmp_path / "store"

    def conf_text(port: int) -> str:
        return (
            f"brokerName=broker-a\nlistenPort={port}\nhaListenPort=0\nbindAddress=127.0.0.1\n"
            f"brokerIP1=127.0.0.1\nstorePathRootDir={store}\nmappedFileSizeCommitLog=1048576\n"
        )

    def send_ext(topic: str) -> dict[str, str]:
        return {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "1", "f": "0",
                "g": "0", "h": "0", "i": "", "j": "0", "k": "false"}

    args = ["-m", "rmq_cluster.broker", "-c", str(conf)]
    proc = None
    try:
        proc, port = await _start_broker(conf, conf_text, args, tmp_path / "1.log",
                                         b"boot success")
        async with open_remoting_client() as client:
            sent = await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(
                RequestCode.SEND_MESSAGE_V2, send_ext("Lost"), b"acked"))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            qid = sent.ext_fields["queueId"]
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            assert await proc.wait() == 0
        topics_json = store / "config" / "topics.json"
        data = json.loads(topics_json.read_text())
        assert data["topicConfigTable"].pop("Lost")
        topics_json.write_text(json.dumps(data))

        proc, port = await _start_broker(conf, conf_text, args, tmp_path / "2.log",
                                         b"boot success")
        async with open_remoting_client() as client:
            pull = {"consumerGroup": "CG", "topic": "Lost", "queueId": qid, "queueOffset": "0",
                    "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                    "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}
            with trio.fail_after(10):
                got = await client.invoke(
                    f"127.0.0.1:{port}", RemotingCommand.request(RequestCode.PULL_MESSAGE, pull)
                )
            assert got.code == ResponseCode.SUCCESS, got.remark
            assert [m.body for m in messages(got)] == [b"acked"]
        with trio.fail_after(10):  # the adopted config is written by the persist task
            while "Lost" not in json.loads(topics_json.read_text())["topicConfigTable"]:  # noqa: ASYNC110 (a file: no event)
                await trio.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            assert await proc.wait() == 0
    finally:
        await _stop(proc)
