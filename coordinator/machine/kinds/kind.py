"""What a record kind is: its two effects, what the node and the operator tools ask of it, and shared invariants.

A record names partitions by a coordinator-local key and files by id. The node's topic catalog, the
pipeline that reports records to it, and the operator's log recovery (coordinator/cli/log_recovery)
ask each kind what its records do and mean, as plain data, instead of matching oneof names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from coordinator.base.invariants import InvariantViolation, check_invariant
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView


@dataclass(frozen=True, slots=True)
class CreatedPartition:
    """A user partition a record assigns to its coordinator, empty (next offset 0)."""

    partition_key: int
    topic_id: bytes
    topic_name: str
    partition: int


@dataclass(frozen=True, slots=True)
class PartitionChanges:
    """What a record does to its coordinator's partitions.

    The topic catalog follows `created` and `deleted_topics`; a log recovery follows `next_offsets` too to
    know each partition's next offset before and after the records it gives up; the node starts the purge on
    `deleted_topics` and `purge_pending`.
    """

    created: tuple[CreatedPartition, ...] = ()
    deleted_topics: tuple[bytes, ...] = ()  # topic ids: each partition of theirs on the coordinator goes
    next_offsets: tuple[tuple[int, int], ...] = ()  # (partition key, next offset) as batches are added, in order
    # Batches set aside for the purge's passes other than a topic deletion's (a partition moved out, an adoption
    # abandoned): the node wakes the coordinator's purge as it does for `deleted_topics`.
    purge_pending: bool = False


@dataclass(frozen=True, slots=True)
class NamesGiven:
    """What a record tells of names used by other records: partitions, files' object keys, the leader's node."""

    partitions: tuple[CreatedPartition, ...] = ()
    files: tuple[tuple[int, str], ...] = ()  # (file id, object key)
    leader_node_id: int | None = None  # None: the record names no leader


NO_PARTITION_CHANGES = PartitionChanges()
PURGE_PENDING = PartitionChanges(purge_pending=True)
NO_NAMES = NamesGiven()


class RecordNames(Protocol):
    """Partition keys and file ids in Kafka terms, as far as known, for describing a record to an operator."""

    def partition(self, key: int) -> str: ...

    def file(self, file_id: int) -> str: ...

    def topic_names(self, topic_id: bytes) -> list[str]: ...  # sorted; empty when none is known


@dataclass(frozen=True, slots=True)
class RecordDescription:
    """One record for an operator: a line in Kafka terms, starting with its kind in words, and the same as fields."""

    summary: str
    fields: dict[str, Any]


class RecordKind(Protocol):
    """One kind of metadata record: everything done with it, live, in replay and by the operator tools.

    `body` is the message in the record's oneof field `name`; a kind's own class narrows its type.
    """

    name: str  # the field of MetadataRecord's `record` oneof
    # It creates or deletes partitions, so the node's topic catalog follows it. A flag, not derived from
    # partition_changes: the pipeline asks it of every applied record, and a commit's changes unpack its batches.
    changes_catalog: bool

    def replay(self, view: CoordinatorView, body: Any, end_offset: int) -> None:
        """Its effect on the speculative view, for a record appended in a log batch ending at `end_offset`."""
        ...

    def apply(self, transaction: StateTransaction, body: Any) -> None:
        """Its effect on the SQLite state, inside `transaction`."""
        ...

    def partition_changes(self, body: Any) -> PartitionChanges:
        """Partitions it creates, topics it deletes, next offsets it moves: the topic catalog and log recovery."""
        ...

    def names_given(self, body: Any) -> NamesGiven:
        """The names it gives to keys and ids in other records, gathered by log recovery to describe them."""
        ...

    def describe(self, body: Any, names: RecordNames) -> RecordDescription:
        """What it held, for an operator: `diskless log recover` lists each record it gives up."""
        ...


class NoCatalogEffects:
    """What a kind that neither creates nor deletes partitions, nor names keys for other records, answers: a base
    for such kinds (the state's bookkeeping: retention, purges, offloads, producer expiry, topic configurations)."""

    changes_catalog = False

    def partition_changes(self, body: Any) -> PartitionChanges:
        return NO_PARTITION_CHANGES

    def names_given(self, body: Any) -> NamesGiven:
        return NO_NAMES


def next_id_after(what: str, given: int, expected: int) -> int:
    """Ids (files, partition keys) are assigned in order: a record carries the next one, else the log is not ours."""
    check_invariant(given == expected, f"{what} {given} != next {expected}")
    return given + 1


def batch_discontinuity(
    batch_id: int, expected_batch_id: int, base_offset: int, last_offset: int, partition_key: int, high_watermark: int
) -> InvariantViolation | None:
    """Why a committed batch does not continue its partition (I3: offsets contiguous, ids in order), else None."""
    if batch_id != expected_batch_id or base_offset != high_watermark or last_offset < base_offset:
        return InvariantViolation(
            f"batch {batch_id} (expected id {expected_batch_id}) at {base_offset}..{last_offset} does not "
            f"continue partition {partition_key} at {high_watermark}"
        )
    return None


def check_log_start_moves(partition_key: int, before: int, after: int, high_watermark: int) -> None:
    """A log start only moves forward, and never past the high watermark."""
    check_invariant(
        before < after <= high_watermark,
        f"log start of partition {partition_key} moves from {before} to {after} (high watermark {high_watermark})",
    )


def check_epoch_rises(before: int, after: int) -> None:
    check_invariant(after > before, f"leader epoch goes from {before} to {after}")
