"""What the client's command-line tools share: the NameServer/ACL options, JSON output,
the progress line and the runner that turns a client error into an exit code."""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from ..cluster.home import STATE_FILE, cluster_home
from .config import ClientConfig
from .errors import MQClientError
from .model import ReceivedMessage

#: A progress line is redrawn at most this often.
PROGRESS_INTERVAL_S = 0.2


def out(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")


class Progress:
    def __init__(self, what: str, total: int | None) -> None:
        self.enabled = sys.stderr.isatty()
        self.what = what
        self.total = total
        self.last = 0.0

    def update(self, n: int, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_INTERVAL_S:
            return
        self.last = now
        total = f"/{self.total}" if self.total else ""
        sys.stderr.write(f"\r{self.what} {n}{total}")
        sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


#: The cluster a command uses when neither ``-n`` nor $NAMESRV_ADDR names NameServers.
DEFAULT_CLUSTER = "default"


def cluster_namesrv(name: str) -> tuple[str | None, Path]:
    """The NameServer addresses ``rmq-cluster up --name NAME`` recorded (its cluster.json
    under the cluster home), and where it looked."""
    path = cluster_home().expanduser().resolve() / name / STATE_FILE
    try:
        addr = json.loads(path.read_text(encoding="utf-8")).get("namesrv_addr")
    except (OSError, ValueError, AttributeError):
        return None, path.parent
    return (addr if isinstance(addr, str) and addr.strip() else None), path.parent


def namesrv_of(args: argparse.Namespace) -> str:
    """``-n``, else $NAMESRV_ADDR, else the NameServers of the cluster ``--name`` (status and
    demo find a cluster the same way); MQClientError naming the flags when none is known."""
    given = args.namesrv or os.environ.get("NAMESRV_ADDR", "").strip()
    if given:
        return str(given)
    name = getattr(args, "name", None) or DEFAULT_CLUSTER
    addr, where = cluster_namesrv(name)
    if addr is None:
        raise MQClientError(f"no NameServer address: pass -n HOST:PORT (or set NAMESRV_ADDR); "
                            f"no cluster {name!r} in {where.parent} to take it from (--name)")
    return addr


def client_config(args: argparse.Namespace) -> ClientConfig:
    return ClientConfig(namesrv_addr=namesrv_of(args),
                        instance_name=f"cli-{os.getpid()}",
                        access_key=getattr(args, "access_key", None) or None,
                        secret_key=getattr(args, "secret_key", None) or None)


def add_ns(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namesrv", default=None,
                   help="NameServer address(es), ';'-separated (default: $NAMESRV_ADDR, else "
                        "the running cluster --name's)")
    p.add_argument("--name", default=None,
                   help=f"cluster whose NameServers to use without -n (default "
                        f"{DEFAULT_CLUSTER}, under $RMQ_CLUSTER_HOME)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--access-key", default=os.environ.get("RMQ_ACCESS_KEY"),
                   help="ACL accessKey: sign requests (default: $RMQ_ACCESS_KEY)")
    p.add_argument("--secret-key", default=os.environ.get("RMQ_SECRET_KEY"),
                   help="ACL secretKey (default: $RMQ_SECRET_KEY)")



def one_line(text: str) -> str:
    return " ".join(str(text).split())


def fail(message: str) -> None:
    """The one line on stderr a failed command leaves (``rmq-cluster: error: ...``)."""
    sys.stderr.write(f"rmq-cluster: error: {one_line(message)}\n")
    sys.stderr.flush()


def runner(fn: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], int]:
    """Run ``fn(args)`` under trio: its int is the exit status; a client error is one line on
    stderr (and, with ``--json``, an ``{"error": ...}`` object on stdout) and exit status 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(trio.run(fn, args))
        except MQClientError as exc:
            if getattr(args, "json", False):
                out({"error": one_line(str(exc)), "code": exc.code, "remark": exc.remark})
            fail(str(exc))
            return 1
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            # stdout closed by the reader (``| head``): nothing more to say
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - interpreter exit flushes it
            return 0

    return run


#: ``bodyEncoding`` of a body shown as it is (UTF-8 text without control characters other
#: than tab and line breaks) or as base64 (anything else).
BODY_TEXT = "text"
BODY_BASE64 = "base64"
_TEXT_CONTROLS = frozenset("\t\n\r")


def body_fields(body: bytes) -> dict[str, str]:
    """``{"body": ..., "bodyEncoding": "text" | "base64"}``."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and all(ch.isprintable() or ch in _TEXT_CONTROLS for ch in text):
        return {"body": text, "bodyEncoding": BODY_TEXT}
    return {"body": base64.b64encode(body).decode("ascii"), "bodyEncoding": BODY_BASE64}


def msg_row(m: ReceivedMessage) -> dict[str, Any]:
    """One received message for the CLI: ids, queue, keys/tags, the body (text or base64,
    ``bodyEncoding`` says which) and every property."""
    return {"msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic,
            "brokerName": m.queue.broker_name, "queueId": m.queue_id,
            "queueOffset": m.queue_offset, "keys": m.keys, "tags": m.tags,
            "bodyLength": len(m.body), "bodyCrc": m.checksum(), **body_fields(m.body),
            "properties": dict(m.properties),
            "reconsumeTimes": m.reconsume_times, "storeTimestamp": m.store_timestamp}


def msg_text(row: dict[str, Any]) -> str:
    """A ``msg_row`` as plain text: a header line, the properties, the body (indented)."""
    head = (f"{row['msgId']} q={row['brokerName']}:{row['queueId']} off={row['queueOffset']} "
            f"keys={row['keys']} tags={row['tags']} bytes={row['bodyLength']}")
    props = " ".join(f"{k}={v}" for k, v in sorted(row["properties"].items()))
    body = row["body"] if row["bodyEncoding"] == BODY_TEXT else f"base64:{row['body']}"
    lines = [head, f"  properties: {props}" if props else "  properties: -"]
    lines.extend(f"  | {line}" for line in (body.splitlines() or [""]))
    return "\n".join(lines)
