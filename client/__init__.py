"""The pure-Python RocketMQ 4.x client: route discovery, producers, push/pull consumers,
rebalance, offset stores and admin calls; Trio-native, with a blocking facade in
``rmq_cluster.client.sync``.

    from rmq_cluster.client import Producer, PushConsumer, Message, ConsumeResult

    async with Producer("PG", namesrv_addr="127.0.0.1:9876") as p:
        await p.send(Message("T", b"hello", tags="A"))
"""

from .admin import Admin
from .allocate import allocate_averagely, allocate_by_circle
from .config import ClientConfig
from .consumer import PullConsumer, PushConfig, PushConsumer
from .errors import (
    ClientStateError,
    MQBrokerError,
    MQClientError,
    MQRemotingError,
    MQTimeoutError,
    NoRouteError,
    TransactionError,
)
from .instance import ClientInstance
from .model import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageModel,
    MessageQueue,
    OrderlyResult,
    PullResult,
    PullStatus,
    ReceivedMessage,
    SendResult,
    SendStatus,
    TransactionState,
)
from .producer import (
    Producer,
    ProducerConfig,
    SendHandle,
    TransactionProducer,
    select_by_hash,
)
from .request_reply import (
    RequestTimeoutError,
    create_reply_message,
    reply_listener,
)

__all__ = [
    "Admin",
    "ClientConfig",
    "ClientInstance",
    "ClientStateError",
    "ConsumeFromWhere",
    "ConsumeResult",
    "MQBrokerError",
    "MQClientError",
    "MQRemotingError",
    "MQTimeoutError",
    "Message",
    "MessageModel",
    "MessageQueue",
    "NoRouteError",
    "OrderlyResult",
    "Producer",
    "ProducerConfig",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConfig",
    "PushConsumer",
    "ReceivedMessage",
    "RequestTimeoutError",
    "SendHandle",
    "SendResult",
    "SendStatus",
    "TransactionError",
    "TransactionProducer",
    "TransactionState",
    "allocate_averagely",
    "allocate_by_circle",
    "create_reply_message",
    "reply_listener",
    "select_by_hash",
]
