"""What the Python SDK's compat tests share (``rocketmq-python-client`` through ``mqproxy``: on
``up single`` in test_python_grpc_client.py, on the replicated profiles in
test_python_grpc_profiles.py): the probe (``pyclient/probe.py``, in the SDK's own venv) run as a
user configures the SDK, one scenario (``run_probe``) or several at once in one process
(``run_scenarios``), and the checks of what its scenarios saw."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rmq_cluster.cluster.acl.signing import Credentials

from .grpc_testlib import check_transactions

PROBE = Path(__file__).parent / "pyclient" / "probe.py"
PROBE_TIMEOUT_S = 90
#: the SDK's account (may publish and subscribe; a cluster without ACL ignores it)
SDK_USER = Credentials("grpcUser01", "grpcUserSecret01")

Event = dict[str, Any]
#: a lane of ``run_scenarios``: scenarios run one after the other, as ``(name, *args)``
Lane = Sequence[Sequence[str]]

#: issue 34's FIFO push scenario: more consumers than queues, several message groups per queue
FIFO_CONSUMERS, FIFO_QUEUES, FIFO_GROUPS, FIFO_PER_GROUP = 3, 2, 8, 50
FIFO_DEADLINE_S = 60


@attrs.frozen
class Proxied:
    namesrv_addr: str
    dir: Path
    endpoint: str
    home: Path
    #: the certificate the proxy serves (``up --proxy`` made it in the cluster's dir)
    cert: Path


def sdk_env(cert: Path, who: Credentials) -> dict[str, str]:
    """What a user sets: TLS on, the cluster's certificate trusted, the account's keys."""
    return {"PROBE_TLS": "1", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert),
            "PROBE_ACCESS_KEY": who.access_key, "PROBE_SECRET_KEY": who.secret_key}


def sdk_log(home: Path) -> Path:
    """Where the SDK logs (under the probe's $HOME)."""
    return home / "logs" / "rocketmq_python" / "rocketmq_client.log"


@attrs.frozen
class ProbeExit:
    """A probe run: its exit code (None: killed at its timeout), its events, and what to show
    when it failed (its stderr's end and the SDK log's)."""

    returncode: int | None
    events: list[Event]
    logs: str


def probe(proxied: Proxied, python: Path, *args: str, env: dict[str, str] | None = None,
          timeout: float = PROBE_TIMEOUT_S) -> ProbeExit:
    """The probe with ``args``, run to its end (or killed at ``timeout``)."""
    home = proxied.home
    home.mkdir(exist_ok=True)  # the SDK logs under $HOME/logs
    argv = [str(python), str(PROBE), proxied.endpoint, *args]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
            env={**os.environ, "HOME": str(home), **(env or sdk_env(proxied.cert, SDK_USER))},
        )
        rc, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as late:  # run() killed it: what it printed until then
        rc, stdout, stderr = None, _text(late.stdout), _text(late.stderr)
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    log = sdk_log(home)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    return ProbeExit(rc, events, f"probe exit {rc}:\n{stderr[-3000:]}\nSDK log:\n{tail}")


def _text(out: str | bytes | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


def run_probe(proxied: Proxied, python: Path, *args: str, env: dict[str, str] | None = None
              ) -> list[Event]:
    """One scenario's events, once the probe ran it to its end ("done") and exited 0."""
    ran = probe(proxied, python, *args, env=env)
    assert ran.returncode == 0 and ran.events[-1:] == [{"event": "done"}], ran.logs
    return ran.events


@attrs.frozen
class Scenarios:
    """The events of scenarios run at once in one probe (``many``), by scenario."""

    events: Mapping[str, list[Event]]
    logs: str

    def of(self, scenario: str) -> list[Event]:
        """``scenario``'s events, once it ran to its end (else fail, with the probe's logs)."""
        events = self.events.get(scenario, [])
        failed = [e["error"] for e in events if e["event"] == "failed"]
        assert events[-1:] == [{"event": "done"}], (
            f"{scenario} did not finish: {failed or events[-3:]}\n{self.logs}")
        return events


def run_scenarios(proxied: Proxied, python: Path, lanes: Sequence[Lane], timeout: float
                  ) -> Scenarios:
    """The lanes run at once in one probe process (``probe.py many``): a thread per lane, its
    scenarios one after the other. A scenario's failure fails only the checks of its events."""
    ran = probe(proxied, python, "many", json.dumps([[list(s) for s in lane] for lane in lanes]),
                timeout=timeout)
    with (proxied.home / "many.jsonl").open("w") as out:  # for a look after a failure
        out.writelines(json.dumps(e) + "\n" for e in ran.events)
    by: defaultdict[str, list[Event]] = defaultdict(list)
    for e in ran.events:
        if "scenario" in e:
            by[e["scenario"]].append({k: v for k, v in e.items() if k != "scenario"})
    return Scenarios(dict(by), ran.logs)


def check_consumed(produced: list[Event], consumed: list[Event]) -> None:
    """The ``consume`` scenario after ``produce``: the SimpleConsumer acked each normal message
    (the ids the producer was given, bodies, tags) and changed one's invisible duration."""
    normal = {e["message_id"] for e in produced if e["event"] == "sent" and e["kind"] == "normal"}
    acked = {e["message_id"]: e for e in consumed if e["event"] == "acked"}
    assert set(acked) == normal, consumed
    assert sorted(e["body"] for e in acked.values()) == [f"normal {i}" for i in range(3)]
    assert all(e["tag"] == "N" for e in acked.values())
    assert [e["event"] for e in consumed].count("changed") == 1


def check_sdk_transactions(events: list[Event], topic: str) -> None:
    """The ``transaction`` scenario: four half messages, each with a transaction id of its own,
    and what ``check_transactions`` asks of both SDKs."""
    ids = [e["transaction_id"] for e in events if e["event"] == "sent"]
    assert len(ids) == 4 and all(ids) and len(set(ids)) == 4, events
    check_transactions(events, topic)


def fifo_args(topic: str, group: str, per_group: int = FIFO_PER_GROUP) -> tuple[str, ...]:
    """The probe's ``push_fifo`` scenario on ``topic`` for the orderly ``group``."""
    return ("push_fifo", topic, group, str(FIFO_CONSUMERS), str(FIFO_GROUPS), str(per_group),
            str(FIFO_DEADLINE_S))


def check_fifo(events: list[Event], per_group: int = FIFO_PER_GROUP) -> None:
    """``push_fifo``: each group's messages consumed once each, in send order, one after the
    other (the next began only once the one before it had been consumed, and so acked)."""
    [started] = [e for e in events if e["event"] == "started"]
    assert started["fifo"] == [True] * FIFO_CONSUMERS, started  # the proxy said fifo
    # a send the SDK gave up on stops its group there (the probe waits for the rest only)
    unsent = [e for e in events if e["event"] == "send_failed"]
    assert not unsent, f"the SDK gave up on sends: {unsent}"
    consumed = sorted((e for e in events if e["event"] == "consumed"), key=lambda e: e["start"])
    by_group: dict[str, list[Event]] = {}
    for e in consumed:
        assert e["message_group"] == e["group"] and not e["overlap"], e
        by_group.setdefault(e["group"], []).append(e)
    assert sorted(by_group) == sorted(f"g{k}" for k in range(FIFO_GROUPS)), sorted(by_group)
    seqs = {group: [e["seq"] for e in seen] for group, seen in sorted(by_group.items())}
    for group, seen in by_group.items():
        assert seqs[group] == list(range(per_group)), (group, seen[-3:], seqs)
        for before, after in itertools.pairwise(seen):
            assert after["start"] >= before["end"], (group, before, after)
