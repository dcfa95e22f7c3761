"""TLS for the gRPC server: credentials from PEM files (reloaded when they change), principals, loopback rules.

Client authentication follows Kafka's `ssl.client.auth` names. `required`
is mutual TLS verified at the handshake: a caller without a certificate
signed by `diskless.ssl.ca.location` never reaches a handler (its client sees
UNAVAILABLE, the server logs the failed handshake). `requested` cannot be
offered: grpc-python can ask for a client certificate only by requiring it.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from coordinator.config.settings import Settings, SettingsError, property_name

log = logging.getLogger(__name__)

ANONYMOUS = "User:ANONYMOUS"
CLIENT_AUTH_MODES = ("none", "requested", "required")  # Kafka's names; requested is refused below


def is_loopback(host: str) -> bool:
    """Whether a listen host only accepts connections from this machine."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class TlsFiles:
    certificate: Path
    key: Path
    ca: Path | None

    def read(self) -> tuple[bytes, bytes, bytes | None]:
        return (
            self.key.read_bytes(),
            self.certificate.read_bytes(),
            self.ca.read_bytes() if self.ca is not None else None,
        )

    def fingerprint(self) -> tuple[int, ...]:
        """Changes when any file is rewritten (mtime and size, nanoseconds)."""
        paths: Sequence[Path] = [self.certificate, self.key, *([self.ca] if self.ca else [])]
        return tuple(v for p in paths for v in (os.stat(p).st_mtime_ns, os.stat(p).st_size))


def tls_files(settings: Settings) -> TlsFiles | None:
    """The configured PEM files, or None for plaintext; raises SettingsError on a half-done set-up."""
    certificate, key, ca = settings.ssl_certificate_location, settings.ssl_key_location, settings.ssl_ca_location
    mode = settings.ssl_client_auth
    if mode not in CLIENT_AUTH_MODES:
        raise SettingsError(f"{property_name('ssl_client_auth')} must be one of {CLIENT_AUTH_MODES}, got {mode!r}")
    if mode == "requested":
        raise SettingsError(
            f"{property_name('ssl_client_auth')}=requested is not supported: grpc-python can ask for a client "
            "certificate only by requiring it; use required (mutual TLS) or none"
        )
    if not certificate and not key:
        if mode != "none" or ca:
            raise SettingsError(
                f"{property_name('ssl_client_auth')}/{property_name('ssl_ca_location')} need TLS: set "
                f"{property_name('ssl_certificate_location')} and {property_name('ssl_key_location')}"
            )
        return None
    if not certificate or not key:
        raise SettingsError(
            f"TLS needs both {property_name('ssl_certificate_location')} and {property_name('ssl_key_location')}"
        )
    if mode == "required" and not ca:
        raise SettingsError(f"{property_name('ssl_client_auth')}=required needs {property_name('ssl_ca_location')}")
    files = TlsFiles(Path(certificate), Path(key), Path(ca) if ca else None)
    for path in (files.certificate, files.key, *([files.ca] if files.ca else [])):
        if not path.is_file():
            raise SettingsError(f"TLS file {path} does not exist")
    return files


def server_credentials(files: TlsFiles, client_auth: str) -> grpc.ServerCredentials:
    """Credentials that re-read the PEM files on the next handshake after any of them changes."""
    seen = [files.fingerprint()]

    def configuration() -> grpc.ServerCertificateConfiguration:
        key, certificate, ca = files.read()
        return grpc.ssl_server_certificate_configuration([(key, certificate)], root_certificates=ca)

    def reload_if_changed() -> grpc.ServerCertificateConfiguration | None:
        try:
            current = files.fingerprint()
            if current == seen[0]:
                return None
            fresh = configuration()
        except OSError as error:  # a rotation in progress: keep serving with the certificates we have
            log.warning("TLS files unreadable (%s); keeping the current certificates", error)
            return None
        seen[0] = current
        log.info("TLS certificates changed on disk: reloaded %s", files.certificate)
        return fresh

    return grpc.dynamic_ssl_server_credentials(
        configuration(),
        reload_if_changed,  # type: ignore[arg-type]  # gRPC reads None as "unchanged"; its stubs forbid None
        require_client_authentication=client_auth == "required",
    )


def principal_of(auth_context: Mapping[str, Iterable[bytes]]) -> str | None:
    """`User:<subject CN>` of a verified client certificate, or None when the caller presented none."""
    name = next(iter(auth_context.get("x509_common_name", ())), None)
    if not name:
        return None
    return "User:" + name.decode("utf-8", "replace")
