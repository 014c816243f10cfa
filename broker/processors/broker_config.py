"""UPDATE_BROKER_CONFIG (25): ``mqadmin updateBrokerConfig -b ADDR -k KEY -v VALUE``.

The body's keys (``broker/config_update.py`` decides what is accepted) replace the running
broker's settings at once, so GET_BROKER_CONFIG shows them. Only ``config_update.LIVE_KEYS``
may change, and each of them takes effect at once: the processors read a flag per request
(autoCreateTopicEnable, longPollingEnable, rejectTransactionMessage, enablePropertyFilter,
slaveReadEnable, storeReplyMessageEnable, maxMessageSize, ...), and ``install_settings`` pushes
the others to their holders (config listeners): ``defaultTopicQueueNums`` resizes the TBW102
template (and registers it), ``transactionCheckInterval`` re-times the check loop's current
wait, ``haAllowedSlaveAddresses`` the HA port's next accept. A change of any other key is
refused, its remark saying it needs a restart. As RocketMQ does, a change of
``brokerPermission`` bumps the topic data version and registers with every NameServer before
answering: with ``brokerPermission=4`` the routes show the broker read-only, producers stop
picking it and its sends answer NO_PERMISSION (mqadmin's graceful decommission); ``6`` makes it
writable again. The new values are written into the broker's config file (the ``-c`` file)
when it has one.

GET_BROKER_CONFIG (26) answers the running settings as ``key=value`` lines with every secret
masked (``cluster.acl.secret_keys``: the broker's own ``aclSecretKey`` never leaves it); under
ACL it is an admin operation (``cluster.acl.permission.ADMIN_CODES``). The rewritten config file
is created owner-only when it holds a secret (``config_update.rewritten_mode``); logged values
are masked too.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

import trio

from ...cluster.acl.local import write_private
from ...cluster.acl.secret_keys import mask_secrets
from ...cluster.config import format_properties, to_properties
from ...cluster.protocol import fastjson
from ...cluster.protocol.route import PermName, TopicConfig
from ...cluster.remoting.codec import RemotingCommand
from ...cluster.remoting.codes import ResponseCode
from ..apache_keys import broker_config_keys, processors
from ..config import BrokerConfig
from ..config_update import (
    BlackListedKeyError,
    ConfigUpdateError,
    apply_update,
    current_values,
    parse_update_body,
    rewrite_properties,
    rewritten_mode,
)
from ..topic_config import AUTO_CREATE_TOPIC_KEY_TOPIC

if TYPE_CHECKING:
    from ..config import BrokerSettings
    from ..context import BrokerContext

def install_settings(ctrl: BrokerContext, settings: BrokerSettings) -> bool:
    """Make ``settings`` the running broker's: every holder of a config sees the new one.
    -> whether the topic table changed (the TBW102 template: register it)."""
    ctrl.settings = settings
    ctrl.bcfg = settings.broker
    ctrl.topics.config = settings.broker
    ctrl.groups.auto_create = settings.broker.auto_create_subscription_group
    template_changed = _follow_template(ctrl, settings.broker)
    for listener in list(ctrl.config_listeners):
        listener()
    return template_changed


def _follow_template(ctrl: BrokerContext, bcfg: BrokerConfig) -> bool:
    """The auto-create template TBW102 with ``defaultTopicQueueNums`` queues while
    ``autoCreateTopicEnable`` is on (created if the broker booted with it off)."""
    if not bcfg.auto_create_topic_enable:
        return False
    n = bcfg.default_topic_queue_nums
    current = ctrl.topics.select(AUTO_CREATE_TOPIC_KEY_TOPIC)
    if current is not None and current.read_queue_nums == current.write_queue_nums == n:
        return False
    perm = PermName.PERM_RW | PermName.PERM_INHERIT
    ctrl.topics.update(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, n, n, perm))
    return True


def config_properties(settings: BrokerSettings) -> dict[str, str]:
    """The running broker's config keys and values, sorted by key (secrets in clear): ours
    (broker, store, HA, DLedger) and every other key Apache's broker answers, at its default
    (``apache_keys``)."""
    props = {
        **broker_config_keys(processors()),
        **to_properties(settings.dledger),
        **to_properties(settings.ha),
        **to_properties(settings.store),
        **to_properties(settings.broker),
    }
    for key in JAVA_INT_KEYS.intersection(props):
        props[key] = java_int_text(props[key])
    return dict(sorted(props.items()))


#: Settings we keep as floats that RocketMQ's configs declare ``int``: printed as Java does.
JAVA_INT_KEYS: Final = frozenset({"accessMessageInMemoryMaxRatio"})


def java_int_text(text: str) -> str:
    """``"40.0"`` -> ``"40"``; a value with a fraction (or not a number) as it is."""
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() else text


def format_config(settings: BrokerSettings) -> str:
    """What GET_BROKER_CONFIG answers and ``mqbroker -p`` prints: secrets masked."""
    return format_properties(mask_secrets(config_properties(settings)))


def _rewrite_file(path: str, updates: dict[str, str]) -> None:
    """Blocking: the config file with ``updates`` written in (run in a worker thread); the
    new file is created owner-only when it holds a secret, atomically replacing the old."""
    current_mode: int | None
    try:
        with open(path, encoding="utf-8") as f:
            current_mode = os.fstat(f.fileno()).st_mode
            text = f.read()
    except FileNotFoundError:
        text, current_mode = "", None
    except UnicodeDecodeError as exc:  # answered like any other unwritable file
        raise OSError(f"{path} is not UTF-8 text: {exc}") from None
    new_text = rewrite_properties(text, updates)
    write_private(path, new_text, mode=rewritten_mode(new_text, current_mode))


class BrokerConfigProcessor:
    def __init__(self, ctrl: BrokerContext) -> None:
        self.ctrl = ctrl
        self._lock = trio.Lock()  # one update at a time (RocketMQ: synchronized)

    async def update_broker_config(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        ctrl = self.ctrl
        async with self._lock:
            try:
                values = parse_update_body(bytes(request.body))
                settings = apply_update(ctrl.settings, values)
            except BlackListedKeyError as exc:
                return request.response(ResponseCode.NO_PERMISSION, str(exc))
            except ConfigUpdateError as exc:
                return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
            perm_changed = settings.broker.broker_permission != ctrl.bcfg.broker_permission
            topics_changed = install_settings(ctrl, settings)
            written = current_values(settings, list(values))
            ctrl.log.info("broker config updated", values=mask_secrets(written),
                          client=conn.peer)
            if topics_changed:
                await ctrl.register_all()
            if "brokerPermission" in values:
                topics = ctrl.topics
                topics.data_version = topics.data_version.next_version(ctrl.now_ms())
                await ctrl.register_all()
                if perm_changed:
                    ctrl.log.info("broker permission changed",
                                  perm=settings.broker.broker_permission)
            path = ctrl.config_file
            if path:
                try:
                    await trio.to_thread.run_sync(_rewrite_file, path, written)
                except OSError as exc:
                    ctrl.log.error("config file not updated", path=path, error=str(exc))
                    return request.response(
                        ResponseCode.SYSTEM_ERROR,
                        f"updated in memory, but {path} could not be written: {exc}",
                    )
        return request.response(ResponseCode.SUCCESS)

    def get_broker_config(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONFIG (26): the running config, secrets masked, and the topic data
        version in the ``version`` field, as RocketMQ answers it."""
        ctrl = self.ctrl
        body = format_config(ctrl.settings).encode("utf-8")
        version = fastjson.dumps(ctrl.topics.data_version.to_json_obj()).decode()
        return request.response(ResponseCode.SUCCESS, None, {"version": version}, body)
