"""The idempotent producer's rules, pure (coordinator/machine/producers.py): what a cosmic-ray run over that module
found unpinned by the tests of the commit path (issue #40, item 5). Each test names the one-line break it kills.
"""

from __future__ import annotations

from coordinator.base.errors import ErrorCode
from coordinator.machine.producers import ProducerWindow, WindowEntry, check_producer

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
