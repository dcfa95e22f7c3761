"""Snapshot fetch (DESIGN §6a): a follower below the leader's log start installs the leader's newest snapshot.

The leader streams the snapshot's data file in chunks, naming it (end offset,
epoch, CRC-32) in the first and giving a SHA-256 in the last; the follower
writes a `.part`, checks both sums, publishes it with the same fsync and
rename as a local snapshot, and empties its log to start at the snapshot's end.
The next load restores the state from it (`state.opening`), then fetching
goes on from there.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from coordinator.base.errors import ErrorCode
from coordinator.config.settings import Settings
from coordinator.runtime.log.epoch_cache import LeaderEpochCache
from coordinator.runtime.log.segments import MetadataLog
from coordinator.runtime.replication.role import ReplicaRole
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal
from protos import internal_pb2_grpc as internal_grpc
from snapshot.snapshots import (
    SnapshotError,
    SnapshotId,
    list_snapshots,
    publish_received,
    received_part,
    snapshot_directory,
    verify_snapshot,
)

log = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024  # one gRPC message each, well below the message size bound


async def stream_snapshot(
    coordinator_directory: Path, coordinator_id: int, none_verifies: Callable[[], None] = lambda: None
) -> AsyncIterator[internal.FetchSnapshotChunk]:
    """The leader's side: its newest snapshot that verifies, in chunks, or one chunk with an error.

    A damaged snapshot is never sent (the follower would refuse it, and ask again, for ever); with none that
    verifies, `none_verifies` asks for a new one and the follower asks again later.
    """
    snapshots = list_snapshots(snapshot_directory(coordinator_directory))
    if not snapshots:
        yield internal.FetchSnapshotChunk(
            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
            error_message=f"coordinator {coordinator_id} has no snapshot yet",
            last=True,
        )
        return
    manifest = None
    for candidate in snapshots:  # newest first; any kept one ends at or past the log start, so the log continues it
        problem = await asyncio.to_thread(verify_snapshot, candidate)
        if problem is None:
            manifest = candidate
            break
        log.error("coordinator %d: snapshot %s does not verify (%s): not sent to a follower",
                  coordinator_id, candidate.snapshot_id, problem)  # fmt: skip
    if manifest is None:
        none_verifies()
        yield internal.FetchSnapshotChunk(
            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
            error_message=f"coordinator {coordinator_id}: no snapshot verifies here; the next one taken will",
            last=True,
        )
        return
    digest = hashlib.sha256()
    try:
        file = open(manifest.data_path, "rb")  # noqa: SIM115 (open across yields; closed below)
    except FileNotFoundError:  # pruned since it was listed: the follower asks again
        yield internal.FetchSnapshotChunk(
            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="snapshot pruned meanwhile; retry", last=True
        )
        return
    with file:
        first = True
        while True:
            data = await asyncio.to_thread(file.read, CHUNK_BYTES)
            digest.update(data)
            last = len(data) < CHUNK_BYTES
            chunk = internal.FetchSnapshotChunk(error_code=ErrorCode.NONE, data=data, last=last)
            if first:
                chunk.end_offset = manifest.snapshot_id.end_offset
                chunk.epoch = manifest.snapshot_id.epoch
                chunk.crc32 = manifest.crc32
                chunk.total_bytes = manifest.size_bytes
                chunk.created_at_ms = manifest.created_at_ms
                first = False
            if last:
                chunk.sha256 = digest.hexdigest()
            yield chunk
            if last:
                return


async def install_snapshot(
    coordinator_id: int,
    directory: Path,
    role: ReplicaRole,
    settings: Settings,
    stub: Callable[[str], internal_grpc.CoordinatorInternalAsyncStub],
) -> SnapshotId:
    """The follower's side, with its files closed: fetch, check, publish; then the log starts at its end."""
    request = internal.FetchSnapshotRequest(
        coordinator_id=coordinator_id, replica_node_id=role.node_id, current_leader_epoch=role.leader_epoch
    )
    snapshot_id: SnapshotId | None = None
    crc32, created_at_ms, received = 0, 0, 0
    digest = hashlib.sha256()
    file = None
    chunk_wait_s = settings.replica_socket_timeout_ms / 1000
    # No deadline for the whole stream (a large snapshot takes as long as its bytes do): one for each chunk.
    call = stub(role.leader_address).FetchSnapshot(request)
    chunks = aiter(call)
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(anext(chunks), chunk_wait_s)
            except StopAsyncIteration:
                raise SnapshotError("the snapshot stream ended before its last chunk") from None
            except TimeoutError:
                raise SnapshotError(f"no snapshot chunk from the leader within {chunk_wait_s} s") from None
            if chunk.error_code != ErrorCode.NONE:
                raise SnapshotError(f"{pb.ErrorCode.Name(chunk.error_code)}: {chunk.error_message}")
            if snapshot_id is None:
                snapshot_id = SnapshotId(chunk.end_offset, chunk.epoch)
                crc32, created_at_ms = chunk.crc32, chunk.created_at_ms
                file = open(received_part(snapshot_directory(directory), snapshot_id), "wb")  # noqa: SIM115
            assert file is not None
            await asyncio.to_thread(file.write, chunk.data)
            digest.update(chunk.data)
            received += len(chunk.data)
            if chunk.last:
                if chunk.sha256 != digest.hexdigest():
                    raise SnapshotError(f"fetched snapshot {snapshot_id}: SHA-256 differs from the leader's")
                break
    finally:
        call.cancel()  # a no-op once the stream is over
        if file is not None:
            file.close()
    assert snapshot_id is not None
    manifest = await asyncio.to_thread(
        publish_received, snapshot_directory(directory), snapshot_id, coordinator_id, crc32, created_at_ms
    )
    await asyncio.to_thread(_start_log_at, directory, settings, snapshot_id.end_offset)
    log.warning(
        "coordinator %d: installed snapshot %s from node %d (%d bytes); the log starts again at %d",
        coordinator_id, manifest.snapshot_id, role.leader_node_id, received, snapshot_id.end_offset,
    )  # fmt: skip
    return snapshot_id


def _start_log_at(directory: Path, settings: Settings, start_offset: int) -> None:
    """Empties the log to start at the snapshot's end and drops the state (the next load restores the snapshot).

    The state held only records below the follower's high watermark, all of which the snapshot holds.
    """
    metadata_log = MetadataLog(directory / "log", settings.log_segment_bytes)
    try:
        metadata_log.replace_with_empty(start_offset)
        LeaderEpochCache.open(directory, metadata_log).truncate_from_end(0)
    finally:
        metadata_log.close()
    state = directory / "state.sqlite"
    state.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        state.with_name(state.name + suffix).unlink(missing_ok=True)
