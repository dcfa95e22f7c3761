"""The metadata log's record interpreter: what each record kind does to the view and to SQLite.

One `RecordKind` per kind of record (protos/records.proto) holds both of its
effects, with the invariants they share, in one place:

- `replay(view, record, end_offset)`: into the speculative view, as the leader
  checks operations (and a follower takes its leader's records);
- `apply(transaction, record)`: into the SQLite state, inside the transaction
  of `StateStore.apply`, whether after the leader's write, on a follower, or
  replaying the log at start.
"""

from __future__ import annotations

from coordinator.machine.kinds.files import (
    FileCommittedKind,
    FileDeletedKind,
    FileDeletionScheduledKind,
    FileHandedOverKind,
    FileOwnershipTakenKind,
)
from coordinator.machine.kinds.kind import RecordKind
from coordinator.machine.kinds.leadership import LeaderChangeKind
from coordinator.machine.kinds.partitions import PartitionCreatedKind, RecordsDeletedKind, TopicDeletedKind
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec

KINDS: dict[str, RecordKind] = {
    kind.name: kind
    for kind in (
        LeaderChangeKind(),
        PartitionCreatedKind(),
        TopicDeletedKind(),
        RecordsDeletedKind(),
        FileCommittedKind(),
        FileOwnershipTakenKind(),
        FileHandedOverKind(),
        FileDeletionScheduledKind(),
        FileDeletedKind(),
    )
}


def _kind_of(record: rec.MetadataRecord) -> tuple[RecordKind, object]:
    name = record.WhichOneof("record")
    kind = KINDS.get(name) if name is not None else None
    if kind is None:
        raise AssertionError(f"unknown metadata record {name!r}")
    return kind, getattr(record, name)


def replay(view: CoordinatorView, record: rec.MetadataRecord, end_offset: int) -> None:
    """Applies one record, appended in a log batch ending at `end_offset` (exclusive), to the view."""
    kind, body = _kind_of(record)
    kind.replay(view, body, end_offset)


def apply(transaction: StateTransaction, record: rec.MetadataRecord) -> None:
    """Applies one record to the SQLite state, inside `transaction`."""
    kind, body = _kind_of(record)
    kind.apply(transaction, body)


__all__ = ["KINDS", "RecordKind", "apply", "replay"]
