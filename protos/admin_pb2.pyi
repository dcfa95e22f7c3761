from protos import coordinator_pb2 as _coordinator_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaderElectionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEADER_ELECTION_OUTCOME_UNKNOWN: _ClassVar[LeaderElectionOutcome]
    LEADER_ELECTED: _ClassVar[LeaderElectionOutcome]
    LEADER_ALREADY_PREFERRED: _ClassVar[LeaderElectionOutcome]
    LEADER_ELECTION_NOT_POSSIBLE: _ClassVar[LeaderElectionOutcome]
LEADER_ELECTION_OUTCOME_UNKNOWN: LeaderElectionOutcome
LEADER_ELECTED: LeaderElectionOutcome
LEADER_ALREADY_PREFERRED: LeaderElectionOutcome
LEADER_ELECTION_NOT_POSSIBLE: LeaderElectionOutcome

class MovePartitionRequest(_message.Message):
    __slots__ = ("topic_id", "partition", "to_coordinator_id", "timeout_ms")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TO_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    partition: int
    to_coordinator_id: int
    timeout_ms: int
    def __init__(self, topic_id: _Optional[bytes] = ..., partition: _Optional[int] = ..., to_coordinator_id: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class MovePartitionResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "from_coordinator_id", "move_id")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FROM_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    MOVE_ID_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    from_coordinator_id: int
    move_id: int
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., from_coordinator_id: _Optional[int] = ..., move_id: _Optional[int] = ...) -> None: ...

class DescribePartitionMoveRequest(_message.Message):
    __slots__ = ("topic_id", "partition", "from_coordinator_id", "move_id", "timeout_ms")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FROM_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    MOVE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    partition: int
    from_coordinator_id: int
    move_id: int
    timeout_ms: int
    def __init__(self, topic_id: _Optional[bytes] = ..., partition: _Optional[int] = ..., from_coordinator_id: _Optional[int] = ..., move_id: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class DescribePartitionMoveResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "step", "to_coordinator_id", "staged_chunks", "target_error")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TO_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    STAGED_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    TARGET_ERROR_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    step: str
    to_coordinator_id: int
    staged_chunks: int
    target_error: str
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., step: _Optional[str] = ..., to_coordinator_id: _Optional[int] = ..., staged_chunks: _Optional[int] = ..., target_error: _Optional[str] = ...) -> None: ...

class DescribePartitionLoadsRequest(_message.Message):
    __slots__ = ("coordinator_ids",)
    COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
    coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, coordinator_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class DescribePartitionLoadsResponse(_message.Message):
    __slots__ = ("coordinators",)
    class Partition(_message.Message):
        __slots__ = ("topic_id", "topic_name", "partition", "live_batches")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        LIVE_BATCHES_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        topic_name: str
        partition: int
        live_batches: int
        def __init__(self, topic_id: _Optional[bytes] = ..., topic_name: _Optional[str] = ..., partition: _Optional[int] = ..., live_batches: _Optional[int] = ...) -> None: ...
    class Coordinator(_message.Message):
        __slots__ = ("coordinator_id", "error_code", "error_message", "partitions")
        COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        coordinator_id: int
        error_code: _coordinator_pb2.ErrorCode
        error_message: str
        partitions: _containers.RepeatedCompositeFieldContainer[DescribePartitionLoadsResponse.Partition]
        def __init__(self, coordinator_id: _Optional[int] = ..., error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[DescribePartitionLoadsResponse.Partition, _Mapping]]] = ...) -> None: ...
    COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    coordinators: _containers.RepeatedCompositeFieldContainer[DescribePartitionLoadsResponse.Coordinator]
    def __init__(self, coordinators: _Optional[_Iterable[_Union[DescribePartitionLoadsResponse.Coordinator, _Mapping]]] = ...) -> None: ...

class DescribeTopicsRequest(_message.Message):
    __slots__ = ("names", "timeout_ms")
    NAMES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    timeout_ms: int
    def __init__(self, names: _Optional[_Iterable[str]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class DescribeTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    class Topic(_message.Message):
        __slots__ = ("name", "topic_id", "partitions", "error_code", "error_message")
        NAME_FIELD_NUMBER: _ClassVar[int]
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        name: str
        topic_id: bytes
        partitions: int
        error_code: _coordinator_pb2.ErrorCode
        error_message: str
        def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partitions: _Optional[int] = ..., error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DescribeTopicsResponse.Topic]
    def __init__(self, topics: _Optional[_Iterable[_Union[DescribeTopicsResponse.Topic, _Mapping]]] = ...) -> None: ...

class AlterReassignmentsRequest(_message.Message):
    __slots__ = ("reassignments",)
    class Reassignment(_message.Message):
        __slots__ = ("coordinator_id", "replicas")
        COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
        REPLICAS_FIELD_NUMBER: _ClassVar[int]
        coordinator_id: int
        replicas: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, coordinator_id: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ...) -> None: ...
    REASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    reassignments: _containers.RepeatedCompositeFieldContainer[AlterReassignmentsRequest.Reassignment]
    def __init__(self, reassignments: _Optional[_Iterable[_Union[AlterReassignmentsRequest.Reassignment, _Mapping]]] = ...) -> None: ...

class AlterReassignmentsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    class Result(_message.Message):
        __slots__ = ("coordinator_id", "error_code", "error_message")
        COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        coordinator_id: int
        error_code: _coordinator_pb2.ErrorCode
        error_message: str
        def __init__(self, coordinator_id: _Optional[int] = ..., error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[AlterReassignmentsResponse.Result]
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[AlterReassignmentsResponse.Result, _Mapping]]] = ...) -> None: ...

class ListReassignmentsRequest(_message.Message):
    __slots__ = ("coordinator_ids", "all_coordinators")
    COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
    ALL_COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
    all_coordinators: bool
    def __init__(self, coordinator_ids: _Optional[_Iterable[int]] = ..., all_coordinators: _Optional[bool] = ...) -> None: ...

class ListReassignmentsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "coordinators", "live_nodes", "replication_factor")
    class Coordinator(_message.Message):
        __slots__ = ("coordinator_id", "replicas", "adding_replicas", "removing_replicas", "leader", "leader_epoch", "isr", "reassigning", "target_replicas")
        COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
        REPLICAS_FIELD_NUMBER: _ClassVar[int]
        ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
        REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
        LEADER_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        ISR_FIELD_NUMBER: _ClassVar[int]
        REASSIGNING_FIELD_NUMBER: _ClassVar[int]
        TARGET_REPLICAS_FIELD_NUMBER: _ClassVar[int]
        coordinator_id: int
        replicas: _containers.RepeatedScalarFieldContainer[int]
        adding_replicas: _containers.RepeatedScalarFieldContainer[int]
        removing_replicas: _containers.RepeatedScalarFieldContainer[int]
        leader: int
        leader_epoch: int
        isr: _containers.RepeatedScalarFieldContainer[int]
        reassigning: bool
        target_replicas: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, coordinator_id: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ..., reassigning: _Optional[bool] = ..., target_replicas: _Optional[_Iterable[int]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    LIVE_NODES_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    coordinators: _containers.RepeatedCompositeFieldContainer[ListReassignmentsResponse.Coordinator]
    live_nodes: _containers.RepeatedScalarFieldContainer[int]
    replication_factor: int
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., coordinators: _Optional[_Iterable[_Union[ListReassignmentsResponse.Coordinator, _Mapping]]] = ..., live_nodes: _Optional[_Iterable[int]] = ..., replication_factor: _Optional[int] = ...) -> None: ...

class ElectLeadersRequest(_message.Message):
    __slots__ = ("coordinator_ids",)
    COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
    coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, coordinator_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ElectLeadersResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    class Result(_message.Message):
        __slots__ = ("coordinator_id", "outcome", "preferred_leader", "leader", "leader_epoch", "reason", "error_code")
        COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
        OUTCOME_FIELD_NUMBER: _ClassVar[int]
        PREFERRED_LEADER_FIELD_NUMBER: _ClassVar[int]
        LEADER_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        REASON_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        coordinator_id: int
        outcome: LeaderElectionOutcome
        preferred_leader: int
        leader: int
        leader_epoch: int
        reason: str
        error_code: _coordinator_pb2.ErrorCode
        def __init__(self, coordinator_id: _Optional[int] = ..., outcome: _Optional[_Union[LeaderElectionOutcome, str]] = ..., preferred_leader: _Optional[int] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., reason: _Optional[str] = ..., error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[ElectLeadersResponse.Result]
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[ElectLeadersResponse.Result, _Mapping]]] = ...) -> None: ...

