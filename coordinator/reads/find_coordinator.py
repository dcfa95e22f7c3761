"""FindCoordinator, DescribeCoordinators and DescribeProduceGateways: where each partition's coordinator is, how it is
doing, and which brokers of each rack producers send its partitions to."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import final

from coordinator.base.errors import CoordinatorUnavailable
from coordinator.base.result import ItemError
from coordinator.cluster.peers import PeerClient, PeerError, known_partitions_at
from coordinator.machine.state import file_reads, reads
from coordinator.machine.topic_names import coordinator_for_new_partition
from coordinator.reads.produce_gateways import Broker, duplicate_broker_problem, produce_gateways
from coordinator.runtime.node_coordinators import NodeCoordinators, set_error, wire_code
from coordinator.runtime.replication.role import RoleKind
from coordinator.runtime.shard import CoordinatorShard, ShardState
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal

log = logging.getLogger(__name__)


@final
@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where brokers reach this node (set once the server listens)."""

    host: str
    port: int
    read_addresses: tuple[str, ...] = ()  # HOST:PORT of this node's reader processes serving FindBatches
    # In a cluster: another node's reader addresses, as its registration in etcd says.
    peer_read_addresses: Callable[[int], tuple[str, ...]] = lambda node_id: ()


def endpoint_of(coordinators: NodeCoordinators, endpoint: Endpoint, coordinator_id: int) -> pb.CoordinatorEndpoint:
    """The coordinator's leader and replicas: this node alone; in a cluster, as etcd last said."""
    shard = coordinators.shard(coordinator_id)
    role = shard.role
    if role is None:
        node_id = coordinators.settings.node_id
        active = shard.state is ShardState.ACTIVE
        return pb.CoordinatorEndpoint(
            coordinator_id=coordinator_id,
            leader_node_id=node_id if active else -1,
            host=endpoint.host,
            port=endpoint.port,
            leader_epoch=shard.leader_epoch,
            replicas=[
                pb.ReplicaEndpoint(
                    node_id=node_id,
                    host=endpoint.host,
                    port=endpoint.port,
                    in_sync=True,
                    read_addresses=endpoint.read_addresses,
                )
            ],
        )
    leader_host, _, leader_port = role.leader_address.rpartition(":")
    replicas = []
    for node_id, address in role.replica_addresses:
        host, _, port = address.rpartition(":")
        readers = endpoint.read_addresses if node_id == role.node_id else endpoint.peer_read_addresses(node_id)
        replicas.append(
            pb.ReplicaEndpoint(
                node_id=node_id, host=host, port=int(port), in_sync=node_id in role.isr, read_addresses=readers
            )
        )
    return pb.CoordinatorEndpoint(
        coordinator_id=coordinator_id,
        leader_node_id=role.leader_node_id if role.leader_address else -1,
        host=leader_host,
        port=int(leader_port) if leader_port else 0,
        leader_epoch=role.leader_epoch,
        replicas=replicas,
    )


def find_coordinator(
    coordinators: NodeCoordinators, endpoint: Endpoint, request: pb.FindCoordinatorRequest
) -> pb.FindCoordinatorResponse:
    coordinators.limit_items(sum(len(t.partitions) for t in request.topics), "partitions")
    response = pb.FindCoordinatorResponse()
    named: set[int] = set()
    for topic in request.topics:
        topic_result = response.topics.add(topic_id=topic.topic_id)
        for partition, route in zip(
            topic.partitions, coordinators.route(topic.topic_id, topic.partitions), strict=True
        ):
            if isinstance(route, ItemError):
                topic_result.partitions.add(
                    partition=partition, error_code=wire_code(route.error_code), coordinator_id=-1
                )
            else:
                topic_result.partitions.add(partition=partition, error_code=pb.NONE, coordinator_id=route)
                named.add(route)
    response.coordinators.extend(endpoint_of(coordinators, endpoint, c) for c in sorted(named))
    return response


