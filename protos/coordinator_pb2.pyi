from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[ErrorCode]
    UNKNOWN_SERVER_ERROR: _ClassVar[ErrorCode]
    OFFSET_OUT_OF_RANGE: _ClassVar[ErrorCode]
    CORRUPT_MESSAGE: _ClassVar[ErrorCode]
    UNKNOWN_TOPIC_OR_PARTITION: _ClassVar[ErrorCode]
    NOT_LEADER_OR_FOLLOWER: _ClassVar[ErrorCode]
    REQUEST_TIMED_OUT: _ClassVar[ErrorCode]
    COORDINATOR_LOAD_IN_PROGRESS: _ClassVar[ErrorCode]
    COORDINATOR_NOT_AVAILABLE: _ClassVar[ErrorCode]
    NOT_COORDINATOR: _ClassVar[ErrorCode]
    INVALID_TOPIC_EXCEPTION: _ClassVar[ErrorCode]
    NOT_ENOUGH_REPLICAS: _ClassVar[ErrorCode]
    NOT_ENOUGH_REPLICAS_AFTER_APPEND: _ClassVar[ErrorCode]
    CLUSTER_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    INVALID_TIMESTAMP: _ClassVar[ErrorCode]
    UNSUPPORTED_VERSION: _ClassVar[ErrorCode]
    TOPIC_ALREADY_EXISTS: _ClassVar[ErrorCode]
    INVALID_PARTITIONS: _ClassVar[ErrorCode]
    INVALID_CONFIG: _ClassVar[ErrorCode]
    INVALID_REQUEST: _ClassVar[ErrorCode]
    POLICY_VIOLATION: _ClassVar[ErrorCode]
    OUT_OF_ORDER_SEQUENCE_NUMBER: _ClassVar[ErrorCode]
    DUPLICATE_SEQUENCE_NUMBER: _ClassVar[ErrorCode]
    INVALID_PRODUCER_EPOCH: _ClassVar[ErrorCode]
    INVALID_TXN_STATE: _ClassVar[ErrorCode]
    TRANSACTION_COORDINATOR_FENCED: _ClassVar[ErrorCode]
    KAFKA_STORAGE_ERROR: _ClassVar[ErrorCode]
    FENCED_LEADER_EPOCH: _ClassVar[ErrorCode]
    UNKNOWN_LEADER_EPOCH: _ClassVar[ErrorCode]
    INVALID_RECORD: _ClassVar[ErrorCode]
    THROTTLING_QUOTA_EXCEEDED: _ClassVar[ErrorCode]
    UNKNOWN_TOPIC_ID: _ClassVar[ErrorCode]
    INCONSISTENT_TOPIC_ID: _ClassVar[ErrorCode]
    OFFSET_MOVED_TO_TIERED_STORAGE: _ClassVar[ErrorCode]

class TimestampType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CREATE_TIME: _ClassVar[TimestampType]
    LOG_APPEND_TIME: _ClassVar[TimestampType]
    NO_TIMESTAMP_TYPE: _ClassVar[TimestampType]

class IsolationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READ_UNCOMMITTED: _ClassVar[IsolationLevel]
    READ_COMMITTED: _ClassVar[IsolationLevel]

class ControlType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTROL_ABORT: _ClassVar[ControlType]
    CONTROL_COMMIT: _ClassVar[ControlType]

class FileState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_STATE_UNKNOWN: _ClassVar[FileState]
    FILE_STATE_LIVE: _ClassVar[FileState]
    FILE_STATE_AWAITING_HANDOVER: _ClassVar[FileState]
    FILE_STATE_AWAITING_DELETION: _ClassVar[FileState]
NONE: ErrorCode
UNKNOWN_SERVER_ERROR: ErrorCode
OFFSET_OUT_OF_RANGE: ErrorCode
CORRUPT_MESSAGE: ErrorCode
UNKNOWN_TOPIC_OR_PARTITION: ErrorCode
NOT_LEADER_OR_FOLLOWER: ErrorCode
REQUEST_TIMED_OUT: ErrorCode
COORDINATOR_LOAD_IN_PROGRESS: ErrorCode
COORDINATOR_NOT_AVAILABLE: ErrorCode
NOT_COORDINATOR: ErrorCode
INVALID_TOPIC_EXCEPTION: ErrorCode
NOT_ENOUGH_REPLICAS: ErrorCode
NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode
CLUSTER_AUTHORIZATION_FAILED: ErrorCode
INVALID_TIMESTAMP: ErrorCode
UNSUPPORTED_VERSION: ErrorCode
TOPIC_ALREADY_EXISTS: ErrorCode
INVALID_PARTITIONS: ErrorCode
INVALID_CONFIG: ErrorCode
INVALID_REQUEST: ErrorCode
POLICY_VIOLATION: ErrorCode
OUT_OF_ORDER_SEQUENCE_NUMBER: ErrorCode
DUPLICATE_SEQUENCE_NUMBER: ErrorCode
INVALID_PRODUCER_EPOCH: ErrorCode
INVALID_TXN_STATE: ErrorCode
TRANSACTION_COORDINATOR_FENCED: ErrorCode
KAFKA_STORAGE_ERROR: ErrorCode
FENCED_LEADER_EPOCH: ErrorCode
UNKNOWN_LEADER_EPOCH: ErrorCode
INVALID_RECORD: ErrorCode
THROTTLING_QUOTA_EXCEEDED: ErrorCode
UNKNOWN_TOPIC_ID: ErrorCode
INCONSISTENT_TOPIC_ID: ErrorCode
OFFSET_MOVED_TO_TIERED_STORAGE: ErrorCode
CREATE_TIME: TimestampType
LOG_APPEND_TIME: TimestampType
NO_TIMESTAMP_TYPE: TimestampType
READ_UNCOMMITTED: IsolationLevel
READ_COMMITTED: IsolationLevel
CONTROL_ABORT: ControlType
CONTROL_COMMIT: ControlType
FILE_STATE_UNKNOWN: FileState
FILE_STATE_LIVE: FileState
FILE_STATE_AWAITING_HANDOVER: FileState
FILE_STATE_AWAITING_DELETION: FileState

