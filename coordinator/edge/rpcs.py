"""Every RPC of the node's gRPC services, one row each: the one registration a new RPC needs.

From the rows come the ACL's permission per method (`access_control`), the node's gRPC services
(coordinator/node/services.py), the routing client's routes and its fast path (coordinator/client/), and where
the first process of a node spread over commit processes sends each call (coordinator/node/processes/front.py).
The handlers live on the node's Router (coordinator/node/router.py), each named by its row. tests/test_rpc_table.py
fails when a method of the protos has no row, or a row names a method or handler that does not exist.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import final

from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from coordinator.base.invariants import check_invariant
from coordinator.edge.acl_file import Permission
from protos import admin_pb2, internal_pb2
from protos import coordinator_pb2 as pb


class Service(enum.Enum):
    """The node's gRPC services, by their names in the protos."""

    COORDINATOR = "DisklessCoordinator"  # the broker contract (KIP-1164), protos/coordinator.proto
    ADMIN = "CoordinatorAdmin"  # operators: snapshots, state checks, protos/admin.proto
    INTERNAL = "CoordinatorInternal"  # between coordinators: hand-over, replication, protos/internal.proto

    @property
    def descriptor(self) -> ServiceDescriptor:
        return _FILES[self].services_by_name[self.value]


_FILES = {
    Service.COORDINATOR: pb.DESCRIPTOR,
    Service.ADMIN: admin_pb2.DESCRIPTOR,
    Service.INTERNAL: internal_pb2.DESCRIPTOR,
}


class ServedBy(enum.Enum):
    """Who answers a call for a coordinator, as a client routes it."""

    LEADER = "leader"  # the coordinator's leader, as a partition's leader takes Kafka's produce and replication
    REPLICA = "replica"  # any replica, up to its high watermark, as Kafka's fetch from a follower (KIP-392)
    NODE = "node"  # whichever node takes the call, for the whole cluster or itself, as any broker answers Metadata


class Front(enum.Enum):
    """How the first process of a node spread over commit processes (`diskless serve --processes N`) serves a call.

    That process leads no coordinator: it holds the catalog, routes, and runs the reader processes.
    """

    LEADING_PROCESS = "pass it on to the commit process leading each coordinator"  # split as a broker splits it
    STATE_FILES = "read it here from the commit processes' state files"  # as a reader process reads them
    CATALOG = "answer it here, where the catalog is held, naming this process's readers"
    CATALOG_CHANGE = "run it here, where the catalog is held, then read the catalog again"  # parts go to the leaders
    EVERY_PROCESS = "ask every commit process and merge their answers"
    HERE = "answer it here as any process does"  # for its own coordinators, all led elsewhere


class NoReplica(enum.Enum):
    """How a node holding no replica at all (one added after the cluster formed) serves a call."""

    HERE = "answer it here"  # each item gets its coordinator's error (the caller routes elsewhere)
    CATALOG_HOLDER = "pass it on whole to a node holding the catalog"  # coordinator 0's leader


class Stream(enum.Enum):
    """Whether a call answers with a stream of messages, and how a stream is admitted."""

    NONE = "one answer"
    GATED = "a stream through the call gate"  # readiness, access, metrics and the error table, as a unary call
    # Replication's own stream, as it always was: the ACL admits it; it is neither counted nor refused while loading.
    ACL_ONLY = "a stream the ACL alone admits"
    # Replication's stream of requests: the ACL admits the stream once; each request is answered in turn, on the
    # node's loop, by the row's handler, as a unary call of it would be.
    EACH_REQUEST = "a stream of requests, each answered in turn as one call"


@final
@dataclass(frozen=True, slots=True)
class Rpc:
    """Everything the node, its processes and the routing client know of one RPC."""

    service: Service
    method: str  # as named in the service of the protos
    permission: Permission  # what the caller's principal needs (the ACL file)
    served_by: ServedBy
    handler: str  # the Router method (coordinator/node/router.py) that answers it in this process
    front: Front
    no_replica: NoReplica = NoReplica.HERE
    stream: Stream = Stream.NONE

    @property
    def descriptor(self) -> MethodDescriptor:
        return self.service.descriptor.methods_by_name[self.method]

    @property
    def streams(self) -> bool:
        return self.stream is not Stream.NONE


