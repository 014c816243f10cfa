"""Plain ACL (RocketMQ 4.4+ ``plain_acl.yml``): rules, signatures, decisions, and the node shell.

Pure: ``address`` (white-list patterns), ``permission``, ``rules`` (the YAML schema),
``signing`` (client side: ``Credentials.sign``), ``validator`` (server side: ``check``).
Shell: ``guard.AclGuard`` (file watch, processor wrapping, denial answers, counting).
"""

from .address import AclConfigError
from .rules import PlainAclConfig, parse_plain_acl, render_plain_acl
from .signing import Credentials, credentials_from
from .validator import AclDenied, check

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