class CreatePartitionsRequest(_message.Message):
    __slots__ = ("topics", "timeout_ms")
    class Topic(_message.Message):
        __slots__ = ("topic_id", "name", "num_partitions", "configs")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        NAME_FIELD_NUMBER: _ClassVar[int]
        NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        CONFIGS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        name: str
        num_partitions: int
        configs: _containers.RepeatedCompositeFieldContainer[TopicConfig]
        def __init__(self, topic_id: _Optional[bytes] = ..., name: _Optional[str] = ..., num_partitions: _Optional[int] = ..., configs: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CreatePartitionsRequest.Topic]
    timeout_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[CreatePartitionsRequest.Topic, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class CreatePartitionsResponse(_message.Message):
    __slots__ = ("throttle_time_ms", "topics")
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "error_code", "error_message")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        error_code: ErrorCode
        error_message: str
        def __init__(self, topic_id: _Optional[bytes] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    throttle_time_ms: int
    topics: _containers.RepeatedCompositeFieldContainer[CreatePartitionsResponse.TopicResult]
    def __init__(self, throttle_time_ms: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[CreatePartitionsResponse.TopicResult, _Mapping]]] = ...) -> None: ...

class DeleteTopicsRequest(_message.Message):
    __slots__ = ("topic_ids", "timeout_ms")
    TOPIC_IDS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topic_ids: _containers.RepeatedScalarFieldContainer[bytes]
    timeout_ms: int
    def __init__(self, topic_ids: _Optional[_Iterable[bytes]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class DeleteTopicsResponse(_message.Message):
    __slots__ = ("throttle_time_ms", "topics")
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "error_code", "error_message")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        error_code: ErrorCode
        error_message: str
        def __init__(self, topic_id: _Optional[bytes] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    throttle_time_ms: int
    topics: _containers.RepeatedCompositeFieldContainer[DeleteTopicsResponse.TopicResult]
    def __init__(self, throttle_time_ms: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[DeleteTopicsResponse.TopicResult, _Mapping]]] = ...) -> None: ...

class CommitFileRequest(_message.Message):
    __slots__ = ("object_key", "object_format", "file_size", "uploader_broker_id", "owner_ids", "batches", "timeout_ms")
    class Batch(_message.Message):
        __slots__ = ("magic", "request_id", "topic_id", "partition", "byte_offset", "size", "base_offset", "last_offset", "batch_max_timestamp", "timestamp_type", "producer_id", "producer_epoch", "base_sequence", "last_sequence", "is_transactional", "is_control", "control_type", "coordinator_epoch")
        MAGIC_FIELD_NUMBER: _ClassVar[int]
        REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        BYTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        SIZE_FIELD_NUMBER: _ClassVar[int]
        BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
        BATCH_MAX_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_TYPE_FIELD_NUMBER: _ClassVar[int]
        PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
        PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        BASE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
        LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
        IS_TRANSACTIONAL_FIELD_NUMBER: _ClassVar[int]
        IS_CONTROL_FIELD_NUMBER: _ClassVar[int]
        CONTROL_TYPE_FIELD_NUMBER: _ClassVar[int]
        COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
        magic: int
        request_id: int
        topic_id: bytes
        partition: int
        byte_offset: int
        size: int
        base_offset: int
        last_offset: int
        batch_max_timestamp: int
        timestamp_type: TimestampType
        producer_id: int
        producer_epoch: int
        base_sequence: int
        last_sequence: int
        is_transactional: bool
        is_control: bool
        control_type: ControlType
        coordinator_epoch: int
        def __init__(self, magic: _Optional[int] = ..., request_id: _Optional[int] = ..., topic_id: _Optional[bytes] = ..., partition: _Optional[int] = ..., byte_offset: _Optional[int] = ..., size: _Optional[int] = ..., base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., batch_max_timestamp: _Optional[int] = ..., timestamp_type: _Optional[_Union[TimestampType, str]] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., base_sequence: _Optional[int] = ..., last_sequence: _Optional[int] = ..., is_transactional: _Optional[bool] = ..., is_control: _Optional[bool] = ..., control_type: _Optional[_Union[ControlType, str]] = ..., coordinator_epoch: _Optional[int] = ...) -> None: ...
    OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    UPLOADER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_IDS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    object_key: str
    object_format: int
    file_size: int
    uploader_broker_id: int
    owner_ids: _containers.RepeatedScalarFieldContainer[int]
    batches: _containers.RepeatedCompositeFieldContainer[CommitFileRequest.Batch]
    timeout_ms: int
    def __init__(self, object_key: _Optional[str] = ..., object_format: _Optional[int] = ..., file_size: _Optional[int] = ..., uploader_broker_id: _Optional[int] = ..., owner_ids: _Optional[_Iterable[int]] = ..., batches: _Optional[_Iterable[_Union[CommitFileRequest.Batch, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class CommitFileResponse(_message.Message):
    __slots__ = ("throttle_time_ms", "batches")
    class BatchResult(_message.Message):
        __slots__ = ("error_code", "error_message", "assigned_base_offset", "log_append_time", "log_start_offset", "is_duplicate")
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        ASSIGNED_BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LOG_APPEND_TIME_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        IS_DUPLICATE_FIELD_NUMBER: _ClassVar[int]
        error_code: ErrorCode
        error_message: str
        assigned_base_offset: int
        log_append_time: int
        log_start_offset: int
        is_duplicate: bool
        def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., assigned_base_offset: _Optional[int] = ..., log_append_time: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., is_duplicate: _Optional[bool] = ...) -> None: ...
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    throttle_time_ms: int
    batches: _containers.RepeatedCompositeFieldContainer[CommitFileResponse.BatchResult]
    def __init__(self, throttle_time_ms: _Optional[int] = ..., batches: _Optional[_Iterable[_Union[CommitFileResponse.BatchResult, _Mapping]]] = ...) -> None: ...

class DeleteRecordsRequest(_message.Message):
    __slots__ = ("topics", "timeout_ms")
    class Partition(_message.Message):
        __slots__ = ("partition", "offset")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        partition: int
        offset: int
        def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[DeleteRecordsRequest.Partition]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[DeleteRecordsRequest.Partition, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DeleteRecordsRequest.Topic]
    timeout_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[DeleteRecordsRequest.Topic, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class DeleteRecordsResponse(_message.Message):
    __slots__ = ("throttle_time_ms", "topics")
    class PartitionResult(_message.Message):
        __slots__ = ("partition", "low_watermark", "error_code", "error_message")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        LOW_WATERMARK_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        partition: int
        low_watermark: int
        error_code: ErrorCode
        error_message: str
        def __init__(self, partition: _Optional[int] = ..., low_watermark: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[DeleteRecordsResponse.PartitionResult]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[DeleteRecordsResponse.PartitionResult, _Mapping]]] = ...) -> None: ...
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    throttle_time_ms: int
    topics: _containers.RepeatedCompositeFieldContainer[DeleteRecordsResponse.TopicResult]
    def __init__(self, throttle_time_ms: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[DeleteRecordsResponse.TopicResult, _Mapping]]] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("topics", "timeout_ms", "isolation_level")
    class Partition(_message.Message):
        __slots__ = ("partition", "timestamp")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        partition: int
        timestamp: int
        def __init__(self, partition: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[ListOffsetsRequest.Partition]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[ListOffsetsRequest.Partition, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[ListOffsetsRequest.Topic]
    timeout_ms: int
    isolation_level: IsolationLevel
    def __init__(self, topics: _Optional[_Iterable[_Union[ListOffsetsRequest.Topic, _Mapping]]] = ..., timeout_ms: _Optional[int] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("throttle_time_ms", "topics")
    class PartitionResult(_message.Message):
        __slots__ = ("partition", "error_code", "error_message", "timestamp", "offset")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        partition: int
        error_code: ErrorCode
        error_message: str
        timestamp: int
        offset: int
        def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., timestamp: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[ListOffsetsResponse.PartitionResult]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[ListOffsetsResponse.PartitionResult, _Mapping]]] = ...) -> None: ...
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    throttle_time_ms: int
    topics: _containers.RepeatedCompositeFieldContainer[ListOffsetsResponse.TopicResult]
    def __init__(self, throttle_time_ms: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[ListOffsetsResponse.TopicResult, _Mapping]]] = ...) -> None: ...

