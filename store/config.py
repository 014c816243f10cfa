"""MessageStoreConfig: RocketMQ's key names and defaults (4.9.x ``MessageStoreConfig``)."""

from __future__ import annotations

import enum
import os
from typing import Final

import attrs

from ..cluster.config import setting

OS_PAGE_SIZE_BYTES: Final = 4096
CQ_STORE_UNIT_SIZE_BYTES: Final = 20
CHECKPOINT_FILE_SIZE_BYTES: Final = 4096
MAX_PROPERTIES_LENGTH_BYTES: Final = 32767
# A record may exceed the body limit by this much (headers, topic, properties).
RECORD_OVERHEAD_ALLOWANCE_BYTES: Final = 64 * 1024
RECOVER_FROM_LAST_FILES: Final = 3  # normal recovery scans from the third-last file
CHECKPOINT_SAFETY_MARGIN_MS: Final = 3000
DISK_SPACE_WARNING_LEVEL_RATIO: Final = 0.90  # rocketmq.broker.diskSpaceWarningLevelRatio
DISK_SPACE_CLEAN_FORCIBLY_RATIO: Final = 0.85  # rocketmq.broker.diskSpaceCleanForciblyRatio
MAX_DELETE_FILES_PER_ROUND: Final = 10
MAX_DISPATCH_BYTES_PER_ROUND: Final = 512 * 1024  # ~4 ms of reput work between yields
DELAY_LEVELS_MS: Final = (
    1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000, 480000,
    540000, 600000, 1200000, 1800000, 3600000, 7200000,
)
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
#: The timer wheel's system topic (RocketMQ 5 ``TimerMessageStore.TIMER_TOPIC``).
TIMER_TOPIC: Final = "rmq_sys_wheel_timer"
#: timerPrecisionMs values RocketMQ 5 accepts (its setter rounds down to one of them).
TIMER_PRECISIONS_MS: Final = (100, 200, 500, 1000)


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


def _default_root() -> str:
    return os.path.join(os.path.expanduser("~"), "store")


@attrs.frozen
class MessageStoreConfig:
    store_path_root_dir: str = setting("storePathRootDir", _default_root())
    # empty = <storePathRootDir>/commitlog
    store_path_commit_log: str = setting("storePathCommitLog", "")
    mapped_file_size_commit_log: int = setting("mappedFileSizeCommitLog", 1024 * 1024 * 1024)
    mapped_file_size_consume_queue: int = setting(
        "mappedFileSizeConsumeQueue", 300000 * CQ_STORE_UNIT_SIZE_BYTES
    )
    flush_disk_type: FlushDiskType = setting(
        "flushDiskType", FlushDiskType.ASYNC_FLUSH
    )
    broker_role: BrokerRole = setting(
        "brokerRole", BrokerRole.ASYNC_MASTER
    )
    flush_interval_commit_log_ms: int = setting("flushIntervalCommitLog", 500)
    flush_commit_log_least_pages: int = setting("flushCommitLogLeastPages", 4)
    flush_commit_log_thorough_interval_ms: int = setting(
        "flushCommitLogThoroughInterval", 1000 * 10
    )
    flush_interval_consume_queue_ms: int = setting("flushIntervalConsumeQueue", 1000)
    flush_consume_queue_least_pages: int = setting("flushConsumeQueueLeastPages", 2)
    flush_consume_queue_thorough_interval_ms: int = setting(
        "flushConsumeQueueThoroughInterval", 1000 * 60
    )
    sync_flush_timeout_ms: int = setting("syncFlushTimeout", 1000 * 5)
    max_message_size: int = setting("maxMessageSize", 1024 * 1024 * 4)
    #: Reserve each new CommitLog segment's blocks at creation (posix_fallocate) instead of a
    #: sparse file; RocketMQ's key (it pre-touches the pages).
    warm_maped_file_enable: bool = setting("warmMapedFileEnable", False)
    check_crc_on_recover: bool = setting("checkCRCOnRecover", True)
    file_reserved_time_hours: int = setting("fileReservedTime", 72)
    delete_when: str = setting("deleteWhen", "04")
    disk_max_used_space_ratio: int = setting("diskMaxUsedSpaceRatio", 75)
    clean_file_forcibly_enable: bool = setting("cleanFileForciblyEnable", True)
    clean_resource_interval_ms: int = setting("cleanResourceInterval", 10000)
    delete_commit_log_files_interval_ms: int = setting("deleteCommitLogFilesInterval", 100)
    destroy_mapped_file_interval_forcibly_ms: int = setting(
        "destroyMapedFileIntervalForcibly", 1000 * 120
    )
    message_index_enable: bool = setting("messageIndexEnable", True)
    message_index_safe: bool = setting("messageIndexSafe", False)
    max_hash_slot_num: int = setting("maxHashSlotNum", 5000000)
    max_index_num: int = setting("maxIndexNum", 5000000 * 4)
    max_msgs_num_batch: int = setting("maxMsgsNumBatch", 64)
    os_page_cache_busy_timeout_ms: int = setting("osPageCacheBusyTimeOutMills", 1000)
    max_transfer_bytes_on_message_in_memory: int = setting(
        "maxTransferBytesOnMessageInMemory", 1024 * 256
    )
    max_transfer_count_on_message_in_memory: int = setting(
        "maxTransferCountOnMessageInMemory", 32
    )
    message_delay_level: str = setting(
        "messageDelayLevel", "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    )
    # timer messages (RocketMQ 5 MessageStoreConfig's keys and defaults)
    timer_wheel_enable: bool = setting("timerWheelEnable", True)
    timer_max_delay_sec: int = setting("timerMaxDelaySec", 3600 * 24 * 3)
    timer_precision_ms: int = setting("timerPrecisionMs", 1000)
    timer_roll_window_slot: int = setting("timerRollWindowSlot", 3600 * 24 * 2)
    timer_flush_interval_ms: int = setting("timerFlushIntervalMs", 1000)
    mapped_file_size_timer_log: int = setting("mappedFileSizeTimerLog", 100 * 1024 * 1024)
    timer_stop_dequeue: bool = setting("timerStopDequeue", False)

    @property
    def commit_log_dir(self) -> str:
        return self.store_path_commit_log or os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "checkpoint")

    @property
    def timer_wheel_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "timerwheel")

    @property
    def timer_log_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "timerlog")

    @property
    def timer_check_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "config", "timercheck")

    @property
    def abort_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "abort")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "lock")

    @property
    def cq_file_size(self) -> int:
        size = self.mapped_file_size_consume_queue
        return max(CQ_STORE_UNIT_SIZE_BYTES, size - size % CQ_STORE_UNIT_SIZE_BYTES)
