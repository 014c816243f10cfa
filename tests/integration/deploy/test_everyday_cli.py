"""The everyday surface of ``rmq-cluster`` (issue 23, items 1, 2, 3, 6, 7) through the real CLI
in subprocesses against a real cluster: stdout parsed as JSON lines, exit codes asserted.

One ``single`` cluster serves the module (under its own ``RMQ_CLUSTER_HOME``, node logs
rotating at 4 KiB); a test that kills a node starts a cluster of its own. Everything started is
stopped (``down``, then SIGKILL by pid for anything left).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.cluster.config import ConfigError
from rmq_cluster.cluster.logging import rotated_paths
from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.testing import become_subreaper, kill_leftovers
from rmq_cluster.deploy.topology import resolve_profile

become_subreaper()  # nodes orphaned by the CLI subprocess are reaped by this process

CLI = [sys.executable, "-m", "rmq_cluster.cli"]
TIMEOUT_S = 90.0
ROTATE_AT = 4096


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RMQ_CLUSTER_LOG_LEVEL", "NAMESRV_ADDR")}
    env.update({"RMQ_CLUSTER_HOME": str(home), "RMQ_CLUSTER_LOG_MAX_BYTES": str(ROTATE_AT),
                "RMQ_CLUSTER_LOG_BACKUPS": "2"})
    return env


class Cli:
    def __init__(self, home: Path, namesrv: str = "") -> None:
        self.home = home
        self.namesrv = namesrv

    def __call__(self, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*CLI, *args], capture_output=True, timeout=TIMEOUT_S, check=False,
                              env=_env(self.home), input=input)
        return subprocess.CompletedProcess(done.args, done.returncode,
                                           done.stdout.decode(), done.stderr.decode())

    def lines(self, *args: str) -> tuple[int, list[dict], str]:
        """Run with ``--json``: exit status, every stdout line parsed, stderr."""
        done = self(*args, "--json")
        return done.returncode, [json.loads(ln) for ln in done.stdout.splitlines()], done.stderr


@contextlib.contextmanager
def _cluster(home: Path, name: str, *extra: str) -> Iterator[tuple[Cli, dict]]:
    cli = Cli(home)
    directory = home / name
    seen: dict[str, int] = {}
    base = supervisor.free_base_port(resolve_profile("single"))
    try:
        done = cli("up", "single", "--name", name, "--base-port", str(base), "--json", *extra)
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.splitlines()) == 1  # --json: one JSON object per line
        info = json.loads(done.stdout)
        for n in info["nodes"]:
            seen[n["name"]] = n["pid"]
        cli.namesrv = info["namesrv_addr"]
        yield cli, info
    finally:
        with contextlib.suppress(supervisor.SupervisorError):
            for rec in supervisor.load_state(directory).records():
                if rec.pid is not None:
                    seen.setdefault(f"{rec.name}@{rec.pid}", rec.pid)
        if (directory / supervisor.STATE_FILE).exists():
            cli("down", "--name", name)
        kill_leftovers(directory, seen)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def cluster(home: Path) -> Iterator[Cli]:
    with _cluster(home, "everyday") as (cli, _info):
        yield cli


def test_produce_json_pipes_into_a_script(cluster: Cli) -> None:
    """``rmq-cluster produce --json ... | python -c '<json lines>'``: only JSON on stdout,
    even at -vv (the logs are on stderr)."""
    script = ("import json, sys; rows = [json.loads(l) for l in sys.stdin]; "
              "print(sum(r.get('status') == 'SEND_OK' for r in rows), rows[-1]['summary']['sent'])")
    cmd = " ".join([*CLI, "-vv", "produce", "-n", cluster.namesrv, "-t", "PipeT", "--count", "4",
                    "--json"])
    done = subprocess.run(f"{cmd} | {sys.executable} -c \"{script}\"", shell=True,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
                          env=_env(cluster.home))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "4 4\n"
    assert '"level":"debug"' in done.stderr  # -vv: debug lines, on stderr


@pytest.mark.slow  # six CLI runs (interpreter starts): ~6 s
def test_consume_count_is_exact_and_commits_only_those(cluster: Cli) -> None:
    ns = cluster.namesrv
    rc, rows, err = cluster.lines("produce", "-n", ns, "-t", "ExactT", "--count", "10",
                                  "--body", "m{i}")
    assert rc == 0, err
    assert rows[-1]["summary"]["sent"] == 10
    seen: list[str] = []
    for count in (3, 2, 5):
        rc, rows, err = cluster.lines("consume", "-n", ns, "-t", "ExactT", "-g", "ExactG",
                                      "--count", str(count), "--timeout", "5")
        assert rc == 0, err
        msgs, summary = rows[:-1], rows[-1]["summary"]
        assert len(msgs) == count and summary["received"] == count
        seen.extend(m["body"] for m in msgs)
    # every message exactly once over the three runs: nothing past --count was committed
    assert sorted(seen) == sorted(f"m{i}" for i in range(10))
    rc, rows, err = cluster.lines("consume", "-n", ns, "-t", "ExactT", "-g", "ExactG",
                                  "--count", "1", "--timeout", "1")
    assert rc == 1 and rows[-1]["summary"]["received"] == 0
    assert err == "rmq-cluster: error: received 0 of 1 messages from ExactT (none new for 1 s)\n"


@pytest.mark.slow  # four CLI runs and a 1 s delay: ~5 s
def test_body_properties_keys_tags_and_delay(cluster: Cli, tmp_path: Path) -> None:
    ns = cluster.namesrv
    raw = bytes(range(256))
    body_file = tmp_path / "body.bin"
    body_file.write_bytes(raw)
    rc, rows, err = cluster.lines(
        "produce", "-n", ns, "-t", "BodyT", "--body-file", str(body_file), "--prop", "a=1",
        "--prop", "b=x=y", "--prop", 'j={"k": [1]}', "--keys", "K{i}", "--tags", "TagA")
    assert rc == 0, err
    rc, rows, err = cluster.lines("produce", "-n", ns, "-t", "BodyT", "--body", "héllo {i}",
                                  "--delay", "1")
    assert rc == 0, err
    rc, rows, err = cluster.lines("consume", "-n", ns, "-t", "BodyT", "-g", "BodyG",
                                  "--count", "2", "--timeout", "10")
    assert rc == 0, err
    by_encoding = {m["bodyEncoding"]: m for m in rows[:-1]}
    binary, text = by_encoding["base64"], by_encoding["text"]
    assert base64.b64decode(binary["body"]) == raw and binary["bodyLength"] == 256
    assert binary["properties"]["a"] == "1" and binary["properties"]["b"] == "x=y"
    assert binary["properties"]["j"] == '{"k": [1]}'
    assert binary["keys"] == "K0" and binary["tags"] == "TagA"
    assert text["body"] == "héllo 0"
    # delay level 1: it went through the schedule topic (which keeps DELAY, as RocketMQ does)
    assert text["properties"]["REAL_TOPIC"] == "BodyT" and text["properties"]["DELAY"] == "1"
    # the plain form shows the body too
    cluster.lines("produce", "-n", ns, "-t", "PlainT", "--body", "line one\nline two",
                  "--prop", "p=q")
    done = cluster("consume", "-n", ns, "-t", "PlainT", "-g", "PlainG", "--count", "1")
    assert done.returncode == 0, done.stderr
    assert "  | line one\n  | line two\n" in done.stdout and "p=q" in done.stdout


def test_consume_of_a_missing_topic_or_an_unreachable_namesrv_fails_in_one_line(
    cluster: Cli,
) -> None:
    done = cluster("consume", "-n", cluster.namesrv, "-t", "NoSuchTopicHere", "-g", "G")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == "rmq-cluster: error: no route for topic 'NoSuchTopicHere'\n"
    done = cluster("consume", "-n", "127.0.0.1:1", "-t", "T", "-g", "G")
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("rmq-cluster: error: cannot connect to 127.0.0.1:1")


def test_logs_rotate_and_read_across_files_and_pretty(cluster: Cli) -> None:
    ns = cluster.namesrv
    log = str(cluster.home / "everyday" / "logs" / "broker-a.log")
    # each consumer group's registration is an info line in the broker's log (~200 bytes):
    # register groups from one process until the broker has rotated its log once
    assert cluster("produce", "-n", ns, "-t", "LogT").returncode == 0
    code = textwrap.dedent(f"""
        import os, trio
        from rmq_cluster.client.consumer import PushConsumer
        from rmq_cluster.cluster.logging import rotated_paths

        async def main():
            for i in range(100):
                if len(rotated_paths({log!r})) > 1:
                    return
                c = PushConsumer(f"LogG{{i}}", namesrv_addr="{ns}", listener=lambda m: None)
                c.subscribe("LogT")
                async with c:
                    with trio.fail_after(30):
                        while not c.assigned_queues():  # registered with the broker
                            await c.assignment_changed.wait()
            raise SystemExit("the broker's log did not rotate")

        trio.run(main)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    files = rotated_paths(log)
    assert files[-2:] == [f"{log}.1", log], files
    assert ROTATE_AT <= os.path.getsize(f"{log}.1") < ROTATE_AT + 2048
    every = [ln for p in files for ln in Path(p).read_text().splitlines()]
    done = cluster("logs", "broker-a", "--name", "everyday", "-n", "100000")
    assert done.returncode == 0 and done.stdout.splitlines() == every
    done = cluster("logs", "broker-a", "--name", "everyday", "-n", "5", "--pretty")
    assert done.returncode == 0
    shown = done.stdout.splitlines()
    assert len(shown) == 5 and not any(ln.startswith("{") for ln in shown)
    assert any("[broker-a/broker] consumer registered group=LogG" in ln for ln in shown)


