"""The keys Apache RocketMQ's broker answers that have no setting of ours, and their values.

GET_BROKER_CONFIG and GET_BROKER_RUNTIME_INFO answer every key Apache RocketMQ 4.9's broker
answers, so tools that read them by name (mqadmin ``getBrokerConfig``, ``brokerStatus``,
``clusterList``, dashboards) find each one. Most of Apache's extra config keys size thread
pools, queues and Netty options this broker does not have (one Trio loop serves every
request): they are answered with Apache's defaults for this machine's processor count, so
they read as an untuned Apache broker would. The ones that mean something here are derived
from our settings or state by the callers (``config_properties``, the runtime-info
processor). Pure: no trio.
"""

from __future__ import annotations

import os
from typing import Final

from ..cluster.remoting.apache_options import APACHE_SERVER_OPTIONS

#: Apache's boolean, size and interval config keys with a fixed default that we do not act on.
_FIXED: Final[dict[str, str]] = {
    "adminBrokerThreadPoolNums": "16",
    "autoDeleteUnusedStats": "false",
    "bitMapLengthConsumeQueueExt": "112",
    "brokerFastFailureEnable": "true",
    "channelNotActiveInterval": "60000",
    "clientAsyncSemaphoreValue": "65535",
    "clientChannelMaxIdleTimeSeconds": "120",
    "clientCloseSocketIfTimeout": "true",
    "clientManageThreadPoolNums": "32",
    "clientManagerThreadPoolQueueCapacity": "1000000",
    "clientOnewaySemaphoreValue": "65535",
    "clientPooledByteBufAllocatorEnable": "false",
    "clientSocketRcvBufSize": "0",
    "clientSocketSndBufSize": "0",
    "clientWorkerThreads": "4",
    "commercialBaseCount": "1",
    "commercialBigCount": "1",
    "commercialEnable": "true",
    "commercialTimerCount": "1",
    "commercialTransCount": "1",
    "commitCommitLogLeastPages": "4",
    "commitCommitLogThoroughInterval": "200",
    "commitIntervalCommitLog": "200",
    "compressedRegister": "false",
    "connectTimeoutMillis": "3000",
    "consumerFallbehindThreshold": str(16 * 1024 * 1024 * 1024),
    "consumerManageThreadPoolNums": "32",
    "consumerManagerThreadPoolQueueCapacity": "1000000",
    "debugLockEnable": "false",
    "defaultQueryMaxNum": "32",
    "deleteConsumeQueueFilesInterval": "100",
    "disableConsumeIfConsumerReadSlowly": "false",
    "diskFallRecorded": "true",
    "duplicationEnable": "false",
    "enableCalcFilterBitMap": "false",
    "enableConsumeQueueExt": "false",
    "enableDetailStat": "true",
    "enableLmq": "false",
    "enableMultiDispatch": "false",
    "enableScheduleAsyncDeliver": "false",
    "enableScheduleMessageStats": "true",
    "endTransactionPoolQueueCapacity": "100000",
    "expectConsumerNumUseFilter": "32",
    "fastFailIfNoBufferInStorePool": "false",
    "fetchNamesrvAddrByAddressServer": "false",
    "filterDataCleanTimeSpan": "86400000",
    "filterServerNums": "0",
    "filterSupportRetry": "false",
    "flushCommitLogTimed": "true",
    "flushConsumerOffsetHistoryInterval": "60000",
    "flushLeastPagesWhenWarmMapedFile": "4096",
    "forceRegister": "true",
    "heartbeatThreadPoolQueueCapacity": "50000",
    "highSpeedMode": "false",
    "isEnableBatchPush": "false",
    "isolateLogEnable": "false",
    "mappedFileSizeConsumeQueueExt": str(48 * 1024 * 1024),
    "maxDelayTime": "40",
    "maxErrorRateOfBloomFilter": "20",
    "maxLmqConsumeQueueNum": "20000",
    "maxTransferBytesOnMessageInDisk": str(64 * 1024),
    "maxTransferCountOnMessageInDisk": "8",
    "messageStorePlugIn": "",
    # we tell a group's consumers when its members change (NOTIFY_CONSUMER_IDS_CHANGED)
    "notifyConsumerIdsChangedEnable": "true",
    "offsetCheckInSlave": "false",
    "pullThreadPoolQueueCapacity": "100000",
    "putMsgIndexHightWater": "600000",
    "putThreadPoolQueueCapacity": "10000",
    "queryThreadPoolQueueCapacity": "20000",
    "redeleteHangedFileInterval": str(120 * 1000),
    "regionId": "DefaultRegion",
    "replyThreadPoolQueueCapacity": "10000",
    "scheduleAsyncDeliverMaxPendingLimit": "2000",
    "scheduleAsyncDeliverMaxResendNum2Blocked": "3",
    "sendThreadPoolQueueCapacity": "10000",
    # no broker-side accept gate: every send is accepted from boot on
    "startAcceptSendRequestTimeStamp": "0",
    "traceOn": "true",
    "transferMsgByHeap": "true",
    # no transient store pool (no off-heap write buffer): see the runtime info below
    "transientStorePoolEnable": "false",
    "transientStorePoolSize": "5",
    "useReentrantLockWhenPutMessage": "true",
    "useTLS": "false",
    "waitTimeMillsInHeartbeatQueue": "31000",
    "waitTimeMillsInPullQueue": "5000",
    "waitTimeMillsInSendQueue": "200",
    "waitTimeMillsInTransactionQueue": "3000",
}

