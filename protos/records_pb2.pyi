from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaderChange(_message.Message):
    __slots__ = ("leader_epoch", "node_id")
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    leader_epoch: int
    node_id: int
    def __init__(self, leader_epoch: _Optional[int] = ..., node_id: _Optional[int] = ...) -> None: ...

class PartitionCreated(_message.Message):
    __slots__ = ("partition_key", "topic_id", "topic_name", "partition")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    partition_key: int
    topic_id: bytes
    topic_name: str
    partition: int
    def __init__(self, partition_key: _Optional[int] = ..., topic_id: _Optional[bytes] = ..., topic_name: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class TopicDeleted(_message.Message):
    __slots__ = ("topic_id", "batches_purged_later")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    BATCHES_PURGED_LATER_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    batches_purged_later: bool
    def __init__(self, topic_id: _Optional[bytes] = ..., batches_purged_later: _Optional[bool] = ...) -> None: ...

class BatchesPurged(_message.Message):
    __slots__ = ("ranges",)
    RANGES_FIELD_NUMBER: _ClassVar[int]
    ranges: _containers.RepeatedCompositeFieldContainer[PurgedRange]
    def __init__(self, ranges: _Optional[_Iterable[_Union[PurgedRange, _Mapping]]] = ...) -> None: ...

class PurgedRange(_message.Message):
    __slots__ = ("partition_key", "below_offset")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    BELOW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition_key: int
    below_offset: int
    def __init__(self, partition_key: _Optional[int] = ..., below_offset: _Optional[int] = ...) -> None: ...

class RetentionApplied(_message.Message):
    __slots__ = ("starts",)
    STARTS_FIELD_NUMBER: _ClassVar[int]
    starts: _containers.RepeatedCompositeFieldContainer[RetainedStart]
    def __init__(self, starts: _Optional[_Iterable[_Union[RetainedStart, _Mapping]]] = ...) -> None: ...

class RetainedStart(_message.Message):
    __slots__ = ("partition_key", "log_start_offset")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition_key: int
    log_start_offset: int
    def __init__(self, partition_key: _Optional[int] = ..., log_start_offset: _Optional[int] = ...) -> None: ...

class FileCommitted(_message.Message):
    __slots__ = ("file_id", "object_key", "file_size", "uploader_broker_id", "owner_ids", "append_time_ms", "packed_batches", "rejected_batches", "transaction_batches")
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    UPLOADER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_IDS_FIELD_NUMBER: _ClassVar[int]
    APPEND_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PACKED_BATCHES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_BATCHES_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_BATCHES_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    object_key: str
    file_size: int
    uploader_broker_id: int
    owner_ids: _containers.RepeatedScalarFieldContainer[int]
    append_time_ms: int
    packed_batches: bytes
    rejected_batches: int
    transaction_batches: _containers.RepeatedCompositeFieldContainer[TransactionBatch]
    def __init__(self, file_id: _Optional[int] = ..., object_key: _Optional[str] = ..., file_size: _Optional[int] = ..., uploader_broker_id: _Optional[int] = ..., owner_ids: _Optional[_Iterable[int]] = ..., append_time_ms: _Optional[int] = ..., packed_batches: _Optional[bytes] = ..., rejected_batches: _Optional[int] = ..., transaction_batches: _Optional[_Iterable[_Union[TransactionBatch, _Mapping]]] = ...) -> None: ...

class TransactionBatch(_message.Message):
    __slots__ = ("batch_id", "is_control", "control_type", "coordinator_epoch", "transaction_first_offset", "last_stable_offset")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    IS_CONTROL_FIELD_NUMBER: _ClassVar[int]
    CONTROL_TYPE_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    is_control: bool
    control_type: int
    coordinator_epoch: int
    transaction_first_offset: int
    last_stable_offset: int
    def __init__(self, batch_id: _Optional[int] = ..., is_control: _Optional[bool] = ..., control_type: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., transaction_first_offset: _Optional[int] = ..., last_stable_offset: _Optional[int] = ...) -> None: ...

class RecordsDeleted(_message.Message):
    __slots__ = ("partition_key", "log_start_offset")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition_key: int
    log_start_offset: int
    def __init__(self, partition_key: _Optional[int] = ..., log_start_offset: _Optional[int] = ...) -> None: ...

class FileOwnershipTaken(_message.Message):
    __slots__ = ("file_id", "new_file", "object_key", "file_size", "uploader_broker_id", "owner_ids", "committed_at_ms", "from_coordinator_id")
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    NEW_FILE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    UPLOADER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_IDS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    FROM_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    new_file: bool
    object_key: str
    file_size: int
    uploader_broker_id: int
    owner_ids: _containers.RepeatedScalarFieldContainer[int]
    committed_at_ms: int
    from_coordinator_id: int
    def __init__(self, file_id: _Optional[int] = ..., new_file: _Optional[bool] = ..., object_key: _Optional[str] = ..., file_size: _Optional[int] = ..., uploader_broker_id: _Optional[int] = ..., owner_ids: _Optional[_Iterable[int]] = ..., committed_at_ms: _Optional[int] = ..., from_coordinator_id: _Optional[int] = ...) -> None: ...

class FileHandedOver(_message.Message):
    __slots__ = ("file_id", "to_coordinator_id")
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    TO_COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    to_coordinator_id: int
    def __init__(self, file_id: _Optional[int] = ..., to_coordinator_id: _Optional[int] = ...) -> None: ...

class FileDeletionScheduled(_message.Message):
    __slots__ = ("file_id", "delete_after_ms")
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    DELETE_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    delete_after_ms: int
    def __init__(self, file_id: _Optional[int] = ..., delete_after_ms: _Optional[int] = ...) -> None: ...

class FileDeleted(_message.Message):
    __slots__ = ("file_id",)
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    def __init__(self, file_id: _Optional[int] = ...) -> None: ...

class ProducersExpired(_message.Message):
    __slots__ = ("expired_before_ms", "producers")
    EXPIRED_BEFORE_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    expired_before_ms: int
    producers: _containers.RepeatedCompositeFieldContainer[ExpiredProducer]
    def __init__(self, expired_before_ms: _Optional[int] = ..., producers: _Optional[_Iterable[_Union[ExpiredProducer, _Mapping]]] = ...) -> None: ...

class ExpiredProducer(_message.Message):
    __slots__ = ("partition_key", "producer_id", "producer_epoch", "last_batch_offset", "last_timestamp")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_BATCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    partition_key: int
    producer_id: int
    producer_epoch: int
    last_batch_offset: int
    last_timestamp: int
    def __init__(self, partition_key: _Optional[int] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., last_batch_offset: _Optional[int] = ..., last_timestamp: _Optional[int] = ...) -> None: ...

class TopicConfigsChanged(_message.Message):
    __slots__ = ("topic_id", "configs")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    configs: _containers.RepeatedCompositeFieldContainer[TopicConfigValue]
    def __init__(self, topic_id: _Optional[bytes] = ..., configs: _Optional[_Iterable[_Union[TopicConfigValue, _Mapping]]] = ...) -> None: ...

class TopicConfigValue(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class BatchesReplaced(_message.Message):
    __slots__ = ("file_id", "object_key", "file_size", "uploader_broker_id", "owner_ids", "committed_at_ms", "runs", "extents")
    class Run(_message.Message):
        __slots__ = ("partition_key", "base_offset", "last_offset", "byte_offset", "batches")
        PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
        BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
        BYTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        BATCHES_FIELD_NUMBER: _ClassVar[int]
        partition_key: int
        base_offset: int
        last_offset: int
        byte_offset: int
        batches: int
        def __init__(self, partition_key: _Optional[int] = ..., base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., byte_offset: _Optional[int] = ..., batches: _Optional[int] = ...) -> None: ...
    class Extent(_message.Message):
        __slots__ = ("topic_id", "partition", "base_offset", "last_offset", "byte_offset", "size", "error_code", "error_message")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
        BYTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        SIZE_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partition: int
        base_offset: int
        last_offset: int
        byte_offset: int
        size: int
        error_code: int
        error_message: str
        def __init__(self, topic_id: _Optional[bytes] = ..., partition: _Optional[int] = ..., base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., byte_offset: _Optional[int] = ..., size: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    UPLOADER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_IDS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    EXTENTS_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    object_key: str
    file_size: int
    uploader_broker_id: int
    owner_ids: _containers.RepeatedScalarFieldContainer[int]
    committed_at_ms: int
    runs: _containers.RepeatedCompositeFieldContainer[BatchesReplaced.Run]
    extents: _containers.RepeatedCompositeFieldContainer[BatchesReplaced.Extent]
    def __init__(self, file_id: _Optional[int] = ..., object_key: _Optional[str] = ..., file_size: _Optional[int] = ..., uploader_broker_id: _Optional[int] = ..., owner_ids: _Optional[_Iterable[int]] = ..., committed_at_ms: _Optional[int] = ..., runs: _Optional[_Iterable[_Union[BatchesReplaced.Run, _Mapping]]] = ..., extents: _Optional[_Iterable[_Union[BatchesReplaced.Extent, _Mapping]]] = ...) -> None: ...

class RemoteLogSegmentsCommitted(_message.Message):
    __slots__ = ("partition_key", "local_log_start_offset")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    LOCAL_LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition_key: int
    local_log_start_offset: int
    def __init__(self, partition_key: _Optional[int] = ..., local_log_start_offset: _Optional[int] = ...) -> None: ...

class DisklessLogsInitialized(_message.Message):
    __slots__ = ("logs",)
    LOGS_FIELD_NUMBER: _ClassVar[int]
    logs: _containers.RepeatedCompositeFieldContainer[DisklessLogInit]
    def __init__(self, logs: _Optional[_Iterable[_Union[DisklessLogInit, _Mapping]]] = ...) -> None: ...

class DisklessLogInit(_message.Message):
    __slots__ = ("partition_key", "log_start_offset", "seal_offset", "leader_epoch", "max_timestamp", "producers_replaced", "producers", "classic_log_start_offset")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SEAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_REPLACED_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    CLASSIC_LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition_key: int
    log_start_offset: int
    seal_offset: int
    leader_epoch: int
    max_timestamp: int
    producers_replaced: bool
    producers: _containers.RepeatedCompositeFieldContainer[CarriedProducer]
    classic_log_start_offset: int
    def __init__(self, partition_key: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., seal_offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., max_timestamp: _Optional[int] = ..., producers_replaced: _Optional[bool] = ..., producers: _Optional[_Iterable[_Union[CarriedProducer, _Mapping]]] = ..., classic_log_start_offset: _Optional[int] = ...) -> None: ...

class CarriedProducer(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "window", "last_timestamp", "coordinator_epoch", "txn_first_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TXN_FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    window: bytes
    last_timestamp: int
    coordinator_epoch: int
    txn_first_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., window: _Optional[bytes] = ..., last_timestamp: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., txn_first_offset: _Optional[int] = ...) -> None: ...

class PartitionMoveStarted(_message.Message):
    __slots__ = ("partition_key", "to_coordinator", "move_id", "catch_up")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    TO_COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    MOVE_ID_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    partition_key: int
    to_coordinator: int
    move_id: int
    catch_up: bool
    def __init__(self, partition_key: _Optional[int] = ..., to_coordinator: _Optional[int] = ..., move_id: _Optional[int] = ..., catch_up: _Optional[bool] = ...) -> None: ...

class PartitionMoveFrozen(_message.Message):
    __slots__ = ("partition_key", "move_id")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    MOVE_ID_FIELD_NUMBER: _ClassVar[int]
    partition_key: int
    move_id: int
    def __init__(self, partition_key: _Optional[int] = ..., move_id: _Optional[int] = ...) -> None: ...

class PartitionMoveCancelled(_message.Message):
    __slots__ = ("partition_key", "move_id")
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    MOVE_ID_FIELD_NUMBER: _ClassVar[int]
    partition_key: int
    move_id: int
    def __init__(self, partition_key: _Optional[int] = ..., move_id: _Optional[int] = ...) -> None: ...

class PartitionAdoptionChunk(_message.Message):
    __slots__ = ("move_id", "from_coordinator", "staged_partition_key", "index", "topic_id", "partition", "files", "packed_batches", "file_indexes", "append_times_ms", "flags", "aborted_transactions")
    class File(_message.Message):
        __slots__ = ("file_id", "object_key", "loaned", "file_size", "uploader_broker_id", "owner_ids", "committed_at_ms")
        FILE_ID_FIELD_NUMBER: _ClassVar[int]
        OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
        LOANED_FIELD_NUMBER: _ClassVar[int]
        FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
        UPLOADER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
        OWNER_IDS_FIELD_NUMBER: _ClassVar[int]
        COMMITTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
        file_id: int
        object_key: str
        loaned: bool
        file_size: int
        uploader_broker_id: int
        owner_ids: _containers.RepeatedScalarFieldContainer[int]
        committed_at_ms: int
        def __init__(self, file_id: _Optional[int] = ..., object_key: _Optional[str] = ..., loaned: _Optional[bool] = ..., file_size: _Optional[int] = ..., uploader_broker_id: _Optional[int] = ..., owner_ids: _Optional[_Iterable[int]] = ..., committed_at_ms: _Optional[int] = ...) -> None: ...
    class Aborted(_message.Message):
        __slots__ = ("last_offset", "producer_id", "first_offset", "last_stable_offset")
        LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
        PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
        FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        last_offset: int
        producer_id: int
        first_offset: int
        last_stable_offset: int
        def __init__(self, last_offset: _Optional[int] = ..., producer_id: _Optional[int] = ..., first_offset: _Optional[int] = ..., last_stable_offset: _Optional[int] = ...) -> None: ...
    MOVE_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    STAGED_PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    PACKED_BATCHES_FIELD_NUMBER: _ClassVar[int]
    FILE_INDEXES_FIELD_NUMBER: _ClassVar[int]
    APPEND_TIMES_MS_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    ABORTED_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    move_id: int
    from_coordinator: int
    staged_partition_key: int
    index: int
    topic_id: bytes
    partition: int
    files: _containers.RepeatedCompositeFieldContainer[PartitionAdoptionChunk.File]
    packed_batches: bytes
    file_indexes: _containers.RepeatedScalarFieldContainer[int]
    append_times_ms: _containers.RepeatedScalarFieldContainer[int]
    flags: _containers.RepeatedScalarFieldContainer[int]
    aborted_transactions: _containers.RepeatedCompositeFieldContainer[PartitionAdoptionChunk.Aborted]
    def __init__(self, move_id: _Optional[int] = ..., from_coordinator: _Optional[int] = ..., staged_partition_key: _Optional[int] = ..., index: _Optional[int] = ..., topic_id: _Optional[bytes] = ..., partition: _Optional[int] = ..., files: _Optional[_Iterable[_Union[PartitionAdoptionChunk.File, _Mapping]]] = ..., packed_batches: _Optional[bytes] = ..., file_indexes: _Optional[_Iterable[int]] = ..., append_times_ms: _Optional[_Iterable[int]] = ..., flags: _Optional[_Iterable[int]] = ..., aborted_transactions: _Optional[_Iterable[_Union[PartitionAdoptionChunk.Aborted, _Mapping]]] = ...) -> None: ...

class PartitionAdopted(_message.Message):
    __slots__ = ("from_coordinator", "move_id", "staged_partition_key", "topic_id", "topic_name", "partition", "log_start_offset", "high_watermark", "local_log_start_offset", "remote_max_timestamp", "classic_log_start_offset", "seal_offset", "switch_leader_epoch", "switch_producers", "producers", "topic_configs")
    FROM_COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    MOVE_ID_FIELD_NUMBER: _ClassVar[int]
    STAGED_PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REMOTE_MAX_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CLASSIC_LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SEAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SWITCH_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SWITCH_PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    from_coordinator: int
    move_id: int
    staged_partition_key: int
    topic_id: bytes
    topic_name: str
    partition: int
    log_start_offset: int
    high_watermark: int
    local_log_start_offset: int
    remote_max_timestamp: int
    classic_log_start_offset: int
    seal_offset: int
    switch_leader_epoch: int
    switch_producers: int
    producers: _containers.RepeatedCompositeFieldContainer[CarriedProducer]
    topic_configs: _containers.RepeatedCompositeFieldContainer[TopicConfigValue]
    def __init__(self, from_coordinator: _Optional[int] = ..., move_id: _Optional[int] = ..., staged_partition_key: _Optional[int] = ..., topic_id: _Optional[bytes] = ..., topic_name: _Optional[str] = ..., partition: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., local_log_start_offset: _Optional[int] = ..., remote_max_timestamp: _Optional[int] = ..., classic_log_start_offset: _Optional[int] = ..., seal_offset: _Optional[int] = ..., switch_leader_epoch: _Optional[int] = ..., switch_producers: _Optional[int] = ..., producers: _Optional[_Iterable[_Union[CarriedProducer, _Mapping]]] = ..., topic_configs: _Optional[_Iterable[_Union[TopicConfigValue, _Mapping]]] = ...) -> None: ...

class PartitionMovedOut(_message.Message):
    __slots__ = ("partition_key", "move_id", "to_coordinator", "loans")
    class Loan(_message.Message):
        __slots__ = ("file_id", "object_key", "borrower")
        FILE_ID_FIELD_NUMBER: _ClassVar[int]
        OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
        BORROWER_FIELD_NUMBER: _ClassVar[int]
        file_id: int
        object_key: str
        borrower: int
        def __init__(self, file_id: _Optional[int] = ..., object_key: _Optional[str] = ..., borrower: _Optional[int] = ...) -> None: ...
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    MOVE_ID_FIELD_NUMBER: _ClassVar[int]
    TO_COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    LOANS_FIELD_NUMBER: _ClassVar[int]
    partition_key: int
    move_id: int
    to_coordinator: int
    loans: _containers.RepeatedCompositeFieldContainer[PartitionMovedOut.Loan]
    def __init__(self, partition_key: _Optional[int] = ..., move_id: _Optional[int] = ..., to_coordinator: _Optional[int] = ..., loans: _Optional[_Iterable[_Union[PartitionMovedOut.Loan, _Mapping]]] = ...) -> None: ...

class FileLoanReturned(_message.Message):
    __slots__ = ("file_id", "borrower")
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    BORROWER_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    borrower: int
    def __init__(self, file_id: _Optional[int] = ..., borrower: _Optional[int] = ...) -> None: ...

class FileReturned(_message.Message):
    __slots__ = ("file_id",)
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    file_id: int
    def __init__(self, file_id: _Optional[int] = ...) -> None: ...

class PartitionAdoptionAbandoned(_message.Message):
    __slots__ = ("from_coordinator", "move_id")
    FROM_COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    MOVE_ID_FIELD_NUMBER: _ClassVar[int]
    from_coordinator: int
    move_id: int
    def __init__(self, from_coordinator: _Optional[int] = ..., move_id: _Optional[int] = ...) -> None: ...

class MetadataRecord(_message.Message):
    __slots__ = ("leader_change", "partition_created", "topic_deleted", "file_committed", "records_deleted", "file_ownership_taken", "file_handed_over", "file_deletion_scheduled", "file_deleted", "producers_expired", "topic_configs_changed", "batches_purged", "retention_applied", "remote_log_segments_committed", "diskless_logs_initialized", "batches_replaced", "partition_move_started", "partition_move_cancelled", "partition_adoption_chunk", "partition_adopted", "partition_moved_out", "file_loan_returned", "file_returned", "partition_adoption_abandoned", "partition_move_frozen")
    LEADER_CHANGE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_CREATED_FIELD_NUMBER: _ClassVar[int]
    TOPIC_DELETED_FIELD_NUMBER: _ClassVar[int]
    FILE_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DELETED_FIELD_NUMBER: _ClassVar[int]
    FILE_OWNERSHIP_TAKEN_FIELD_NUMBER: _ClassVar[int]
    FILE_HANDED_OVER_FIELD_NUMBER: _ClassVar[int]
    FILE_DELETION_SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    FILE_DELETED_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CONFIGS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    BATCHES_PURGED_FIELD_NUMBER: _ClassVar[int]
    RETENTION_APPLIED_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_SEGMENTS_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    DISKLESS_LOGS_INITIALIZED_FIELD_NUMBER: _ClassVar[int]
    BATCHES_REPLACED_FIELD_NUMBER: _ClassVar[int]
    PARTITION_MOVE_STARTED_FIELD_NUMBER: _ClassVar[int]
    PARTITION_MOVE_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ADOPTION_CHUNK_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ADOPTED_FIELD_NUMBER: _ClassVar[int]
    PARTITION_MOVED_OUT_FIELD_NUMBER: _ClassVar[int]
    FILE_LOAN_RETURNED_FIELD_NUMBER: _ClassVar[int]
    FILE_RETURNED_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ADOPTION_ABANDONED_FIELD_NUMBER: _ClassVar[int]
    PARTITION_MOVE_FROZEN_FIELD_NUMBER: _ClassVar[int]
    leader_change: LeaderChange
    partition_created: PartitionCreated
    topic_deleted: TopicDeleted
    file_committed: FileCommitted
    records_deleted: RecordsDeleted
    file_ownership_taken: FileOwnershipTaken
    file_handed_over: FileHandedOver
    file_deletion_scheduled: FileDeletionScheduled
    file_deleted: FileDeleted
    producers_expired: ProducersExpired
    topic_configs_changed: TopicConfigsChanged
    batches_purged: BatchesPurged
    retention_applied: RetentionApplied
    remote_log_segments_committed: RemoteLogSegmentsCommitted
    diskless_logs_initialized: DisklessLogsInitialized
    batches_replaced: BatchesReplaced
    partition_move_started: PartitionMoveStarted
    partition_move_cancelled: PartitionMoveCancelled
    partition_adoption_chunk: PartitionAdoptionChunk
    partition_adopted: PartitionAdopted
    partition_moved_out: PartitionMovedOut
    file_loan_returned: FileLoanReturned
    file_returned: FileReturned
    partition_adoption_abandoned: PartitionAdoptionAbandoned
    partition_move_frozen: PartitionMoveFrozen
    def __init__(self, leader_change: _Optional[_Union[LeaderChange, _Mapping]] = ..., partition_created: _Optional[_Union[PartitionCreated, _Mapping]] = ..., topic_deleted: _Optional[_Union[TopicDeleted, _Mapping]] = ..., file_committed: _Optional[_Union[FileCommitted, _Mapping]] = ..., records_deleted: _Optional[_Union[RecordsDeleted, _Mapping]] = ..., file_ownership_taken: _Optional[_Union[FileOwnershipTaken, _Mapping]] = ..., file_handed_over: _Optional[_Union[FileHandedOver, _Mapping]] = ..., file_deletion_scheduled: _Optional[_Union[FileDeletionScheduled, _Mapping]] = ..., file_deleted: _Optional[_Union[FileDeleted, _Mapping]] = ..., producers_expired: _Optional[_Union[ProducersExpired, _Mapping]] = ..., topic_configs_changed: _Optional[_Union[TopicConfigsChanged, _Mapping]] = ..., batches_purged: _Optional[_Union[BatchesPurged, _Mapping]] = ..., retention_applied: _Optional[_Union[RetentionApplied, _Mapping]] = ..., remote_log_segments_committed: _Optional[_Union[RemoteLogSegmentsCommitted, _Mapping]] = ..., diskless_logs_initialized: _Optional[_Union[DisklessLogsInitialized, _Mapping]] = ..., batches_replaced: _Optional[_Union[BatchesReplaced, _Mapping]] = ..., partition_move_started: _Optional[_Union[PartitionMoveStarted, _Mapping]] = ..., partition_move_cancelled: _Optional[_Union[PartitionMoveCancelled, _Mapping]] = ..., partition_adoption_chunk: _Optional[_Union[PartitionAdoptionChunk, _Mapping]] = ..., partition_adopted: _Optional[_Union[PartitionAdopted, _Mapping]] = ..., partition_moved_out: _Optional[_Union[PartitionMovedOut, _Mapping]] = ..., file_loan_returned: _Optional[_Union[FileLoanReturned, _Mapping]] = ..., file_returned: _Optional[_Union[FileReturned, _Mapping]] = ..., partition_adoption_abandoned: _Optional[_Union[PartitionAdoptionAbandoned, _Mapping]] = ..., partition_move_frozen: _Optional[_Union[PartitionMoveFrozen, _Mapping]] = ...) -> None: ...

class RecordBatch(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[MetadataRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[MetadataRecord, _Mapping]]] = ...) -> None: ...
