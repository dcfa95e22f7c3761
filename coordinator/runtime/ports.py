"""What the pipeline needs of the metadata log and the state: narrow Protocols, implemented elsewhere.

The pipeline never names `MetadataLog` or `StateStore`: a replicated log (its
append answering at the high watermark) or a follower's state can stand in.
The concrete classes are chosen in one place, `coordinator.runtime.shard.loading`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from coordinator.base.errors import CoordinatorUnavailable
from coordinator.machine import kinds
from protos import records_pb2 as rec

AppliedFrame = tuple[int, Sequence[rec.MetadataRecord]]  # (end offset of the frame, its records)


def topic_records(applied: Sequence[AppliedFrame]) -> list[rec.MetadataRecord]:
    """The records among applied frames that change the node's topic catalog (their kind says so), in log order."""
    return [record for _, frame in applied for record in frame if kinds.changes_catalog(record)]


# Told (coordinator id, the topic_records in log order) after SQLite applied them and before
# any caller of their group is answered, so an answer never runs ahead of the catalog.
TopicRecordsApplied = Callable[[int, Sequence[rec.MetadataRecord]], None]


class LogAppender(Protocol):
    """The metadata log as the pipeline writes it (DESIGN §3 steps 3 and 4)."""

    def append(self, frames: bytes, end_offset: int, last_epoch: int) -> None:
        """Returns once the frames ending at `end_offset` are at or below the high watermark.

        With one replica that is durable on disk; a replicated log returns once the in-sync replicas
        have them. Raises when they may not be: the pipeline then fails every operation not answered.
        """
        ...


class AppliedState(Protocol):
    """The committed state as the pipeline applies to it (DESIGN §3 step 5)."""

    @property
    def applied_offset(self) -> int: ...

    def apply(self, frames: Sequence[AppliedFrame]) -> None: ...


class Replication(Protocol):
    """The leader's replication as the pipeline waits on it (`coordinator.runtime.replication.leader`)."""

    def refuse_write(self) -> CoordinatorUnavailable | None:
        """Why records may not be appended now (too few in-sync replicas, leadership lost), or None."""
        ...

    def writing(self) -> None:
        """A group's write begins; `appended` follows it, or `write_failed`."""
        ...

    def write_failed(self) -> None: ...

    def appended(self, frames: bytes, base_offset: int, end_offset: int) -> None:
        """The leader's own log holds these frames durably; followers may fetch them."""
        ...

    async def committed(self, end_offset: int) -> CoordinatorUnavailable | None:
        """Returns once the high watermark passed `end_offset`: None, or the error its callers get.

        Raises when leadership ended first (the records may never be committed).
        """
        ...
