"""The idempotent producer's rules, pure (coordinator/machine/producers.py): what a cosmic-ray run over that module
found unpinned by the tests of the commit path (issue #40, item 5). Each test names the one-line break it kills.
"""

from __future__ import annotations

from coordinator.base.errors import ErrorCode
from coordinator.machine.producers import (
    LOG_APPEND_TIME,
    ProducerWindow,
    WindowEntry,
    check_producer,
    effective_timestamp,
)
from protos import coordinator_pb2 as pb

CREATE_TIME = pb.CREATE_TIME

EPOCH = 3


def window(*ranges: tuple[int, int]) -> ProducerWindow:
    """A producer at EPOCH whose last batches had these (base, last) sequences, oldest first."""
    entries = tuple(WindowEntry(base, last, 100 + i * 10, 1_000, 0) for i, (base, last) in enumerate(ranges))
    return ProducerWindow(EPOCH, entries, 1_000)


def test_a_duplicate_is_a_batch_with_both_sequences_of_one_in_the_window() -> None:
    current = window((0, 4), (5, 9))
    verdict = check_producer(current, EPOCH, 5, 9)
    assert (verdict.error_code, verdict.duplicate_of) == (ErrorCode.NONE, current.entries[1])


def test_a_batch_sharing_only_its_last_sequence_with_one_in_the_window_is_out_of_order_not_a_duplicate() -> None:
    # (2..9) ends where (5..9) ended but starts inside the batch before: Kafka's duplicate needs both sequences to
    # match (`ProducerStateEntry.findDuplicateBatch`); answering it as a duplicate would acknowledge records never
    # written. Kills `entry.base_sequence <= base_sequence` for `==`.
    for base in (2, 6):
        verdict = check_producer(window((0, 4), (5, 9)), EPOCH, base, 9)
        assert verdict.duplicate_of is None, base
        assert verdict.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, base


def test_a_batch_sharing_only_its_base_sequence_with_one_in_the_window_is_out_of_order_not_a_duplicate() -> None:
    # Kills `entry.last_sequence <= last_sequence` and `>=` for `==`, and `or` for `and`.
    for last in (7, 12):
        verdict = check_producer(window((0, 4), (5, 9)), EPOCH, 5, last)
        assert verdict.duplicate_of is None, last
        assert verdict.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, last


def test_a_retry_at_an_older_epoch_is_fenced_even_with_sequences_of_the_window() -> None:
    # Duplicates are looked for at the producer's current epoch only (Kafka's batch metadata is per epoch): a zombie
    # retrying at an older epoch is INVALID_PRODUCER_EPOCH. Kills `window.epoch >= epoch` for `==`.
    verdict = check_producer(window((0, 4)), EPOCH - 1, 0, 4)
    assert (verdict.error_code, verdict.duplicate_of) == (ErrorCode.INVALID_PRODUCER_EPOCH, None)


def test_a_new_epoch_starts_at_sequence_0_and_nothing_else() -> None:
    assert check_producer(window((0, 4)), EPOCH + 1, 0, 0).error_code == ErrorCode.NONE
    # Kills `base_sequence > 0` for `!= 0` (a negative one is refused at the request's validation as well).
    for base in (-1, 1, 5):
        assert check_producer(window((0, 4)), EPOCH + 1, base, 9).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_create_time_of_0_is_a_timestamp_and_only_a_negative_one_means_none() -> None:
    # DESIGN §4: a batch without a timestamp (-1) takes its append time; 0 (the epoch) is a timestamp like any
    # other. Kills `max_timestamp <= 0` and `< 1` for `< 0`.
    assert effective_timestamp(0, CREATE_TIME, 5_000) == 0
    assert effective_timestamp(-1, CREATE_TIME, 5_000) == 5_000
    assert effective_timestamp(7, CREATE_TIME, 5_000) == 7
    assert effective_timestamp(7, LOG_APPEND_TIME, 5_000) == 5_000
