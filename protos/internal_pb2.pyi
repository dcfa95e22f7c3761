from protos import coordinator_pb2 as _coordinator_pb2
from protos import records_pb2 as _records_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HandedOverFile(_message.Message):
    __slots__ = ("object_key", "file_size", "uploader_broker_id", "owner_ids", "committed_at_ms")
    OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    UPLOADER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_IDS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    object_key: str
    file_size: int
    uploader_broker_id: int
    owner_ids: _containers.RepeatedScalarFieldContainer[int]
    committed_at_ms: int
    def __init__(self, object_key: _Optional[str] = ..., file_size: _Optional[int] = ..., uploader_broker_id: _Optional[int] = ..., owner_ids: _Optional[_Iterable[int]] = ..., committed_at_ms: _Optional[int] = ...) -> None: ...

class HandOverFilesRequest(_message.Message):
    __slots__ = ("from_coordinator_id", "to_coordinator_id", "files", "timeout_ms")
    FROM_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    TO_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    from_coordinator_id: int
    to_coordinator_id: int
    files: _containers.RepeatedCompositeFieldContainer[HandedOverFile]
    timeout_ms: int
    def __init__(self, from_coordinator_id: _Optional[int] = ..., to_coordinator_id: _Optional[int] = ..., files: _Optional[_Iterable[_Union[HandedOverFile, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class HandOverFilesResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class KnownFilesRequest(_message.Message):
    __slots__ = ("coordinator_ids", "object_keys")
    COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
    OBJECT_KEYS_FIELD_NUMBER: _ClassVar[int]
    coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
    object_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, coordinator_ids: _Optional[_Iterable[int]] = ..., object_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class KnownFilesResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "files")
    class KnownFile(_message.Message):
        __slots__ = ("object_key", "coordinator_ids", "states")
        OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
        COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
        STATES_FIELD_NUMBER: _ClassVar[int]
        object_key: str
        coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
        states: _containers.RepeatedScalarFieldContainer[_coordinator_pb2.FileState]
        def __init__(self, object_key: _Optional[str] = ..., coordinator_ids: _Optional[_Iterable[int]] = ..., states: _Optional[_Iterable[_Union[_coordinator_pb2.FileState, str]]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    files: _containers.RepeatedCompositeFieldContainer[KnownFilesResponse.KnownFile]
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., files: _Optional[_Iterable[_Union[KnownFilesResponse.KnownFile, _Mapping]]] = ...) -> None: ...

class FetchLogRequest(_message.Message):
    __slots__ = ("coordinator_id", "replica_node_id", "leader_epoch", "fetch_offset", "last_fetched_epoch", "max_bytes", "max_wait_ms", "replica_incarnation")
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    coordinator_id: int
    replica_node_id: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_bytes: int
    max_wait_ms: int
    replica_incarnation: str
    def __init__(self, coordinator_id: _Optional[int] = ..., replica_node_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ..., max_bytes: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., replica_incarnation: _Optional[str] = ...) -> None: ...

class FetchLogResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "high_watermark", "log_start_offset", "log_end_offset", "frames", "diverging_epoch", "diverging_end_offset", "coordinator_id")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_EPOCH_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    frames: bytes
    diverging_epoch: int
    diverging_end_offset: int
    coordinator_id: int
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., frames: _Optional[bytes] = ..., diverging_epoch: _Optional[int] = ..., diverging_end_offset: _Optional[int] = ..., coordinator_id: _Optional[int] = ...) -> None: ...

class FetchLogsRequest(_message.Message):
    __slots__ = ("replica_node_id", "replica_incarnation", "max_wait_ms", "max_bytes", "partitions")
    REPLICA_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    replica_node_id: int
    replica_incarnation: str
    max_wait_ms: int
    max_bytes: int
    partitions: _containers.RepeatedCompositeFieldContainer[FetchLogRequest]
    def __init__(self, replica_node_id: _Optional[int] = ..., replica_incarnation: _Optional[str] = ..., max_wait_ms: _Optional[int] = ..., max_bytes: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[FetchLogRequest, _Mapping]]] = ...) -> None: ...

class FetchLogsResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[FetchLogResponse]
    def __init__(self, partitions: _Optional[_Iterable[_Union[FetchLogResponse, _Mapping]]] = ...) -> None: ...

class OffsetForLeaderEpochRequest(_message.Message):
    __slots__ = ("coordinator_id", "replica_node_id", "current_leader_epoch", "leader_epoch")
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    coordinator_id: int
    replica_node_id: int
    current_leader_epoch: int
    leader_epoch: int
    def __init__(self, coordinator_id: _Optional[int] = ..., replica_node_id: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class OffsetForLeaderEpochResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "leader_epoch", "end_offset")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    leader_epoch: int
    end_offset: int
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., leader_epoch: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...

class FetchSnapshotRequest(_message.Message):
    __slots__ = ("coordinator_id", "replica_node_id", "current_leader_epoch")
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    coordinator_id: int
    replica_node_id: int
    current_leader_epoch: int
    def __init__(self, coordinator_id: _Optional[int] = ..., replica_node_id: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ...) -> None: ...

