"""A partition move's cut-over at its target without a server (design §5a): PartitionAdopted makes the staged
batches the partition served there, with the frozen source's positions, producers' windows, open transaction,
markers' epochs and topic configurations. Afterwards a resend of a batch the source acknowledged is a duplicate at
the target, a new batch continues at the source's high watermark, the catalog places the partition at the target
(also when rebuilt while the source still holds it frozen); a repeated adoption changes nothing, an adoption of
what is not staged, or of another number of chunks, is refused, and one under other topic configurations than the
target's waits; view and SQLite agree through a reopen, a rebuild from the records and the state check."""

from __future__ import annotations

import tempfile
from pathlib import Path

from coordinator.base.errors import ErrorCode
from coordinator.base.result import Result
from coordinator.commits import parts
from coordinator.commits import rules as commit_rules
from coordinator.machine import records
from coordinator.machine.catalog import PlacedPartition, TopicCatalog
from coordinator.machine.state import adoptions, integrity
from coordinator.machine.state.store import StateStore
from coordinator.runtime.shard.log_replay import logical_dump
from coordinator.topics import partition_checks
from coordinator.topics.move_adoption import AdoptRequest, check_adopt_partition
from tests.harness import batch, laid_out
from tests.test_move_adoption_chunks import MOVE, NOW, OTHER, TOPIC, Coordinator, frozen_source, move_all, pair

__all__ = ["pair"]  # the fixture, shared with the chunks' tests

CONFIGS = {"retention.ms": "86400000"}


def adopt(source: Coordinator, target: Coordinator, key: int, chunks: int) -> tuple[ErrorCode, int]:
    """(error code, records written) of the target's answer to the source's adoption request."""
    with source.store.read_transaction() as db:
        adopted = adoptions.adopted_partition(db, key)
    assert adopted is not None
    result = check_adopt_partition(target.view, AdoptRequest(0, MOVE, chunks, adopted), NOW)
    target.append(result)
    return result.response.error_code, len(result.records)


def moved(pair: tuple[Coordinator, Coordinator]) -> tuple[int, int]:
    """The source's partition 0 frozen with configurations and an open transaction, staged at the target: (the
    source's key, the chunks sent)."""
    source, target = pair
    source.append(Result([records.topic_configs_changed(TOPIC, CONFIGS)], None))
    source.apply()
    key = frozen_source(source, target, open_transaction=True)
    return key, move_all(source, target, key)


def resend(target: Coordinator, sequence: int, records_in_batch: int, key: str) -> tuple[int, int, bool]:
    """Producer 7's batch sent to the target: (error code, base offset, answered as a duplicate)."""
    laid = laid_out([batch(TOPIC, 0, records_in_batch, producer_id=7, epoch=1, sequence=sequence)])
    read = parts.request_batches(laid)
    part = parts.CommitPart(key, 100, 1, (0, 1), tuple(read), tuple(commit_rules.batch_structure_problems(read, 100)))
    result = commit_rules.check_commit_part(target.view, part, NOW)
    target.append(result)
    (outcome,) = result.response
    return outcome.error_code, outcome.assigned_base_offset, outcome.is_duplicate


def test_the_adopted_partition_is_the_sources_and_serves_at_the_target(pair: tuple[Coordinator, Coordinator]) -> None:
    source, target = pair
    key, chunks = moved(pair)
    assert adopt(source, target, key, chunks) == (ErrorCode.NONE, 1)
    target.apply()
    at_source, at_target = source.view.partition(TOPIC, 0), target.view.partition(TOPIC, 0)
    assert at_source is not None and at_target is not None and at_target.moving_to == -1
    positions = ("log_start_offset", "high_watermark", "local_log_start_offset", "seal_offset")
    assert [getattr(at_target, p) for p in positions] == [getattr(at_source, p) for p in positions]
    assert target.view.producer_windows[at_target.key] == source.view.producer_windows[at_source.key]
    assert target.view.open_transactions[at_target.key] == {11: 13} == source.view.open_transactions[at_source.key]
    assert target.view.coordinator_epochs[at_target.key] == source.view.coordinator_epochs[at_source.key]
    assert dict(target.view.topic_configs(TOPIC)) == CONFIGS
    assert target.view.last_stable_offset(at_target) == 13
    # Producer 7's batch at offsets 6..7 (sequences 3..4), acknowledged by the source: a duplicate at the target.
    assert resend(target, 3, 2, "wal/7") == (ErrorCode.NONE, 6, True)
    # Its next batch continues at the source's high watermark.
    assert resend(target, 5, 1, "wal/8") == (ErrorCode.NONE, at_source.high_watermark, False)
    target.apply()
    assert integrity.check_integrity(target.store.path).problem is None


