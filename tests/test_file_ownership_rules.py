"""The WAL-file ownership checks, pure (coordinator/files/ownership.py): what a cosmic-ray run over that module found
unpinned by the tests of the file workers, which go through whole nodes (issue #40, item 5). Each names the
one-line break it kills.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from coordinator.files.ownership import (
    FileRef,
    check_files_deleted,
    check_handed_over,
    check_schedule_deletions,
    check_take_files,
    hand_over_problem,
    next_owner,
    previous_owner,
)
from coordinator.machine.view import FileFacts
from protos import internal_pb2 as internal

KEY = "wal/0001"
OTHER = "wal/0002"


def facts(key: str = KEY, file_id: int = 7, **changes: Any) -> FileFacts:
    base = FileFacts(
        file_id=file_id, object_key=key, file_size=100, uploader_broker_id=1, owner_ids=(1, 2), committed_at_ms=10,
        live_batches=0, is_last_owner=False, owned=True, delete_after_ms=-1, part_batches=1,
    )  # fmt: skip
    return replace(base, **changes)


@dataclass
class View:
    """The little of a coordinator's view the ownership checks read."""

    files: dict[str, FileFacts]
    coordinator_id: int = 1
    pending: set[str] = field(default_factory=set)

    def committed_file(self, object_key: str) -> FileFacts | None:
        return self.files.get(object_key)

    def file_pending(self, object_key: str) -> bool:
        return object_key in self.pending


def refs(*all_facts: FileFacts) -> list[FileRef]:
    return [FileRef(f.file_id, f.object_key) for f in all_facts]


def test_the_first_owner_has_no_previous_and_the_last_no_next() -> None:
    # Kills `position > -1` (the first owner's previous would be the last), and `position + 0 <`, `<=`, `- 1 <`
    # in next_owner (the last owner's next would be an IndexError).
    assert [previous_owner((3, 1, 2), c) for c in (3, 1, 2)] == [None, 3, 1]
    assert [next_owner((3, 1, 2), c) for c in (3, 1, 2)] == [1, 2, None]


def hand_over(owners: list[int], to: int = 2, sender: int = 1, size: int = 100) -> internal.HandOverFilesRequest:
    handed = internal.HandedOverFile(object_key=KEY, owner_ids=owners, file_size=size)
    return internal.HandOverFilesRequest(from_coordinator_id=sender, to_coordinator_id=to, files=[handed])


def test_a_hand_over_names_distinct_coordinators_each_below_the_count() -> None:
    assert hand_over_problem(hand_over([1, 2]), 3) is None
    # Kills `>` for `!=` on the distinct owners, and `and` for `or` between the two rules.
    assert "must be distinct coordinators 0..2" in (hand_over_problem(hand_over([1, 2, 1]), 3) or "")
    # Kills `<=`, `!=` and `is not` for `<` on the count: coordinator 3 of 3 does not exist (nor 4).
    for beyond in (3, 4):
        assert "must be distinct coordinators 0..2" in (hand_over_problem(hand_over([1, 2, beyond]), 3) or "")


def test_a_hand_over_comes_from_the_owner_just_before_the_receiver_and_a_file_size_is_not_negative() -> None:
    # Kills `<` for `!=`: coordinator 0 (a lower id) is not the owner before 2 in (1, 2).
    assert "is not the owner before 2" in (hand_over_problem(hand_over([1, 2], sender=0), 3) or "")
    assert "is not the owner before 2" in (hand_over_problem(hand_over([0, 1, 2], sender=0), 3) or "")
    # Kills `== 0` and `< 1` for `< 0`: an empty file is a file; a negative size is nonsense.
    assert hand_over_problem(hand_over([1, 2], size=0), 3) is None
    assert "file_size" in (hand_over_problem(hand_over([1, 2], size=-1), 3) or "")


def test_files_are_taken_each_on_its_own_facts() -> None:
    unowned = facts(owned=False)
    owned_already = facts(OTHER, 8, owned=True)
    later = facts("wal/0003", 9, owned=False)
    view = View({f.object_key: f for f in (unowned, owned_already, later)})
    # Kills `break` for `continue` (one already owned would end the pass) and `and` for `or`.
    result = check_take_files(view, refs(owned_already, unowned, later), 0)  # type: ignore[arg-type]
    assert result.response == 2
    assert check_take_files(view, [FileRef(1, "wal/unknown")], 0).response == 0  # type: ignore[arg-type]


def test_a_file_changed_since_the_worker_picked_it_is_left_alone() -> None:
    # Kills `>`/`<` for `!=` on the file id (a file deleted and committed again has a new id, higher or lower than
    # the one picked is never the same file) and `and` for `or` between the checks.
    current = facts(owned=False)
    view = View({KEY: current})
    for picked in (current.file_id - 1, current.file_id + 1):
        assert check_take_files(view, [FileRef(picked, KEY)], 0).response == 0, picked  # type: ignore[arg-type]
    busy = View({KEY: facts(owned=False, live_batches=2)})
    assert check_take_files(busy, refs(current), 0).response == 0  # type: ignore[arg-type]
    pending = View({KEY: current}, pending={KEY})
    assert check_take_files(pending, refs(current), 0).response == 0  # type: ignore[arg-type]


def test_only_an_owner_that_is_not_the_last_hands_a_file_over_each_on_its_own_facts() -> None:
    handing = facts()  # owned, not last
    last = facts(OTHER, 8, is_last_owner=True)
    not_owned = facts("wal/0003", 9, owned=False, is_last_owner=False)
    view = View({f.object_key: f for f in (handing, last, not_owned)})
    # Kills `and` for `or` (a file not owned here, not the last owner's, would be handed over) and `break`.
    assert check_handed_over(view, refs(last, not_owned, handing), 0).response == 1  # type: ignore[arg-type]


def test_the_last_owner_schedules_a_deletion_once() -> None:
    unscheduled = facts(is_last_owner=True)
    at_zero = facts(OTHER, 8, is_last_owner=True, delete_after_ms=0)
    later = facts("wal/0003", 9, is_last_owner=True, delete_after_ms=500)
    view = View({f.object_key: f for f in (unscheduled, at_zero, later)})
    # Kills `== 0` for `>= 0`: one scheduled (at 0 or later) is not scheduled again.
    scheduled = check_schedule_deletions(view, refs(unscheduled, at_zero, later), 50, 1000)  # type: ignore[arg-type]
    assert scheduled.response == 1
    not_last = View({KEY: facts(is_last_owner=False)})
    # Kills `and` for `or`: only the last owner schedules.
    assert check_schedule_deletions(not_last, refs(unscheduled), 50, 1000).response == 0  # type: ignore[arg-type]


def test_a_file_leaves_the_state_only_at_its_last_owner_once_its_deletion_time_came() -> None:
    due = facts(is_last_owner=True, delete_after_ms=0)
    view = View({KEY: due})
    # Kills `0 <` and `1 <=` for `0 <=`: a deletion due at 0 is due.
    assert check_files_deleted(view, refs(due), 0).response == 1  # type: ignore[arg-type]
    for changes in ({"delete_after_ms": -1}, {"delete_after_ms": 60}, {"owned": False}, {"is_last_owner": False}):
        # Kills `-1 <=` (never scheduled), the deadline, `or` for `and` between owned and last, and the `or` chain.
        view = View({KEY: facts(**{"is_last_owner": True, "delete_after_ms": 0, **changes})})
        assert check_files_deleted(view, refs(due), 50).response == 0, changes  # type: ignore[arg-type]