class FetchSnapshotChunk(_message.Message):
    __slots__ = ("error_code", "error_message", "end_offset", "total_bytes", "data", "sha256", "last", "epoch", "crc32", "created_at_ms")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    end_offset: int
    total_bytes: int
    data: bytes
    sha256: str
    last: bool
    epoch: int
    crc32: int
    created_at_ms: int
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., end_offset: _Optional[int] = ..., total_bytes: _Optional[int] = ..., data: _Optional[bytes] = ..., sha256: _Optional[str] = ..., last: _Optional[bool] = ..., epoch: _Optional[int] = ..., crc32: _Optional[int] = ..., created_at_ms: _Optional[int] = ...) -> None: ...

class ChangeTopicRequest(_message.Message):
    __slots__ = ("coordinator_id", "topic_id", "topic_name", "partitions", "delete", "timeout_ms", "configs", "alter_configs", "delete_configs", "validate_only", "expect_configs", "expected_configs")
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    ALTER_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DELETE_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    EXPECT_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    coordinator_id: int
    topic_id: bytes
    topic_name: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    delete: bool
    timeout_ms: int
    configs: _containers.RepeatedCompositeFieldContainer[_coordinator_pb2.TopicConfig]
    alter_configs: bool
    delete_configs: _containers.RepeatedScalarFieldContainer[str]
    validate_only: bool
    expect_configs: bool
    expected_configs: _containers.RepeatedCompositeFieldContainer[_coordinator_pb2.TopicConfig]
    def __init__(self, coordinator_id: _Optional[int] = ..., topic_id: _Optional[bytes] = ..., topic_name: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ..., delete: _Optional[bool] = ..., timeout_ms: _Optional[int] = ..., configs: _Optional[_Iterable[_Union[_coordinator_pb2.TopicConfig, _Mapping]]] = ..., alter_configs: _Optional[bool] = ..., delete_configs: _Optional[_Iterable[str]] = ..., validate_only: _Optional[bool] = ..., expect_configs: _Optional[bool] = ..., expected_configs: _Optional[_Iterable[_Union[_coordinator_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class ChangeTopicResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "configs")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    configs: _containers.RepeatedCompositeFieldContainer[_coordinator_pb2.TopicConfig]
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., configs: _Optional[_Iterable[_Union[_coordinator_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class KnownPartitionsRequest(_message.Message):
    __slots__ = ("topic_id", "partitions", "topic_name", "all_partitions")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    ALL_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    partitions: _containers.RepeatedScalarFieldContainer[int]
    topic_name: str
    all_partitions: bool
    def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[int]] = ..., topic_name: _Optional[str] = ..., all_partitions: _Optional[bool] = ...) -> None: ...

class KnownPartitionsResponse(_message.Message):
    __slots__ = ("topic_name", "partitions", "coordinator_ids", "named_topic_id", "named_partitions", "named_coordinator_ids")
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
    NAMED_TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    NAMED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    NAMED_COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
    named_topic_id: bytes
    named_partitions: _containers.RepeatedScalarFieldContainer[int]
    named_coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic_name: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ..., coordinator_ids: _Optional[_Iterable[int]] = ..., named_topic_id: _Optional[bytes] = ..., named_partitions: _Optional[_Iterable[int]] = ..., named_coordinator_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class MovedBatch(_message.Message):
    __slots__ = ("object_key", "byte_offset", "size", "base_offset", "last_offset", "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "last_sequence", "magic", "timestamp_type", "append_time_ms", "flags")
    OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
    BYTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BASE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    MAGIC_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_TYPE_FIELD_NUMBER: _ClassVar[int]
    APPEND_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    object_key: str
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    magic: int
    timestamp_type: int
    append_time_ms: int
    flags: int
    def __init__(self, object_key: _Optional[str] = ..., byte_offset: _Optional[int] = ..., size: _Optional[int] = ..., base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., max_timestamp: _Optional[int] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., base_sequence: _Optional[int] = ..., last_sequence: _Optional[int] = ..., magic: _Optional[int] = ..., timestamp_type: _Optional[int] = ..., append_time_ms: _Optional[int] = ..., flags: _Optional[int] = ...) -> None: ...

class MovedFile(_message.Message):
    __slots__ = ("object_key", "file_size", "uploader_broker_id", "owner_ids", "committed_at_ms")
    OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    UPLOADER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_IDS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    object_key: str
    file_size: int
    uploader_broker_id: int
    owner_ids: _containers.RepeatedScalarFieldContainer[int]
    committed_at_ms: int
    def __init__(self, object_key: _Optional[str] = ..., file_size: _Optional[int] = ..., uploader_broker_id: _Optional[int] = ..., owner_ids: _Optional[_Iterable[int]] = ..., committed_at_ms: _Optional[int] = ...) -> None: ...

class MovedAbortedTransaction(_message.Message):
    __slots__ = ("marker_offset", "producer_id", "first_offset", "last_stable_offset")
    MARKER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    marker_offset: int
    producer_id: int
    first_offset: int
    last_stable_offset: int
    def __init__(self, marker_offset: _Optional[int] = ..., producer_id: _Optional[int] = ..., first_offset: _Optional[int] = ..., last_stable_offset: _Optional[int] = ...) -> None: ...

class AdoptPartitionChunkRequest(_message.Message):
    __slots__ = ("from_coordinator_id", "to_coordinator_id", "move_id", "index", "topic_id", "partition", "batches", "files", "aborted_transactions", "timeout_ms")
    FROM_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    TO_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    MOVE_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    ABORTED_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    from_coordinator_id: int
    to_coordinator_id: int
    move_id: int
    index: int
    topic_id: bytes
    partition: int
    batches: _containers.RepeatedCompositeFieldContainer[MovedBatch]
    files: _containers.RepeatedCompositeFieldContainer[MovedFile]
    aborted_transactions: _containers.RepeatedCompositeFieldContainer[MovedAbortedTransaction]
    timeout_ms: int
    def __init__(self, from_coordinator_id: _Optional[int] = ..., to_coordinator_id: _Optional[int] = ..., move_id: _Optional[int] = ..., index: _Optional[int] = ..., topic_id: _Optional[bytes] = ..., partition: _Optional[int] = ..., batches: _Optional[_Iterable[_Union[MovedBatch, _Mapping]]] = ..., files: _Optional[_Iterable[_Union[MovedFile, _Mapping]]] = ..., aborted_transactions: _Optional[_Iterable[_Union[MovedAbortedTransaction, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class AdoptPartitionChunkResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "staged_chunks", "next_offset", "adopted", "lent_files", "lent_files_known", "abandoned")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STAGED_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ADOPTED_FIELD_NUMBER: _ClassVar[int]
    LENT_FILES_FIELD_NUMBER: _ClassVar[int]
    LENT_FILES_KNOWN_FIELD_NUMBER: _ClassVar[int]
    ABANDONED_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    staged_chunks: int
    next_offset: int
    adopted: bool
    lent_files: _containers.RepeatedScalarFieldContainer[str]
    lent_files_known: bool
    abandoned: bool
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., staged_chunks: _Optional[int] = ..., next_offset: _Optional[int] = ..., adopted: _Optional[bool] = ..., lent_files: _Optional[_Iterable[str]] = ..., lent_files_known: _Optional[bool] = ..., abandoned: _Optional[bool] = ...) -> None: ...

class AdoptPartitionRequest(_message.Message):
    __slots__ = ("from_coordinator_id", "to_coordinator_id", "move_id", "chunks", "partition", "timeout_ms")
    FROM_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    TO_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    MOVE_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    from_coordinator_id: int
    to_coordinator_id: int
    move_id: int
    chunks: int
    partition: _records_pb2.PartitionAdopted
    timeout_ms: int
    def __init__(self, from_coordinator_id: _Optional[int] = ..., to_coordinator_id: _Optional[int] = ..., move_id: _Optional[int] = ..., chunks: _Optional[int] = ..., partition: _Optional[_Union[_records_pb2.PartitionAdopted, _Mapping]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class AdoptPartitionResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class ReturnFilesRequest(_message.Message):
    __slots__ = ("from_coordinator_id", "to_coordinator_id", "object_keys", "timeout_ms", "move_ids")
    FROM_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    TO_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_KEYS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MOVE_IDS_FIELD_NUMBER: _ClassVar[int]
    from_coordinator_id: int
    to_coordinator_id: int
    object_keys: _containers.RepeatedScalarFieldContainer[str]
    timeout_ms: int
    move_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, from_coordinator_id: _Optional[int] = ..., to_coordinator_id: _Optional[int] = ..., object_keys: _Optional[_Iterable[str]] = ..., timeout_ms: _Optional[int] = ..., move_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ReturnFilesResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "files")
    class ReturnedFile(_message.Message):
        __slots__ = ("object_key", "error_code", "error_message")
        OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        object_key: str
        error_code: _coordinator_pb2.ErrorCode
        error_message: str
        def __init__(self, object_key: _Optional[str] = ..., error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    files: _containers.RepeatedCompositeFieldContainer[ReturnFilesResponse.ReturnedFile]
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., files: _Optional[_Iterable[_Union[ReturnFilesResponse.ReturnedFile, _Mapping]]] = ...) -> None: ...

class AbandonAdoptionRequest(_message.Message):
    __slots__ = ("from_coordinator_id", "to_coordinator_id", "move_id", "timeout_ms")
    FROM_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    TO_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    MOVE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    from_coordinator_id: int
    to_coordinator_id: int
    move_id: int
    timeout_ms: int
    def __init__(self, from_coordinator_id: _Optional[int] = ..., to_coordinator_id: _Optional[int] = ..., move_id: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class AbandonAdoptionResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
