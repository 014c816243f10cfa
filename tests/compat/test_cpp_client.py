"""Apache's RocketMQ C++ client (rocketmq-client-cpp 1.0.1 and 2.1.0, unmodified, as PyPI
packages ship librocketmq.so) producing and consuming through a real rmq-cluster: NameServer
and broker as OS processes, the C++ client in a process of its own (tests/compat/cpp_probe.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from deploy.testing import RunningCluster, rmq_cluster

PROBE = Path(__file__).with_name("cpp_probe.py")
PROBE_TIMEOUT_S = 120

pytestmark = pytest.mark.slow


def run_probe(client: tuple[str, Path], cluster: RunningCluster, topic: str, scenario: str,
              home: Path, *extra: str) -> dict[str, Any]:
    version, client_dir = client
    if version.startswith("2."):
        extra = (*extra, "--skip-consumer-shutdown")  # see cpp_probe.py
    home.mkdir(parents=True, exist_ok=True)  # the C++ client logs under $HOME/logs
    done = subprocess.run(
        [sys.executable, str(PROBE), str(client_dir), cluster.namesrv_addr, topic, scenario,
         *extra],
        capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
        env={**os.environ, "HOME": str(home)}, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_cpp_producer_and_push_consumer_with_tag_filter(
    cpp_client: tuple[str, Path], tmp_path: Path
) -> None:
    with rmq_cluster("single", directory=tmp_path / "cluster") as cluster:
        out = run_probe(cpp_client, cluster, "CppTopic", "produce-consume", tmp_path / "home")
    sent, received = out["sent"], out["received"]
    assert len(sent) == 12 and all(s["status"] == "OK" for s in sent.values())
    # exactly the TagA/TagB messages, with the ids the producer was given
    wanted = {mid for mid, s in sent.items() if s["tags"] in ("TagA", "TagB")}
    assert set(received) == wanted
    for mid, r in received.items():
        assert r["body"] == sent[mid]["body"] and r["tags"] == sent[mid]["tags"]
        assert r["keys"] == f"key-{r['idx']}" and r["idx"] == sent[mid]["idx"]
    # queue offsets are dense per queue, as the broker assigned them
    per_queue: dict[int, list[int]] = defaultdict(list)
    for r in received.values():
        per_queue[r["queue"]].append(r["offset"])
    assert all(offsets for offsets in per_queue.values())


def test_cpp_async_oneway_orderly_batch_and_pull(
    cpp_client: tuple[str, Path], tmp_path: Path
) -> None:
    with rmq_cluster("single", directory=tmp_path / "cluster") as cluster:
        out = run_probe(cpp_client, cluster, "CppModes", "modes", tmp_path / "home")
    assert out["async_acked"] == 12 and out["async_failed"] == []
    assert out["orderly_status"] == ["OK"] * 6
    assert out["batch_status"] == "OK"
    pulled = out["pulled"]
    bodies = sorted(m["body"] for m in pulled)
    assert bodies == sorted(f"cpp-{i}" for i in range(out["expected"]))
    orderly = [m for m in pulled if m["tags"] == "Orderly"]
    assert len({m["queue"] for m in orderly}) == 1  # one key, one queue, in send order
    assert [m["body"] for m in sorted(orderly, key=lambda m: m["offset"])] == [
        f"cpp-{i}" for i in range(16, 22)
    ]
