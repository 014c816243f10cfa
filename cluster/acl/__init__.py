"""Plain ACL (RocketMQ 4.4+ ``plain_acl.yml``): rules, signatures, decisions, and the node shell.

Pure: ``address`` (white-list patterns), ``permission``, ``rules`` (the YAML schema),
``signing`` (client side: ``Credentials.sign``), ``validator`` (server side: ``check``).
Shell: ``guard.AclGuard`` (file watch, processor wrapping, denial answers, counting).
"""

from rmq_cluster.cluster.acl.address import AclConfigError
from rmq_cluster.cluster.acl.rules import PlainAclConfig, parse_plain_acl, render_plain_acl
from rmq_cluster.cluster.acl.signing import Credentials, credentials_from
from rmq_cluster.cluster.acl.validator import AclDenied, check

__all__ = [
    "AclConfigError",
    "AclDenied",
    "Credentials",
    "PlainAclConfig",
    "check",
    "credentials_from",
    "parse_plain_acl",
    "render_plain_acl",
]
