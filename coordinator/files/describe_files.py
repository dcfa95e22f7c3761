"""DescribeFiles: each key's state over the coordinators of this node, commits in flight included (DESIGN §4, §5).

A broker whose commit failed (a timeout, a lost answer) asks whether its file is known before it deletes it, so a
key is answered unknown only where every coordinator could say so for sure:

- a coordinator led here knows every commit it accepted, from the moment it is queued (not yet checked, checked,
  written, awaiting its in-sync replicas) until it is applied; a commit in flight is described as it will be once
  applied (`in_flight_state`), and one that fails afterwards leaves the key unknown again;
- a replica that does not lead its coordinator (a follower, or a node or commit process holding no replica of it)
  cannot see its leader's commits in flight: it answers what it holds itself (its state and the records it fetched
  and has not applied yet) and asks the leader (KnownFiles) about each key it does not hold;
- a key no coordinator here knows gets, without every coordinator's answer, the retriable error of one that could
  not answer (COORDINATOR_NOT_AVAILABLE, …), never FILE_STATE_UNKNOWN; a key some coordinator knows is known, in the
  most alive state among those answering.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Sequence

from coordinator.base.errors import CoordinatorUnavailable, ErrorCode
from coordinator.cluster.peers import PeerClient, PeerError
from coordinator.machine.object_keys import object_key_problem
from coordinator.machine.records import BATCH_LAYOUT
from coordinator.machine.state import file_reads, reads
from coordinator.runtime.node_coordinators import NodeCoordinators, set_error
from coordinator.runtime.replication.role import RoleKind
from coordinator.runtime.shard import CoordinatorShard, FileInFlight
from protos import coordinator_pb2 as pb

# The most alive state among the answering coordinators wins.
_STATES_MOST_ALIVE_FIRST = (pb.FILE_STATE_LIVE, pb.FILE_STATE_AWAITING_HANDOVER, pb.FILE_STATE_AWAITING_DELETION)


class _AskLeader(enum.Enum):
    """This replica does not hold the key and cannot know its leader's commits in flight."""

    ASK_LEADER = "ask the leader"


ASK_LEADER = _AskLeader.ASK_LEADER


def in_flight_state(in_flight: FileInFlight, coordinator_id: int) -> int:
    """The state a file in flight will have here once it lands, as `file_reads.file_state` will then say.

    A commit still queued is LIVE: it brings batches, and the check that may refuse them all has not run. A file
    taken over by hand-over (no commit here) is AWAITING_HANDOVER: it has no batch here and passes on.
    """
    committed = in_flight.committed
    if committed is None:
        return pb.FILE_STATE_LIVE if in_flight.queued else pb.FILE_STATE_AWAITING_HANDOVER
    if len(committed.packed_batches) >= BATCH_LAYOUT.size:
        return pb.FILE_STATE_LIVE
    owners = committed.owner_ids
    if owners and owners[0] == coordinator_id and owners[-1] == coordinator_id:
        return pb.FILE_STATE_AWAITING_DELETION  # the only owner: it owns the file from its commit
    return pb.FILE_STATE_AWAITING_HANDOVER


def file_state_here(shard: CoordinatorShard, object_key: str) -> int | None:
    """The key's state in this replica of the coordinator, commits in flight included; None if it does not hold it.

    The caller checked that the coordinator is active; raises reads.DAMAGE_ERRORS on a damaged state.
    """
    facts = shard.file_facts(object_key)
    if facts is not None:
        return file_reads.file_state(facts)
    in_flight = shard.file_in_flight(object_key)
    return None if in_flight is None else in_flight_state(in_flight, shard.coordinator_id)


def file_states_here(shard: CoordinatorShard, object_keys: Sequence[str]) -> list[int | None]:
    """`file_state_here` of each key, the committed state read in one read transaction and one query for the keys
    (KnownFiles asks about up to a step of keys per coordinator)."""
    with shard.read_transaction() as db:
        committed = file_reads.described_files_facts(db, object_keys)
    states: list[int | None] = []
    for object_key in object_keys:
        facts = committed.get(object_key)
        if facts is not None:
            states.append(file_reads.file_state(facts))
            continue
        in_flight = shard.file_in_flight(object_key)
        states.append(None if in_flight is None else in_flight_state(in_flight, shard.coordinator_id))
    return states