class FindBatchesRequest(_message.Message):
    __slots__ = ("fetch_max_bytes", "max_batches_per_partition", "topics", "timeout_ms", "isolation_level")
    class Partition(_message.Message):
        __slots__ = ("partition", "offset", "max_partition_fetch_bytes")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        MAX_PARTITION_FETCH_BYTES_FIELD_NUMBER: _ClassVar[int]
        partition: int
        offset: int
        max_partition_fetch_bytes: int
        def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_partition_fetch_bytes: _Optional[int] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[FindBatchesRequest.Partition]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[FindBatchesRequest.Partition, _Mapping]]] = ...) -> None: ...
    FETCH_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCHES_PER_PARTITION_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    fetch_max_bytes: int
    max_batches_per_partition: int
    topics: _containers.RepeatedCompositeFieldContainer[FindBatchesRequest.Topic]
    timeout_ms: int
    isolation_level: IsolationLevel
    def __init__(self, fetch_max_bytes: _Optional[int] = ..., max_batches_per_partition: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[FindBatchesRequest.Topic, _Mapping]]] = ..., timeout_ms: _Optional[int] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ...) -> None: ...

class BatchInfo(_message.Message):
    __slots__ = ("batch_id", "object_key", "magic", "byte_offset", "byte_size", "base_offset", "last_offset", "log_append_timestamp", "batch_max_timestamp", "timestamp_type", "producer_id", "is_transactional", "is_control")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
    MAGIC_FIELD_NUMBER: _ClassVar[int]
    BYTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_APPEND_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BATCH_MAX_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    IS_TRANSACTIONAL_FIELD_NUMBER: _ClassVar[int]
    IS_CONTROL_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    object_key: str
    magic: int
    byte_offset: int
    byte_size: int
    base_offset: int
    last_offset: int
    log_append_timestamp: int
    batch_max_timestamp: int
    timestamp_type: TimestampType
    producer_id: int
    is_transactional: bool
    is_control: bool
    def __init__(self, batch_id: _Optional[int] = ..., object_key: _Optional[str] = ..., magic: _Optional[int] = ..., byte_offset: _Optional[int] = ..., byte_size: _Optional[int] = ..., base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., log_append_timestamp: _Optional[int] = ..., batch_max_timestamp: _Optional[int] = ..., timestamp_type: _Optional[_Union[TimestampType, str]] = ..., producer_id: _Optional[int] = ..., is_transactional: _Optional[bool] = ..., is_control: _Optional[bool] = ...) -> None: ...