async def find_coordinator_asking(
    coordinators: NodeCoordinators, endpoint: Endpoint, request: pb.FindCoordinatorRequest, peers: PeerClient | None
) -> pb.FindCoordinatorResponse:
    """FindCoordinator, where a partition this node does not know is asked of the leader of the coordinator it would
    be on (placement is a function of topic and partition) before it is answered unknown: a topic created through
    another node is known here before this node's replicas apply it (read your writes, DESIGN §6a). A partition
    that leader cannot be asked about answers COORDINATOR_NOT_AVAILABLE (retriable), never a false unknown."""
    answer = find_coordinator(coordinators, endpoint, request)
    if peers is None:
        return answer
    asks: defaultdict[tuple[str, bytes], list[int]] = defaultdict(list)
    for topic in answer.topics:
        for result in topic.partitions:
            # Not in the catalog: unknown, or retriable while a coordinator here cannot say what it holds; in a
            # cluster where this node holds no replica of some coordinators (placement, reassignment) always that.
            if result.error_code != pb.NONE:
                address = _leader_elsewhere(coordinators, topic.topic_id, result.partition)
                if address is not None:
                    asks[(address, topic.topic_id)].append(result.partition)
    if not asks:
        return answer
    timeout_s = coordinators.timeout_s(0)
    replies = await asyncio.gather(
        *(known_partitions_at(peers, address, internal.KnownPartitionsRequest(topic_id=topic_id, partitions=ps),
                              timeout_s) for (address, topic_id), ps in asks.items()),
        return_exceptions=True,
    )  # fmt: skip
    unconfirmed: dict[tuple[bytes, int], str] = {}
    unknown: set[tuple[bytes, int]] = set()  # the leader of the partition's coordinator does not know it either
    for ((_, topic_id), partitions), reply in zip(asks.items(), replies, strict=True):
        if isinstance(reply, PeerError):
            unconfirmed.update({(topic_id, p): str(reply) for p in partitions})
        elif isinstance(reply, BaseException):
            raise reply
        else:
            unknown.update((topic_id, p) for p in partitions if p not in reply.partitions)
            if reply.partitions:
                learned = dict(zip(reply.partitions, reply.coordinator_ids, strict=True))
                coordinators.catalog.learn(topic_id, reply.topic_name, learned)
    answer = find_coordinator(coordinators, endpoint, request)
    for topic in answer.topics:
        for result in topic.partitions:
            if (topic.topic_id, result.partition) in unknown and result.error_code == pb.NOT_LEADER_OR_FOLLOWER:
                result.error_code = pb.UNKNOWN_TOPIC_OR_PARTITION  # the one that would hold it says so
            # FindCoordinator's results carry no message: the node logs why.
            if (topic.topic_id, result.partition) in unconfirmed and result.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION:
                result.error_code = pb.COORDINATOR_NOT_AVAILABLE
    if unconfirmed:
        log.warning("FindCoordinator: %d partitions unknown here and not confirmed elsewhere: %s", len(unconfirmed),
                    next(iter(unconfirmed.values())))  # fmt: skip
    return answer


def _leader_elsewhere(coordinators: NodeCoordinators, topic_id: bytes, partition: int) -> str | None:
    """HOST:PORT of the leader of the coordinator the partition would be on, when that is another node."""
    if partition < 0:
        return None
    shard = coordinators.shard(coordinator_for_new_partition(topic_id, partition, len(coordinators.shards)))
    role = shard.role
    if role is None or not role.leader_address or role.leader_node_id == role.node_id:
        return None
    return role.leader_address


def known_partitions(
    coordinators: NodeCoordinators, request: internal.KnownPartitionsRequest
) -> internal.KnownPartitionsResponse:
    """Which of the topic's partitions this node's catalog knows (never asks further)."""
    coordinators.limit_items(len(request.partitions), "partitions")
    catalog = coordinators.catalog
    answer = internal.KnownPartitionsResponse()
    named = catalog.topic_id_of(request.topic_name) if request.topic_name else None
    other = catalog.topic(named) if named is not None and named != request.topic_id else None
    if named is not None and other is not None:
        answer.named_topic_id = named
        answer.named_partitions.extend(sorted(other.partitions))
        answer.named_coordinator_ids.extend(other.partitions[p] for p in sorted(other.partitions))
    entry = catalog.topic(request.topic_id)
    if entry is None:
        return answer
    known = (
        sorted(entry.partitions) if request.all_partitions else [p for p in request.partitions if p in entry.partitions]
    )
    answer.topic_name = entry.name
    answer.partitions.extend(known)
    answer.coordinator_ids.extend(entry.partitions[p] for p in known)
    return answer


def describe_coordinators(
    coordinators: NodeCoordinators, endpoint: Endpoint, request: pb.DescribeCoordinatorsRequest
) -> pb.DescribeCoordinatorsResponse:
    coordinators.limit_items(len(request.coordinator_ids), "coordinator ids")
    wanted = list(request.coordinator_ids) or [s.coordinator_id for s in coordinators.shards]
    response = pb.DescribeCoordinatorsResponse()
    for coordinator_id in wanted:
        description = response.coordinators.add(coordinator_id=coordinator_id, last_snapshot_end_offset=-1)
        if not coordinators.hosts(coordinator_id):
            description.error_code = pb.NOT_COORDINATOR
            description.error_message = f"coordinator {coordinator_id} is not hosted on this node"
            continue
        _describe(coordinators, endpoint, coordinators.shard(coordinator_id), description)
    return response


