"""ali-ons (a real third-party RocketMQ 4.x client) producing and consuming through our
NameServer and Broker."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import trio

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer

COUNT = 10
RETRY_BODY = "hello 3"
TOPIC = "AliOnsTopic"


async def test_ali_ons_producer_and_push_consumer(node_probes: Path, tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node is not None
    async with trio.open_nursery() as nursery:
        ns = NamesrvServer(
            NamesrvConfig(
                kv_config_path=str(tmp_path / "ns" / "kvConfig.json"),
                config_store_path=str(tmp_path / "ns" / "namesrv.properties"),
                bind_address="127.0.0.1",
                listen_port=0,
            )
        )
        host, port = await nursery.start(ns.serve)
        ns_addr = f"{host}:{port}"
        settings = load_broker_config(
            {
                "brokerName": "broker-a",
                "brokerClusterName": "CompatCluster",
                "listenPort": "0",
                "bindAddress": "127.0.0.1",
                "brokerIP1": "127.0.0.1",
                "storePathRootDir": str(tmp_path / "store"),
                "namesrvAddr": ns_addr,
                "mappedFileSizeCommitLog": str(16 * 1024 * 1024),
                # every delay level 1 s, so a retried message comes back quickly
                "messageDelayLevel": " ".join(["1s"] * 18),
            }
        ).settings
        broker = BrokerNode(settings)
        bhost, bport = await nursery.start(broker.run)
        # ali-ons throws on TOPIC_NOT_EXIST instead of falling back to TBW102 like the Java
        # client, so the topic is created first, as an operator would with mqadmin updateTopic.
        create = {
            "topic": TOPIC,
            "defaultTopic": "TBW102",
            "readQueueNums": "4",
            "writeQueueNums": "4",
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "order": "false",
        }
        async with open_remoting_client() as client:
            resp = await client.invoke(
                f"{bhost}:{bport}",
                RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, create),
                5,
            )
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        with trio.fail_after(5):
            await ns.wait_until(lambda state: TOPIC in state.routes.topic_queue_table)
        with trio.fail_after(90):
            done = await trio.run_process(
                [
                    node,
                    str(node_probes / "produce_consume_probe.js"),
                    ns_addr,
                    TOPIC,
                    str(COUNT),
                    "CID_ALIONS",
                    RETRY_BODY,
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                stdin=subprocess.DEVNULL,
            )

        def committed() -> int:
            return sum(max(0, broker.offsets.query("CID_ALIONS", TOPIC, q)) for q in range(4))

        if done.returncode == 0:
            # the probe's last UPDATE_CONSUMER_OFFSET is a oneway written just before it exits:
            # the process's exit can reach this loop before the broker read that frame, so
            # wait for the commit (polled under a deadline), then check what it says below
            with trio.move_on_after(10):
                while committed() < COUNT:  # noqa: ASYNC110 - the broker's own table, no event
                    await trio.sleep(0.05)
        last_committed = committed()
        nursery.cancel_scope.cancel()
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    out = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert [s["status"] for s in out["sent"]] == ["SEND_OK"] * COUNT
    bodies = sorted(r["body"] for r in out["received"])
    expected = sorted([f"hello {i}" for i in range(COUNT)] + [RETRY_BODY])
    assert bodies == expected, json.dumps(out)
    # the refused message came back through the retry topic, one reconsume later
    again = [r for r in out["received"] if r["body"] == RETRY_BODY]
    assert [r["reconsumeTimes"] for r in again] == [0, 1]
    assert {r["tags"] for r in out["received"]} == {"TagA", "TagB"}
    # the consumer committed its progress (UPDATE_CONSUMER_OFFSET, oneway); the filtered TagC
    # message may or may not be behind it yet when the probe closes
    assert last_committed in (COUNT, COUNT + 1)