def test_a_repeated_adoption_changes_nothing_and_one_of_what_is_not_staged_is_refused(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    key, chunks = moved(pair)
    assert adopt(source, target, key, chunks + 1) == (ErrorCode.INVALID_REQUEST, 0)  # a chunk it never received
    assert adopt(source, target, key, chunks) == (ErrorCode.NONE, 1)
    assert adopt(source, target, key, chunks) == (ErrorCode.NONE, 0)  # not applied yet: answered as the first
    target.apply()
    assert adopt(source, target, key, chunks) == (ErrorCode.NONE, 0)
    with source.store.read_transaction() as db:
        adopted = adoptions.adopted_partition(db, key)
    assert adopted is not None
    unstaged = AdoptRequest(0, MOVE + 1, 1, adopted)
    assert check_adopt_partition(target.view, unstaged, NOW).response.error_code == ErrorCode.INVALID_REQUEST


def test_an_adoption_under_other_topic_configurations_waits_for_the_change(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    created = partition_checks.check_create_partitions(
        target.view, partition_checks.CreatePartitions(TOPIC, "orders", (1,)), 0
    )  # the target holds partition 1 of the topic, at the default configurations
    target.append(created)
    key, chunks = moved(pair)
    assert adopt(source, target, key, chunks) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, 0)
    target.append(Result([records.topic_configs_changed(TOPIC, CONFIGS)], None))  # the change reaches the target
    assert adopt(source, target, key, chunks) == (ErrorCode.NONE, 1)


def test_the_catalog_places_the_partition_at_the_target_from_the_adoption(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    key, chunks = moved(pair)
    adopt(source, target, key, chunks)
    catalog = TopicCatalog()
    catalog.rebuild([PlacedPartition(0, TOPIC, "orders", 0)])
    catalog.apply_records(1, target.pending[-1][1])  # the target applied its adoption
    assert catalog.coordinator_of(TOPIC, 0) == 1
    # Rebuilt while the source still holds it frozen (no drop yet): the holder that is not frozen, in either order.
    placed = [PlacedPartition(0, TOPIC, "orders", 0, frozen=True), PlacedPartition(1, TOPIC, "orders", 0)]
    for order in (placed, placed[::-1]):
        catalog.rebuild(order)
        assert catalog.coordinator_of(TOPIC, 0) == 1


def test_view_and_sqlite_agree_through_a_reopen_a_rebuild_and_the_state_check(
    pair: tuple[Coordinator, Coordinator],
) -> None:
    source, target = pair
    key, chunks = moved(pair)
    adopt(source, target, key, chunks)
    target.apply()
    before = target.view
    path = target.store.path
    target.store.close()
    reopened = StateStore(path, 1)
    target.store = reopened
    view = reopened.load_view()
    at_target = view.partition(TOPIC, 0)
    assert at_target is not None and view.adopted_moves == {(0, MOVE)} and view.staged_moves == {}
    assert view.producer_windows[at_target.key] == before.producer_windows[at_target.key]
    assert view.open_transactions[at_target.key] == before.open_transactions[at_target.key]
    with tempfile.TemporaryDirectory() as directory:
        rebuilt = StateStore(Path(directory) / "state.sqlite", 1)
        created = partition_checks.check_create_partitions(
            rebuilt.load_view(), partition_checks.CreatePartitions(OTHER, "audit", (0, 1)), 0
        )
        rebuilt.apply([(1, list(created.records)), *[(end + 1, r) for end, r in target.written]])  # type: ignore[attr-defined]
        live, replayed = logical_dump(path), logical_dump(rebuilt.path)
        assert {k: v for k, v in replayed.items() if k != "meta"} == {k: v for k, v in live.items() if k != "meta"}
        rebuilt.close()
    assert integrity.check_integrity(path).problem is None
