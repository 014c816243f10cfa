"""What the client's command-line tools share: the NameServer/ACL options, JSON output,
the progress line and the runner that turns a client error into an exit code."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import trio

from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.errors import MQClientError
from rmq_cluster.client.model import ReceivedMessage

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


def client_config(args: argparse.Namespace) -> ClientConfig:
    return ClientConfig(namesrv_addr=args.namesrv or None,
                        instance_name=f"cli-{os.getpid()}",
                        access_key=getattr(args, "access_key", None) or None,
                        secret_key=getattr(args, "secret_key", None) or None)


def add_ns(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namesrv", default=os.environ.get("NAMESRV_ADDR"),
                   help="NameServer address(es), ';'-separated (default: $NAMESRV_ADDR)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--access-key", default=os.environ.get("RMQ_ACCESS_KEY"),
                   help="ACL accessKey: sign requests (default: $RMQ_ACCESS_KEY)")
    p.add_argument("--secret-key", default=os.environ.get("RMQ_SECRET_KEY"),
                   help="ACL secretKey (default: $RMQ_SECRET_KEY)")



def runner(fn: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(trio.run(fn, args))
        except MQClientError as exc:
            if getattr(args, "json", False):
                out({"error": str(exc), "code": exc.code, "remark": exc.remark})
            else:
                print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130

    return run


def msg_row(m: ReceivedMessage) -> dict[str, Any]:
    return {"msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic,
            "brokerName": m.queue.broker_name, "queueId": m.queue_id,
            "queueOffset": m.queue_offset, "keys": m.keys, "tags": m.tags,
            "bodyLength": len(m.body), "bodyCrc": m.checksum(),
            "reconsumeTimes": m.reconsume_times, "storeTimestamp": m.store_timestamp}
