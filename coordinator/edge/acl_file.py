"""Authorisation: which principal may call which RPC (KIP-1164: the coordinator API needs CLUSTER_ACTION).

The ACL file has one line per principal, `User:<name> PERMISSION[,PERMISSION...]`,
with `#` comments. It is re-read when it changes; a file that does not parse
keeps the previous ACL in force (and says why in the log), so a typo never
opens or closes the cluster by accident.
"""

from __future__ import annotations

import enum
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


class Permission(enum.Enum):
    CLUSTER_ACTION = "CLUSTER_ACTION"  # brokers: commit, find, list, delete, create
    DESCRIBE = "DESCRIBE"  # read-only operator calls
    ALTER = "ALTER"  # operator actions that change a node (snapshots on demand)
    INTERNAL = "INTERNAL"  # calls between coordinators


# What each permission also grants, as Kafka's ALTER implies DESCRIBE: a broker that may commit
# may also ask where a partition's coordinator is.
IMPLIED = {
    Permission.CLUSTER_ACTION: {Permission.DESCRIBE},
    Permission.ALTER: {Permission.DESCRIBE},
    Permission.INTERNAL: {Permission.DESCRIBE},
}


class AclError(ValueError):
    """The ACL file does not parse; the message names the line."""


@dataclass(frozen=True, slots=True)
class Acl:
    grants: dict[str, frozenset[Permission]]

    def allows(self, principal: str, permission: Permission) -> bool:
        granted = self.grants.get(principal, frozenset())
        return permission in granted or any(permission in IMPLIED.get(g, ()) for g in granted)


def parse_acl(text: str, source: str = "ACL") -> Acl:
    grants: dict[str, set[Permission]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        parts = content.split(None, 1)
        if len(parts) != 2 or not parts[0].startswith("User:") or len(parts[0]) == len("User:"):
            raise AclError(f"{source}:{number}: expected 'User:<name> PERMISSION[,PERMISSION...]', got {content!r}")
        names = [n.strip() for n in parts[1].split(",") if n.strip()]
        try:
            permissions = {Permission(n) for n in names}
        except ValueError:
            known = ", ".join(p.value for p in Permission)
            raise AclError(f"{source}:{number}: unknown permission in {names} (known: {known})") from None
        grants.setdefault(parts[0], set()).update(permissions)
    return Acl({principal: frozenset(p) for principal, p in grants.items()})


class AclFile:
    """An ACL file, re-read when its mtime or size changes (checked at most every `check_interval_s`)."""

    def __init__(self, path: Path, check_interval_s: float = 1.0) -> None:
        self.path = path
        self._check_interval_s = check_interval_s
        self._stamp = self._file_stamp()
        self.acl = parse_acl(path.read_text(encoding="utf-8"), str(path))
        self._checked_at = time.monotonic()

    def _file_stamp(self) -> tuple[int, int]:
        stat = os.stat(self.path)
        return stat.st_mtime_ns, stat.st_size

    def current(self) -> Acl:
        now = time.monotonic()
        if now - self._checked_at < self._check_interval_s:
            return self.acl
        self._checked_at = now
        try:
            stamp = self._file_stamp()
            if stamp != self._stamp:
                self._stamp = stamp
                self.acl = parse_acl(self.path.read_text(encoding="utf-8"), str(self.path))
                log.info("ACL file %s changed: %d principals", self.path, len(self.acl.grants))
        except (OSError, AclError) as error:
            log.error("ACL file %s not reloaded, keeping the previous ACL: %s", self.path, error)
        return self.acl
