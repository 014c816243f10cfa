"""The broker's topic table (RocketMQ ``TopicConfigManager``), pure: no I/O, no trio.

Holds ``TopicConfig`` per topic and the ``DataVersion`` that changes with every edit; encodes to
and decodes from ``topics.json`` (the ``TopicConfigSerializeWrapper`` shape). The shell persists
it whenever ``changed`` says so and re-registers with the NameServers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

import attrs

from ..cluster.clock import now_ms
from ..cluster.protocol import names
from ..cluster.protocol.route import (
    DataVersion,
    PermName,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from ..store.config import TIMER_TOPIC as STORE_TIMER_TOPIC
from .config import BrokerConfig

#: The auto-create template topic.
AUTO_CREATE_TOPIC_KEY_TOPIC: Final = "TBW102"
SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC: Final = "BenchmarkTest"
OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC: Final = STORE_TIMER_TOPIC
TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
REPLY_TOPIC_SUFFIX: Final = "_REPLY_TOPIC"
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
SCHEDULE_QUEUE_NUMS: Final = 18
BENCHMARK_QUEUE_NUMS: Final = 1024
SYSTEM_NAME_TOPIC_QUEUE_NUMS: Final = 16
#: (the name rules and the queue-count cap live in cluster/protocol/names.py)
TOPIC_MAX_LENGTH: Final = names.TOPIC_MAX_LENGTH
VALID_CHARS_TEXT: Final = names.VALID_CHARS_TEXT
MAX_QUEUE_NUMS: Final = names.MAX_QUEUE_NUMS
#: Producers may never send to these (RocketMQ ``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``).
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    # (the timer topic too: RocketMQ 5 lets a producer write it, REAL_TOPIC and all, which
    # would put a message into any topic past ACL when its time comes)
    {SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC,
     TIMER_TOPIC}
)


def validate_topic(topic: str | None) -> str | None:
    """None if ``topic`` is a legal name, else RocketMQ's remark saying why not (a full match:
    no trailing newline slips through)."""
    if topic is None:
        return "The specified topic is blank."
    return names.validate_topic(topic)


def _capped(tc: TopicConfig) -> TopicConfig:
    """``tc`` with its queue counts within [0, MAX_QUEUE_NUMS] (configs read from files)."""
    r = min(max(tc.read_queue_nums, 0), MAX_QUEUE_NUMS)
    w = min(max(tc.write_queue_nums, 0), MAX_QUEUE_NUMS)
    if r == tc.read_queue_nums and w == tc.write_queue_nums:
        return tc
    return attrs.evolve(tc, read_queue_nums=r, write_queue_nums=w)


def is_not_allowed_send_topic(topic: str) -> bool:
    return topic in NOT_ALLOWED_SEND_TOPICS


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``; ``ValueError`` unless ``group`` is a valid group name."""
    return names.retry_topic(group)


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``; ``ValueError`` unless ``group`` is a valid group name."""
    return names.dlq_topic(group)


class TopicConfigManager:
    def __init__(self, config: BrokerConfig, *, clock_ms: Callable[[], int] = now_ms) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion(timestamp=clock_ms(), counter=0)
        #: Set by every edit; the shell persists and clears it.
        self.changed = False
        self._init_system_topics()

    # ------------------------------------------------------------------ setup

    def system_topics(self) -> Iterable[TopicConfig]:
        c = self.config
        rw = PermName.PERM_RW
        if c.auto_create_topic_enable:
            yield TopicConfig(
                AUTO_CREATE_TOPIC_KEY_TOPIC,
                c.default_topic_queue_nums,
                c.default_topic_queue_nums,
                rw | PermName.PERM_INHERIT,
            )
        yield TopicConfig(SELF_TEST_TOPIC, 1, 1, rw)
        yield TopicConfig(BENCHMARK_TOPIC, BENCHMARK_QUEUE_NUMS, BENCHMARK_QUEUE_NUMS, rw)
        cluster_perm = PermName.PERM_INHERIT | (rw if c.cluster_topic_enable else 0)
        yield TopicConfig(
            c.broker_cluster_name,
            SYSTEM_NAME_TOPIC_QUEUE_NUMS,
            SYSTEM_NAME_TOPIC_QUEUE_NUMS,
            cluster_perm,
        )
        broker_perm = PermName.PERM_INHERIT | (rw if c.broker_topic_enable else 0)
        # RocketMQ 4.9 gives the broker-name topic 1 read and 1 write queue (the cluster-name
        # topic above has SYSTEM_NAME_TOPIC_QUEUE_NUMS)
        yield TopicConfig(c.broker_name, 1, 1, broker_perm)
        yield TopicConfig(OFFSET_MOVED_EVENT, 1, 1, rw)
        yield TopicConfig(SCHEDULE_TOPIC, SCHEDULE_QUEUE_NUMS, SCHEDULE_QUEUE_NUMS, rw)
        if c.trace_topic_enable:
            yield TopicConfig(c.msg_trace_topic_name, 1, 1, rw)
        yield TopicConfig(c.broker_cluster_name + REPLY_TOPIC_SUFFIX, 1, 1, rw)

    def _init_system_topics(self) -> None:
        for tc in self.system_topics():
            self.table[tc.topic_name] = tc

    # ------------------------------------------------------------------ persistence

    def encode(self) -> bytes:
        return TopicConfigSerializeWrapper(dict(self.table), self.data_version).encode()

    def load(self, data: bytes) -> None:
        """Merge a ``topics.json`` (the file's topics win over system defaults, as in Java)."""
        if not data.strip():
            return
        wrapper = TopicConfigSerializeWrapper.decode(data)
        self.table.update({k: _capped(v) for k, v in wrapper.topic_config_table.items()})
        self.data_version = wrapper.data_version
        # the template follows autoCreateTopicEnable, whatever the file says
        if not self.config.auto_create_topic_enable:
            self.table.pop(AUTO_CREATE_TOPIC_KEY_TOPIC, None)
        else:
            self.table.setdefault(
                AUTO_CREATE_TOPIC_KEY_TOPIC,
                TopicConfig(
                    AUTO_CREATE_TOPIC_KEY_TOPIC,
                    self.config.default_topic_queue_nums,
                    self.config.default_topic_queue_nums,
                    PermName.PERM_RW | PermName.PERM_INHERIT,
                ),
            )

    def wrapper(self) -> TopicConfigSerializeWrapper:
        """The table as registration and GET_ALL_TOPIC_CONFIG send it."""
        perm = self.config.broker_permission
        table = dict(self.table)
        if not (PermName.is_readable(perm) and PermName.is_writeable(perm)):
            table = {k: attrs.evolve(v, perm=perm) for k, v in table.items()}
        return TopicConfigSerializeWrapper(table, self.data_version)

    def _bump(self) -> None:
        self.data_version = self.data_version.next_version(self.clock_ms())
        self.changed = True

    # ------------------------------------------------------------------ queries and edits

    def select(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def update(self, tc: TopicConfig) -> None:
        """Install ``tc``; ``ValueError`` for a bad name or queue counts over MAX_QUEUE_NUMS
        (callers validate first and answer with the remark)."""
        bad = names.validate_topic(tc.topic_name) or names.validate_queue_nums(
            tc.read_queue_nums, tc.write_queue_nums
        )
        if bad is not None:
            raise ValueError(bad)
        self.table[tc.topic_name] = tc
        self._bump()

    def delete(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        self._bump()
        return True

    def create_in_send_message(
        self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int = 0
    ) -> tuple[TopicConfig | None, bool, str]:
        """Auto-create ``topic`` from the template ``default_topic`` (Java
        ``createTopicInSendMessageMethod``). -> (config or None, created, why not)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing, False, ""
        template = self.table.get(default_topic)
        if template is None:
            return None, False, f"the default topic[{default_topic}] does not exist"
        perm = template.perm
        if (
            default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC
            and not self.config.auto_create_topic_enable
        ):
            perm = PermName.PERM_RW
        if not PermName.is_inherited(perm):
            return None, False, f"the default topic[{default_topic}] has no perm [{perm}]"
        bad = names.validate_topic(topic)
        if bad is not None:
            return None, False, bad
        queue_nums = min(client_queue_nums, template.write_queue_nums, MAX_QUEUE_NUMS)
        if queue_nums < 1:  # (RocketMQ creates a topic with 0 queues: nothing can use it)
            return None, False, (
                f"defaultTopicQueueNums[{client_queue_nums}] is out of range [1, {MAX_QUEUE_NUMS}]"
            )
        tc = TopicConfig(
            topic,
            queue_nums,
            queue_nums,
            perm & ~PermName.PERM_INHERIT,
            topic_sys_flag=topic_sys_flag,
        )
        self.table[topic] = tc
        self._bump()
        return tc, True, ""

    def adopt_stored(self, queues: Iterable[tuple[str, int]]) -> list[str]:
        """Give a config to every topic the store holds queues of but this table lacks (queues
        = highest queue id + 1, read-write) -> the topics adopted, sorted. A master serves what
        its log holds: topics created on an old leader/master after this replica last synced,
        or a topic auto-created by a send that was answered just before a ``kill -9`` and whose
        ``topics.json`` write never happened (RocketMQ writes it before answering)."""
        highest: dict[str, int] = {}
        for topic, queue_id in queues:
            highest[topic] = max(highest.get(topic, 0), queue_id + 1)
        adopted = []
        for topic, nums in sorted(highest.items()):
            if topic not in self.table:
                self.create_in_send_message_back(topic, nums, PermName.PERM_RW)
                adopted.append(topic)
        return adopted

    def create_in_send_message_back(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0
    ) -> tuple[TopicConfig, bool]:
        """Retry / DLQ / system topics created by the broker itself. -> (config, created).
        Queue counts are capped at MAX_QUEUE_NUMS (names are the callers' to check: they come
        from validated groups, or from the log a DLedger leader adopts)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing, False
        queue_nums = max(0, min(queue_nums, MAX_QUEUE_NUMS))
        tc = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
        self.table[topic] = tc
        self._bump()
        return tc, True
