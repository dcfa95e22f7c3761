"""ReplaceBatches' rules without a server (DESIGN §4c): every refusal, partial deletion, retries, what a move keeps
(offsets, sizes, timestamps, producer fields, transaction markers, the LSO, aborted ranges, the time index), the
live batch counts the state check compares, and GetFileMergeWorkItem's plan from the same state."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from coordinator.base.errors import ErrorCode
from coordinator.base.invariants import InvariantViolation
from coordinator.base.result import Result
from coordinator.commits import rules as rules_commit
from coordinator.consolidation import rules
from coordinator.consolidation.merge_work import WorkBounds, merge_work
from coordinator.consolidation.rules import Extent, ReplacePart
from coordinator.machine import records
from coordinator.machine.state import reads
from coordinator.machine.state.integrity import check_integrity, live_batch_problems
from coordinator.runtime.shard.log_replay import logical_dump
from protos import coordinator_pb2 as pb
from tests.test_producer_expiry_core import TOPIC, Coordinator, _commit, _coordinator
from tests.test_transactions_core import data, find, marker

NOW = 10_000
NEW_KEY = "wal/merged/0001"


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Coordinator]:
    made = _coordinator(str(tmp_path))  # partitions 0 and 1 of TOPIC, keys 0 and 1
    yield made
    made.store.close()


def commit_sizes(
    coordinator: Coordinator, partition: int, sizes: Sequence[int], key: str, records_each: int = 2
) -> None:
    """One file holding one batch per size, of `records_each` offsets each, applied."""
    from tests.harness import batch

    batches = [batch(TOPIC, partition, records_each, size=size, max_timestamp=NOW + i) for i, size in enumerate(sizes)]
    assert _commit(coordinator, batches, key, NOW) == [ErrorCode.NONE] * len(sizes)
    coordinator.apply()


def part(*extents: Extent, key: str = NEW_KEY, owners: tuple[int, ...] = (0,), file_size: int = 10_000) -> ReplacePart:
    problems = rules.extent_structure_problems(extents, file_size)
    return ReplacePart(key, file_size, 7, owners, tuple(extents), tuple(problems), 1000)


def replace(coordinator: Coordinator, request: ReplacePart, apply: bool = True) -> list[tuple[int, str]]:
    result = rules.check_replace_part(coordinator.view, request, NOW + 5)
    coordinator.append(result)
    if apply:
        coordinator.apply()
    return [(outcome.error_code, outcome.message) for outcome in result.response]


def codes(answers: list[tuple[int, str]]) -> list[int]:
    return [code for code, _ in answers]


def positions(coordinator: Coordinator, partition: int) -> list[tuple[str, int, int, int, int]]:
    """Each held batch's (object key, byte offset, size, base offset, last offset), as FindBatches answers it."""
    with coordinator.store.read_transaction() as db:
        found = reads.partition_offsets(db, TOPIC, partition)
        assert found is not None
        rows = list(
            db.execute(
                "SELECT f.object_key, b.byte_offset, b.size, b.base_offset, b.last_offset FROM batches AS b "
                "JOIN files AS f ON f.file_id = b.file_id WHERE b.partition_key = ? ORDER BY b.last_offset",
                (found.partition_key,),
            )
        )
    return [tuple(row) for row in rows]  # type: ignore[misc]


def live(coordinator: Coordinator, key: str) -> int:
    facts = coordinator.store.committed_file(key)
    assert facts is not None, key
    return facts.live_batches


def assert_counts_agree(coordinator: Coordinator) -> None:
    with coordinator.store.read_transaction() as db:
        assert live_batch_problems(db) == []


