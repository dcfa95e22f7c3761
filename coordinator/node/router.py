"""The node's router: each RPC goes to its operation in a domain package (commits, topics, files, reads), which
splits it by coordinator.

Every list in a request gets one result per item, in request order. Items
whose coordinator is not here, or cannot serve now, get that coordinator's
error; the others go on.

Each RPC's row (coordinator/edge/rpcs.py) names the Router method that answers it. A process that does not answer
every call itself (a node's first process, spread over commit processes) gets its placement at construction: what
answers those calls there instead.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, final

from coordinator.base.clock import Clock
from coordinator.base.errors import ErrorCode
from coordinator.base.metrics import Metrics
from coordinator.base.workers import NODE_WIDE, WorkerStatus
from coordinator.cluster.peers import PeerClient, forward_call
from coordinator.commits.commit_file import CommitFiles
from coordinator.config.settings import Settings
from coordinator.consolidation import merge_work, replace_batches
from coordinator.edge.rpcs import NoReplica, Rpc
from coordinator.files import describe_files, handover, move_loans, move_staging
from coordinator.files.list_file_keys import FileKeyStreams
from coordinator.machine.catalog import TopicCatalog
from coordinator.node import admin_service, leader_elections, reassignments
from coordinator.node.reassignments import ClusterAdmin
from coordinator.reads import describe_producers, find_batches, find_coordinator, list_offsets
from coordinator.reads.find_coordinator import Endpoint
from coordinator.runtime.node_coordinators import Elsewhere, NodeCoordinators
from coordinator.runtime.replication.fetch_answers import answer_fetch_logs
from coordinator.runtime.replication.leader import LeaderReplication
from coordinator.runtime.replication.refusals import refused_epoch_end, refused_fetch
from coordinator.runtime.replication.snapshot_transfer import stream_snapshot
from coordinator.runtime.shard import CoordinatorShard
from coordinator.topics import delete_records, move_admin, move_cutover, remote_segments
from coordinator.topics.admin import TopicAdmin
from coordinator.topics.switch import service as switch_service
from protos import admin_pb2 as admin
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal

__all__ = ["Answer", "CoordinatorGrower", "Endpoint", "Placed", "Placement", "Router"]

NO_GROWTH = (
    "this node cannot add coordinators online: it is spread over commit processes (diskless.node.processes > 1), "
    "each of which leads a share of the coordinators fixed when the node starts; restart it with a larger "
    "--coordinators instead (existing partitions stay, new topics spread over every coordinator)"
)


class CoordinatorGrower(Protocol):
    """What answers CreateCoordinators where the node may add coordinators online (coordinator/node/growth.py)."""

    async def create_coordinators(
        self, request: admin.CreateCoordinatorsRequest
    ) -> admin.CreateCoordinatorsResponse: ...


# A request -> its response, an awaitable of it, or (a stream) an async iterator of its messages.
Answer: TypeAlias = Callable[[Any], Any]


@final
@dataclass(frozen=True, slots=True)
class Placed:
    """What answers an RPC in this process instead of the Router method its row names."""

    answer: Answer
    # The call goes on to another process of this node: one passed on already is answered by the Router method
    # here instead, never passed on twice.
    passes_on: bool = False


# Called with the Router once it is made: by method name, what answers the RPCs this process answers otherwise.
Placement: TypeAlias = Callable[["Router"], Mapping[str, Placed]]


class Router:
    def __init__(
        self,
        shards: Sequence[CoordinatorShard],
        settings: Settings,
        clock: Clock,
        metrics: Metrics,
        catalog: TopicCatalog,
        peers: PeerClient | None = None,
        catalog_holder: Callable[[], str | None] = lambda: None,
        elsewhere: Elsewhere | None = None,
        placement: Placement | None = None,
    ) -> None:
        self.shards = list(shards)
        self.settings = settings
        self.catalog = catalog  # derived from the coordinators' records by the node; read here
        self.endpoint = Endpoint("127.0.0.1", 0)  # set by the server once it listens
        self._coordinators = NodeCoordinators(self.shards, catalog, settings, metrics, elsewhere)
        self._topic_admin = TopicAdmin(self._coordinators, peers)
        self._clock = clock
        self._commits = CommitFiles(self._coordinators, clock)
        self._replaces = replace_batches.ReplaceCalls(self._coordinators)
        self._file_keys = FileKeyStreams(self._coordinators, clock)
        self._peers = peers
        # Where catalog calls go when this node holds no replica at all (a node added after the cluster formed).
        self._catalog_holder = catalog_holder
        self._placement: Mapping[str, Placed] = placement(self) if placement is not None else {}
        # The node's cluster controller, set where the node is part of a cluster: it runs preferred elections and
        # starts reassignments.
        self.elector: ClusterAdmin | None = None
        # Adds coordinators online where this node may (a lone node of one process, coordinator/node/growth.py; a
        # node of a cluster, coordinator/node/cluster_growth.py).
        self.growth: CoordinatorGrower | None = None
        # The node's supervised background workers now (set by the node): DescribeCoordinators shows them.
        self.worker_statuses: Callable[[], Sequence[WorkerStatus]] = list

    def add_shards(self, shards: Sequence[CoordinatorShard]) -> None:
        """Coordinators added online (coordinator/node/growth.py): calls and new partitions go to them from now on."""
        self.shards.extend(shards)
        self._coordinators.shards.extend(shards)

    @property
    def coordinators(self) -> NodeCoordinators:
        return self._coordinators

    def answer(self, rpc: Rpc) -> Placed:
        """What answers `rpc` in this process: its placement here, else the Router method its row names."""
        placed = self._placement.get(rpc.method)
        return placed if placed is not None else Placed(self.answer_here(rpc))

    def answer_here(self, rpc: Rpc) -> Answer:
        """The Router method the row names; passed on whole to the catalog holder where the row says so and this node
        holds no replica."""
        handler: Answer = getattr(self, rpc.handler)
        if rpc.no_replica is NoReplica.HERE:
            return handler
        return self._or_catalog_holder(rpc.method, handler)

    def _or_catalog_holder(self, method: str, handler: Answer) -> Answer:
        def answer(request: Any) -> Any:
            holder = self._catalog_holder() if self._peers is not None else None
            if holder is None or self._peers is None:
                return handler(request)
            # The call's own timeout where it carries one (a topic change); else the node's.
            timeout_ms = request.timeout_ms if "timeout_ms" in request.DESCRIPTOR.fields_by_name else 0
            return forward_call(self._peers, holder, method, request, self._coordinators.timeout_s(timeout_ms))

        return answer

    # ------------------------------------------------------------------ the broker contract (protos/coordinator.proto)

    async def create_partitions(self, request: pb.CreatePartitionsRequest) -> pb.CreatePartitionsResponse:
        return await self._topic_admin.create_partitions(request)

    async def delete_topics(self, request: pb.DeleteTopicsRequest) -> pb.DeleteTopicsResponse:
        return await self._topic_admin.delete_topics(request)

    async def alter_topic_configs(self, request: pb.AlterTopicConfigsRequest) -> pb.AlterTopicConfigsResponse:
        return await self._topic_admin.configs.alter_topic_configs(request)

    async def describe_topic_configs(self, request: pb.DescribeTopicConfigsRequest) -> pb.DescribeTopicConfigsResponse:
        return await self._topic_admin.configs.describe_topic_configs(request)

    async def commit_remote_log_segments(
        self, request: pb.CommitRemoteLogSegmentsRequest
    ) -> pb.CommitRemoteLogSegmentsResponse:
        return await remote_segments.commit_remote_log_segments(self._coordinators, request)

    async def init_diskless_log(self, request: pb.InitDisklessLogRequest) -> pb.InitDisklessLogResponse:
        return await switch_service.init_diskless_log(self._coordinators, request)

    async def repair_diskless_log(self, request: pb.RepairDisklessLogRequest) -> pb.RepairDisklessLogResponse:
        return await switch_service.repair_diskless_log(self._coordinators, request)

    async def describe_diskless_logs(self, request: pb.DescribeDisklessLogsRequest) -> pb.DescribeDisklessLogsResponse:
        return await switch_service.describe_diskless_logs(self._coordinators, request)

    async def commit_file(self, request: pb.CommitFileRequest) -> pb.CommitFileResponse:
        return await self._commits.commit_file(request)

    async def replace_batches(self, request: pb.ReplaceBatchesRequest) -> pb.ReplaceBatchesResponse:
        """Object consolidation (DESIGN §4c): each coordinator's runs moved into the merged object, one record each."""
        return await self._replaces.replace_batches(request)

    async def get_file_merge_work_item(
        self, request: pb.GetFileMergeWorkItemRequest
    ) -> pb.GetFileMergeWorkItemResponse:
        """A coordinator's oldest small live files with their live batches, from its leader (DESIGN §4c)."""
        return await merge_work.get_file_merge_work_item(self._coordinators, self._clock, request)

    async def delete_records(self, request: pb.DeleteRecordsRequest) -> pb.DeleteRecordsResponse:
        return await delete_records.delete_records(self._coordinators, request)

    async def list_offsets(self, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
        return await list_offsets.list_offsets(self._coordinators, request)

    async def describe_producers(self, request: pb.DescribeProducersRequest) -> pb.DescribeProducersResponse:
        return await describe_producers.describe_producers(self._coordinators, request)

    def find_batches(self, request: pb.FindBatchesRequest) -> bytes:
        """The serialized answer (coordinator/machine/batch_entries.py)."""
        return find_batches.find_batches(self._coordinators, request)

    async def describe_files(self, request: pb.DescribeFilesRequest) -> pb.DescribeFilesResponse:
        """Commits in flight included; a coordinator not led here is asked of its leader for what it lacks."""
        return await describe_files.describe_files(self._coordinators, self._peers, request)

    def list_file_keys(self, request: pb.ListFileKeysRequest) -> AsyncGenerator[pb.ListFileKeysPage, None]:
        """Every key a coordinator led here knows, in pages of one snapshot (the orphan scan's known keys)."""
        return self._file_keys.list_file_keys(request)

    async def find_coordinator(self, request: pb.FindCoordinatorRequest) -> pb.FindCoordinatorResponse:
        return await find_coordinator.find_coordinator_asking(self._coordinators, self.endpoint, request, self._peers)

    def describe_coordinators(self, request: pb.DescribeCoordinatorsRequest) -> pb.DescribeCoordinatorsResponse:
        response = find_coordinator.describe_coordinators(self._coordinators, self.endpoint, request)
        statuses = self.worker_statuses()
        node_workers = [_background_worker(status) for status in statuses if status.coordinator_id == NODE_WIDE]
        for description in response.coordinators:
            if not self._coordinators.hosts(description.coordinator_id):
                continue
            description.workers.extend(
                _background_worker(status) for status in statuses if status.coordinator_id == description.coordinator_id
            )
            description.node_workers.extend(node_workers)
        return response

    def describe_produce_gateways(
        self, request: pb.DescribeProduceGatewaysRequest
    ) -> pb.DescribeProduceGatewaysResponse:
        return find_coordinator.describe_produce_gateways(self._coordinators, request)

    # ------------------------------------------------------------------ between coordinators (protos/internal.proto)

    def known_partitions(self, request: internal.KnownPartitionsRequest) -> internal.KnownPartitionsResponse:
        return find_coordinator.known_partitions(self._coordinators, request)

    async def hand_over_files(self, request: internal.HandOverFilesRequest) -> internal.HandOverFilesResponse:
        return await handover.hand_over_files(self._coordinators, request)

    async def known_files(self, request: internal.KnownFilesRequest) -> internal.KnownFilesResponse:
        return await handover.known_files(self._coordinators, request)

    async def fetch_log(self, request: internal.FetchLogRequest) -> internal.FetchLogResponse:
        if not self._coordinators.hosts(request.coordinator_id):
            return refused_fetch(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"no coordinator {request.coordinator_id} here")
        return await self._coordinators.shard(request.coordinator_id).fetch_log(request)

    async def fetch_logs(self, request: internal.FetchLogsRequest) -> internal.FetchLogsResponse:
        return await answer_fetch_logs(self._replication_leader, self.settings, self._clock, request)

    def _replication_leader(self, coordinator_id: int) -> LeaderReplication | str:
        if not self._coordinators.hosts(coordinator_id):
            return f"no coordinator {coordinator_id} here"
        return self._coordinators.shard(coordinator_id).replication_leader()

    def offset_for_leader_epoch(
        self, request: internal.OffsetForLeaderEpochRequest
    ) -> internal.OffsetForLeaderEpochResponse:
        if not self._coordinators.hosts(request.coordinator_id):
            return refused_epoch_end(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"no coordinator {request.coordinator_id} here")
        return self._coordinators.shard(request.coordinator_id).offset_for_leader_epoch(request)

    async def adopt_partition_chunk(
        self, request: internal.AdoptPartitionChunkRequest
    ) -> internal.AdoptPartitionChunkResponse:
        return await move_staging.adopt_partition_chunk(self._coordinators, request)

    async def adopt_partition(self, request: internal.AdoptPartitionRequest) -> internal.AdoptPartitionResponse:
        return await move_cutover.adopt_partition(self._coordinators, request)

    async def abandon_adoption(self, request: internal.AbandonAdoptionRequest) -> internal.AbandonAdoptionResponse:
        return await move_cutover.abandon_adoption(self._coordinators, request)

    async def return_files(self, request: internal.ReturnFilesRequest) -> internal.ReturnFilesResponse:
        return await move_loans.return_files(self._coordinators, request)

    async def change_topic(self, request: internal.ChangeTopicRequest) -> internal.ChangeTopicResponse:
        return await self._topic_admin.change_here(request)

    def fetch_snapshot(self, request: internal.FetchSnapshotRequest) -> AsyncIterator[internal.FetchSnapshotChunk]:
        """The newest snapshot of a coordinator this node leads, streamed to a follower."""
        if not self._coordinators.hosts(request.coordinator_id):
            return _refused_snapshot(f"no coordinator {request.coordinator_id} here")
        shard = self._coordinators.shard(request.coordinator_id)
        if not shard.leads or shard.leader_epoch != request.current_leader_epoch:
            return _refused_snapshot(
                f"this node does not lead coordinator {request.coordinator_id} in epoch {request.current_leader_epoch}"
            )
        return stream_snapshot(shard.directory, request.coordinator_id, shard.request_snapshot)

    # ------------------------------------------------------------------ operators (protos/admin.proto)

    async def create_snapshot(self, request: admin.CreateSnapshotRequest) -> admin.CreateSnapshotResponse:
        return await admin_service.create_snapshot(self.shards, self.settings, request)

    async def list_snapshots(self, request: admin.ListSnapshotsRequest) -> admin.ListSnapshotsResponse:
        return await admin_service.list_snapshots(self.shards, self.settings, request)

    async def check_state(self, request: admin.CheckStateRequest) -> admin.CheckStateResponse:
        return await admin_service.check_state(self.shards, self.settings, request)

    async def elect_leaders(self, request: admin.ElectLeadersRequest) -> admin.ElectLeadersResponse:
        return await leader_elections.elect_leaders(self.elector, self.settings, request)

    async def alter_reassignments(self, request: admin.AlterReassignmentsRequest) -> admin.AlterReassignmentsResponse:
        return await reassignments.alter_reassignments(self.elector, self.settings, request)

    async def list_reassignments(self, request: admin.ListReassignmentsRequest) -> admin.ListReassignmentsResponse:
        return await reassignments.list_reassignments(self.elector, request)

    async def describe_topics(self, request: admin.DescribeTopicsRequest) -> admin.DescribeTopicsResponse:
        return await self._topic_admin.describe_topics(request)

    async def create_coordinators(self, request: admin.CreateCoordinatorsRequest) -> admin.CreateCoordinatorsResponse:
        if self.growth is None:
            count = len(self.shards)
            return admin.CreateCoordinatorsResponse(
                error_code=pb.INVALID_REQUEST, error_message=NO_GROWTH, previous_count=count, count=count
            )
        return await self.growth.create_coordinators(request)

    async def move_partition(self, request: admin.MovePartitionRequest) -> admin.MovePartitionResponse:
        return await move_admin.move_partition(self._coordinators, request)

    async def describe_partition_move(
        self, request: admin.DescribePartitionMoveRequest
    ) -> admin.DescribePartitionMoveResponse:
        return await move_admin.describe_partition_move(self._coordinators, self._peers, request)

    def describe_partition_loads(
        self, request: admin.DescribePartitionLoadsRequest
    ) -> admin.DescribePartitionLoadsResponse:
        return admin_service.describe_partition_loads(self.shards, self.settings, request)


async def _refused_snapshot(message: str) -> AsyncIterator[internal.FetchSnapshotChunk]:
    yield internal.FetchSnapshotChunk(error_code=pb.NOT_LEADER_OR_FOLLOWER, error_message=message, last=True)


def _background_worker(status: WorkerStatus) -> pb.BackgroundWorker:
    return pb.BackgroundWorker(
        name=status.name, scope=status.scope.value, state=status.state.value, failures=status.failures,
        recent_failures=status.recent_failures, failing=status.failing, last_failure=status.last_failure,
    )  # fmt: skip