def processors() -> int:
    """The processor count Apache's defaults are computed from (the JVM's own count)."""
    return os.cpu_count() or 1


def broker_config_keys(cpus: int) -> dict[str, str]:
    """Every Apache broker config key without a setting of ours: its default for ``cpus``
    processors (Apache sizes its thread pools from the processor count)."""
    send = min(cpus, 4)
    return {
        **_FIXED,
        **APACHE_SERVER_OPTIONS,
        "clientCallbackExecutorThreads": str(cpus),
        "endTransactionThreadPoolNums": str(max(8 + cpus * 2, send * 4)),
        "heartbeatThreadPoolNums": str(min(32, cpus)),
        "processReplyMessageThreadPoolNums": str(16 + cpus * 2),
        "pullMessageThreadPoolNums": str(16 + cpus * 2),
        "putMessageFutureThreadPoolNums": str(send),
        "queryMessageThreadPoolNums": str(8 + cpus),
        "sendMessageThreadPoolNums": str(send),
    }


def runtime_info_keys(store_path: str, disk_ratio: float) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO keys of Apache's that describe its thread pools, page-cache
    lock and transient store pool, as an idle Apache broker answers them (queues empty, no
    wait, no pool), and the per-path disk ratio of the CommitLog directory."""
    cap = broker_config_keys(processors())
    return {
        "EndTransactionQueueSize": "0",
        "EndTransactionThreadPoolQueueCapacity": cap["endTransactionPoolQueueCapacity"],
        "dispatchMaxBuffer": "0",
        "pageCacheLockTimeMills": "0",
        "pullThreadPoolQueueCapacity": cap["pullThreadPoolQueueCapacity"],
        "pullThreadPoolQueueHeadWaitTimeMills": "0",
        "pullThreadPoolQueueSize": "0",
        "queryThreadPoolQueueCapacity": cap["queryThreadPoolQueueCapacity"],
        "queryThreadPoolQueueHeadWaitTimeMills": "0",
        "queryThreadPoolQueueSize": "0",
        "remainTransientStoreBufferNumbs": str(2**31 - 1),
        "sendThreadPoolQueueCapacity": cap["sendThreadPoolQueueCapacity"],
        "sendThreadPoolQueueHeadWaitTimeMills": "0",
        "sendThreadPoolQueueSize": "0",
        f"commitLogDiskRatio_{store_path}": str(disk_ratio),
    }
