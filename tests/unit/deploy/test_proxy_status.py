"""``rmq-cluster status``'s proxy rows (deploy/proxy_up.py): what ``up --proxy`` recorded in
``run/proxy.json``, up only while its pid lives and its port takes connections."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from rmq_cluster.deploy.proxy_up import INFO_FILE, proxy_rows


def _record(cluster: Path, port: int, pid: int) -> None:
    (cluster / "run").mkdir(parents=True, exist_ok=True)
    (cluster / INFO_FILE).write_text(json.dumps(
        {"proxy": f"127.0.0.1:{port}", "pid": pid, "tls": True, "cert": "c.pem", "acl": False}))


def test_a_proxy_is_up_while_its_pid_lives_and_its_port_answers(tmp_path: Path) -> None:
    assert proxy_rows(tmp_path) == []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        _record(tmp_path, port, os.getpid())
        [row] = proxy_rows(tmp_path)
        assert (row["address"], row["tls"], row["state"]) == (f"127.0.0.1:{port}", True, "up")
    assert proxy_rows(tmp_path)[0]["state"] == "down"  # the port is gone
    (tmp_path / INFO_FILE).write_text("{not json")
    assert proxy_rows(tmp_path) == []
