"""The mqproxy node: a client instance toward the NameServers and brokers, and the gRPC
server in front of it (TLS when the config names a certificate; under ACL every call goes
through ``AuthGate`` and the proxy signs its own remoting calls with an account of the same
rules file)."""

from __future__ import annotations

import functools

import attrs
import trio

from ..client.config import ClientConfig
from ..client.instance import ClientInstance
from ..client.producer import Producer
from ..cluster.acl.guard import AclGuard
from ..cluster.acl.rules import Account, AclConfigError, PlainAclConfig
from ..cluster.logging import get_logger
from .auth_gate import AuthGate
from .config import ProxyConfig
from .h2_server import GrpcService, serve_grpc
from .service import MessagingService
from .tls import server_context

log = get_logger(node="proxy")
#: the producer group the proxy sends under on the remoting side
PROXY_PRODUCER_GROUP = "PROXY_PRODUCER"


def own_account(rules: PlainAclConfig, access_key: str | None) -> Account:
    """The account the proxy signs its remoting calls with: ``access_key``'s, else the first
    admin account of the rules; ``AclConfigError`` when there is none."""
    if access_key is not None:
        account = rules.accounts.get(access_key)
        if account is None:
            raise AclConfigError(f"no account {access_key} in the ACL rules")
        return account
    for account in rules.accounts.values():
        if account.admin:
            return account
    raise AclConfigError("the ACL rules have no admin account for the proxy to sign with")


async def run_proxy(config: ProxyConfig, *,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Run until cancelled; started, reports the gRPC port bound. ``AclConfigError``,
    ``OSError`` or ``ssl.SSLError`` before starting when the ACL or TLS files are unusable."""
    client_config = attrs.evolve(ClientConfig(), namesrv_addr=config.namesrv_addr,
                                 call_timeout_s=config.call_timeout_s)
    guard = None
    if config.acl_file is not None:
        guard = AclGuard(config.acl_file, node="proxy")
        guard.load()
        account = own_account(guard.rules, config.acl_account)
        client_config = attrs.evolve(client_config, access_key=account.access_key,
                                     secret_key=account.secret_key)
    tls = None
    if config.tls_cert_file is not None:
        tls = server_context(config.tls_cert_file, config.tls_key_file or config.tls_cert_file)
    async with ClientInstance(client_config) as instance, \
            Producer(PROXY_PRODUCER_GROUP, instance=instance) as producer, \
            trio.open_nursery() as nursery:
        messaging = MessagingService(config, instance, producer, nursery=nursery)
        if config.enable_proxy_auto_renew:
            await nursery.start(messaging.pop.renewer.run)
        service: GrpcService = messaging
        if guard is not None:
            await nursery.start(guard.run)
            service = AuthGate(service, guard, config.max_signature_skew_s)
        listeners = await nursery.start(
            functools.partial(serve_grpc, config, service, tls_context=tls))
        port = listeners[0].socket.getsockname()[1]
        log.info("mqproxy started", grpc_port=port, namesrv=config.namesrv_addr,
                 tls=tls is not None, acl=guard is not None)
        task_status.started(port)