def test_a_run_moves_to_consecutive_positions_in_the_new_object_with_nothing_else_changed(
    coordinator: Coordinator,
) -> None:
    commit_sizes(coordinator, 0, [100, 50], "wal/a")  # offsets 0..1, 2..3
    commit_sizes(coordinator, 0, [70], "wal/b")  # offsets 4..5
    commit_sizes(coordinator, 1, [30], "wal/b2")
    before = find(coordinator, 0, 0)
    answers = replace(coordinator, part(Extent(TOPIC, 0, 0, 5, 1000, 220), Extent(TOPIC, 1, 0, 1, 2000, 30)))
    assert answers == [(ErrorCode.NONE, "")] * 2
    assert positions(coordinator, 0) == [
        (NEW_KEY, 1000, 100, 0, 1),
        (NEW_KEY, 1100, 50, 2, 3),
        (NEW_KEY, 1150, 70, 4, 5),
    ]
    assert positions(coordinator, 1) == [(NEW_KEY, 2000, 30, 0, 1)]
    assert find(coordinator, 0, 0) == before  # offsets, producers, flags, LSO, aborted ranges: as they were
    assert [live(coordinator, k) for k in ("wal/a", "wal/b", "wal/b2", NEW_KEY)] == [0, 0, 0, 4]
    assert_counts_agree(coordinator)
    # FindBatches' serialized entries carry the new key and positions (what brokers read).
    with coordinator.store.read_transaction() as db:
        entries = [
            pb.FindBatchesResponse.PartitionResult.FromString(e) for (e,) in db.execute("SELECT entry FROM batches")
        ]
    assert {b.object_key for e in entries for b in e.batches} == {NEW_KEY}


def test_each_refusal_leaves_its_run_in_place_and_the_other_extents_apply(coordinator: Coordinator) -> None:
    commit_sizes(coordinator, 0, [100, 100, 100, 100], "wal/a")  # offsets 0..1, 2..3, 4..5, 6..7
    other = bytes(range(2, 18))
    answers = replace(
        coordinator,
        part(
            Extent(TOPIC, 0, 0, 2, 0, 200),  # 2 is inside a batch
            Extent(TOPIC, 0, 1, 3, 200, 200),  # 1 is inside a batch
            Extent(TOPIC, 0, 2, 3, 400, 99),  # one byte short of the batch
            Extent(TOPIC, 0, 6, 9, 500, 200),  # past the high watermark 8
            Extent(other, 0, 0, 1, 700, 100),  # no such topic here
            Extent(TOPIC, 0, 4, 5, 5000, 100),  # past the object's end (10,000 - 5000 is room: this one is fine)
            Extent(TOPIC, 0, 4, 7, 800, 200),  # overlaps the previous extent's offsets
            Extent(TOPIC, 0, 6, 7, 5050, 100),  # overlaps an earlier extent's bytes (5000..5100)
            Extent(TOPIC, 0, 0, 1, 9950, 100),  # past the object's end
            Extent(TOPIC, 0, 0, 1, 9000, 100),  # fine
        ),
    )
    assert codes(answers) == [
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.OFFSET_OUT_OF_RANGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NONE,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NONE,
    ], answers
    assert "batch boundaries" in answers[0][1] and "size 99 differs from the 100 bytes" in answers[2][1]
    assert (
        "overlap an earlier extent of the partition" in answers[6][1] and "overlap an earlier extent" in answers[7][1]
    )
    assert "outside the object" in answers[8][1]
    assert positions(coordinator, 0) == [
        (NEW_KEY, 9000, 100, 0, 1), ("wal/a", 100, 100, 2, 3), (NEW_KEY, 5000, 100, 4, 5), ("wal/a", 300, 100, 6, 7)
    ]  # fmt: skip
    assert live(coordinator, "wal/a") == 2 and live(coordinator, NEW_KEY) == 2
    assert_counts_agree(coordinator)


