"""What this node is for one coordinator, as the cluster's metadata in etcd says (DESIGN §6a)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RoleKind(enum.Enum):
    LEADER = "LEADER"  # takes writes, serves followers' fetches
    FOLLOWER = "FOLLOWER"  # fetches the leader's log, serves reads up to its high watermark
    OFFLINE = "OFFLINE"  # a replica here, but no leader is known: serves nothing until one is
    NOT_REPLICA = "NOT_REPLICA"  # this node holds no replica of the coordinator


@dataclass(frozen=True, slots=True)
class ReplicaRole:
    kind: RoleKind
    node_id: int  # this node
    leader_node_id: int  # -1 when none is known
    leader_epoch: int
    leader_address: str  # HOST:PORT of the leader's node; empty when none is known
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    replica_addresses: tuple[tuple[int, str], ...] = ()  # (node id, HOST:PORT) of the live replicas
    node_incarnation: str = ""  # this node's incarnation (a follower sends it with each fetch)
    isr_incarnations: tuple[tuple[int, str], ...] = ()  # the incarnation each ISR member was in sync as

    def same_leadership(self, other: ReplicaRole) -> bool:
        """Whether `other` differs at most in its ISR (no reload needed to follow it)."""
        return (
            self.kind is other.kind
            and self.leader_node_id == other.leader_node_id
            and self.leader_epoch == other.leader_epoch
            and self.leader_address == other.leader_address
        )