# fmt: off
RPCS: tuple[Rpc, ...] = (
    # The broker contract. Topic-wide calls involve every coordinator: a node takes them whole.
    Rpc(Service.COORDINATOR, "CreatePartitions", Permission.CLUSTER_ACTION, ServedBy.NODE, "create_partitions",
        Front.CATALOG_CHANGE, NoReplica.CATALOG_HOLDER),
    Rpc(Service.COORDINATOR, "DeleteTopics", Permission.CLUSTER_ACTION, ServedBy.NODE, "delete_topics",
        Front.CATALOG_CHANGE, NoReplica.CATALOG_HOLDER),
    Rpc(Service.COORDINATOR, "CommitFile", Permission.CLUSTER_ACTION, ServedBy.LEADER, "commit_file",
        Front.LEADING_PROCESS),
    Rpc(Service.COORDINATOR, "DeleteRecords", Permission.CLUSTER_ACTION, ServedBy.LEADER, "delete_records",
        Front.LEADING_PROCESS),
    Rpc(Service.COORDINATOR, "ListOffsets", Permission.CLUSTER_ACTION, ServedBy.LEADER, "list_offsets",
        Front.LEADING_PROCESS),
    # Each partition's producers and open transactions (KIP-664, DESIGN §4b), a strict read of its leader.
    Rpc(Service.COORDINATOR, "DescribeProducers", Permission.DESCRIBE, ServedBy.LEADER, "describe_producers",
        Front.LEADING_PROCESS),
    Rpc(Service.COORDINATOR, "FindBatches", Permission.CLUSTER_ACTION, ServedBy.REPLICA, "find_batches",
        Front.STATE_FILES),
    # Any replica answers; one that does not lead a coordinator asks its leader (KnownFiles) about every key it does
    # not hold itself, since only the leader sees the commits in flight (coordinator/files/describe_files.py).
    Rpc(Service.COORDINATOR, "DescribeFiles", Permission.DESCRIBE, ServedBy.REPLICA, "describe_files",
        Front.LEADING_PROCESS),
    Rpc(Service.COORDINATOR, "FindCoordinator", Permission.DESCRIBE, ServedBy.NODE, "find_coordinator",
        Front.CATALOG, NoReplica.CATALOG_HOLDER),
    Rpc(Service.COORDINATOR, "DescribeCoordinators", Permission.DESCRIBE, ServedBy.NODE, "describe_coordinators",
        Front.EVERY_PROCESS),
    # From the node's view of each coordinator's leader: every process holds it (a node's first process too, where
    # each coordinator's leader is the node), and so does a node holding no replica (etcd names the leaders).
    Rpc(Service.COORDINATOR, "DescribeProduceGateways", Permission.DESCRIBE, ServedBy.NODE,
        "describe_produce_gateways", Front.HERE),
    # Topic configurations (DESIGN §4a): asked of the coordinators' leaders (coordinator/topics/config_admin.py), not
    # of the catalog, which holds none; taken where topic changes are (the catalog holder), under their lock. A broker
    # relays its admins' changes; an operator needs the same permission.
    Rpc(Service.COORDINATOR, "AlterTopicConfigs", Permission.CLUSTER_ACTION, ServedBy.NODE, "alter_topic_configs",
        Front.HERE, NoReplica.CATALOG_HOLDER),
    Rpc(Service.COORDINATOR, "DescribeTopicConfigs", Permission.DESCRIBE, ServedBy.NODE, "describe_topic_configs",
        Front.HERE, NoReplica.CATALOG_HOLDER),
    # A tiered-storage copier's offload, decided by each partition's coordinator's leader (only its refusals so far).
    Rpc(Service.COORDINATOR, "CommitRemoteLogSegments", Permission.CLUSTER_ACTION, ServedBy.LEADER,
        "commit_remote_log_segments", Front.LEADING_PROCESS),
    # The classic -> diskless switch (design §4d): a classic leader's seal and a repair, decided by each partition's
    # coordinator's leader; the switch's state read from the leader, strictly (as DescribeProducers).
    Rpc(Service.COORDINATOR, "InitDisklessLog", Permission.CLUSTER_ACTION, ServedBy.LEADER, "init_diskless_log",
        Front.LEADING_PROCESS),
    Rpc(Service.COORDINATOR, "RepairDisklessLog", Permission.CLUSTER_ACTION, ServedBy.LEADER, "repair_diskless_log",
        Front.LEADING_PROCESS),
    Rpc(Service.COORDINATOR, "DescribeDisklessLogs", Permission.DESCRIBE, ServedBy.LEADER, "describe_diskless_logs",
        Front.LEADING_PROCESS),
    # Object consolidation (DESIGN §4c): each coordinator's extents to its leader, split as CommitFile's batches; the
    # merge job's plan from one coordinator's leader (a follower may lag what moved).
    Rpc(Service.COORDINATOR, "ReplaceBatches", Permission.CLUSTER_ACTION, ServedBy.LEADER, "replace_batches",
        Front.LEADING_PROCESS),
    Rpc(Service.COORDINATOR, "GetFileMergeWorkItem", Permission.DESCRIBE, ServedBy.LEADER, "get_file_merge_work_item",
        Front.LEADING_PROCESS),
    # What DescribeFiles answers, for every file at once; only the coordinator's leader answers.
    Rpc(Service.COORDINATOR, "ListFileKeys", Permission.DESCRIBE, ServedBy.LEADER, "list_file_keys",
        Front.HERE, stream=Stream.GATED),
    # Operators. Taking a snapshot changes the node (files, log start): ALTER; listing is read-only. CheckState
    # may take a coordinator out of service to rebuild it: an ALTER, like taking a snapshot.
    Rpc(Service.ADMIN, "CreateSnapshot", Permission.ALTER, ServedBy.NODE, "create_snapshot", Front.HERE),
    Rpc(Service.ADMIN, "ListSnapshots", Permission.DESCRIBE, ServedBy.NODE, "list_snapshots", Front.HERE),
    Rpc(Service.ADMIN, "CheckState", Permission.ALTER, ServedBy.NODE, "check_state", Front.HERE),
    # Preferred leaders at once (DESIGN §6a): any node of a cluster changes leaderships in etcd, an ALTER.
    Rpc(Service.ADMIN, "ElectLeaders", Permission.ALTER, ServedBy.NODE, "elect_leaders", Front.HERE),
    # Online reassignment (DESIGN §6a): any node of a cluster writes reassignments to etcd, an ALTER; listing them
    # (and every coordinator's replicas, for a rebalance plan) reads etcd only.
    Rpc(Service.ADMIN, "AlterReassignments", Permission.ALTER, ServedBy.NODE, "alter_reassignments", Front.HERE),
    Rpc(Service.ADMIN, "ListReassignments", Permission.DESCRIBE, ServedBy.NODE, "list_reassignments", Front.HERE),
    # Topics by name, for operators naming a topic as kafka-configs does: from the catalog, as FindCoordinator.
    Rpc(Service.ADMIN, "DescribeTopics", Permission.DESCRIBE, ServedBy.NODE, "describe_topics", Front.HERE,
        NoReplica.CATALOG_HOLDER),
    # Coordinators added online (a lone node): the node taking the call grows, an ALTER of the whole node.
    Rpc(Service.ADMIN, "CreateCoordinators", Permission.ALTER, ServedBy.NODE, "create_coordinators", Front.HERE),
    # Each partition's live batches, for `diskless rebalance-partitions` (docs/design.md §5a): from the coordinators
    # this node (process) leads; the command asks every address it is given.
    Rpc(Service.ADMIN, "DescribePartitionLoads", Permission.DESCRIBE, ServedBy.NODE, "describe_partition_loads",
        Front.HERE),
    # Partition moves (docs/design.md §5a): an operator's start, on the leader of the partition's coordinator (it
    # records the freeze), an ALTER; where a move is, from the leader of its source.
    Rpc(Service.ADMIN, "MovePartition", Permission.ALTER, ServedBy.LEADER, "move_partition", Front.LEADING_PROCESS),
    Rpc(Service.ADMIN, "DescribePartitionMove", Permission.DESCRIBE, ServedBy.LEADER, "describe_partition_move",
        Front.LEADING_PROCESS),
    # Between coordinators: each goes to the node leading the target coordinator.
    Rpc(Service.INTERNAL, "HandOverFiles", Permission.INTERNAL, ServedBy.LEADER, "hand_over_files", Front.HERE),
    Rpc(Service.INTERNAL, "KnownFiles", Permission.INTERNAL, ServedBy.LEADER, "known_files", Front.HERE),
    Rpc(Service.INTERNAL, "FetchLog", Permission.INTERNAL, ServedBy.LEADER, "fetch_log", Front.HERE),
    # Every coordinator one follower node fetches from this node (each answered by its leader here, or refused).
    Rpc(Service.INTERNAL, "FetchLogs", Permission.INTERNAL, ServedBy.NODE, "fetch_logs", Front.HERE),
    # The same, over one open stream per node pair: each request answered as a FetchLogs call by the same handler.
    Rpc(Service.INTERNAL, "FetchLogsStream", Permission.INTERNAL, ServedBy.NODE, "fetch_logs", Front.HERE,
        stream=Stream.EACH_REQUEST),
    Rpc(Service.INTERNAL, "OffsetForLeaderEpoch", Permission.INTERNAL, ServedBy.LEADER, "offset_for_leader_epoch",
        Front.HERE),
    Rpc(Service.INTERNAL, "FetchSnapshot", Permission.INTERNAL, ServedBy.LEADER, "fetch_snapshot", Front.HERE,
        stream=Stream.ACL_ONLY),
    Rpc(Service.INTERNAL, "ChangeTopic", Permission.INTERNAL, ServedBy.LEADER, "change_topic", Front.HERE),
    Rpc(Service.INTERNAL, "KnownPartitions", Permission.INTERNAL, ServedBy.NODE, "known_partitions", Front.HERE),
    # A partition move's copy and cut-over (docs/design.md §5a), from the source's move worker to the target's leader.
    Rpc(Service.INTERNAL, "AdoptPartitionChunk", Permission.INTERNAL, ServedBy.LEADER, "adopt_partition_chunk",
        Front.HERE),
    Rpc(Service.INTERNAL, "AdoptPartition", Permission.INTERNAL, ServedBy.LEADER, "adopt_partition", Front.HERE),
    Rpc(Service.INTERNAL, "AbandonAdoption", Permission.INTERNAL, ServedBy.LEADER, "abandon_adoption", Front.HERE),
    # Borrowed WAL files given back, from the borrower's loan-return worker to the lender's leader.
    Rpc(Service.INTERNAL, "ReturnFiles", Permission.INTERNAL, ServedBy.LEADER, "return_files", Front.HERE),
)
# fmt: on

# The ACL, the gate and the metrics know a call by its method name alone: names are unique across the services.
BY_METHOD: Mapping[str, Rpc] = {rpc.method: rpc for rpc in RPCS}
check_invariant(len(BY_METHOD) == len(RPCS), f"{len(RPCS) - len(BY_METHOD)} method names are in two rows")
PERMISSIONS: Mapping[str, Permission] = {rpc.method: rpc.permission for rpc in RPCS}


def rows_of(service: Service) -> tuple[Rpc, ...]:
    return tuple(rpc for rpc in RPCS if rpc.service is service)