class CheckStateRequest(_message.Message):
    __slots__ = ("coordinator_ids",)
    COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
    coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, coordinator_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class CheckStateResponse(_message.Message):
    __slots__ = ("results",)
    class Result(_message.Message):
        __slots__ = ("coordinator_id", "error_code", "error_message", "sound", "problem", "seconds", "state_bytes")
        COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        SOUND_FIELD_NUMBER: _ClassVar[int]
        PROBLEM_FIELD_NUMBER: _ClassVar[int]
        SECONDS_FIELD_NUMBER: _ClassVar[int]
        STATE_BYTES_FIELD_NUMBER: _ClassVar[int]
        coordinator_id: int
        error_code: _coordinator_pb2.ErrorCode
        error_message: str
        sound: bool
        problem: str
        seconds: float
        state_bytes: int
        def __init__(self, coordinator_id: _Optional[int] = ..., error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., sound: _Optional[bool] = ..., problem: _Optional[str] = ..., seconds: _Optional[float] = ..., state_bytes: _Optional[int] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CheckStateResponse.Result]
    def __init__(self, results: _Optional[_Iterable[_Union[CheckStateResponse.Result, _Mapping]]] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ("end_offset", "epoch", "size_bytes", "crc32", "applied_offset", "created_at_ms", "path")
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    APPLIED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    end_offset: int
    epoch: int
    size_bytes: int
    crc32: int
    applied_offset: int
    created_at_ms: int
    path: str
    def __init__(self, end_offset: _Optional[int] = ..., epoch: _Optional[int] = ..., size_bytes: _Optional[int] = ..., crc32: _Optional[int] = ..., applied_offset: _Optional[int] = ..., created_at_ms: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class CreateSnapshotRequest(_message.Message):
    __slots__ = ("coordinator_ids",)
    COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
    coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, coordinator_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class CreateSnapshotResponse(_message.Message):
    __slots__ = ("results",)
    class Result(_message.Message):
        __slots__ = ("coordinator_id", "error_code", "error_message", "snapshot", "log_start_offset", "deleted_segments", "deleted_snapshots")
        COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        DELETED_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
        DELETED_SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
        coordinator_id: int
        error_code: _coordinator_pb2.ErrorCode
        error_message: str
        snapshot: SnapshotInfo
        log_start_offset: int
        deleted_segments: int
        deleted_snapshots: int
        def __init__(self, coordinator_id: _Optional[int] = ..., error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., snapshot: _Optional[_Union[SnapshotInfo, _Mapping]] = ..., log_start_offset: _Optional[int] = ..., deleted_segments: _Optional[int] = ..., deleted_snapshots: _Optional[int] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CreateSnapshotResponse.Result]
    def __init__(self, results: _Optional[_Iterable[_Union[CreateSnapshotResponse.Result, _Mapping]]] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ("coordinator_ids", "verify")
    COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
    verify: bool
    def __init__(self, coordinator_ids: _Optional[_Iterable[int]] = ..., verify: _Optional[bool] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ("coordinators",)
    class Snapshot(_message.Message):
        __slots__ = ("info", "verified", "problem")
        INFO_FIELD_NUMBER: _ClassVar[int]
        VERIFIED_FIELD_NUMBER: _ClassVar[int]
        PROBLEM_FIELD_NUMBER: _ClassVar[int]
        info: SnapshotInfo
        verified: bool
        problem: str
        def __init__(self, info: _Optional[_Union[SnapshotInfo, _Mapping]] = ..., verified: _Optional[bool] = ..., problem: _Optional[str] = ...) -> None: ...
    class Coordinator(_message.Message):
        __slots__ = ("coordinator_id", "error_code", "error_message", "snapshots", "log_start_offset", "log_end_offset")
        COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
        coordinator_id: int
        error_code: _coordinator_pb2.ErrorCode
        error_message: str
        snapshots: _containers.RepeatedCompositeFieldContainer[ListSnapshotsResponse.Snapshot]
        log_start_offset: int
        log_end_offset: int
        def __init__(self, coordinator_id: _Optional[int] = ..., error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., snapshots: _Optional[_Iterable[_Union[ListSnapshotsResponse.Snapshot, _Mapping]]] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ...) -> None: ...
    COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    coordinators: _containers.RepeatedCompositeFieldContainer[ListSnapshotsResponse.Coordinator]
    def __init__(self, coordinators: _Optional[_Iterable[_Union[ListSnapshotsResponse.Coordinator, _Mapping]]] = ...) -> None: ...

class CreateCoordinatorsRequest(_message.Message):
    __slots__ = ("count", "expected_count", "validate_only")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    count: int
    expected_count: int
    validate_only: bool
    def __init__(self, count: _Optional[int] = ..., expected_count: _Optional[int] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class CreateCoordinatorsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "previous_count", "count")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_COUNT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    previous_count: int
    count: int
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., previous_count: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...
