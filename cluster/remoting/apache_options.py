"""Apache RocketMQ's Netty server options, as both of its nodes answer them in their config
(GET_BROKER_CONFIG, GET_NAMESRV_CONFIG), at their defaults.

Our remoting server has no selector or worker threads, semaphores or socket-buffer options
(one Trio loop; its own limits are the ``server*`` extension keys), so every node answers
these with Apache's defaults: a tool that reads them by name finds them, reading an untuned
Apache node's values.
"""

from __future__ import annotations

from typing import Final

APACHE_SERVER_OPTIONS: Final[dict[str, str]] = {
    "serverAsyncSemaphoreValue": "64",
    "serverCallbackExecutorThreads": "0",
    "serverOnewaySemaphoreValue": "256",
    "serverPooledByteBufAllocatorEnable": "true",
    "serverSelectorThreads": "3",
    "serverSocketBacklog": "1024",
    "serverSocketRcvBufSize": "0",
    "serverSocketSndBufSize": "0",
    "serverWorkerThreads": "8",
    "useEpollNativeSelector": "false",
    "writeBufferHighWaterMark": "0",
    "writeBufferLowWaterMark": "0",
}
