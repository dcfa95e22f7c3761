"""Splitting a request into parts by where its items are served, and merging the parts' answers in request order.

Pure: no sockets. Items are numbered flat, in request order (every partition of every topic, every
batch, every object key); a part is the request with a subset of those items, and the answer to a
part lists its items' results in the part's order (the contract: one result per item, in order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from coordinator.base.result import ItemError
from coordinator.commits import parts, rules
from protos import coordinator_pb2 as pb

PartitionKey = tuple[bytes, int]  # (topic id, partition)
PartitionRequest = (
    pb.FindBatchesRequest
    | pb.ListOffsetsRequest
    | pb.DeleteRecordsRequest
    | pb.CommitRemoteLogSegmentsRequest
    | pb.DescribeProducersRequest
)
PartitionResponse = (
    pb.FindBatchesResponse
    | pb.ListOffsetsResponse
    | pb.DeleteRecordsResponse
    | pb.CommitRemoteLogSegmentsResponse
    | pb.DescribeProducersResponse
)
RequestT = TypeVar(
    "RequestT",
    pb.FindBatchesRequest,
    pb.ListOffsetsRequest,
    pb.DeleteRecordsRequest,
    pb.CommitRemoteLogSegmentsRequest,
    pb.DescribeProducersRequest,
)
ResponseT = TypeVar(
    "ResponseT",
    pb.FindBatchesResponse,
    pb.ListOffsetsResponse,
    pb.DeleteRecordsResponse,
    pb.CommitRemoteLogSegmentsResponse,
    pb.DescribeProducersResponse,
)

# The most alive state among the answering coordinators wins (DESIGN §4, as a node merges its own coordinators).
_STATES_MOST_ALIVE_FIRST = (pb.FILE_STATE_LIVE, pb.FILE_STATE_AWAITING_HANDOVER, pb.FILE_STATE_AWAITING_DELETION)


# ------------------------------------ by partition: FindBatches, ListOffsets, DeleteRecords, CommitRemoteLogSegments


def partition_keys(request: PartitionRequest) -> list[PartitionKey]:
    # DescribeProducers names its partitions by number, the others by a message with a `partition` field.
    return [
        (topic.topic_id, p if isinstance(p, int) else p.partition) for topic in request.topics for p in topic.partitions
    ]


def partition_part(request: RequestT, indices: Sequence[int]) -> RequestT:
    """The request with only the items at `indices` (ascending); a topic keeps its place, split where it was."""
    part = type(request)()
    part.CopyFrom(request)
    part.ClearField("topics")
    wanted = set(indices)
    index = 0
    for topic in request.topics:
        added: Any = None  # the three requests' Topic types differ only in name
        for partition in topic.partitions:
            if index in wanted:
                if added is None:
                    added = part.topics.add(topic_id=topic.topic_id)
                added.partitions.append(partition)
            index += 1
    return part


def partition_results(response: PartitionResponse) -> list[Any]:
    """Every partition result of an answer, flat, in order."""
    return [p for topic in response.topics for p in topic.partitions]


def merge_partition_results(
    request: PartitionRequest, response: ResponseT, results: Sequence[Any], throttle_time_ms: int
) -> ResponseT:
    """Fills the empty `response` with `results` (flat, request order) under the request's topics."""
    if "throttle_time_ms" in response.DESCRIPTOR.fields_by_name:  # not in every response
        response.throttle_time_ms = throttle_time_ms  # type: ignore[attr-defined]
    index = 0
    for topic in request.topics:
        count = len(topic.partitions)
        response.topics.add(topic_id=topic.topic_id).partitions.extend(results[index : index + count])
        index += count
    return response


