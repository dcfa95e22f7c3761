from protos import coordinator_pb2 as _coordinator_pb2
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
        __slots__ = ("object_key", "coordinator_ids")
        OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
        COORDINATOR_IDS_FIELD_NUMBER: _ClassVar[int]
        object_key: str
        coordinator_ids: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, object_key: _Optional[str] = ..., coordinator_ids: _Optional[_Iterable[int]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    files: _containers.RepeatedCompositeFieldContainer[KnownFilesResponse.KnownFile]
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., files: _Optional[_Iterable[_Union[KnownFilesResponse.KnownFile, _Mapping]]] = ...) -> None: ...