class AbortedTransaction(_message.Message):
    __slots__ = ("producer_id", "first_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    first_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., first_offset: _Optional[int] = ...) -> None: ...

class FindBatchesResponse(_message.Message):
    __slots__ = ("throttle_time_ms", "topics")
    class PartitionResult(_message.Message):
        __slots__ = ("partition", "error_code", "log_start_offset", "high_watermark", "batches", "error_message", "local_log_start_offset", "last_stable_offset", "aborted_transactions")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
        BATCHES_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        LOCAL_LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        ABORTED_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
        partition: int
        error_code: ErrorCode
        log_start_offset: int
        high_watermark: int
        batches: _containers.RepeatedCompositeFieldContainer[BatchInfo]
        error_message: str
        local_log_start_offset: int
        last_stable_offset: int
        aborted_transactions: _containers.RepeatedCompositeFieldContainer[AbortedTransaction]
        def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., log_start_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., batches: _Optional[_Iterable[_Union[BatchInfo, _Mapping]]] = ..., error_message: _Optional[str] = ..., local_log_start_offset: _Optional[int] = ..., last_stable_offset: _Optional[int] = ..., aborted_transactions: _Optional[_Iterable[_Union[AbortedTransaction, _Mapping]]] = ...) -> None: ...
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[FindBatchesResponse.PartitionResult]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[FindBatchesResponse.PartitionResult, _Mapping]]] = ...) -> None: ...
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    throttle_time_ms: int
    topics: _containers.RepeatedCompositeFieldContainer[FindBatchesResponse.TopicResult]
    def __init__(self, throttle_time_ms: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[FindBatchesResponse.TopicResult, _Mapping]]] = ...) -> None: ...

class DescribeFilesRequest(_message.Message):
    __slots__ = ("object_keys", "timeout_ms")
    OBJECT_KEYS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    object_keys: _containers.RepeatedScalarFieldContainer[str]
    timeout_ms: int
    def __init__(self, object_keys: _Optional[_Iterable[str]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class DescribeFilesResponse(_message.Message):
    __slots__ = ("throttle_time_ms", "files")
    class FileResult(_message.Message):
        __slots__ = ("object_key", "error_code", "error_message", "has_live_batches", "state", "coordinator_ids")
        OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        HAS_LIVE_BATCHES_FIELD_NUMBER: _ClassVar[int]
        STATE_FIELD_NUMBER: _ClassVar[int]
        COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
        object_key: str
        error_code: ErrorCode
        error_message: str
        has_live_batches: bool
        state: FileState
        coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, object_key: _Optional[str] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., has_live_batches: _Optional[bool] = ..., state: _Optional[_Union[FileState, str]] = ..., coordinator_ids: _Optional[_Iterable[int]] = ...) -> None: ...
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    throttle_time_ms: int
    files: _containers.RepeatedCompositeFieldContainer[DescribeFilesResponse.FileResult]
    def __init__(self, throttle_time_ms: _Optional[int] = ..., files: _Optional[_Iterable[_Union[DescribeFilesResponse.FileResult, _Mapping]]] = ...) -> None: ...

class FindCoordinatorRequest(_message.Message):
    __slots__ = ("topics",)
    class Topic(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[FindCoordinatorRequest.Topic]
    def __init__(self, topics: _Optional[_Iterable[_Union[FindCoordinatorRequest.Topic, _Mapping]]] = ...) -> None: ...

class CoordinatorEndpoint(_message.Message):
    __slots__ = ("coordinator_id", "leader_node_id", "host", "port", "leader_epoch", "replicas")
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    coordinator_id: int
    leader_node_id: int
    host: str
    port: int
    leader_epoch: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaEndpoint]
    def __init__(self, coordinator_id: _Optional[int] = ..., leader_node_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaEndpoint, _Mapping]]] = ...) -> None: ...

class ReplicaEndpoint(_message.Message):
    __slots__ = ("node_id", "host", "port", "in_sync", "read_addresses")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    READ_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    host: str
    port: int
    in_sync: bool
    read_addresses: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., in_sync: _Optional[bool] = ..., read_addresses: _Optional[_Iterable[str]] = ...) -> None: ...

