"""What a coordinator's leader knows of each follower (Kafka's `Replica` on the leader), and the lines it reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import final


@final
@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows of one follower (Kafka's `Replica` state on the leader)."""

    node_id: int
    incarnation: str = ""  # the follower node's incarnation, as its fetches say
    log_end_offset: int = -1  # -1 until its first fetch in this epoch
    last_fetch_ms: int = -1
    leader_end_at_last_fetch: int = -1
    last_caught_up_ms: int = -1


@final
@dataclass(frozen=True, slots=True)
class ReplicaProgress:
    """One replica as the leader sees it now (DescribeCoordinators' `replica_progress`, the lag gauges)."""

    node_id: int
    log_end_offset: int  # -1 until the follower has fetched in this epoch
    lag: int  # offsets behind the leader's log end; -1 while unknown
    in_sync: bool
    last_fetch_age_ms: int  # -1 if it has not fetched in this epoch (and for the leader itself)
    caught_up_age_ms: int
