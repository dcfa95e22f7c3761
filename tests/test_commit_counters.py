"""CommitFile's per-coordinator counters (coordinator/commits/commit_file.py `_count_commit`), on one coordinator's core
(bench/profile_commit.py): accepted batches and bytes, duplicates, retried commits, every part of every call counted."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.profile_commit import BATCH_BYTES, _OneCoordinator, _request
from coordinator.base.clock import ManualClock
from coordinator.commits.commit_file import CommitFiles
from protos import coordinator_pb2 as pb

PARTITIONS = 4


def _sample(coordinators: _OneCoordinator, name: str) -> float | None:
    return coordinators.metrics.registry.get_sample_value(name, {"coordinator": "0"})


def test_each_commit_is_counted_by_its_coordinator(tmp_path: Path) -> None:
    coordinators = _OneCoordinator(tmp_path, PARTITIONS)
    commits = CommitFiles(coordinators, ManualClock(1_700_000_000_000))  # type: ignore[arg-type]
    first = pb.CommitFileRequest.FromString(_request(0, PARTITIONS))
    resent = pb.CommitFileRequest.FromString(_request(0, PARTITIONS))
    resent.object_key = "wal/resent"  # the same batches in another file: duplicates

    async def calls() -> list[pb.CommitFileResponse]:
        return [
            await commits.commit_file(first),
            await commits.commit_file(pb.CommitFileRequest.FromString(_request(1, PARTITIONS))),
            await commits.commit_file(resent),
            await commits.commit_file(first),  # the same file again: a retried commit
        ]

    answers = asyncio.run(calls())
    coordinators.core.store.close()
    assert [b.is_duplicate for b in answers[2].batches] == [True] * PARTITIONS
    assert _sample(coordinators, "diskless_committed_batches_total") == 2 * PARTITIONS
    assert _sample(coordinators, "diskless_committed_bytes_total") == 2 * PARTITIONS * BATCH_BYTES
    assert _sample(coordinators, "diskless_duplicate_batches_total") == PARTITIONS
    assert _sample(coordinators, "diskless_retried_commits_total") == 1