def trim_to_fetch_budget(request: pb.FindBatchesRequest, response: pb.FindBatchesResponse) -> None:
    """Applies the call's one byte budget across the merged parts, in request order (DESIGN §4 FindBatches).

    Each part was answered under the whole budget, so each partition's batches are a prefix at least as long as
    a single call would return; cutting them by the same rule gives the single call's answer.
    """
    total_bytes = 0
    total_batches = 0
    for topic_request, topic_result in zip(request.topics, response.topics, strict=True):
        for asked, result in zip(topic_request.partitions, topic_result.partitions, strict=True):
            if result.error_code != pb.NONE:
                continue
            partition_bytes = 0
            kept = 0
            for batch in result.batches:
                if total_batches > 0 and (
                    partition_bytes >= asked.max_partition_fetch_bytes or total_bytes >= request.fetch_max_bytes
                ):
                    break
                partition_bytes += batch.byte_size
                total_bytes += batch.byte_size
                total_batches += 1
                kept += 1
            del result.batches[kept:]


# ---------------------------------------------------------------- CommitFile


def commit_keys(request: pb.CommitFileRequest) -> list[PartitionKey]:
    return [(batch.topic_id, batch.partition) for batch in request.batches]


def commit_part(request: pb.CommitFileRequest, indices: Sequence[int]) -> pb.CommitFileRequest:
    """The file's fields with only the batches at `indices`: each coordinator commits its own batches."""
    part = pb.CommitFileRequest()
    part.CopyFrom(request)
    part.ClearField("batches")
    part.batches.extend(request.batches[i] for i in indices)
    return part


def commit_structure_problems(request: pb.CommitFileRequest) -> list[ItemError | None]:
    """Per batch, its structural problem over the whole request (the server's rule).

    A node checks byte-range overlap only among the batches it is sent; when parts go to several nodes,
    the client applies the rule to the whole file so an overlap across parts is still refused.
    """
    return rules.batch_structure_problems(parts.request_batches(request.batches), request.file_size)


def commit_error(problem: ItemError) -> pb.CommitFileResponse.BatchResult:
    return pb.CommitFileResponse.BatchResult(
        error_code=problem.error_code,  # ErrorCode mirrors the contract's enum
        error_message=problem.message,
        assigned_base_offset=-1,
        log_append_time=-1,
        log_start_offset=-1,
    )


# ---------------------------------------------------------------- ReplaceBatches (DESIGN §4c)


def replace_keys(request: pb.ReplaceBatchesRequest) -> list[PartitionKey]:
    return [(extent.topic_id, extent.partition) for extent in request.extents]


def replace_part(request: pb.ReplaceBatchesRequest, indices: Sequence[int]) -> pb.ReplaceBatchesRequest:
    """The object's fields with only the extents at `indices`: each coordinator moves its own runs."""
    part = pb.ReplaceBatchesRequest()
    part.CopyFrom(request)
    part.ClearField("extents")
    part.extents.extend(request.extents[i] for i in indices)
    return part


# ---------------------------------------------------------------- DescribeFiles


def describe_part(request: pb.DescribeFilesRequest, indices: Sequence[int]) -> pb.DescribeFilesRequest:
    return pb.DescribeFilesRequest(object_keys=[request.object_keys[i] for i in indices], timeout_ms=request.timeout_ms)


def merge_file_answers(answers: Sequence[pb.DescribeFilesResponse.FileResult]) -> pb.DescribeFilesResponse.FileResult:
    """One key's result from every node's, for a broker deciding whether it may delete the file.

    A file any node knows is known, a commit in flight included (a node describes it as it will land): the union
    of the known answers, whatever the other nodes said, errors included. Otherwise the first error, if any node
    had one: nobody concludes a file unknown without every coordinator's word. Only then FILE_STATE_UNKNOWN.
    """
    known = [a for a in answers if a.error_code == pb.NONE and a.state != pb.FILE_STATE_UNKNOWN]
    if not known:
        for answer in answers:
            if answer.error_code != pb.NONE:
                return answer
        known = list(answers)  # every node answered, and none knows the file
    merged = pb.DescribeFilesResponse.FileResult(object_key=answers[0].object_key, error_code=pb.NONE)
    merged.coordinator_ids.extend(sorted({c for answer in known for c in answer.coordinator_ids}))
    states = {answer.state for answer in known}
    merged.has_live_batches = any(answer.has_live_batches for answer in known)
    merged.state = next((s for s in _STATES_MOST_ALIVE_FIRST if s in states), pb.FILE_STATE_UNKNOWN)
    return merged
