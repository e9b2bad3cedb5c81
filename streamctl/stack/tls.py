"""A throwaway certificate authority and the server certificates it signs, as PEM.

Owns key and certificate generation for the secured local broker, the compose secrets and the
metrics endpoints (with Python's `cryptography`: no openssl or keytool on PATH needed, and the
same code on every platform and in the image). Keys are EC P-256 (fast to make, accepted by the
Java broker, librdkafka and Python's ssl). The broker's key goes into a PKCS#12 keystore: Kafka's
PEM keystore needs an encrypted PKCS#8 key, and the JDK 17 cannot decrypt the PBES2 scheme
`cryptography` encrypts PKCS#8 with (only old PBES1 ciphers), while it reads PBES2 in PKCS#12.
Clients trust the CA as PEM. Neighbours: `secure` (which files are written where).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 825
"""The longest validity clients accept for a server certificate (Apple's limit); a local
stack outlives its certificate only if left running for two years."""


@dataclass(frozen=True)
class Issued:
    """A private key and its certificate."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @property
    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        """Unencrypted PKCS#8 (Python's ssl, librdkafka)."""
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())

    def pkcs12(self, password: str, chain: Sequence[x509.Certificate]) -> bytes:
        """A PKCS#12 keystore of the key and its chain (AES-256, PBKDF2-SHA256) for Java."""
        encryption = (serialization.PrivateFormat.PKCS12.encryption_builder()
                      .kdf_rounds(50_000)
                      .key_cert_algorithm(pkcs12.PBES.PBESv2SHA256AndAES256CBC)
                      .hmac_hash(hashes.SHA256()).build(password.encode()))
        return pkcs12.serialize_key_and_certificates(b"kafka", self.key, self.certificate,
                                                     list(chain), encryption)


def new_authority(name: str = "streamctl throwaway CA") -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    certificate = (
        _builder(subject, subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256()))
    return Issued(key, certificate)


def issue_server(authority: Issued, hosts: Sequence[str]) -> Issued:
    """A server certificate for `hosts` (DNS names or IP addresses, all in the SAN: clients
    verify the name they connect to), signed by `authority`."""
    if not hosts:
        raise ValueError("a server certificate needs at least one host name or address")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    certificate = (
        _builder(subject, authority.certificate.subject, key.public_key())
        .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(authority.key, hashes.SHA256()))
    return Issued(key, certificate)


def _builder(subject: x509.Name, issuer: x509.Name,
             public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            # An hour of slack: a client whose clock is a little behind still accepts it.
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS)))


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)