def describe_produce_gateways(
    coordinators: NodeCoordinators, request: pb.DescribeProduceGatewaysRequest
) -> pb.DescribeProduceGatewaysResponse:
    """Each coordinator's gateways per rack (produce_gateways.py), from this node's view of who leads each."""
    coordinators.limit_items(len(request.brokers), "brokers")
    brokers = [Broker(b.broker_id, b.rack) for b in request.brokers]
    problem = duplicate_broker_problem(brokers)
    if problem is not None:
        return pb.DescribeProduceGatewaysResponse(error_code=pb.INVALID_REQUEST, error_message=problem)
    gateways = produce_gateways(brokers, leader_nodes(coordinators))
    return pb.DescribeProduceGatewaysResponse(
        gateways=[
            pb.DescribeProduceGatewaysResponse.Gateway(coordinator_id=g.coordinator_id, rack=g.rack,
                                                       broker_ids=g.broker_ids)
            for g in gateways
        ]
    )  # fmt: skip


def leader_nodes(coordinators: NodeCoordinators) -> dict[int, int]:
    """Each coordinator's leader node as this node sees it: itself alone (or in a node's processes); in a cluster,
    as etcd last said (-1 where none is known)."""
    return {
        shard.coordinator_id: coordinators.settings.node_id if shard.role is None else shard.role.leader_node_id
        for shard in coordinators.shards
    }


def _describe(
    coordinators: NodeCoordinators,
    endpoint: Endpoint,
    shard: CoordinatorShard,
    description: pb.CoordinatorDescription,
) -> None:
    statistics = shard.statistics()
    role = shard.role
    # A coordinator this node holds no replica of never loads here: say so rather than "LOADING" for ever.
    not_replica = role is not None and role.kind is RoleKind.NOT_REPLICA
    description.state = RoleKind.NOT_REPLICA.value if not_replica else statistics.state
    description.queued_operations = statistics.queued_operations
    try:
        shard.require_active()
    except CoordinatorUnavailable as error:
        set_error(description, error)
        description.oldest_live_file_timestamp = -1
        return
    description.leader.CopyFrom(endpoint_of(coordinators, endpoint, shard.coordinator_id))
    try:
        with shard.read_transaction() as db:
            counts = file_reads.coordinator_counts(db)
    except reads.DAMAGE_ERRORS as error:
        damaged = coordinators.damaged(shard, error)
        set_error(description, damaged)
        description.oldest_live_file_timestamp = -1
        return
    description.partition_count = counts.partition_count
    description.live_file_count = counts.live_file_count
    description.live_batch_count = counts.live_batch_count
    description.oldest_live_file_timestamp = counts.oldest_live_file_timestamp
    description.files_awaiting_deletion = counts.files_awaiting_deletion
    description.files_awaiting_handover = counts.files_awaiting_handover
    description.log_start_offset = statistics.log_start_offset
    description.log_end_offset = statistics.log_end_offset
    description.high_watermark = statistics.high_watermark
    description.applied_offset = statistics.applied_offset
    description.log_flush_count = statistics.log_flush_count
    description.log_append_count = statistics.log_append_count
    description.last_snapshot_end_offset = statistics.last_snapshot_end_offset
    usage = shard.disk_usage()
    description.state_bytes = usage.state_bytes
    description.log_bytes = usage.log_bytes
    description.snapshot_bytes = usage.snapshot_bytes
    description.producer_count = statistics.producer_count
    scrub = shard.scrub_statistics()
    description.scrubbed_bytes = scrub.scrubbed_bytes
    description.scrub_damage_found = scrub.damage_found
    description.last_scrub_pass_ms = scrub.last_pass_ms
    description.last_scrub_damage = scrub.last_damage
    role = shard.role
    description.node_id = coordinators.settings.node_id
    description.role = shard.served_role
    description.isr.extend([coordinators.settings.node_id] if role is None else role.isr)
    description.replica_node_ids.extend([coordinators.settings.node_id] if role is None else role.replicas)
    description.replica_lag = statistics.replica_lag
    description.leader_changes = statistics.leader_changes
    for progress in shard.replica_progress():
        description.replica_progress.add(
            node_id=progress.node_id, log_end_offset=progress.log_end_offset, lag=progress.lag,
            in_sync=progress.in_sync, last_fetch_age_ms=progress.last_fetch_age_ms,
            caught_up_age_ms=progress.caught_up_age_ms,
        )  # fmt: skip
