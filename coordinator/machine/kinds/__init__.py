"""The metadata log's record kinds: the one registry of what each kind of record does and means.

One `RecordKind` per kind of record (protos/records.proto) holds, in one place:

- `replay(view, body, end_offset)`: its effect on the speculative view, as the leader
  checks operations (and a follower takes its leader's records);
- `apply(transaction, body)`: its effect on the SQLite state, inside the transaction
  of `StateStore.apply`, whether after the leader's write, on a follower, or
  replaying the log at start; both effects check the same invariants;
- `changes_catalog` and `partition_changes(body)`: what the node's topic catalog follows
  (coordinator.machine.catalog, reported by coordinator.runtime.ports.topic_records), and the
  next offsets a log recovery follows;
- `names_given(body)` and `describe(body, names)`: a record for an operator
  (coordinator/cli/log_recovery), as data that the command only formats.

Every other module reaches a record's kind through `find` (or `replay`, `apply`,
`changes_catalog`) below, never by matching oneof names; tests/test_record_kinds.py fails when
a field of the oneof has no kind here, or when a kind's hooks fail on a record of its kind.
"""

from __future__ import annotations

from typing import Any

from coordinator.machine.kinds.abandon import PartitionAdoptionAbandonedKind
from coordinator.machine.kinds.adoption import PartitionAdoptedKind
from coordinator.machine.kinds.adoptions import PartitionAdoptionChunkKind
from coordinator.machine.kinds.files import (
    FileCommittedKind,
    FileDeletedKind,
    FileDeletionScheduledKind,
    FileHandedOverKind,
    FileOwnershipTakenKind,
)
from coordinator.machine.kinds.kind import (
    CreatedPartition,
    NamesGiven,
    PartitionChanges,
    RecordDescription,
    RecordKind,
    RecordNames,
)
from coordinator.machine.kinds.leadership import LeaderChangeKind
from coordinator.machine.kinds.moved_out import FileLoanReturnedKind, FileReturnedKind, PartitionMovedOutKind
from coordinator.machine.kinds.moves import (
    PartitionMoveCancelledKind,
    PartitionMoveFrozenKind,
    PartitionMoveStartedKind,
)
from coordinator.machine.kinds.partitions import PartitionCreatedKind, RecordsDeletedKind, TopicDeletedKind
from coordinator.machine.kinds.producers import ProducersExpiredKind
from coordinator.machine.kinds.purges import BatchesPurgedKind
from coordinator.machine.kinds.replacements import BatchesReplacedKind
from coordinator.machine.kinds.retention import RetentionAppliedKind
from coordinator.machine.kinds.switch import DisklessLogsInitializedKind
from coordinator.machine.kinds.tiering import RemoteLogSegmentsCommittedKind
from coordinator.machine.kinds.topic_configs import TopicConfigsChangedKind
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec

# Typed as the protocol, so that mypy checks each kind's class against RecordKind.
_REGISTERED: tuple[RecordKind, ...] = (
    LeaderChangeKind(),
    PartitionCreatedKind(),
    TopicDeletedKind(),
    RecordsDeletedKind(),
    FileCommittedKind(),
    FileOwnershipTakenKind(),
    FileHandedOverKind(),
    FileDeletionScheduledKind(),
    FileDeletedKind(),
    ProducersExpiredKind(),
    TopicConfigsChangedKind(),
    BatchesPurgedKind(),
    RetentionAppliedKind(),
    RemoteLogSegmentsCommittedKind(),
    DisklessLogsInitializedKind(),
    BatchesReplacedKind(),
    PartitionMoveStartedKind(),
    PartitionMoveCancelledKind(),
    PartitionAdoptionChunkKind(),
    PartitionAdoptedKind(),
    PartitionMovedOutKind(),
    FileLoanReturnedKind(),
    FileReturnedKind(),
    PartitionAdoptionAbandonedKind(),
    PartitionMoveFrozenKind(),
)
KINDS: dict[str, RecordKind] = {kind.name: kind for kind in _REGISTERED}
# The pipeline asks of every applied record whether the catalog follows it: a set lookup by name is cheapest.
_CATALOG_KIND_NAMES = frozenset(kind.name for kind in _REGISTERED if kind.changes_catalog)


def find(record: rec.MetadataRecord) -> tuple[RecordKind, Any] | None:
    """The record's kind and its body (the oneof's message); None for a record with no kind set."""
    name = record.WhichOneof("record")
    if name is None:
        return None
    kind = KINDS.get(name)
    if kind is None:
        raise AssertionError(f"unknown metadata record {name!r}")
    return kind, getattr(record, name)


def _kind_of(record: rec.MetadataRecord) -> tuple[RecordKind, Any]:
    found = find(record)
    if found is None:
        raise AssertionError("metadata record with no kind set")
    return found


def changes_catalog(record: rec.MetadataRecord) -> bool:
    """Whether the node's topic catalog follows this record (its kind's `changes_catalog`)."""
    return record.WhichOneof("record") in _CATALOG_KIND_NAMES


def replay(view: CoordinatorView, record: rec.MetadataRecord, end_offset: int) -> None:
    """Applies one record, appended in a log batch ending at `end_offset` (exclusive), to the view."""
    kind, body = _kind_of(record)
    kind.replay(view, body, end_offset)


def apply(transaction: StateTransaction, record: rec.MetadataRecord) -> None:
    """Applies one record to the SQLite state, inside `transaction`."""
    kind, body = _kind_of(record)
    kind.apply(transaction, body)


__all__ = [
    "KINDS",
    "CreatedPartition",
    "NamesGiven",
    "PartitionChanges",
    "RecordDescription",
    "RecordKind",
    "RecordNames",
    "apply",
    "changes_catalog",
    "find",
    "replay",
]
