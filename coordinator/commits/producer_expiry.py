"""Producer-id expiry (DESIGN §4a), the pure decision: which idle producers' state a coordinator forgets.

Kafka's `producer.id.expiration.ms`: a producer whose last batch's effective timestamp (DESIGN §4) is at or before
the check's now - `diskless.coordinator.producer.id.expiration.ms` (Kafka's `>=`) is forgotten on that partition;
its next batch is an unknown producer's (any sequence). The expiry worker (producer_expiry_worker.py) proposes
candidates from the committed state; this check decides against the speculative view, as commits are checked, so a
commit of the producer still pending (appended, not yet applied) keeps it. The record carries what the check saw of
each producer, and applying it removes only a state that is still that one (coordinator/machine/kinds/producers.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import final

from coordinator.base.result import Result
from coordinator.machine import records
from coordinator.machine.producers import ProducerWindow, last_batch_offset, producer_expired
from coordinator.machine.records import ExpiredProducer
from coordinator.machine.view import CoordinatorView, PartitionView

ProducerKey = tuple[int, int]  # (partition key, producer id)


@final
@dataclass(frozen=True, slots=True)
class ExpiryRequest:
    """Producers to look at (the committed state showed them idle) and the expiration they are judged by."""

    candidates: tuple[ProducerKey, ...]
    expiration_ms: int


def expired_producer(key: ProducerKey, window: ProducerWindow | None, expired_before_ms: int) -> ExpiredProducer | None:
    """The producer as the record names it, when its window is expired; else None (unknown, or not idle enough)."""
    if window is None or not producer_expired(window.last_timestamp, expired_before_ms):
        return None
    return ExpiredProducer(key[0], key[1], window.epoch, last_batch_offset(window), window.last_timestamp)


def check_expire_producers(view: CoordinatorView, request: ExpiryRequest, now_ms: int) -> Result[int]:
    """One record forgetting the candidates the view shows expired (none when no candidate is); answers how many."""
    expired_before_ms = now_ms - request.expiration_ms
    expired = _expired(view, dict.fromkeys(request.candidates), expired_before_ms)  # in order, each once
    if not expired:
        return Result([], 0)
    return Result([records.producers_expired(expired_before_ms, expired)], len(expired))


def _frozen(partition: PartitionView | None) -> bool:
    return partition is not None and partition.moving_to >= 0


def _expired(view: CoordinatorView, keys: Iterable[ProducerKey], expired_before_ms: int) -> list[ExpiredProducer]:
    # A producer with an open transaction is never expired (Kafka's rule, DESIGN §4b), nor one of a partition frozen
    # moving to another coordinator (design §5a: its producers move as they are).
    partitions = view.partitions_by_key
    found = (
        expired_producer(key, view.producer_window(*key), expired_before_ms)
        for key in keys
        if view.open_transaction(*key) < 0 and not _frozen(partitions.get(key[0]))
    )
    return [producer for producer in found if producer is not None]
