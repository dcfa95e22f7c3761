"""The life of a WAL file at one coordinator (DESIGN §5): the checks behind its ownership records.

A file's owners are its `owner_ids`, in turn; the first owns it from the
commit. An owner with no live batch left hands the file to the next owner,
and the last owner deletes the object after the grace period:

    LIVE ──(no live batch, not last)──▶ hand-over ──▶ next owner's state
    LIVE ──(no live batch, last)──▶ deletion scheduled ──(grace)──▶ deleted

The file workers (I/O) decide what to try; these pure checks re-read the
coordinator's view when the operation runs, so a change in between (a
duplicate call, a restart) turns into no record rather than a wrong one.
The receiver records a hand-over before the sender forgets the file, so at
every moment some coordinator that will pass it on knows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError, Result
from coordinator.machine import records
from coordinator.machine.object_keys import object_key_problem
from coordinator.machine.view import CoordinatorView, FileFacts
from protos import internal_pb2 as internal
from protos import records_pb2 as rec

NO_ERROR = ItemError(ErrorCode.NONE, "")


@dataclass(frozen=True, slots=True)
class FileRef:
    """A file as a worker picked it: its id here and its key (the check verifies both again)."""

    file_id: int
    object_key: str


def previous_owner(owner_ids: Sequence[int], coordinator_id: int) -> int | None:
    """The owner before `coordinator_id` in `owner_ids` (None for the first owner)."""
    position = list(owner_ids).index(coordinator_id)
    return owner_ids[position - 1] if position > 0 else None


def next_owner(owner_ids: Sequence[int], coordinator_id: int) -> int | None:
    """The owner after `coordinator_id` in `owner_ids` (None for the last owner)."""
    position = list(owner_ids).index(coordinator_id)
    return owner_ids[position + 1] if position + 1 < len(owner_ids) else None


def hand_over_problem(request: internal.HandOverFilesRequest, coordinators: int) -> str | None:
    """Why a HandOverFiles request to `request.to_coordinator_id` is nonsense, or None."""
    keys = [f.object_key for f in request.files]
    if len(set(keys)) != len(keys):
        return "a HandOverFiles call must not repeat an object key"
    for handed in request.files:
        problem = object_key_problem(handed.object_key)
        if problem:
            return problem
        owners = list(handed.owner_ids)
        if len(set(owners)) != len(owners) or any(not 0 <= o < coordinators for o in owners):
            return f"owner_ids {owners} of {handed.object_key!r} must be distinct coordinators 0..{coordinators - 1}"
        if request.to_coordinator_id not in owners:
            return f"owner_ids {owners} of {handed.object_key!r} do not name coordinator {request.to_coordinator_id}"
        if previous_owner(owners, request.to_coordinator_id) != request.from_coordinator_id:
            return (
                f"coordinator {request.from_coordinator_id} is not the owner before {request.to_coordinator_id} "
                f"in owner_ids {owners} of {handed.object_key!r}"
            )
        if handed.file_size < 0:
            return f"file_size of {handed.object_key!r} must be >= 0, got {handed.file_size}"
    return None


def check_receive_files(
    view: CoordinatorView, request: internal.HandOverFilesRequest, now_ms: int
) -> Result[ItemError]:
    """The previous owner hands files over: this coordinator records itself as their owner (idempotent)."""
    taken: list[rec.MetadataRecord] = []
    next_file_id = view.next_file_id
    for handed in request.files:
        facts = view.committed_file(handed.object_key)
        if facts is None and view.file_pending(handed.object_key):
            # Its commit here is not applied yet: the sender retries once it is.
            return Result(
                [],
                ItemError(
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    f"{handed.object_key!r} is being committed to coordinator {view.coordinator_id}; retry",
                ),
            )
        if facts is not None and facts.owned:
            continue  # a retried hand-over this coordinator recorded already
        new_file = facts is None
        file_id = next_file_id if new_file else facts.file_id  # type: ignore[union-attr]
        next_file_id += int(new_file)
        taken.append(
            records.file_ownership_taken(
                file_id,
                new_file,
                handed.object_key,
                handed.file_size,
                handed.uploader_broker_id,
                handed.owner_ids,
                handed.committed_at_ms,
                request.from_coordinator_id,
            )
        )
    return Result(taken, NO_ERROR)


def _still(view: CoordinatorView, ref: FileRef) -> FileFacts | None:
    facts = view.committed_file(ref.object_key)
    if facts is None or facts.file_id != ref.file_id or facts.live_batches != 0 or view.file_pending(ref.object_key):
        return None
    if facts.loans_out or facts.lender_id >= 0:  # a loan out, or a loan row (design §5a): held until returned
        return None
    return facts


def check_take_files(view: CoordinatorView, files: Sequence[FileRef], now_ms: int) -> Result[int]:
    """No owner before this coordinator knows these files: it takes their ownership (answers how many)."""
    taken = []
    for ref in files:
        facts = _still(view, ref)
        if facts is None or facts.owned:
            continue
        taken.append(
            records.file_ownership_taken(
                facts.file_id, False, facts.object_key, facts.file_size, facts.uploader_broker_id,
                facts.owner_ids, facts.committed_at_ms, -1,
            )
        )  # fmt: skip
    return Result(taken, len(taken))


def check_handed_over(view: CoordinatorView, files: Sequence[FileRef], now_ms: int) -> Result[int]:
    """The next owner recorded these files: they leave this coordinator (answers how many)."""
    handed = []
    for ref in files:
        facts = _still(view, ref)
        if facts is None or not facts.owned or facts.is_last_owner:
            continue
        following = next_owner(facts.owner_ids, view.coordinator_id)
        assert following is not None  # not the last owner
        handed.append(records.file_handed_over(facts.file_id, following))
    return Result(handed, len(handed))


def check_schedule_deletions(
    view: CoordinatorView, files: Sequence[FileRef], now_ms: int, grace_period_ms: int
) -> Result[int]:
    """The last owner has no live batch left in these files: each is deleted after the grace period."""
    scheduled = []
    for ref in files:
        facts = _still(view, ref)
        if facts is None or not (facts.owned and facts.is_last_owner) or facts.delete_after_ms >= 0:
            continue
        scheduled.append(records.file_deletion_scheduled(facts.file_id, now_ms + grace_period_ms))
    return Result(scheduled, len(scheduled))


def check_files_deleted(view: CoordinatorView, files: Sequence[FileRef], now_ms: int) -> Result[int]:
    """These objects are gone from storage: the files leave the state (answers how many)."""
    deleted = []
    for ref in files:
        facts = _still(view, ref)
        if facts is None or not (facts.owned and facts.is_last_owner) or not 0 <= facts.delete_after_ms <= now_ms:
            continue
        deleted.append(records.file_deleted(facts.file_id))
    return Result(deleted, len(deleted))
