"""The nodes a benchmark starts as child processes (``mqnamesrv``, ``mqbroker``): their ports,
a broker's properties, the start (until the node prints its boot line) and the stop, in one
place for every bench script.

Ports come from tests/ports.py, as the tests' own nodes get theirs: random free ports of the
test range, below the kernel's ephemeral range, so no outgoing connection takes one between
the check and the node's bind. A child runs the code of the tree it is given (``root``, through
bench/checkout.py): bench/ha.py loads another tree's bench/ha_broker.py beside this one's, and
bench/send_counts.py runs a broker of ``--tree``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import checkout  # bench/checkout.py (imported first by every bench script)

from tests.ports import free_port

#: The line a node prints on stdout once it serves (a broker: once registered, if it has
#: NameServers).
BOOT_LINE = "boot success"
#: How long a node may take to print it.
BOOT_TIMEOUT_S = 30.0
#: How long a node may take to exit on SIGTERM before it is killed.
STOP_TIMEOUT_S = 15.0
#: A broker also binds its fast port (listenPort - 2) and its HA port (listenPort + 1).
BROKER_NEIGHBOURS = (-2, 1)
#: ``mqbroker`` as a child's arguments (after the interpreter).
BROKER = ("-m", "rmq_cluster.broker")
NAMESRV = ("-m", "rmq_cluster.namesrv")

__all__ = ["BOOT_TIMEOUT_S", "BROKER", "NAMESRV", "broker_conf", "broker_port", "free_port",
           "spawn", "start_broker", "stop"]


def broker_port(taken: set[int] | None = None) -> int:
    """A listen port whose fast and HA ports are free too (none of them in ``taken``; the
    three are added to it)."""
    return free_port(neighbours=BROKER_NEIGHBOURS, taken=taken)


def broker_conf(path: Path, *, port: int, store: str | Path, cluster: str = "BenchCluster",
                name: str = "bench", queues: int = 4, extra: str = "",
                **more: str | int) -> Path:
    """Writes a bench broker's properties to ``path``: loopback, ASYNC_FLUSH, 1 GiB CommitLog
    files, ``queues`` queues per auto-created topic, then ``more`` (RocketMQ key names) and the
    raw lines of ``extra``."""
    props: dict[str, str | int] = {
        "brokerClusterName": cluster, "brokerName": name, "brokerIP1": "127.0.0.1",
        "bindAddress": "127.0.0.1", "listenPort": port, "storePathRootDir": str(store),
        "flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": 1 << 30,
        "defaultTopicQueueNums": queues, **more,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()) + extra)
    return path


def spawn(args: list[str] | tuple[str, ...], *, root: Path = checkout.ROOT,
          boot: str = BOOT_LINE, stderr: int | IO[bytes] = subprocess.DEVNULL,
          timeout: float = BOOT_TIMEOUT_S) -> subprocess.Popen[str]:
    """``python <args> --log-level warning`` on ``root``'s code, once it printed ``boot``;
    killed and RuntimeError if it exits or ``timeout`` passes first."""
    proc = subprocess.Popen(
        [sys.executable, *args, "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=str(root),
        env=checkout.child_env(root),
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if boot in line:
            return proc
    proc.kill()
    proc.wait()
    raise RuntimeError(f"{list(args)} did not start")


def stop(proc: subprocess.Popen[str] | None) -> None:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; nothing if it already exited."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_broker(store: str | Path, *, root: Path = checkout.ROOT, queues: int = 4,
                 extra: str = "", command: tuple[str, ...] = BROKER,
                 timeout: float = BOOT_TIMEOUT_S,
                 **more: Any) -> tuple[subprocess.Popen[str], int]:
    """A broker of ``root`` on a free port with its store in ``store``/data (its properties
    in ``store``), no NameServer unless ``more`` names one; ``command`` runs it in place of
    ``mqbroker`` (given ``-c <properties>`` after it). -> (process, listen port)."""
    port = broker_port()
    conf = broker_conf(Path(store) / "broker.properties", port=port,
                       store=f"{store}/data", queues=queues, extra=extra, **more)
    return spawn([*command, "-c", str(conf)], root=root, timeout=timeout), port
