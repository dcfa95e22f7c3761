"""Who is calling and whether they may: the principal of each call, checked against the ACL."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from pathlib import Path

from coordinator.base.errors import PermissionDenied, Unauthenticated
from coordinator.base.logging_output import EveryInterval
from coordinator.edge.acl_file import Acl, AclFile, Permission
from coordinator.edge.rpcs import PERMISSIONS
from coordinator.edge.tls import ANONYMOUS, principal_of

log = logging.getLogger(__name__)
DENIAL_LOG_INTERVAL_S = 10.0  # one line per (RPC, principal, reason) per interval: a misconfigured client retries fast

# Kafka's KIP-590 envelope, as gRPC metadata: a node passing a caller's call on to another node sends the caller's
# principal with it, and the other node authorises the call as that caller. Only a peer holding the permission nodes
# call each other with (FORWARDING_PERMISSION) may send it; from anyone else the call is refused, never trusted.
FORWARDED_FOR = "diskless-forwarded-for"
FORWARDING_PERMISSION = Permission.INTERNAL
PRINCIPAL_MAX_CHARS = 1024  # a forwarded principal longer than any certificate's CN is refused, not logged whole
# The principal of the call this task answers (the original caller's for a forwarded call), set by the gate once the
# call is admitted: what a node passes on with the call (coordinator/cluster/peers.py `forward_call`).
CALLER: ContextVar[str | None] = ContextVar("diskless_caller", default=None)


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

    def admit(
        self,
        method: str,
        auth_context: Mapping[str, Iterable[bytes]],
        metadata: Iterable[tuple[str, str | bytes]] | None = None,
    ) -> str:
        """The caller's principal (the original caller's, for a call another node passed on); raises Unauthenticated
        or PermissionDenied."""
        principal = principal_of(auth_context)
        if principal is None:
            if self._certificate_required:
                self._log_denial((method, "", "certificate"), f"denied {method}: no verified client certificate")
                raise Unauthenticated(f"{method} needs a client certificate signed by the cluster's CA")
            principal = ANONYMOUS
        acl = self._acl.current() if self._acl is not None else None
        peer = principal
        forwarded = self._forwarded(method, peer, metadata, acl)
        if forwarded is not None:
            principal = forwarded
        if acl is None:
            return principal
        permission = self.permissions[method]
        if not acl.allows(principal, permission):
            by = f" (passed on by {peer})" if forwarded is not None else ""
            self._log_denial(
                (method, principal, permission.value), f"denied {method} to {principal}{by}: missing {permission.value}"
            )
            raise PermissionDenied(f"{principal}{by} lacks the {permission.value} permission needed for {method}")
        return principal

    def _forwarded(
        self, method: str, peer: str, metadata: Iterable[tuple[str, str | bytes]] | None, acl: Acl | None
    ) -> str | None:
        """The principal a node passed this call on for, or None; PermissionDenied when the peer may not pass calls on
        or the value is not a principal (a call claiming another caller's identity is never trusted)."""
        claimed = [value for key, value in metadata or () if key == FORWARDED_FOR]
        if not claimed:
            return None
        if acl is not None and not acl.allows(peer, FORWARDING_PERMISSION):
            self._log_denial(
                (method, peer, "forwarding"),
                f"denied {method} to {peer}: it passed the call on for another principal without the "
                f"{FORWARDING_PERMISSION.value} permission nodes pass calls on with",
            )
            raise PermissionDenied(
                f"{peer} may not pass {method} on for another principal: only a node's principal, holding the "
                f"{FORWARDING_PERMISSION.value} permission, may ({FORWARDED_FOR} metadata refused)"
            )
        value = claimed[0].decode("utf-8", "replace") if isinstance(claimed[0], bytes) else claimed[0]
        if len(claimed) > 1 or not value.startswith("User:") or len(value) > PRINCIPAL_MAX_CHARS:
            raise PermissionDenied(f"{method} passed on by {peer} names no single principal in {FORWARDED_FOR}")
        return value
