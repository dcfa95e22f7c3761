"""Who is calling and whether they may: the principal of each call, checked against the ACL."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from coordinator.base.errors import PermissionDenied, Unauthenticated
from coordinator.base.logging_output import EveryInterval
from coordinator.edge.acl_file import AclFile, Permission
from coordinator.edge.rpcs import PERMISSIONS
from coordinator.edge.tls import ANONYMOUS, principal_of

log = logging.getLogger(__name__)
DENIAL_LOG_INTERVAL_S = 10.0  # one line per (RPC, principal, reason) per interval: a misconfigured client retries fast


class AccessControl:
    """Authenticates a call from its TLS peer and authorises it by the RPC's permission.

    Without an ACL file every call is allowed (the server only starts that way
    in plaintext on loopback). Every denial is logged with the principal and
    the RPC, at most once per interval for the same RPC, principal and reason
    (with the count of the denials it stands for); every denial is counted in
    diskless_denied_calls_total.
    """

    def __init__(self, acl_path: Path | None, tls: bool, client_auth: str, acl_reload_interval_s: float) -> None:
        self._acl = AclFile(acl_path, acl_reload_interval_s) if acl_path is not None else None
        self._certificate_required = tls and client_auth == "required"
        self.permissions: Mapping[str, Permission] = PERMISSIONS  # every service's (coordinator/edge/rpcs.py)
        self._denial_log = EveryInterval(DENIAL_LOG_INTERVAL_S)

    def _log_denial(self, key: tuple[str, str, str], line: str) -> None:
        if self._denial_log.allow(key):
            log.warning("%s (%d more such denials since the last line)", line, self._denial_log.take_suppressed(key))

    def admit(self, method: str, auth_context: Mapping[str, Iterable[bytes]]) -> str:
        """The caller's principal; raises Unauthenticated or PermissionDenied."""
        principal = principal_of(auth_context)
        if principal is None:
            if self._certificate_required:
                self._log_denial((method, "", "certificate"), f"denied {method}: no verified client certificate")
                raise Unauthenticated(f"{method} needs a client certificate signed by the cluster's CA")
            principal = ANONYMOUS
        if self._acl is None:
            return principal
        permission = self.permissions[method]
        if not self._acl.current().allows(principal, permission):
            self._log_denial(
                (method, principal, permission.value), f"denied {method} to {principal}: missing {permission.value}"
            )
            raise PermissionDenied(f"{principal} lacks the {permission.value} permission needed for {method}")
        return principal