def test_a_run_partly_deleted_meanwhile_stays_even_when_the_deletion_is_not_applied_yet(
    coordinator: Coordinator,
) -> None:
    commit_sizes(coordinator, 0, [100, 100, 100], "wal/a")  # offsets 0..5
    coordinator.append(Result([records.records_deleted(0, 3)], None))  # DeleteRecords to 3, pending
    answers = replace(coordinator, part(Extent(TOPIC, 0, 0, 3, 0, 200), Extent(TOPIC, 0, 4, 5, 200, 100)), apply=False)
    assert codes(answers) == [ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.NONE]
    assert "deleted (or offloaded) meanwhile" in answers[0][1]
    coordinator.apply()
    assert positions(coordinator, 0) == [("wal/a", 100, 100, 2, 3), (NEW_KEY, 200, 100, 4, 5)]
    assert_counts_agree(coordinator)


def test_a_retry_answers_as_the_first_call_pending_or_applied_and_other_extents_are_refused(
    coordinator: Coordinator,
) -> None:
    commit_sizes(coordinator, 0, [100, 100], "wal/a")
    first = part(Extent(TOPIC, 0, 0, 1, 0, 100), Extent(TOPIC, 0, 2, 9, 100, 100))
    answered = replace(coordinator, first, apply=False)
    assert codes(answered) == [ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE]
    pending_retry = rules.check_replace_part(coordinator.view, first, NOW + 6)
    assert pending_retry.records == [] and [(o.error_code, o.message) for o in pending_retry.response] == answered
    coordinator.apply()
    state = logical_dump(coordinator.store.path)
    applied_retry = rules.check_replace_part(coordinator.view, first, NOW + 7)
    assert applied_retry.records == [] and [(o.error_code, o.message) for o in applied_retry.response] == answered
    assert all(o.is_retry for o in applied_retry.response)
    other = rules.check_replace_part(coordinator.view, part(Extent(TOPIC, 0, 2, 3, 0, 100)), NOW + 8)
    assert other.records == [] and codes([(o.error_code, o.message) for o in other.response]) == [
        ErrorCode.INVALID_REQUEST
    ]
    assert "other extents" in other.response[0].message
    # A key a CommitFile recorded is not a replacement's: refused, nothing written.
    reused = rules.check_replace_part(coordinator.view, part(Extent(TOPIC, 0, 2, 3, 0, 100), key="wal/a"), NOW)
    assert reused.records == [] and "by a commit or a hand-over" in reused.response[0].message
    # And a CommitFile reusing the merged object's key is refused too.
    from tests.harness import batch
    from tests.test_core import commit_part

    commit = rules_commit.check_commit_part(coordinator.view, commit_part([batch(TOPIC, 0, 1)], NEW_KEY), NOW)
    assert commit.records == [] and [o.error_code for o in commit.response] == [ErrorCode.INVALID_REQUEST]
    assert logical_dump(coordinator.store.path) == state


def test_a_coordinator_not_named_as_an_owner_refuses_the_whole_part(coordinator: Coordinator) -> None:
    commit_sizes(coordinator, 0, [100], "wal/a")
    refused = rules.check_replace_part(coordinator.view, part(Extent(TOPIC, 0, 0, 1, 0, 100), owners=(1, 2)), NOW)
    assert refused.records == [] and refused.response[0].error_code == ErrorCode.INVALID_REQUEST
    assert "do not name coordinator 0" in refused.response[0].message


def test_a_call_that_moves_nothing_records_the_file_with_no_live_batch_for_the_workers(
    coordinator: Coordinator,
) -> None:
    commit_sizes(coordinator, 0, [100], "wal/a")
    assert codes(replace(coordinator, part(Extent(TOPIC, 0, 0, 0, 0, 100)))) == [ErrorCode.INVALID_REQUEST]
    facts = coordinator.store.committed_file(NEW_KEY)
    assert facts is not None and (facts.live_batches, facts.owned, facts.is_last_owner) == (0, True, True)
    with coordinator.store.read_transaction() as db:
        idle = [row[1] for row in db.execute("SELECT file_id, object_key FROM files WHERE live_batches = 0")]
    assert idle == [NEW_KEY]  # the file workers' work list: deletion after the grace (DESIGN §5)


