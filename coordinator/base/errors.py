"""Kafka error codes, and the exceptions the edge maps to gRPC statuses.

Caller nonsense is answered per item with an ErrorCode (named after the rule
broken); exceptions here are for calls that cannot run at all.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

import grpc

from protos import coordinator_pb2 as pb

# To the type checker the mirror is the generated enum class, which protobuf's stubs type every ErrorCode field
# with; each member equals the contract's value of that name (tests/test_error_codes.py checks), so a member may be set
# in a message as it is. Use `pb.ErrorCode.Name(code)` for a code's name: the checker sees no `.name`.
if TYPE_CHECKING:
    ErrorCode = pb.ErrorCode
else:

    class ErrorCode(IntEnum):
        """Mirror of the contract's ErrorCode enum, usable without protobuf lookups (and named in logs)."""

        NONE = pb.NONE
        UNKNOWN_SERVER_ERROR = pb.UNKNOWN_SERVER_ERROR
        OFFSET_OUT_OF_RANGE = pb.OFFSET_OUT_OF_RANGE
        UNKNOWN_TOPIC_OR_PARTITION = pb.UNKNOWN_TOPIC_OR_PARTITION
        REQUEST_TIMED_OUT = pb.REQUEST_TIMED_OUT
        COORDINATOR_LOAD_IN_PROGRESS = pb.COORDINATOR_LOAD_IN_PROGRESS
        COORDINATOR_NOT_AVAILABLE = pb.COORDINATOR_NOT_AVAILABLE
        NOT_COORDINATOR = pb.NOT_COORDINATOR
        INVALID_TOPIC_EXCEPTION = pb.INVALID_TOPIC_EXCEPTION
        UNSUPPORTED_VERSION = pb.UNSUPPORTED_VERSION
        TOPIC_ALREADY_EXISTS = pb.TOPIC_ALREADY_EXISTS
        INVALID_PARTITIONS = pb.INVALID_PARTITIONS
        INVALID_CONFIG = pb.INVALID_CONFIG
        INVALID_REQUEST = pb.INVALID_REQUEST
        POLICY_VIOLATION = pb.POLICY_VIOLATION
        OUT_OF_ORDER_SEQUENCE_NUMBER = pb.OUT_OF_ORDER_SEQUENCE_NUMBER
        INVALID_PRODUCER_EPOCH = pb.INVALID_PRODUCER_EPOCH
        INVALID_TXN_STATE = pb.INVALID_TXN_STATE
        KAFKA_STORAGE_ERROR = pb.KAFKA_STORAGE_ERROR
        INVALID_RECORD = pb.INVALID_RECORD
        UNKNOWN_TOPIC_ID = pb.UNKNOWN_TOPIC_ID
        INCONSISTENT_TOPIC_ID = pb.INCONSISTENT_TOPIC_ID
        OFFSET_MOVED_TO_TIERED_STORAGE = pb.OFFSET_MOVED_TO_TIERED_STORAGE
        NOT_LEADER_OR_FOLLOWER = pb.NOT_LEADER_OR_FOLLOWER
        TRANSACTION_COORDINATOR_FENCED = pb.TRANSACTION_COORDINATOR_FENCED
        NOT_ENOUGH_REPLICAS = pb.NOT_ENOUGH_REPLICAS
        NOT_ENOUGH_REPLICAS_AFTER_APPEND = pb.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        FENCED_LEADER_EPOCH = pb.FENCED_LEADER_EPOCH
        UNKNOWN_LEADER_EPOCH = pb.UNKNOWN_LEADER_EPOCH
        # Codes of the contract the coordinator does not answer with today, mirrored all the same: a code a broker
        # may see is named in logs and usable without protobuf (tests/test_error_codes.py checks both directions).
        CORRUPT_MESSAGE = pb.CORRUPT_MESSAGE
        CLUSTER_AUTHORIZATION_FAILED = pb.CLUSTER_AUTHORIZATION_FAILED
        DUPLICATE_SEQUENCE_NUMBER = pb.DUPLICATE_SEQUENCE_NUMBER
        INVALID_TIMESTAMP = pb.INVALID_TIMESTAMP
        THROTTLING_QUOTA_EXCEEDED = pb.THROTTLING_QUOTA_EXCEEDED


class CallRejected(Exception):
    """The call as a whole never ran; `status` is the gRPC status to answer with."""

    status: grpc.StatusCode = grpc.StatusCode.UNKNOWN


class Overloaded(CallRejected):
    """A coordinator's bounded queue is full."""

    status = grpc.StatusCode.RESOURCE_EXHAUSTED


class ShuttingDown(CallRejected):
    status = grpc.StatusCode.UNAVAILABLE


class PeerUnreachable(CallRejected):
    """A call this node forwards (it holds no replica to answer from) could not reach the node that can."""

    status = grpc.StatusCode.UNAVAILABLE


class PassedOn(CallRejected):
    """A call passed on to another process of the node was answered with a gRPC status: the caller gets it as is."""

    def __init__(self, status: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.status = status


class MalformedRequest(CallRejected):
    """Too malformed to answer item by item, or past a per-call limit."""

    status = grpc.StatusCode.INVALID_ARGUMENT


class UndecodableRequest(MalformedRequest):
    """The request's bytes are not a valid protobuf message of the method's request type."""


class Shed(Overloaded):
    """Refused at the edge before the request was parsed: the node already works on as much as its bounds allow."""


class Unauthenticated(CallRejected):
    status = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(CallRejected):
    status = grpc.StatusCode.PERMISSION_DENIED


class CoordinatorUnavailable(Exception):
    """A coordinator cannot take the operation now; `error_code` goes to every item."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def grpc_status_of(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The one table from exceptions to gRPC statuses at the edge."""
    if isinstance(error, CallRejected):
        return error.status, str(error)
    return grpc.StatusCode.INTERNAL, f"internal error: {type(error).__name__}: {error}"