def test_a_listener_that_raises_is_a_warning_with_its_traceback(cluster: Cli) -> None:
    """An application that configures no logging: the warning and its traceback on stderr,
    and the message is consumed again."""
    ns = cluster.namesrv
    assert cluster("produce", "-n", ns, "-t", "RaiseT", "--body", "x").returncode == 0
    code = textwrap.dedent(f"""
        import trio
        from rmq_cluster.client.consumer import PushConsumer
        from rmq_cluster.client.model import ConsumeFromWhere

        async def main():
            calls = []
            done = trio.Event()

            def listener(msgs):
                calls.append(len(msgs))
                if len(calls) == 1:
                    raise ValueError("boom-in-listener")
                done.set()

            c = PushConsumer("RaiseG", namesrv_addr="{ns}", listener=listener,
                             consume_from=ConsumeFromWhere.FIRST_OFFSET,
                             orderly=True, orderly_suspend_s=0.1)  # retried here, at once
            c.subscribe("RaiseT")
            async with c:
                with trio.fail_after(60):
                    await done.wait()
            print("calls", len(calls))

        trio.run(main)
    """)
    env = {k: v for k, v in _env(cluster.home).items() if k != "RMQ_CLUSTER_LOG_FILE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "calls 2\n"
    record = next(json.loads(ln) for ln in done.stderr.splitlines() if "listener raised" in ln)
    assert record["level"] == "warning"
    assert "Traceback" in record["exception"] and "ValueError: boom-in-listener" in (
        record["exception"])


def test_broker_refuses_a_public_brokerip1_on_a_loopback_bind(tmp_path: Path) -> None:
    conf = tmp_path / "b.properties"
    base = (f"brokerName=b\nlistenPort=0\nhaListenPort=0\nnamesrvAddr=127.0.0.1:1\n"
            f"storePathRootDir={tmp_path}/store\n")
    conf.write_text(base + "bindAddress=127.0.0.1\nbrokerIP1=192.0.2.10\n")
    done = subprocess.run([sys.executable, "-m", "rmq_cluster.broker", "-c", str(conf)],
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 2  # a bad config value (broker/__main__.py)
    err = [ln for ln in done.stderr.splitlines() if ln.startswith("mqbroker:")]
    assert len(err) == 1
    assert "brokerIP1=192.0.2.10" in err[0] and "bindAddress=127.0.0.1" in err[0]
    assert not (tmp_path / "store").exists()  # refused before anything was written
    # behind NAT: another address than a non-loopback bind is fine; loopback on loopback too
    for bind, ip in (("0.0.0.0", "192.0.2.10"), ("10.0.0.5", "198.51.100.7"),
                     ("127.0.0.1", "127.0.0.1")):
        load_broker_config({"bindAddress": bind, "brokerIP1": ip})
    with pytest.raises(ConfigError, match=r"brokerIP1=10\.1\.1\.1 .*bindAddress=127\.0\.0\.2"):
        load_broker_config({"bindAddress": "127.0.0.2", "brokerIP1": "10.1.1.1"})


@pytest.mark.slow
def test_bind_ls_status_and_down_exit_codes(home: Path, cluster: Cli) -> None:
    """``up --bind 0.0.0.0`` reaches every node; ``ls`` lists the home's clusters; ``status``
    exits 1 with a node down; ``down`` twice is fine; ``--dir`` wins over the home."""
    with _cluster(home, "wide", "--bind", "0.0.0.0") as (cli, info):
        for conf in (home / "wide" / "conf").iterdir():
            assert "bindAddress=0.0.0.0\n" in conf.read_text()
        ports = {int(n["addr"].rsplit(":", 1)[1]) for n in info["nodes"]}
        assert ports <= _listening_on_any()
        rc, rows, _err = cli.lines("ls")
        assert rc == 0
        states = {r["name"]: (r["profile"], r["alive"], r["total"], r["state"]) for r in rows}
        assert states == {"everyday": ("single", 2, 2, "running"),
                          "wide": ("single", 2, 2, "running")}
        assert cli("status", "--name", "wide").returncode == 0
        assert cli("kill", "namesrv-0", "--name", "wide", "--wait").returncode == 0
        done = cli("status", "--name", "wide")
        assert done.returncode == 1
        assert done.stderr == ("rmq-cluster: error: cluster wide is not healthy: namesrv-0 not "
                               "running\n")
        done = cli("status", "--name", "wide", "--json")
        assert done.returncode == 1 and json.loads(done.stdout)["healthy"] is False
        rc, rows, _err = cli.lines("ls")
        assert {r["name"]: r["state"] for r in rows}["wide"] == "degraded"
        assert cli("down", "--name", "wide").returncode == 0
        done = cli("down", "--name", "wide")
        assert done.returncode == 0  # a stopped cluster: said plainly (issue 38 item 9)
        assert done.stdout == "cluster wide was not running: nothing to stop\n"
        done = cli("status", "--dir", str(home / "wide"))
        assert done.returncode == 1  # stopped: not healthy
        rc, rows, _err = cli.lines("ls")
        assert {r["name"]: r["state"] for r in rows}["wide"] == "stopped"
        elsewhere = home.parent / "never-made"
        done = cli("down", "--dir", str(elsewhere))
        assert done.returncode == 1 and done.stderr.count("\n") == 1
        assert "no such directory" in done.stderr


def _listening_on_any() -> set[int]:
    """Ports with a listener on 0.0.0.0 (from /proc/net/tcp)."""
    out = set()
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            local, _remote, st = line.split()[1:4]
            addr, port = local.split(":")
            if st == "0A" and addr == "00000000":
                out.add(int(port, 16))
    return out


def test_client_commands_find_their_cluster(cluster: Cli, tmp_path: Path) -> None:
    """Without -n (and no $NAMESRV_ADDR) produce, consume and the mqadmin commands use the
    NameServers of the cluster --name under $RMQ_CLUSTER_HOME, from any directory; without such
    a cluster the one-line error names -n, and starts nothing (issue 38 item 5)."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], capture_output=True, text=True, check=False,
                              timeout=TIMEOUT_S, env=_env(cluster.home), cwd=tmp_path)

    done = run("produce", "--name", "everyday", "-t", "FindT", "--count", "2", "--json")
    assert done.returncode == 0, done.stderr
    assert [json.loads(x).get("status") for x in done.stdout.splitlines()][:2] == [
        "SEND_OK", "SEND_OK"]
    done = run("consume", "--name", "everyday", "-t", "FindT", "-g", "FindG", "--count", "2",
               "--from", "first", "--timeout", "60", "--json")
    assert done.returncode == 0, done.stderr
    done = run("topicRoute", "--name", "everyday", "-t", "FindT")  # JSON, as mqadmin's
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["queueDatas"][0]["brokerName"] == "broker-a"
    done = run("produce", "--name", "nosuch", "-t", "FindT", "--count", "1")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "-n HOST:PORT" in done.stderr and "nosuch" in done.stderr
    assert "rmq-cluster up" not in done.stderr and "namesrv_addr" not in done.stderr