def test_transactions_markers_the_lso_and_aborted_ranges_are_unchanged_by_a_move(coordinator: Coordinator) -> None:
    _commit(coordinator, [data(0, 2, 5, 0, 0)], "wal/t1", NOW)  # offsets 0..1, producer 5's transaction
    _commit(coordinator, [marker(0, 5, 0, commit=False)], "wal/t2", NOW)  # offset 2: aborted
    _commit(coordinator, [data(0, 3, 6, 0, 0)], "wal/t3", NOW)  # offsets 3..5: producer 6's, still open
    coordinator.apply()
    before = find(coordinator, 0, 0), find(coordinator, 0, 0, committed=False)
    assert before[0].last_stable_offset == 3 and before[0].aborted == [(5, 0)]
    with coordinator.store.read_transaction() as db:
        time_index = list(db.execute("SELECT * FROM time_index"))
    sizes = [b[2] for b in positions(coordinator, 0)]
    assert codes(replace(coordinator, part(Extent(TOPIC, 0, 0, 5, 0, sum(sizes))))) == [ErrorCode.NONE]
    assert (find(coordinator, 0, 0), find(coordinator, 0, 0, committed=False)) == before
    with coordinator.store.read_transaction() as db:
        assert list(db.execute("SELECT * FROM time_index")) == time_index
    assert [p[0] for p in positions(coordinator, 0)] == [NEW_KEY] * 3
    assert_counts_agree(coordinator)


def test_the_state_check_sees_a_live_batch_count_that_disagrees(coordinator: Coordinator) -> None:
    commit_sizes(coordinator, 0, [100, 100], "wal/a")
    replace(coordinator, part(Extent(TOPIC, 0, 0, 1, 0, 100)))
    assert_counts_agree(coordinator)
    with coordinator.store._writer:  # damage of the kind a lost write would leave
        coordinator.store._writer.execute("UPDATE files SET live_batches = 2 WHERE object_key = 'wal/a'")
    with coordinator.store.read_transaction() as db:
        assert live_batch_problems(db) == [
            f"file {live_file_id(coordinator, 'wal/a')} counts 2 live batches, 1 name it"
        ]
    problem = check_integrity(coordinator.store.path).problem  # the state check (CheckState, after a crash) runs it
    assert problem is not None and "counts 2 live batches, 1 name it" in problem


def test_a_move_from_a_file_that_holds_fewer_live_batches_than_left_it_is_an_invariant_violation(
    coordinator: Coordinator,
) -> None:
    """The apply lowers every left file's count in one statement; one file short must still stop it."""
    commit_sizes(coordinator, 0, [100], "wal/a")  # offsets 0..1
    commit_sizes(coordinator, 0, [100], "wal/b")  # offsets 2..3
    with coordinator.store._writer:  # damage of the kind a lost write would leave
        coordinator.store._writer.execute("UPDATE files SET live_batches = 0 WHERE object_key = 'wal/b'")
    with pytest.raises(InvariantViolation, match=f"batches left files .*{live_file_id(coordinator, 'wal/b')}"):
        replace(coordinator, part(Extent(TOPIC, 0, 0, 3, 0, 200)))
    assert live(coordinator, "wal/a") == 1  # nothing of the record was applied


def live_file_id(coordinator: Coordinator, key: str) -> int:
    facts = coordinator.store.committed_file(key)
    assert facts is not None
    return facts.file_id


def bounds(**given: Any) -> WorkBounds:
    values = {
        "committed_before_ms": NOW,
        "max_file_size": 10_000,
        "max_files": 10,
        "max_batches": 100,
        "after": (-(2**63), -1),
    }
    values.update(given)
    return WorkBounds(**values)


