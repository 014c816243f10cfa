"""Our remoting server against ali-ons' remoting layer (a real third-party 4.x implementation)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import trio

from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.connection import Connection
from rmq_cluster.cluster.remoting.processors import ProcessorTable
from rmq_cluster.cluster.remoting.server import RemotingServer

ECHO, FAIL = 1, 2


def _echo(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    return request.response(0, ext_fields=request.ext_fields, body=request.body)


async def _fail(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    raise RuntimeError("no such thing")


async def test_ali_ons_client_talks_to_our_server(node_probes: Path, nursery: trio.Nursery) -> None:
    server = RemotingServer(ProcessorTable({ECHO: _echo, FAIL: _fail}), node="compat")
    _host, port = await nursery.start(server.serve, "127.0.0.1", 0)
    node = shutil.which("node")
    assert node is not None
    with trio.fail_after(60):
        done = await trio.run_process(
            [node, str(node_probes / "remoting_probe.js"), str(port), str(ECHO), str(FAIL)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    assert done.returncode == 0, done.stderr.decode()
    seen = json.loads(done.stdout.decode().strip().splitlines()[-1])
    echo = seen["echo"]
    assert echo["code"] == 0
    assert echo["flag"] & 1 == 1
    assert echo["opaque"] == echo["sentOpaque"]
    assert echo["language"] == "JAVA"
    # ali-ons sent queueId as a JSON number and batch as a boolean: we hand strings back
    assert echo["extFields"] == {"topic": "TopicTest", "queueId": "3", "batch": "false"}
    assert echo["body"] == "hello from ali-ons"
    assert seen["unknown"] == {"code": 3, "remark": " request type 9999 not supported"}
    assert seen["failed"] == {"code": 1, "remark": "RuntimeError: no such thing"}
    assert seen["concurrent_ok"] is True