class FindCoordinatorResponse(_message.Message):
    __slots__ = ("topics", "coordinators")
    class PartitionResult(_message.Message):
        __slots__ = ("partition", "error_code", "coordinator_id")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
        partition: int
        error_code: ErrorCode
        coordinator_id: int
        def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., coordinator_id: _Optional[int] = ...) -> None: ...
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[FindCoordinatorResponse.PartitionResult]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[FindCoordinatorResponse.PartitionResult, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[FindCoordinatorResponse.TopicResult]
    coordinators: _containers.RepeatedCompositeFieldContainer[CoordinatorEndpoint]
    def __init__(self, topics: _Optional[_Iterable[_Union[FindCoordinatorResponse.TopicResult, _Mapping]]] = ..., coordinators: _Optional[_Iterable[_Union[CoordinatorEndpoint, _Mapping]]] = ...) -> None: ...

class DescribeCoordinatorsRequest(_message.Message):
    __slots__ = ("coordinator_ids",)
    COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
    coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, coordinator_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class CoordinatorDescription(_message.Message):
    __slots__ = ("coordinator_id", "error_code", "error_message", "leader", "partition_count", "live_file_count", "live_batch_count", "oldest_live_file_timestamp", "files_awaiting_deletion", "files_awaiting_handover", "log_start_offset", "log_end_offset", "high_watermark", "applied_offset", "last_snapshot_end_offset", "log_flush_count", "log_append_count", "queued_operations", "state", "node_id", "role", "isr", "replica_node_ids", "replica_progress", "replica_lag", "leader_changes", "state_bytes", "log_bytes", "snapshot_bytes", "producer_count", "scrubbed_bytes", "scrub_damage_found", "last_scrub_pass_ms", "last_scrub_damage", "workers", "node_workers")
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    PARTITION_COUNT_FIELD_NUMBER: _ClassVar[int]
    LIVE_FILE_COUNT_FIELD_NUMBER: _ClassVar[int]
    LIVE_BATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    OLDEST_LIVE_FILE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    FILES_AWAITING_DELETION_FIELD_NUMBER: _ClassVar[int]
    FILES_AWAITING_HANDOVER_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    APPLIED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_SNAPSHOT_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_FLUSH_COUNT_FIELD_NUMBER: _ClassVar[int]
    LOG_APPEND_COUNT_FIELD_NUMBER: _ClassVar[int]
    QUEUED_OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    REPLICA_NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_LAG_FIELD_NUMBER: _ClassVar[int]
    LEADER_CHANGES_FIELD_NUMBER: _ClassVar[int]
    STATE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOG_BYTES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_COUNT_FIELD_NUMBER: _ClassVar[int]
    SCRUBBED_BYTES_FIELD_NUMBER: _ClassVar[int]
    SCRUB_DAMAGE_FOUND_FIELD_NUMBER: _ClassVar[int]
    LAST_SCRUB_PASS_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_SCRUB_DAMAGE_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    NODE_WORKERS_FIELD_NUMBER: _ClassVar[int]
    coordinator_id: int
    error_code: ErrorCode
    error_message: str
    leader: CoordinatorEndpoint
    partition_count: int
    live_file_count: int
    live_batch_count: int
    oldest_live_file_timestamp: int
    files_awaiting_deletion: int
    files_awaiting_handover: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    applied_offset: int
    last_snapshot_end_offset: int
    log_flush_count: int
    log_append_count: int
    queued_operations: int
    state: str
    node_id: int
    role: str
    isr: _containers.RepeatedScalarFieldContainer[int]
    replica_node_ids: _containers.RepeatedScalarFieldContainer[int]
    replica_progress: _containers.RepeatedCompositeFieldContainer[ReplicaProgress]
    replica_lag: int
    leader_changes: int
    state_bytes: int
    log_bytes: int
    snapshot_bytes: int
    producer_count: int
    scrubbed_bytes: int
    scrub_damage_found: int
    last_scrub_pass_ms: int
    last_scrub_damage: str
    workers: _containers.RepeatedCompositeFieldContainer[BackgroundWorker]
    node_workers: _containers.RepeatedCompositeFieldContainer[BackgroundWorker]
    def __init__(self, coordinator_id: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., leader: _Optional[_Union[CoordinatorEndpoint, _Mapping]] = ..., partition_count: _Optional[int] = ..., live_file_count: _Optional[int] = ..., live_batch_count: _Optional[int] = ..., oldest_live_file_timestamp: _Optional[int] = ..., files_awaiting_deletion: _Optional[int] = ..., files_awaiting_handover: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., applied_offset: _Optional[int] = ..., last_snapshot_end_offset: _Optional[int] = ..., log_flush_count: _Optional[int] = ..., log_append_count: _Optional[int] = ..., queued_operations: _Optional[int] = ..., state: _Optional[str] = ..., node_id: _Optional[int] = ..., role: _Optional[str] = ..., isr: _Optional[_Iterable[int]] = ..., replica_node_ids: _Optional[_Iterable[int]] = ..., replica_progress: _Optional[_Iterable[_Union[ReplicaProgress, _Mapping]]] = ..., replica_lag: _Optional[int] = ..., leader_changes: _Optional[int] = ..., state_bytes: _Optional[int] = ..., log_bytes: _Optional[int] = ..., snapshot_bytes: _Optional[int] = ..., producer_count: _Optional[int] = ..., scrubbed_bytes: _Optional[int] = ..., scrub_damage_found: _Optional[int] = ..., last_scrub_pass_ms: _Optional[int] = ..., last_scrub_damage: _Optional[str] = ..., workers: _Optional[_Iterable[_Union[BackgroundWorker, _Mapping]]] = ..., node_workers: _Optional[_Iterable[_Union[BackgroundWorker, _Mapping]]] = ...) -> None: ...

class BackgroundWorker(_message.Message):
    __slots__ = ("name", "scope", "state", "failures", "recent_failures", "failing", "last_failure")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    RECENT_FAILURES_FIELD_NUMBER: _ClassVar[int]
    FAILING_FIELD_NUMBER: _ClassVar[int]
    LAST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    name: str
    scope: str
    state: str
    failures: int
    recent_failures: int
    failing: bool
    last_failure: str
    def __init__(self, name: _Optional[str] = ..., scope: _Optional[str] = ..., state: _Optional[str] = ..., failures: _Optional[int] = ..., recent_failures: _Optional[int] = ..., failing: _Optional[bool] = ..., last_failure: _Optional[str] = ...) -> None: ...

class ReplicaProgress(_message.Message):
    __slots__ = ("node_id", "log_end_offset", "lag", "in_sync", "last_fetch_age_ms", "caught_up_age_ms")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCH_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    CAUGHT_UP_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    log_end_offset: int
    lag: int
    in_sync: bool
    last_fetch_age_ms: int
    caught_up_age_ms: int
    def __init__(self, node_id: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., lag: _Optional[int] = ..., in_sync: _Optional[bool] = ..., last_fetch_age_ms: _Optional[int] = ..., caught_up_age_ms: _Optional[int] = ...) -> None: ...

class DescribeCoordinatorsResponse(_message.Message):
    __slots__ = ("coordinators",)
    COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    coordinators: _containers.RepeatedCompositeFieldContainer[CoordinatorDescription]
    def __init__(self, coordinators: _Optional[_Iterable[_Union[CoordinatorDescription, _Mapping]]] = ...) -> None: ...

class ListFileKeysRequest(_message.Message):
    __slots__ = ("coordinator_id", "page_max_keys")
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_MAX_KEYS_FIELD_NUMBER: _ClassVar[int]
    coordinator_id: int
    page_max_keys: int
    def __init__(self, coordinator_id: _Optional[int] = ..., page_max_keys: _Optional[int] = ...) -> None: ...

class ListFileKeysPage(_message.Message):
    __slots__ = ("error_code", "error_message", "coordinator_id", "leader_epoch", "applied_offset", "object_keys", "states", "last", "key_count")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    APPLIED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    OBJECT_KEYS_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    KEY_COUNT_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    coordinator_id: int
    leader_epoch: int
    applied_offset: int
    object_keys: _containers.RepeatedScalarFieldContainer[str]
    states: _containers.RepeatedScalarFieldContainer[FileState]
    last: bool
    key_count: int
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., coordinator_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., applied_offset: _Optional[int] = ..., object_keys: _Optional[_Iterable[str]] = ..., states: _Optional[_Iterable[_Union[FileState, str]]] = ..., last: _Optional[bool] = ..., key_count: _Optional[int] = ...) -> None: ...