def test_the_merge_plan_is_the_oldest_small_live_files_with_their_live_batches_paged(coordinator: Coordinator) -> None:
    commit_sizes(coordinator, 0, [100, 100], "wal/a")
    commit_sizes(coordinator, 1, [100], "wal/b")
    commit_sizes(coordinator, 0, [5000], "wal/big")
    commit_sizes(coordinator, 0, [100], "wal/c")
    with coordinator.store.read_transaction() as db:
        plan = merge_work(db, bounds(max_file_size=1000))
        assert [f.object_key for f in plan.files] == ["wal/a", "wal/b", "wal/c"] and plan.next_page_token == b""
        assert [(b.partition, b.base_offset, b.last_offset, b.byte_offset, b.size) for b in plan.files[0].batches] == [
            (0, 0, 1, 0, 100), (0, 2, 3, 100, 100),
        ]  # fmt: skip
        assert all(b.topic_id == TOPIC for f in plan.files for b in f.batches)
        first = merge_work(db, bounds(max_file_size=1000, max_files=2))
        assert [f.object_key for f in first.files] == ["wal/a", "wal/b"] and first.next_page_token
        token = first.next_page_token
    from coordinator.consolidation.merge_work import _TOKEN

    with coordinator.store.read_transaction() as db:
        rest = merge_work(db, bounds(max_file_size=1000, after=_TOKEN.unpack(token)))
        assert [f.object_key for f in rest.files] == ["wal/c"] and rest.next_page_token == b""
        by_batches = merge_work(db, bounds(max_file_size=1000, max_batches=2))
        assert [f.object_key for f in by_batches.files] == ["wal/a"] and by_batches.next_page_token  # b would be 3
        young = merge_work(db, bounds(committed_before_ms=NOW - 1))
        assert list(young.files) == []  # committed at NOW: younger than the age asked
    # Once merged, a file with no live batch left is not planned again; the merged object is, if small.
    replace(coordinator, part(Extent(TOPIC, 0, 0, 3, 0, 200), Extent(TOPIC, 1, 0, 1, 200, 100), file_size=300))
    with coordinator.store.read_transaction() as db:
        plan = merge_work(db, bounds(max_file_size=1000, committed_before_ms=NOW + 5))
    assert [f.object_key for f in plan.files] == ["wal/c", NEW_KEY]
    assert [(b.partition, b.byte_offset) for b in plan.files[1].batches] == [(0, 0), (0, 100), (1, 200)]


def test_extents_sharing_one_offset_overlap(coordinator: Coordinator) -> None:
    """One-record batches at offsets 0, 1, 2 (bytes 0, 100, 200 of wal/a): an extent sharing only one offset with an
    earlier one is refused (a batch gets one new position), whichever side the shared offset is on. Kills `start <=
    extent.last_offset` made `<`, and `extent.base_offset <= stop` made `<`, in `check_replace_part`'s overlap test
    (the first a survivor of the mutation run, docs/testing.md)."""
    commit_sizes(coordinator, 0, [100, 100, 100], "wal/a", records_each=1)
    answers = replace(coordinator, part(Extent(TOPIC, 0, 1, 2, 0, 200), Extent(TOPIC, 0, 0, 1, 1000, 200)))
    assert codes(answers) == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST], answers
    assert "overlap an earlier extent of the partition" in answers[1][1]
    assert positions(coordinator, 0) == [("wal/a", 0, 100, 0, 0), (NEW_KEY, 0, 100, 1, 1), (NEW_KEY, 100, 100, 2, 2)]
    assert_counts_agree(coordinator)


def test_extents_sharing_one_offset_overlap_the_other_way(coordinator: Coordinator) -> None:
    """The same with the earlier extent below: 0..1, then 1..2."""
    commit_sizes(coordinator, 0, [100, 100, 100], "wal/a", records_each=1)
    answers = replace(coordinator, part(Extent(TOPIC, 0, 0, 1, 0, 200), Extent(TOPIC, 0, 1, 2, 1000, 200)))
    assert codes(answers) == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST], answers
    assert positions(coordinator, 0) == [(NEW_KEY, 0, 100, 0, 0), (NEW_KEY, 100, 100, 1, 1), ("wal/a", 200, 100, 2, 2)]
