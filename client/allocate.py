"""Queue allocation strategies (Java ``AllocateMessageQueueStrategy``). Pure.

A strategy is any callable ``(group, current_cid, mq_all, cid_all) -> list[MessageQueue]``;
inputs are sorted first, so every member computes the same split.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .model import MessageQueue

AllocateStrategy = Callable[[str, str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]


def allocate_averagely(
    group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    """Contiguous blocks; the first ``len(mq) % len(cid)`` members get one extra queue."""
    mqs = sorted(mq_all)
    cids = sorted(cid_all)
    if not mqs or current_cid not in cids:
        return []
    index = cids.index(current_cid)
    n_mq, n_cid = len(mqs), len(cids)
    mod = n_mq % n_cid
    if n_mq <= n_cid:
        size = 1
    elif mod > 0 and index < mod:
        size = n_mq // n_cid + 1
    else:
        size = n_mq // n_cid
    start = index * size if mod > 0 and index < mod else index * size + mod
    count = min(size, n_mq - start)
    return [mqs[(start + i) % n_mq] for i in range(max(0, count))]


def allocate_by_circle(
    group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    """Round robin: queue i goes to member i % len(cids)."""
    mqs = sorted(mq_all)
    cids = sorted(cid_all)
    if current_cid not in cids:
        return []
    index = cids.index(current_cid)
    return [mq for i, mq in enumerate(mqs) if i % len(cids) == index]
