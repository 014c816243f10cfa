"""``rmq-cluster up --acl --metrics`` with real processes: credentials printed once, the demo
and the client CLI work with them, unsigned requests are refused; ``up`` prints every node's
/metrics URL (the NameServer's too, issue 38 item 8), ``status --json`` lists them and
``status --metrics`` scrapes the NameServer and the broker."""

from __future__ import annotations

import json
import re
import urllib.error
from pathlib import Path

import pytest

from rmq_cluster.cluster.metrics_server import fetch_metrics
from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.testing import UP_TIMEOUT_S, become_subreaper, cli, kill_leftovers
from rmq_cluster.deploy.topology import resolve_profile

CRED_LINE = re.compile(r"^accessKey=(\S+) secretKey=(\S+)$", re.M)


def test_up_acl_prints_credentials_once_and_enforces(tmp_path: Path) -> None:
    become_subreaper()
    cluster_dir = tmp_path / "c"
    port = supervisor.free_base_port(resolve_profile("single"))
    pids: dict[str, int] = {}
    try:
        up = cli("up", "single", "--acl", "--metrics", "--dir", str(cluster_dir),
                 "--base-port", str(port), "--timeout", str(UP_TIMEOUT_S))
        assert up.returncode == 0, up.stderr
        urls = dict(re.findall(r"^(\S+)\s+(http://127\.0\.0\.1:\d+/metrics)$", up.stdout, re.M))
        assert set(urls) == {"namesrv-0", "broker-a"}, up.stdout
        found = CRED_LINE.findall(up.stdout)
        assert len(found) == 1, up.stdout
        ak, sk = found[0]
        state = supervisor.load_state(cluster_dir)
        pids = {r.name: r.pid for r in state.records() if r.pid is not None}
        assert (cluster_dir / "conf" / "plain_acl.yml").stat().st_mode & 0o077 == 0
        again = cli("up", "single", "--acl", "--dir", str(cluster_dir))
        assert again.returncode == 0 and not CRED_LINE.search(again.stdout)  # printed once
        demo = cli("demo", "--dir", str(cluster_dir), "--json")  # signs as the cluster's admin
        assert demo.returncode == 0, demo.stderr
        assert json.loads(demo.stdout)["ok"]
        ns = state.topology.namesrv_addr
        signed = cli("produce", "-n", ns, "-t", "AclCli", "--access-key", ak,
                     "--secret-key", sk)
        assert signed.returncode == 0, signed.stderr
        unsigned = cli("produce", "-n", ns, "-t", "AclCli")
        assert unsigned.returncode != 0
        assert "No accessKey is configured" in unsigned.stderr
        assert len(unsigned.stderr.strip().splitlines()) == 1
        status = cli("status", "--dir", str(cluster_dir), "--metrics")
        assert status.returncode == 0, status.stderr
        metrics_row = status.stdout.splitlines()[-1].split()  # the metrics table's broker row
        assert metrics_row[0] == "broker-a" and metrics_row[1].startswith("127.0.0.1:")
        assert float(metrics_row[-1]) >= 1  # ACL_DENIED: the unsigned produce was counted
        as_json = cli("status", "--dir", str(cluster_dir), "--metrics", "--json")
        report = json.loads(as_json.stdout)
        assert {n["name"]: n["metrics_url"] for n in report["nodes"]} == urls
        ns_row, row = report["metrics"]
        assert row["rmq_broker_put_messages_total"] >= 6  # demo (5) + the signed produce
        assert ns_row["name"] == "namesrv-0" and ns_row["rmq_namesrv_live_brokers"] == 1
        assert ns_row["rmq_namesrv_broker_registrations_total"] >= 1
        assert ns_row["rmq_namesrv_requests_total"] >= 2  # a registration, route lookups
        for url in urls.values():
            with pytest.raises(urllib.error.HTTPError) as denied:  # /metrics wants up's token
                fetch_metrics(url.removeprefix("http://").removesuffix("/metrics"))
            assert denied.value.code == 401
    finally:
        cli("down", "--dir", str(cluster_dir), "--purge")
        kill_leftovers(cluster_dir, pids)