async def prefetch_files_facts(shards: Sequence[CoordinatorShard], object_keys: Sequence[str]) -> None:
    """The rows `file_states_here` reads for these keys, read first off the loop at each shard led here (their pages
    into the OS cache; CoordinatorShard.prefetch), answers dropped."""
    await asyncio.gather(
        *(shard.prefetch(lambda db: file_reads.described_files_facts(db, object_keys)) for shard in shards)
    )


async def describe_files(
    coordinators: NodeCoordinators, peers: PeerClient | None, request: pb.DescribeFilesRequest
) -> pb.DescribeFilesResponse:
    coordinators.limit_items(len(request.object_keys), "object keys")
    response = pb.DescribeFilesResponse()
    states: dict[int, dict[int, int]] = {}  # per well-formed key's result: coordinator id -> the key's state there
    errors: dict[int, CoordinatorUnavailable] = {}  # per result: the first coordinator that could not answer
    to_ask: dict[int, list[int]] = {}  # coordinator id -> the results whose key its leader is asked about
    # Files asked about are mostly old ones (an orphan scan's, a consolidation's leftovers), whose rows' pages may
    # have left the OS cache: the same reads first off the loop, so that those below, on it, do not wait for the disk
    # with every coordinator's commits (KnownFiles does the same, coordinator/files/handover.py).
    keys = [key for key in request.object_keys if object_key_problem(key) is None]
    if keys:
        await prefetch_files_facts(coordinators.shards, keys)
    for index, object_key in enumerate(request.object_keys):
        result = response.files.add(object_key=object_key)
        problem = object_key_problem(object_key)
        if problem:
            result.error_code, result.error_message = pb.INVALID_REQUEST, problem
            continue
        known = states[index] = {}
        for shard in coordinators.shards:
            found = _here(coordinators, shard, object_key)
            if isinstance(found, CoordinatorUnavailable):
                errors.setdefault(index, found)
            elif found is ASK_LEADER:
                to_ask.setdefault(shard.coordinator_id, []).append(index)
            elif found is not None:
                known[shard.coordinator_id] = found
    if to_ask:
        await _ask_leaders(coordinators, peers, request, to_ask, states, errors)
    for index, known in states.items():
        result = response.files[index]
        error = errors.get(index)
        if not known and error is not None:
            # Without every coordinator's answer nobody may conclude the file is unknown. (A file some coordinator
            # knows is known, whatever the others could say: the most alive state among those answering.)
            set_error(result, error)
            continue
        result.coordinator_ids.extend(sorted(known))
        result.has_live_batches = pb.FILE_STATE_LIVE in known.values()
        result.state = next((s for s in _STATES_MOST_ALIVE_FIRST if s in known.values()), pb.FILE_STATE_UNKNOWN)
    return response


def _here(
    coordinators: NodeCoordinators, shard: CoordinatorShard, object_key: str
) -> int | _AskLeader | CoordinatorUnavailable | None:
    """The key's state in this coordinator as this node can tell it, None if surely unknown there, or what to do."""
    role = shard.role
    if role is not None and role.kind is RoleKind.NOT_REPLICA:
        return ASK_LEADER  # led by another node, or by another commit process of this one
    try:
        shard.require_active()
    except CoordinatorUnavailable as error:
        return error
    try:
        state = file_state_here(shard, object_key)
    except reads.DAMAGE_ERRORS as error:
        return coordinators.damaged(shard, error)
    if state is not None or shard.leads:
        return state
    return ASK_LEADER


async def _ask_leaders(
    coordinators: NodeCoordinators,
    peers: PeerClient | None,
    request: pb.DescribeFilesRequest,
    to_ask: dict[int, list[int]],
    states: dict[int, dict[int, int]],
    errors: dict[int, CoordinatorUnavailable],
) -> None:
    """Asks each coordinator's leader about the keys this node could not settle for it; an error where none answers."""
    pending = sorted({i for indexes in to_ask.values() for i in indexes})
    ids = sorted(to_ask)
    try:
        if peers is None:
            raise PeerError("this node has no client to ask other coordinators with")
        known = await peers.known_files(
            ids, [request.object_keys[i] for i in pending], coordinators.timeout_s(request.timeout_ms)
        )
    except PeerError as error:
        unavailable = CoordinatorUnavailable(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"the leaders of coordinators {ids} could not say whether they know the file ({error}); retry",
        )
        for index in pending:
            errors.setdefault(index, unavailable)
        return
    for coordinator_id, indexes in to_ask.items():
        for index in indexes:
            state = known.get(request.object_keys[index], {}).get(coordinator_id)
            if state is not None:
                states[index][coordinator_id] = state
