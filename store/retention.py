"""Retention and full-disk protection (pure; the Trio shell calls ``clean_once`` periodically).

* Delete when the local hour is listed in ``deleteWhen`` ("04" or "04;05"), when the disk is
  fuller than ``diskMaxUsedSpaceRatio`` %, or on request; delete only files whose
  lastModified + ``fileReservedTime`` hours has passed — except above the forced-clean ratio
  (0.85), where the oldest files go regardless of age. Never the last file, at most 10 a round,
  never a file the dispatcher or the flusher has not finished with.
* Above the warning ratio (0.90) the store is marked DISK_FULL and refuses puts with
  SERVICE_NOT_AVAILABLE; the flag clears at or below it.
* The free-space probe is injectable: ``disk_usage(path) -> used ratio in [0, 1]``.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

import attrs
import structlog

from .commitlog import CommitLog
from .config import (
    DISK_SPACE_CLEAN_FORCIBLY_RATIO,
    DISK_SPACE_WARNING_LEVEL_RATIO,
    MAX_DELETE_FILES_PER_ROUND,
    MessageStoreConfig,
)
from .dispatcher import ConsumeQueueTable
from .index_file import IndexService

log = structlog.get_logger(component="retention")

DiskUsageProbe = Callable[[str], float]
MIN_DISK_MAX_USED_RATIO_PERCENT = 10
MAX_DISK_MAX_USED_RATIO_PERCENT = 95


def default_disk_usage(path: str) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


def is_delete_hour(delete_when: str, hour: int) -> bool:
    for part in delete_when.split(";"):
        part = part.strip()
        if part.isdigit() and int(part) == hour:
            return True
    return False


@attrs.frozen
class CleanResult:
    disk_ratio: float
    disk_full: bool
    commitlog_files_deleted: int
    consume_queue_files_deleted: int
    index_files_deleted: int


class Retention:
    def __init__(
        self,
        config: MessageStoreConfig,
        commitlog: CommitLog,
        cqs: ConsumeQueueTable,
        index: IndexService | None,
        *,
        disk_usage: DiskUsageProbe = default_disk_usage,
        safe_offset: Callable[[], int],
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.cqs = cqs
        self.index = index
        self.disk_usage = disk_usage
        self.safe_offset = safe_offset  # files ending above this are still in use
        self.disk_full = False
        self.manual_rounds = 0

    def check_disk(self) -> float:
        ratio = self.disk_usage(self.config.commit_log_dir)
        full = ratio > DISK_SPACE_WARNING_LEVEL_RATIO
        if full != self.disk_full:
            log.warning("disk_full" if full else "disk_ok", ratio=round(ratio, 4))
        self.disk_full = full
        return ratio

    def request_delete(self, rounds: int = 20) -> None:
        self.manual_rounds = rounds

    def clean_once(self, now_ms: int | None = None) -> CleanResult:
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        ratio = self.check_disk()
        max_ratio = (
            min(
                MAX_DISK_MAX_USED_RATIO_PERCENT,
                max(MIN_DISK_MAX_USED_RATIO_PERCENT, self.config.disk_max_used_space_ratio),
            )
            / 100.0
        )
        hour = time.localtime(now_ms / 1000).tm_hour
        time_up = is_delete_hour(self.config.delete_when, hour)
        space_full = ratio > max_ratio
        manual = self.manual_rounds > 0
        if manual:
            self.manual_rounds -= 1
        force = self.config.clean_file_forcibly_enable and ratio > DISK_SPACE_CLEAN_FORCIBLY_RATIO
        deleted = 0
        if time_up or space_full or manual:
            deleted = self._delete_commitlog_files(now_ms, force)
        cq_deleted = idx_deleted = 0
        if deleted:
            cl_min = self.commitlog.min_offset
            for cq in self.cqs.queues.values():
                cq_deleted += cq.delete_expired(cl_min)
            if self.index is not None:
                idx_deleted = self.index.delete_expired(cl_min)
        self.commitlog.queue.retry_destroy()
        return CleanResult(ratio, self.disk_full, deleted, cq_deleted, idx_deleted)

    def _delete_commitlog_files(self, now_ms: int, force: bool) -> int:
        reserved_ms = self.config.file_reserved_time_hours * 3600 * 1000
        safe = self.safe_offset()
        count = 0
        for mf in self.commitlog.queue.files[:-1]:
            if count >= MAX_DELETE_FILES_PER_ROUND or mf.file_end > safe:
                break
            expired = mf.last_modified() * 1000 + reserved_ms <= now_ms
            if not (expired or force):
                break
            count += 1
        if count:
            gone = self.commitlog.queue.delete_first_files(count)
            log.info(
                "commitlog_files_deleted", count=len(gone), forced=force,
                min_offset=self.commitlog.min_offset,
            )
        return count
