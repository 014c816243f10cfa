"""The Trio shell of plain ACL: rules file, hot reload, and the check in front of processors.

``AclGuard.load()`` reads the rules (a node refuses to start on a bad file, as RocketMQ does);
``run()`` re-reads the file when its mtime/size/inode change (checked every
``ACL_RELOAD_CHECK_INTERVAL_S``; a broken edit is logged and the previous rules stay);
``wrap(processors)`` puts the check in front of each processor, keeping plain ``def``
processors plain (answered inline) and ``async def`` ones async. Without ``aclEnable`` nodes do
not build a guard at all, so a disabled ACL costs nothing per request.

A denial is answered as RocketMQ 4.9 answers an ``AclException`` thrown by its RPC hook:
SYSTEM_ERROR (1), remark ``org.apache.rocketmq.acl.common.AclException: <reason>``; it is logged
with the peer and counted (``denials``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Final

import trio

from ..logging import get_logger
from ..remoting.codec import RemotingCommand
from ..remoting.codes import FLAG_RESPONSE, ResponseCode
from ..remoting.connection import Connection
from ..remoting.processors import AnyProcessor, Processor, checked
from .permission import ADMIN_CODES
from .rules import AclConfigError, PlainAclConfig, parse_plain_acl
from .validator import AclDecider, AclDenied

#: RocketMQ's FileWatchService looks at the rules file every 500 ms.
ACL_RELOAD_CHECK_INTERVAL_S: Final = 0.5
#: plain_acl.yml larger than this is refused (it is a small hand-written file).
MAX_ACL_FILE_BYTES: Final = 4 * 1024 * 1024
#: Where RocketMQ looks by default, under rocketmqHome.
DEFAULT_ACL_FILE: Final = "conf/plain_acl.yml"


def default_acl_path(rocketmq_home: str) -> str:
    return os.path.join(rocketmq_home or ".", DEFAULT_ACL_FILE)


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def read_rules(path: str) -> PlainAclConfig:
    """Blocking: the rules in ``path``; ``AclConfigError`` with a one-line reason."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_ACL_FILE_BYTES + 1)
    except OSError as exc:
        raise AclConfigError(f"cannot read ACL rules {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_ACL_FILE_BYTES:
        raise AclConfigError(f"{path} is over {MAX_ACL_FILE_BYTES} bytes")
    return parse_plain_acl(data, source=path)


class AclGuard:
    def __init__(
        self,
        path: str,
        *,
        node: str = "acl",
        on_deny: Callable[[], None] | None = None,
        guarded_codes: frozenset[int] | None = None,
        admin_codes: frozenset[int] = ADMIN_CODES,
    ) -> None:
        self.path = path
        self.log = get_logger(node=node, role="acl")
        self.rules = PlainAclConfig()
        self._decider = AclDecider(self.rules, admin_codes)
        self.denials = 0
        self.reloads = 0
        self._stamp: tuple[int, int, int] | None = None
        self._on_deny = on_deny
        #: Only these codes are checked (None: every code with a processor).
        self.guarded_codes = guarded_codes
        self.admin_codes = admin_codes
        #: Set (and replaced) after each successful reload.
        self.reloaded = trio.Event()
        #: Set (and replaced) after each change of the file was looked at, loaded or not.
        self.examined = trio.Event()

    # ------------------------------------------------------------------ rules

    def load(self) -> None:
        """Blocking first load; raises ``AclConfigError``."""
        stamp = _stamp(self.path)
        self.rules = read_rules(self.path)
        self._decider = AclDecider(self.rules, self.admin_codes)
        self._stamp = stamp
        self.log.info(
            "acl rules loaded",
            path=self.path,
            accounts=len(self.rules.accounts),
            global_white=len(self.rules.global_white),
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Reload the rules whenever the file changes, until cancelled."""
        task_status.started()
        while True:
            await trio.sleep(ACL_RELOAD_CHECK_INTERVAL_S)  # a poll timer (RocketMQ: 500 ms)
            await self.reload_if_changed()

    async def reload_if_changed(self) -> bool:
        stamp = await trio.to_thread.run_sync(_stamp, self.path)
        if stamp is None or stamp == self._stamp:
            return False
        try:
            rules = await trio.to_thread.run_sync(read_rules, self.path)
        except AclConfigError as exc:
            self._stamp = stamp  # do not retry the same broken file every tick
            self.log.error("acl rules not reloaded, keeping the previous ones", error=str(exc))
            self._fire("examined")
            return False
        self.rules = rules
        self._decider = AclDecider(rules, self.admin_codes)
        self._stamp = stamp
        self.reloads += 1
        self.log.info("acl rules reloaded", path=self.path, accounts=len(rules.accounts))
        self._fire("reloaded")
        self._fire("examined")
        return True

    def _fire(self, name: str) -> None:
        event: trio.Event = getattr(self, name)
        setattr(self, name, trio.Event())
        event.set()

    # ------------------------------------------------------------------ checking

    def check(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        """None to go on, else the denial to answer with."""
        denied = self._decider.check(request, conn.peer)
        if denied is None:
            return None
        return self._deny(conn, request, denied)

    def topic_access(
        self, conn: Connection, request: RemotingCommand, topics: Iterable[str], needed: int
    ) -> RemotingCommand | None:
        """For a processor that read a message by offset or id: None if the sender of
        ``request`` has ``needed`` (PUB/SUB) on the message's ``topics``, else the denial."""
        denied = self._decider.check_topics(request, conn.peer, topics, needed)
        if denied is None:
            return None
        return self._deny(conn, request, denied)

    def account_may(self, access_key: str | None, remote: str, topics: Iterable[str],
                    needed: int) -> bool:
        """For what the broker itself sends a client (a transaction check): has the account
        ``access_key``, admitted from ``remote``, ``needed`` on ``topics`` under the current
        rules? Not a denial of a request: neither counted nor logged here."""
        return self._decider.account_topics(access_key, remote, topics, needed) is None

    def _deny(self, conn: Connection, request: RemotingCommand, denied: AclDenied
              ) -> RemotingCommand:
        self.denials += 1
        if self._on_deny is not None:
            self._on_deny()
        self.log.warning(
            "acl denied",
            peer=conn.peer,
            code=request.code,
            access_key=request.ext_fields.get("AccessKey"),
            reason=str(denied),
        )
        return RemotingCommand(
            code=int(ResponseCode.SYSTEM_ERROR),
            opaque=request.opaque,
            flag=FLAG_RESPONSE,
            remark=denied.remark,
        )

    def wrap_one(self, processor: AnyProcessor) -> Processor:
        return checked(processor, self.check)

    def wrap(self, processors: Mapping[int, AnyProcessor]) -> dict[int, AnyProcessor]:
        codes = self.guarded_codes
        return {
            code: self.wrap_one(p) if codes is None or code in codes else p
            for code, p in processors.items()
        }
