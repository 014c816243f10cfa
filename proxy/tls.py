"""TLS for the gRPC port: the self-signed certificate ``up --proxy`` makes once per cluster,
and the server context (TLS 1.2+, ALPN ``h2`` only) the proxy serves it with.

The certificate is an ECDSA P-256 key signed by itself, valid ``CERT_VALID_DAYS``, for
``localhost``, ``127.0.0.1`` and ``::1`` (plus the hosts asked for): a client that checks host
names (gRPC's C core, under Apache's Python SDK) accepts it once it trusts the file; one that
checks nothing (Apache's Java SDK) accepts it anyway. The key is written owner-only (0600),
never widened. Blocking file I/O, no trio."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import attrs

from ..cluster.acl.local import write_private

#: where ``up --proxy`` keeps the certificate and key, relative to the cluster directory
TLS_DIR: Final = "conf/proxy-tls"
CERT_FILE: Final = "proxy.crt"
KEY_FILE: Final = "proxy.key"
CERT_VALID_DAYS: Final = 825
#: names every generated certificate is valid for
DEFAULT_HOSTS: Final = ("localhost", "127.0.0.1", "::1")
#: what the proxy accepts from a client
ALPN_H2: Final = "h2"
#: the one name the certificate's subject carries
COMMON_NAME: Final = "rmq-cluster mqproxy"


@attrs.frozen
class CertFiles:
    cert: Path
    key: Path


def cert_files(cluster_dir: Path) -> CertFiles:
    base = cluster_dir / TLS_DIR
    return CertFiles(base / CERT_FILE, base / KEY_FILE)


def ensure_certificate(cluster_dir: Path, hosts: Iterable[str] = ()) -> CertFiles:
    """The cluster's certificate and key, made on the first call (kept afterwards, so
    clients that trust it go on trusting it)."""
    files = cert_files(cluster_dir)
    if files.cert.is_file() and files.key.is_file():
        return files
    cert_pem, key_pem = self_signed([*DEFAULT_HOSTS, *hosts])
    write_private(files.key, key_pem)
    files.cert.parent.mkdir(parents=True, exist_ok=True)
    files.cert.write_bytes(cert_pem)
    return files


def _san(hosts: Iterable[str]) -> list[object]:
    from cryptography import x509

    names: list[object] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def self_signed(hosts: Iterable[str]) -> tuple[bytes, bytes]:
    """(certificate PEM, PKCS#8 key PEM) of a new self-signed certificate for ``hosts``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, COMMON_NAME)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERT_VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(_san(hosts)), critical=False)  # type: ignore[arg-type]
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """TLS 1.2 or later, offering only HTTP/2 (gRPC's ALPN); raises ``OSError``/``ssl.SSLError``
    when the files are unusable."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    ctx.set_alpn_protocols([ALPN_H2])
    # HTTP/2 forbids renegotiation and compression (RFC 9113 9.2.1)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    return ctx