class DescribeProduceGatewaysRequest(_message.Message):
    __slots__ = ("brokers",)
    class Broker(_message.Message):
        __slots__ = ("broker_id", "rack")
        BROKER_ID_FIELD_NUMBER: _ClassVar[int]
        RACK_FIELD_NUMBER: _ClassVar[int]
        broker_id: int
        rack: str
        def __init__(self, broker_id: _Optional[int] = ..., rack: _Optional[str] = ...) -> None: ...
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[DescribeProduceGatewaysRequest.Broker]
    def __init__(self, brokers: _Optional[_Iterable[_Union[DescribeProduceGatewaysRequest.Broker, _Mapping]]] = ...) -> None: ...

class DescribeProduceGatewaysResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "gateways")
    class Gateway(_message.Message):
        __slots__ = ("coordinator_id", "rack", "broker_ids")
        COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
        RACK_FIELD_NUMBER: _ClassVar[int]
        BROKER_IDS_FIELD_NUMBER: _ClassVar[int]
        coordinator_id: int
        rack: str
        broker_ids: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, coordinator_id: _Optional[int] = ..., rack: _Optional[str] = ..., broker_ids: _Optional[_Iterable[int]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GATEWAYS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    gateways: _containers.RepeatedCompositeFieldContainer[DescribeProduceGatewaysResponse.Gateway]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., gateways: _Optional[_Iterable[_Union[DescribeProduceGatewaysResponse.Gateway, _Mapping]]] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class AlterTopicConfigsRequest(_message.Message):
    __slots__ = ("topics", "validate_only", "timeout_ms")
    class Topic(_message.Message):
        __slots__ = ("topic_id", "set", "delete")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        SET_FIELD_NUMBER: _ClassVar[int]
        DELETE_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        set: _containers.RepeatedCompositeFieldContainer[TopicConfig]
        delete: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, topic_id: _Optional[bytes] = ..., set: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ..., delete: _Optional[_Iterable[str]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[AlterTopicConfigsRequest.Topic]
    validate_only: bool
    timeout_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[AlterTopicConfigsRequest.Topic, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class AlterTopicConfigsResponse(_message.Message):
    __slots__ = ("topics",)
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "error_code", "error_message", "configs")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        CONFIGS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        error_code: ErrorCode
        error_message: str
        configs: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
        def __init__(self, topic_id: _Optional[bytes] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., configs: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[AlterTopicConfigsResponse.TopicResult]
    def __init__(self, topics: _Optional[_Iterable[_Union[AlterTopicConfigsResponse.TopicResult, _Mapping]]] = ...) -> None: ...

class ConfigEntry(_message.Message):
    __slots__ = ("name", "value", "is_default")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    is_default: bool
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., is_default: _Optional[bool] = ...) -> None: ...

class DescribeTopicConfigsRequest(_message.Message):
    __slots__ = ("topic_ids",)
    TOPIC_IDS_FIELD_NUMBER: _ClassVar[int]
    topic_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, topic_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class DescribeTopicConfigsResponse(_message.Message):
    __slots__ = ("topics",)
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "error_code", "error_message", "configs")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        CONFIGS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        error_code: ErrorCode
        error_message: str
        configs: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
        def __init__(self, topic_id: _Optional[bytes] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., configs: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DescribeTopicConfigsResponse.TopicResult]
    def __init__(self, topics: _Optional[_Iterable[_Union[DescribeTopicConfigsResponse.TopicResult, _Mapping]]] = ...) -> None: ...

class CommitRemoteLogSegmentsRequest(_message.Message):
    __slots__ = ("topics", "timeout_ms")
    class Partition(_message.Message):
        __slots__ = ("partition", "start_offset", "end_offset", "remote_log_segment_id")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        END_OFFSET_FIELD_NUMBER: _ClassVar[int]
        REMOTE_LOG_SEGMENT_ID_FIELD_NUMBER: _ClassVar[int]
        partition: int
        start_offset: int
        end_offset: int
        remote_log_segment_id: str
        def __init__(self, partition: _Optional[int] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., remote_log_segment_id: _Optional[str] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[CommitRemoteLogSegmentsRequest.Partition]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[CommitRemoteLogSegmentsRequest.Partition, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CommitRemoteLogSegmentsRequest.Topic]
    timeout_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[CommitRemoteLogSegmentsRequest.Topic, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class CommitRemoteLogSegmentsResponse(_message.Message):
    __slots__ = ("topics",)
    class PartitionResult(_message.Message):
        __slots__ = ("partition", "error_code", "error_message", "log_start_offset", "local_log_start_offset", "remote_log_end_offset")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LOCAL_LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        REMOTE_LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
        partition: int
        error_code: ErrorCode
        error_message: str
        log_start_offset: int
        local_log_start_offset: int
        remote_log_end_offset: int
        def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., log_start_offset: _Optional[int] = ..., local_log_start_offset: _Optional[int] = ..., remote_log_end_offset: _Optional[int] = ...) -> None: ...
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[CommitRemoteLogSegmentsResponse.PartitionResult]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[CommitRemoteLogSegmentsResponse.PartitionResult, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CommitRemoteLogSegmentsResponse.TopicResult]
    def __init__(self, topics: _Optional[_Iterable[_Union[CommitRemoteLogSegmentsResponse.TopicResult, _Mapping]]] = ...) -> None: ...

class DescribeProducersRequest(_message.Message):
    __slots__ = ("topics",)
    class Topic(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DescribeProducersRequest.Topic]
    def __init__(self, topics: _Optional[_Iterable[_Union[DescribeProducersRequest.Topic, _Mapping]]] = ...) -> None: ...

class DescribeProducersResponse(_message.Message):
    __slots__ = ("topics",)
    class ProducerState(_message.Message):
        __slots__ = ("producer_id", "producer_epoch", "last_sequence", "last_timestamp", "coordinator_epoch", "current_txn_start_offset")
        PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
        PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
        LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
        CURRENT_TXN_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        producer_id: int
        producer_epoch: int
        last_sequence: int
        last_timestamp: int
        coordinator_epoch: int
        current_txn_start_offset: int
        def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., last_sequence: _Optional[int] = ..., last_timestamp: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., current_txn_start_offset: _Optional[int] = ...) -> None: ...
    class PartitionResult(_message.Message):
        __slots__ = ("partition", "error_code", "error_message", "active_producers")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        ACTIVE_PRODUCERS_FIELD_NUMBER: _ClassVar[int]
        partition: int
        error_code: ErrorCode
        error_message: str
        active_producers: _containers.RepeatedCompositeFieldContainer[DescribeProducersResponse.ProducerState]
        def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., active_producers: _Optional[_Iterable[_Union[DescribeProducersResponse.ProducerState, _Mapping]]] = ...) -> None: ...
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[DescribeProducersResponse.PartitionResult]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[DescribeProducersResponse.PartitionResult, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DescribeProducersResponse.TopicResult]
    def __init__(self, topics: _Optional[_Iterable[_Union[DescribeProducersResponse.TopicResult, _Mapping]]] = ...) -> None: ...

