"""Plain ACL permissions (RocketMQ ``acl.common.Permission``): bits, parsing, checking.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

from ..remoting.codes import RequestCode

DENY: Final = 1
#: Needed-permission marker: either PUB or SUB satisfies it.
ANY: Final = 1 << 1
PUB: Final = 1 << 2
SUB: Final = 1 << 3

#: Request codes only an ``admin: true`` account may send: RocketMQ 4.9's
#: ``Permission.ADMIN_CODE`` (the first five), plus the reads that reveal a node's settings
#: (its config -- secrets are masked in it, but the rest is the operator's business) and the
#: ACL rule reads and writes (RocketMQ's GET_BROKER_CLUSTER_ACL_CONFIG answers with secrets).
#: Topic/group/offset tables (GET_ALL_*), runtime and consume stats stay open to any signed
#: account: slaves sync them and ``mqadmin`` monitoring reads them.
ADMIN_CODES: Final = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.GET_BROKER_CONFIG,
        RequestCode.GET_NAMESRV_CONFIG,
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
        RequestCode.DELETE_ACL_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
    }
)

_BY_NAME: Final = {
    "PUB": PUB,
    "SUB": SUB,
    "PUB|SUB": PUB | SUB,
    "SUB|PUB": PUB | SUB,
    "DENY": DENY,
}


def parse_perm(text: str | None) -> int:
    """``PUB``, ``SUB``, ``PUB|SUB``/``SUB|PUB``, ``DENY``; anything else (or nothing) is DENY."""
    if text is None:
        return DENY
    return _BY_NAME.get(str(text).strip(), DENY)


def perm_name(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    names = [n for n, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit]
    return "|".join(names) or "DENY"


def check_permission(needed: int, owned: int) -> bool:
    """Whether ``owned`` grants ``needed`` (DENY in ``owned`` refuses everything)."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def need_admin(code: int) -> bool:
    return code in ADMIN_CODES
