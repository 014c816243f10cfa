"""What the compat failover tests share: a client process that prints its observations as JSON
lines, read as they come (``EventStream``: a JVM of Apache's Java clients, the Python SDK's
probe), waited on with deadlines while a master is killed; finding a group's master and the
one elected after it; and the kill itself during a stream of sends and receives
(``kill_during_stream``), with the gaps it caused (``stream_figures``)."""

from __future__ import annotations

import contextlib
import itertools
import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from rmq_cluster.client import Admin
from rmq_cluster.client.errors import MQClientError
from rmq_cluster.deploy.testing import RunningCluster, _in_thread

from .grpc_testlib import read_topic

Event = dict[str, Any]
Cond = Callable[[list[Event]], bool]

#: a new master elected and in the NameServer's route
FAILOVER_WAIT_S = 40.0
ROUTE_POLL_S = 0.1
MASTER_ID = 0
#: how long a stopped client may take to exit
EXIT_WAIT_S = 60.0


class EventStream:
    """``argv`` in a process of its own (stdout: one JSON object per line, other lines skipped;
    stderr to ``stderr_path``); a thread collects the events as they come into ``events``."""

    def __init__(self, argv: Sequence[str], stderr_path: Path,
                 env: dict[str, str] | None = None) -> None:
        stderr_path.parent.mkdir(parents=True, exist_ok=True)
        self.stderr_path = stderr_path
        self.events: list[Event] = []
        self._lines: queue.Queue[Event | None] = queue.Queue()
        with stderr_path.open("w") as err:
            self.proc = subprocess.Popen(
                list(argv), stdout=subprocess.PIPE, stderr=err, text=True,
                stdin=subprocess.DEVNULL, env=env,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._lines.put(json.loads(line))
        self._lines.put(None)

    def wait_for(self, what: str, cond: Cond, deadline: float) -> None:
        """Collect events until ``cond(events)`` holds; fail at ``deadline`` (monotonic) or when
        the process exits first."""
        while not cond(self.events):
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {what}: {self.events[-3:]}\n{self.logs()}"
            try:
                event = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            assert event is not None, f"the client exited before {what}: {self.logs()}"
            self.events.append(event)

    def finish(self, timeout: float = EXIT_WAIT_S) -> int:
        """Its exit code (killed after ``timeout``), every event it printed collected."""
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            self.stop()
        self._reader.join(timeout)
        while not self._lines.empty():
            event = self._lines.get_nowait()
            if event is not None:
                self.events.append(event)
        return rc

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # our own child, by its handle
            self.proc.wait()

    def tail(self) -> str:
        if not self.stderr_path.exists():
            return ""
        return self.stderr_path.read_text(errors="replace")[-3000:]

    def logs(self) -> str:
        """What to show when it fails (its stderr's end; subclasses add their logs)."""
        return self.tail()


def log_tails(*paths: Path) -> str:
    """The ends of the log files that exist, each under its name."""
    return "\n".join(f"--- {p.name}:\n{p.read_text(errors='replace')[-4000:]}"
                     for p in paths if p.exists())


# --------------------------------------------------------------------------- masters


def masters(cluster: RunningCluster) -> set[str]:
    """The live nodes ``status`` shows as a master (a DLedger leader included)."""
    return {n["name"] for n in cluster.status()["nodes"]
            if n.get("alive") and str(n.get("role")).endswith("MASTER")}


def master_of(cluster: RunningCluster, group: str) -> tuple[str, str]:
    """The node serving as ``group``'s master, and its address (from ``status``)."""
    [(name, addr)] = [(n["name"], n["addr"]) for n in cluster.status()["nodes"]
                      if n.get("kind") == "broker" and n.get("group") == group
                      and n.get("alive") and str(n.get("role")).endswith("MASTER")]
    return str(name), str(addr)


def routed_new_master(namesrv: str, topic: str, group: str, old_addr: str | None) -> str:
    """The address the NameServer routes ``group``'s master to once it is not ``old_addr``
    (``None``: once it routes one at all)."""
    async def go() -> str:
        async with Admin(namesrv_addr=namesrv) as admin:
            with trio.fail_after(FAILOVER_WAIT_S):
                while True:
                    with contextlib.suppress(MQClientError):  # no route while none is master
                        route = await admin.topic_route(topic)
                        for bd in route.broker_datas:
                            addr = bd.broker_addrs.get(MASTER_ID)
                            if bd.broker_name == group and addr and addr != old_addr:
                                return str(addr)
                    await trio.sleep(ROUTE_POLL_S)  # the election's end: polled, with a deadline

    return _in_thread(go, FAILOVER_WAIT_S + 10)


# --------------------------------------------------------------------------- a kill mid-stream


def stream_events(events: list[Event]) -> list[Event]:
    """The events of the stream scenario (a client running that scenario alone names none)."""
    return [e for e in events if e.get("scenario", "stream") == "stream"]


def sends(events: list[Event], since: float = 0.0) -> int:
    """Acknowledged sends of the stream at or after wall time ``since``."""
    return sum(1 for e in stream_events(events) if e["event"] == "sent" and e["t"] >= since)


@attrs.frozen
class Failover:
    """A master killed while the stream ran: which, when (wall clock), and who took over (and
    when the NameServer routed it)."""

    victim: str
    old_addr: str
    killed: float
    new_addr: str
    routed: float


@attrs.frozen
class StreamPlan:
    """How much of the stream to see around the kill, and how long to wait for each part."""

    before_kill: int = 20
    after_failover: int = 40
    stream_wait_s: float = 120.0
    drain_wait_s: float = 90.0


def kill_during_stream(cluster: RunningCluster, client: EventStream, *, topic: str,
                       group: str, stop_file: Path, done: Cond, restart: bool = False,
                       plan: StreamPlan = StreamPlan()) -> Failover:
    """Once the client acknowledged ``plan.before_kill`` sends, ``kill -9`` ``group``'s master
    (asked of ``status`` beforehand: it is slow), wait until the NameServer routes the group to
    a new master (with ``restart``, a profile that elects none: the killed one restarted) and
    ``plan.after_failover`` sends were acknowledged after that, then create ``stop_file`` and
    wait until ``done(events)`` (the client's drain)."""
    victim, old_addr = master_of(cluster, group)
    try:
        client.wait_for("sends before the kill", lambda ev: sends(ev) >= plan.before_kill,
                        time.monotonic() + plan.stream_wait_s)
        killed_cli = cluster.cli("kill", victim, "--wait")
        assert killed_cli.returncode == 0, killed_cli.stderr
        killed = time.time()
        if restart:
            again = cluster.cli("restart", victim)
            assert again.returncode == 0, again.stderr
        new_addr = routed_new_master(cluster.namesrv_addr, topic, group,
                                     None if restart else old_addr)
        routed = time.time()
        client.wait_for("sends after the failover",
                        lambda ev: sends(ev, routed) >= plan.after_failover,
                        time.monotonic() + plan.stream_wait_s)
    finally:
        stop_file.touch()
    client.wait_for("the drain", done, time.monotonic() + plan.drain_wait_s)
    return Failover(victim, old_addr, killed, new_addr, routed)


def longest_gap(times: list[float], start: float) -> float:
    points = [start, *sorted(t for t in times if t >= start)]
    return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


def first_write_on_new_master(namesrv: str, topic: str, group: str, fo: Failover,
                              stored: int) -> float:
    """When (wall clock) the first message was stored on ``group`` after the kill (by its new
    master: the killed process was gone): ``topic``'s ``stored`` messages read back over
    remoting."""
    after = [m.store_timestamp / 1000 for m in read_topic(namesrv, topic, stored)
             if m.queue.broker_name == group and m.store_timestamp > fo.killed * 1000]
    assert after, "no message stored on the new master"
    return min(after)


def group_written_again(namesrv: str, topic: str, group: str, fo: Failover, stored: int
                        ) -> float:
    """``first_write_on_new_master``, where the proxy must have written the group again. A
    master that was restarted (``2m-2s-sync`` elects none) comes back at its old address, and
    an SDK may keep its sends on the other broker for the rest of the window (seen once in a
    CI rehearsal of the Java SDK's): there only the figures say when, if at all, the group was
    written again (NaN: not within the stream)."""
    if fo.new_addr != fo.old_addr:
        return first_write_on_new_master(namesrv, topic, group, fo, stored)
    try:
        return first_write_on_new_master(namesrv, topic, group, fo, stored)
    except AssertionError:
        return float("nan")


def stream_figures(events: list[Event], fo: Failover, first_write_after: float
                   ) -> dict[str, Any]:
    """The kill's cost as the client saw it: when the group was routed and written again, the
    longest times without an acknowledged send and without a received message, failures,
    redeliveries and duplicates (a message received more than once by one consumer)."""
    evs = stream_events(events)
    received = [e for e in evs if e["event"] == "received"]
    copies = [(e.get("via", ""), e["body"]) for e in received]
    return {
        "killed": fo.victim, "new_master": fo.new_addr,
        # the NameServer routed the group to its new master
        "routed_new_master_s": round(fo.routed - fo.killed, 2),
        # the first message the proxy stored on the group's new master
        "group_write_gap_s": round(first_write_after - fo.killed, 2),
        "longest_send_gap_s": round(longest_gap(
            [e["t"] for e in evs if e["event"] == "sent"], fo.killed), 2),
        "longest_receive_gap_s": round(longest_gap([e["t"] for e in received], fo.killed), 2),
        "send_failures": sum(1 for e in evs if e["event"] == "send_failed"),
        "ack_failures": sum(1 for e in evs if e["event"] == "ack_failed"),
        "redelivered": sum(1 for e in received if e["attempt"] > 1),
        "duplicates": len(copies) - len(set(copies)),
        "acked_sends": sends(evs),
    }
