"""Recovery at open (pure): find the CommitLog's valid end, cut the dirty tail, cut the
ConsumeQueue units and IndexFiles that point beyond it, and say where dispatch must restart.

* Normal (no ``abort`` file): scan from the third-last CommitLog file.
* Abnormal (``abort`` present): scan from the newest file whose first record was stored at or
  before the checkpoint's safe time (min(physic, logics) − 3 s; also index when
  messageIndexSafe), then re-dispatch everything from that file; replays are idempotent.
Both check magic, TOTALSIZE against the fields, PHYSICALOFFSET and (checkCRCOnRecover) body CRC.
"""

from __future__ import annotations

import attrs
import structlog

from .checkpoint import StoreCheckpoint
from .commitlog import CommitLog
from .config import RECOVER_FROM_LAST_FILES, MessageStoreConfig
from .dispatcher import ConsumeQueueTable
from .index_file import IndexService

log = structlog.get_logger(component="recovery")


@attrs.frozen
class RecoveryResult:
    abnormal: bool
    commitlog_end: int
    scan_from: int  # where the CommitLog validation scan started
    reput_from: int


def recover(
    config: MessageStoreConfig,
    commitlog: CommitLog,
    cqs: ConsumeQueueTable,
    index: IndexService | None,
    checkpoint: StoreCheckpoint,
    *,
    last_exit_ok: bool,
) -> RecoveryResult:
    for cq in cqs.queues.values():
        cq.recover()
    files = commitlog.queue.files
    check_crc = config.check_crc_on_recover
    if not files:
        end = start_offset = scan_from = 0
    elif last_exit_ok:
        start = max(0, len(files) - RECOVER_FROM_LAST_FILES)
        end = commitlog.scan_valid_end(start, check_crc=check_crc)
        start_offset = end
        scan_from = files[start].file_from
    else:
        safe_ts = (
            checkpoint.min_timestamp_index()
            if config.message_index_enable and config.message_index_safe
            else checkpoint.min_timestamp()
        )
        start = 0
        for i in range(len(files) - 1, -1, -1):
            ts = commitlog.first_store_timestamp(files[i])
            if 0 < ts <= safe_ts:
                start = i
                break
        end = commitlog.scan_valid_end(start, check_crc=True)
        start_offset = scan_from = files[start].file_from
    if files:
        commitlog.queue.set_positions(end)
        commitlog.queue.truncate_dirty(end)
    for cq in cqs.queues.values():
        cq.truncate_dirty(end)
        cq.correct_min_offset(commitlog.min_offset)
    rebuild_from: int | None = None
    if index is not None:
        rebuild_from = index.truncate_beyond(
            end, None if last_exit_ok else checkpoint.index_msg_timestamp
        )
    reput = cqs.max_physic_offset()
    if reput < 0:
        reput = commitlog.min_offset
    reput = min(reput, start_offset)
    if rebuild_from is not None:
        reput = min(reput, rebuild_from)
    reput = max(commitlog.min_offset, min(reput, end))
    result = RecoveryResult(
        abnormal=not last_exit_ok,
        commitlog_end=end,
        scan_from=scan_from,
        reput_from=reput,
    )
    log.info(
        "store_recovered", abnormal=result.abnormal, commitlog_end=end, reput_from=reput,
        files=len(files),
    )
    return result


def rebuild_topic_queue_table(commitlog: CommitLog, cqs: ConsumeQueueTable) -> None:
    table: dict[tuple[str, int], int] = {}
    for key, cq in cqs.queues.items():
        table[key] = cq.max_offset_in_queue
    commitlog.topic_queue_table = table
