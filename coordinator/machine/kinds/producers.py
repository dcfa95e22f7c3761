"""The ProducersExpired record: idle producers' state forgotten (DESIGN §4a, producer-id expiry).

The leader decided from its speculative view (coordinator/commits/producer_expiry.py) and the record carries
what it saw of each producer. Applying it removes a producer's state on a partition only while that state is
still the one seen (same epoch, same last batch, same timestamp): the view, SQLite, a follower and a replay
all decide from the record's values alone, never from a clock, so they drop the same producers.
"""

from __future__ import annotations

from coordinator.base.invariants import check_invariant
from coordinator.machine.kinds.kind import (
    NoCatalogEffects,
    RecordDescription,
    RecordNames,
)
from coordinator.machine.producers import (
    PackedWindow,
    ProducerWindow,
    last_batch_offset,
    packed_last_batch_offset,
    producer_expired,
)
from coordinator.machine.records import ExpiredProducer, expired_producers
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView
from protos import records_pb2 as rec


def window_seen(window: ProducerWindow | None, seen: ExpiredProducer) -> bool:
    """Whether the producer's window is still the one the expiry saw (it wrote nothing since)."""
    return (
        window is not None
        and window.epoch == seen.producer_epoch
        and window.last_timestamp == seen.last_timestamp
        and last_batch_offset(window) == seen.last_batch_offset
    )


def _packed_window_seen(window: PackedWindow | None, seen: ExpiredProducer) -> bool:
    return (
        window is not None
        and window[0] == seen.producer_epoch
        and window[2] == seen.last_timestamp
        and packed_last_batch_offset(window) == seen.last_batch_offset
    )


def _checked(expired: rec.ProducersExpired) -> list[ExpiredProducer]:
    """The record's producers, each of which its own cut-off expires (else the record is not a decision of ours)."""
    producers = expired_producers(expired)
    for producer in producers:
        check_invariant(
            producer_expired(producer.last_timestamp, expired.expired_before_ms),
            f"producer {producer.producer_id} of partition {producer.partition_key} expired with its last batch at "
            f"{producer.last_timestamp}, not before {expired.expired_before_ms}",
        )
    return producers


class ProducersExpiredKind(NoCatalogEffects):
    name = "producers_expired"

    def replay(self, view: CoordinatorView, expired: rec.ProducersExpired, end_offset: int) -> None:
        for producer in _checked(expired):
            if window_seen(view.producer_window(producer.partition_key, producer.producer_id), producer):
                view.remove_producer(producer.partition_key, producer.producer_id)

    def apply(self, transaction: StateTransaction, expired: rec.ProducersExpired) -> None:
        for producer in _checked(expired):
            if _packed_window_seen(transaction.producer_window(producer.partition_key, producer.producer_id), producer):
                transaction.expire_window(producer.partition_key, producer.producer_id)
                # Its last marker's coordinator epoch goes with it, as Kafka's whole entry does (DESIGN §4b); in
                # record order, before any marker of a later record writes it again.
                transaction.db.execute(
                    "DELETE FROM producer_transactions WHERE partition_key = ? AND producer_id = ?",
                    (producer.partition_key, producer.producer_id),
                )

    def describe(self, expired: rec.ProducersExpired, names: RecordNames) -> RecordDescription:
        producers = expired_producers(expired)
        parts = [
            f"{names.partition(p.partition_key)} producer {p.producer_id} epoch {p.producer_epoch} last batch at "
            f"offset {p.last_batch_offset}, timestamp {p.last_timestamp}"
            for p in producers
        ]
        summary = f"producers expired: {len(producers)} with a last batch older than {expired.expired_before_ms}" + (
            ": " + "; ".join(parts) if parts else ""
        )
        fields = {
            "expired_before_ms": expired.expired_before_ms,
            "producers": [
                {
                    "partition": names.partition(p.partition_key),
                    "producer_id": p.producer_id,
                    "producer_epoch": p.producer_epoch,
                    "last_batch_offset": p.last_batch_offset,
                    "last_timestamp": p.last_timestamp,
                }
                for p in producers
            ],
        }
        return RecordDescription(summary, fields)