class ClassicProducerBatch(_message.Message):
    __slots__ = ("base_sequence", "last_sequence", "base_offset", "last_offset", "timestamp", "timestamp_type")
    BASE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_TYPE_FIELD_NUMBER: _ClassVar[int]
    base_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int
    timestamp: int
    timestamp_type: TimestampType
    def __init__(self, base_sequence: _Optional[int] = ..., last_sequence: _Optional[int] = ..., base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., timestamp: _Optional[int] = ..., timestamp_type: _Optional[_Union[TimestampType, str]] = ...) -> None: ...

class ClassicProducerState(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "batches", "last_timestamp", "coordinator_epoch", "current_txn_first_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TXN_FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    batches: _containers.RepeatedCompositeFieldContainer[ClassicProducerBatch]
    last_timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., batches: _Optional[_Iterable[_Union[ClassicProducerBatch, _Mapping]]] = ..., last_timestamp: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., current_txn_first_offset: _Optional[int] = ...) -> None: ...

class InitDisklessLogRequest(_message.Message):
    __slots__ = ("topics", "timeout_ms")
    class Partition(_message.Message):
        __slots__ = ("partition", "log_start_offset", "seal_offset", "leader_epoch", "producers", "max_timestamp")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        SEAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        PRODUCERS_FIELD_NUMBER: _ClassVar[int]
        MAX_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        partition: int
        log_start_offset: int
        seal_offset: int
        leader_epoch: int
        producers: _containers.RepeatedCompositeFieldContainer[ClassicProducerState]
        max_timestamp: int
        def __init__(self, partition: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., seal_offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., producers: _Optional[_Iterable[_Union[ClassicProducerState, _Mapping]]] = ..., max_timestamp: _Optional[int] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[InitDisklessLogRequest.Partition]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[InitDisklessLogRequest.Partition, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[InitDisklessLogRequest.Topic]
    timeout_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[InitDisklessLogRequest.Topic, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class InitDisklessLogResponse(_message.Message):
    __slots__ = ("topics",)
    class PartitionResult(_message.Message):
        __slots__ = ("partition", "error_code", "error_message", "log_start_offset", "seal_offset", "high_watermark")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        SEAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
        HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
        partition: int
        error_code: ErrorCode
        error_message: str
        log_start_offset: int
        seal_offset: int
        high_watermark: int
        def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., log_start_offset: _Optional[int] = ..., seal_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ...) -> None: ...
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[InitDisklessLogResponse.PartitionResult]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[InitDisklessLogResponse.PartitionResult, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[InitDisklessLogResponse.TopicResult]
    def __init__(self, topics: _Optional[_Iterable[_Union[InitDisklessLogResponse.TopicResult, _Mapping]]] = ...) -> None: ...

class RepairDisklessLogRequest(_message.Message):
    __slots__ = ("topics", "timeout_ms")
    class Partition(_message.Message):
        __slots__ = ("partition", "seal_offset")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        SEAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
        partition: int
        seal_offset: int
        def __init__(self, partition: _Optional[int] = ..., seal_offset: _Optional[int] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[RepairDisklessLogRequest.Partition]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[RepairDisklessLogRequest.Partition, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[RepairDisklessLogRequest.Topic]
    timeout_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[RepairDisklessLogRequest.Topic, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class RepairDisklessLogResponse(_message.Message):
    __slots__ = ("topics",)
    class PartitionResult(_message.Message):
        __slots__ = ("partition", "error_code", "error_message", "log_start_offset", "seal_offset", "high_watermark")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        SEAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
        HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
        partition: int
        error_code: ErrorCode
        error_message: str
        log_start_offset: int
        seal_offset: int
        high_watermark: int
        def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., log_start_offset: _Optional[int] = ..., seal_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ...) -> None: ...
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[RepairDisklessLogResponse.PartitionResult]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[RepairDisklessLogResponse.PartitionResult, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[RepairDisklessLogResponse.TopicResult]
    def __init__(self, topics: _Optional[_Iterable[_Union[RepairDisklessLogResponse.TopicResult, _Mapping]]] = ...) -> None: ...

class DescribeDisklessLogsRequest(_message.Message):
    __slots__ = ("topics",)
    class Topic(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DescribeDisklessLogsRequest.Topic]
    def __init__(self, topics: _Optional[_Iterable[_Union[DescribeDisklessLogsRequest.Topic, _Mapping]]] = ...) -> None: ...

class DescribeDisklessLogsResponse(_message.Message):
    __slots__ = ("topics",)
    class PartitionResult(_message.Message):
        __slots__ = ("partition", "error_code", "error_message", "switched", "classic_log_start_offset", "seal_offset", "leader_epoch", "producers_carried", "log_start_offset", "local_log_start_offset", "high_watermark")
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        SWITCHED_FIELD_NUMBER: _ClassVar[int]
        CLASSIC_LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        SEAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        PRODUCERS_CARRIED_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LOCAL_LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
        partition: int
        error_code: ErrorCode
        error_message: str
        switched: bool
        classic_log_start_offset: int
        seal_offset: int
        leader_epoch: int
        producers_carried: int
        log_start_offset: int
        local_log_start_offset: int
        high_watermark: int
        def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., switched: _Optional[bool] = ..., classic_log_start_offset: _Optional[int] = ..., seal_offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., producers_carried: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., local_log_start_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ...) -> None: ...
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[DescribeDisklessLogsResponse.PartitionResult]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[DescribeDisklessLogsResponse.PartitionResult, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DescribeDisklessLogsResponse.TopicResult]
    def __init__(self, topics: _Optional[_Iterable[_Union[DescribeDisklessLogsResponse.TopicResult, _Mapping]]] = ...) -> None: ...

class ReplaceBatchesRequest(_message.Message):
    __slots__ = ("object_key", "object_format", "file_size", "uploader_broker_id", "owner_ids", "extents", "timeout_ms")
    class Extent(_message.Message):
        __slots__ = ("topic_id", "partition", "base_offset", "last_offset", "byte_offset", "size")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
        BYTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        SIZE_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partition: int
        base_offset: int
        last_offset: int
        byte_offset: int
        size: int
        def __init__(self, topic_id: _Optional[bytes] = ..., partition: _Optional[int] = ..., base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., byte_offset: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...
    OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    UPLOADER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_IDS_FIELD_NUMBER: _ClassVar[int]
    EXTENTS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    object_key: str
    object_format: int
    file_size: int
    uploader_broker_id: int
    owner_ids: _containers.RepeatedScalarFieldContainer[int]
    extents: _containers.RepeatedCompositeFieldContainer[ReplaceBatchesRequest.Extent]
    timeout_ms: int
    def __init__(self, object_key: _Optional[str] = ..., object_format: _Optional[int] = ..., file_size: _Optional[int] = ..., uploader_broker_id: _Optional[int] = ..., owner_ids: _Optional[_Iterable[int]] = ..., extents: _Optional[_Iterable[_Union[ReplaceBatchesRequest.Extent, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class ReplaceBatchesResponse(_message.Message):
    __slots__ = ("extents",)
    class ExtentResult(_message.Message):
        __slots__ = ("error_code", "error_message")
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        error_code: ErrorCode
        error_message: str
        def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    EXTENTS_FIELD_NUMBER: _ClassVar[int]
    extents: _containers.RepeatedCompositeFieldContainer[ReplaceBatchesResponse.ExtentResult]
    def __init__(self, extents: _Optional[_Iterable[_Union[ReplaceBatchesResponse.ExtentResult, _Mapping]]] = ...) -> None: ...

class GetFileMergeWorkItemRequest(_message.Message):
    __slots__ = ("coordinator_id", "min_age_ms", "max_file_size", "max_files", "page_token")
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_FILES_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    coordinator_id: int
    min_age_ms: int
    max_file_size: int
    max_files: int
    page_token: bytes
    def __init__(self, coordinator_id: _Optional[int] = ..., min_age_ms: _Optional[int] = ..., max_file_size: _Optional[int] = ..., max_files: _Optional[int] = ..., page_token: _Optional[bytes] = ...) -> None: ...

class GetFileMergeWorkItemResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "files", "next_page_token")
    class Batch(_message.Message):
        __slots__ = ("topic_id", "partition", "base_offset", "last_offset", "byte_offset", "size")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
        BYTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        SIZE_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partition: int
        base_offset: int
        last_offset: int
        byte_offset: int
        size: int
        def __init__(self, topic_id: _Optional[bytes] = ..., partition: _Optional[int] = ..., base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., byte_offset: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...
    class File(_message.Message):
        __slots__ = ("object_key", "object_format", "file_size", "committed_at_ms", "batches")
        OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
        OBJECT_FORMAT_FIELD_NUMBER: _ClassVar[int]
        FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
        COMMITTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
        BATCHES_FIELD_NUMBER: _ClassVar[int]
        object_key: str
        object_format: int
        file_size: int
        committed_at_ms: int
        batches: _containers.RepeatedCompositeFieldContainer[GetFileMergeWorkItemResponse.Batch]
        def __init__(self, object_key: _Optional[str] = ..., object_format: _Optional[int] = ..., file_size: _Optional[int] = ..., committed_at_ms: _Optional[int] = ..., batches: _Optional[_Iterable[_Union[GetFileMergeWorkItemResponse.Batch, _Mapping]]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    error_message: str
    files: _containers.RepeatedCompositeFieldContainer[GetFileMergeWorkItemResponse.File]
    next_page_token: bytes
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., files: _Optional[_Iterable[_Union[GetFileMergeWorkItemResponse.File, _Mapping]]] = ..., next_page_token: _Optional[bytes] = ...) -> None: ...
