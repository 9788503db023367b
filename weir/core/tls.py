"""Mutual TLS for every internal connection: certificates, contexts, credentials.

With ``security.ssl.enabled``, every process presents ``security.ssl.internal.cert`` and
accepts only peers whose certificate chains to ``security.ssl.internal.truststore`` (both
directions, as Flink's internal SSL does): a client without a certificate from the
cluster's CA is refused, and a server without one is not trusted. gRPC uses these files
through its credentials; the data plane through :mod:`ssl` contexts.

:func:`generate_cluster_pki` makes a private CA and one certificate for a local cluster
(``weir cluster start --tls``), with the ``cryptography`` package.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> files = generate_cluster_pki(Path(tempfile.mkdtemp()), ["127.0.0.1", "localhost"])
    >>> sorted(files.as_options())
    ['security.ssl.enabled', 'security.ssl.internal.cert', 'security.ssl.internal.key', \
'security.ssl.internal.truststore']
    >>> files.server_context().verify_mode.name
    'CERT_REQUIRED'
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from weir.core import options
from weir.core.config import Configuration
from weir.core.errors import ConfigError

if TYPE_CHECKING:
    import grpc
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey

#: What the generated certificates are valid for.
VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of one process: its certificate and key, and the CA it trusts."""

    cert: Path
    key: Path
    truststore: Path

    @classmethod
    def from_conf(cls, conf: Configuration) -> TlsFiles | None:
        """The files ``conf`` names when ``security.ssl.enabled``; None when TLS is off.
        Raises ConfigError naming a missing, unreadable or world-readable file."""
        if not conf.get(options.SSL_ENABLED):
            return None
        paths = []
        for option in (options.SSL_CERT, options.SSL_KEY, options.SSL_TRUSTSTORE):
            value = conf.get(option)
            if not value:
                msg = (f"security.ssl.enabled is set but {option.key} is not: give every "
                       "process the PEM files (`weir cluster start --tls` generates them)")
                raise ConfigError(msg)
            path = Path(value).expanduser()
            try:
                mode = path.stat().st_mode
                path.read_bytes()
            except OSError as err:
                msg = f"{option.key} {path} cannot be read: {err.strerror or err}"
                raise ConfigError(msg) from err
            if option is options.SSL_KEY and mode & (stat.S_IRWXG | stat.S_IRWXO):
                msg = (f"{option.key} {path} is readable by other users (mode "
                       f"{stat.filemode(mode)}): restrict it with `chmod 600 {path}`")
                raise ConfigError(msg)
            paths.append(path)
        files = cls(*paths)
        files.server_context()  # a key that does not match its certificate fails here
        return files

    def as_options(self) -> dict[str, str]:
        return {options.SSL_ENABLED.key: "true", options.SSL_CERT.key: str(self.cert),
                options.SSL_KEY.key: str(self.key),
                options.SSL_TRUSTSTORE.key: str(self.truststore)}

    def _context(self, purpose: int) -> ssl.SSLContext:
        context = ssl.SSLContext(purpose)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert, self.key)
            context.load_verify_locations(cafile=str(self.truststore))
        except (ssl.SSLError, OSError) as err:
            msg = (f"cannot use the TLS files {self.cert}, {self.key}, {self.truststore}: "
                   f"{err}; check that the key belongs to the certificate and that all are "
                   "PEM")
            raise ConfigError(msg) from err
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    def server_context(self) -> ssl.SSLContext:
        """For accepting: peers must present a certificate from the truststore's CA."""
        return self._context(ssl.PROTOCOL_TLS_SERVER)

    def client_context(self) -> ssl.SSLContext:
        """For connecting: the server's certificate must chain to the CA and name the host."""
        context = self._context(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = True
        return context

    def grpc_server_credentials(self) -> grpc.ServerCredentials:
        import grpc

        return grpc.ssl_server_credentials(
            [(self.key.read_bytes(), self.cert.read_bytes())],
            root_certificates=self.truststore.read_bytes(), require_client_auth=True)

    def grpc_channel_credentials(self) -> grpc.ChannelCredentials:
        import grpc

        return grpc.ssl_channel_credentials(
            root_certificates=self.truststore.read_bytes(),
            private_key=self.key.read_bytes(), certificate_chain=self.cert.read_bytes())


def generate_cluster_pki(directory: Path, hosts: list[str]) -> TlsFiles:
    """A private CA and one certificate valid for ``hosts`` (IP addresses or names), as
    PEM files in ``directory`` (0700; keys 0600). The CA's key is not kept: nothing else
    can ever be signed by it, so the cluster trusts exactly this certificate."""
    from cryptography.hazmat.primitives.asymmetric import ec

    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("weir cluster CA", ca_key, ca_key, "weir cluster CA", [], ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate("weir node", key, ca_key, "weir cluster CA", hosts, ca=False)
    files = TlsFiles(directory / "node.pem", directory / "node-key.pem", directory / "ca.pem")
    _write(files.truststore, _pem(ca), 0o644)
    _write(files.cert, _pem(cert), 0o644)
    _write(files.key, _pem_key(key), 0o600)
    return files


def write_self_signed(cert: Path, key: Path, hosts: list[str], name: str) -> None:
    """A new self-signed certificate for ``hosts`` at ``cert`` and its key at ``key`` (both
    0600): its own trust anchor, for components that trust exactly one identity."""
    from cryptography.hazmat.primitives.asymmetric import ec

    private = ec.generate_private_key(ec.SECP256R1())
    # Both the trust anchor and the leaf: a CA that may sign, and names its hosts.
    _write(cert, _pem(_certificate(name, private, private, name, hosts, ca=True)), 0o600)
    _write(key, _pem_key(private), 0o600)


def _certificate(subject: str, key: EllipticCurvePrivateKey,
                 signing_key: EllipticCurvePrivateKey, issuer: str, hosts: list[str],
                 ca: bool) -> x509.Certificate:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + VALIDITY)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None),
                              critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=bool(hosts), content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = (builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]),
                                  critical=False))
    return builder.sign(signing_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` from the start (a key is never briefly readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, mode)
