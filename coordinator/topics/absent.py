"""Topic changes on a node that holds no replica of some coordinators (DESIGN §6a: placement over any number of
nodes, reassignment): the topic's partitions on those coordinators, and any topic holding its name there, are asked
of their leaders (`KnownPartitions`) and learned into the node's catalog before the topic rules run, so that the
rules see every coordinator's partitions as on a node holding them all. A leader that cannot be asked makes the
change wait (retriable), never a change decided on part of the catalog."""

from __future__ import annotations

import asyncio

from coordinator.base.errors import ErrorCode
from coordinator.base.result import ItemError
from coordinator.cluster.peers import PeerClient, PeerError, known_partitions_at
from coordinator.runtime.node_coordinators import NodeCoordinators
from protos import internal_pb2 as internal


async def learn_from_absent_coordinators(
    coordinators: NodeCoordinators, peers: PeerClient | None, topic_id: bytes, topic_name: str, timeout_ms: int
) -> ItemError | None:
    """Asks the leader of each coordinator this node holds no replica of; why it could not, or None."""
    absent = coordinators.absent()
    if not absent:
        return None
    leaderless = [s.coordinator_id for s in absent if s.role is None or not s.role.leader_address]
    if peers is None or leaderless:
        return ItemError(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"topic changes wait for every coordinator: no leader known for coordinators {leaderless}",
        )
    addresses = sorted({s.role.leader_address for s in absent if s.role is not None})
    request = internal.KnownPartitionsRequest(topic_id=topic_id, topic_name=topic_name, all_partitions=True)
    timeout_s = coordinators.timeout_s(timeout_ms)
    replies = await asyncio.gather(
        *(known_partitions_at(peers, address, request, timeout_s) for address in addresses), return_exceptions=True
    )
    catalog = coordinators.catalog
    for reply in replies:
        if isinstance(reply, PeerError):
            return ItemError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"topic changes wait for every coordinator: {reply}")
        if isinstance(reply, BaseException):
            raise reply
        if reply.partitions:
            catalog.learn(topic_id, reply.topic_name, dict(zip(reply.partitions, reply.coordinator_ids, strict=True)))
        if reply.named_topic_id and reply.named_partitions:
            named = dict(zip(reply.named_partitions, reply.named_coordinator_ids, strict=True))
            catalog.learn(reply.named_topic_id, topic_name, named)
    return None
