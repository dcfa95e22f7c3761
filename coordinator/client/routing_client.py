"""The routing client: what a Python broker (and the benchmark, the tests) uses to call the coordinators.

It bootstraps from one or more node addresses and asks FindCoordinator where each partition's
coordinator is, caching partition → coordinator id (an assignment never moves, DESIGN §2) and
coordinator id → route (leader address, leader epoch, every replica's address). A request is split
by where its items are served, as each method's row says (coordinator/edge/rpcs.py): CommitFile,
DeleteRecords, ListOffsets and CommitRemoteLogSegments to the coordinator's leader, FindBatches and
DescribeFiles to a replica (the leader unless `read_node_id` names another replica); parts for one node
travel in one call, and the answers are merged in request order.

Items answered NOT_COORDINATOR, NOT_LEADER_OR_FOLLOWER, COORDINATOR_NOT_AVAILABLE or
COORDINATOR_LOAD_IN_PROGRESS, and parts whose node is UNAVAILABLE or unreachable, are retried after a
refresh of their routes, with capped exponential backoff, until `deadline_ms`: then the items keep
their last per-item error, or the call raises RoutingError if a part could not reach any node (a CommitFile batch
answered NOT_COORDINATOR by a coordinator its file's owner_ids do not name is answered at once: the partition moved
since the file named its owners, and only a new file naming them commits it, design §5a). Other
gRPC statuses (DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, …) propagate as raised: the call may have run.

Fast path: while every known route is one address (a node without a cluster), a request goes there
unsplit, with no per-item routing; only its retriable items, if any, take the routed path.

Readers: a replica that advertises reader processes (ReplicaEndpoint.read_addresses) has its FindBatches sent
to them in turn; one that is UNAVAILABLE or unreachable is skipped for a second and the replica's own
address answers instead. A read sent to a follower (`read_node_id`) that it answers as lagging its leader (an
unknown partition, an offset past its high watermark) is asked again of the leader, whose word it is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, TypeVar, final

from coordinator.base.backoff import Backoff
from coordinator.client.channels import channel_credentials
from coordinator.client.move_calls import MoveCalls
from coordinator.client.node_calls import READER_METHOD, DeadlinePassed, RoutingError
from coordinator.client.request_parts import (
    PartitionKey,
    commit_error,
    commit_keys,
    commit_part,
    commit_structure_problems,
    describe_part,
    merge_file_answers,
    merge_partition_results,
    partition_keys,
    partition_part,
    partition_results,
    replace_keys,
    replace_part,
    trim_to_fetch_budget,
)
from coordinator.client.routes import RETRIABLE_CODES
from coordinator.edge.rpcs import BY_METHOD, ServedBy
from protos import admin_pb2 as admin
from protos import coordinator_pb2 as pb

# What a follower answers where it lags its leader (a partition it has not applied yet, an offset past its high
# watermark that the leader gave): asked again of the leader, whose word it is (KIP-392's follower fetching).
FOLLOWER_LAG_CODES = frozenset({pb.UNKNOWN_TOPIC_OR_PARTITION, pb.OFFSET_OUT_OF_RANGE})

MessageT = TypeVar("MessageT")


__all__ = ["RoutingClient", "RoutingError", "channel_credentials"]


@final
class RoutingClient(MoveCalls):
    """Routes each item of a call to the node that serves it; retries what moved. Use `async with`; its
    constructor and calls to one node are `NodeCalls`'s (`node_calls.py`)."""

    # ------------------------------------------------------------------ the routed operations

    async def commit_file(self, request: pb.CommitFileRequest) -> pb.CommitFileResponse:
        """Each coordinator's batches to its leader; one answer per batch, in request order."""
        deadline = self._deadline()
        fast = await self._fast_path("CommitFile", request, deadline)
        if fast is not None and not fast[1]:
            return fast[0]  # type: ignore[no-any-return]  # decoded by the method's response type
        fast = None if fast is None else fast[0]
        results: list[Any] = [None] * len(request.batches) if fast is None else list(fast.batches)
        keys = commit_keys(request)
        local = await self._local_commit_problems(request, keys)
        for index, problem in local.items():
            results[index] = commit_error(problem)
        results = await self._route_items(
            "CommitFile",
            keys,
            lambda indices: commit_part(request, indices),
            lambda response: list(response.batches),
            results,
            deadline,
            skip=frozenset(local),
            settled=lambda i, r: (
                r.error_code == pb.NOT_COORDINATOR
                and self._table.partitions.get(keys[i], -1) not in (-1, *request.owner_ids)
            ),
        )
        return pb.CommitFileResponse(throttle_time_ms=fast.throttle_time_ms if fast is not None else 0, batches=results)

    async def replace_batches(self, request: pb.ReplaceBatchesRequest) -> pb.ReplaceBatchesResponse:
        """Object consolidation (DESIGN §4c): each coordinator's extents to its leader; one answer per extent, in
        request order. The byte-range rule spans the request; a node checks it among the extents it is sent."""
        deadline = self._deadline()
        fast = await self._fast_path("ReplaceBatches", request, deadline)
        if fast is not None and not fast[1]:
            return fast[0]  # type: ignore[no-any-return]  # decoded by the method's response type
        results: list[Any] = [None] * len(request.extents) if fast is None else list(fast[0].extents)
        results = await self._route_items(
            "ReplaceBatches",
            replace_keys(request),
            lambda indices: replace_part(request, indices),
            lambda response: list(response.extents),
            results,
            deadline,
        )
        return pb.ReplaceBatchesResponse(extents=results)

    async def get_file_merge_work_item(
        self, request: pb.GetFileMergeWorkItemRequest
    ) -> pb.GetFileMergeWorkItemResponse:
        """One coordinator's merge plan from its leader (DESIGN §4c), retried while its leader moves."""
        deadline = self._deadline()
        backoff = Backoff(self.backoff_initial_ms, self.backoff_max_ms)
        coordinator_id = request.coordinator_id
        while True:
            address = self._leader_of(coordinator_id)
            problem = None
            if address is None:
                self._table.coordinators_known = False
                problem = await self._refresh([], deadline, everything=True)
                address = self._leader_of(coordinator_id)
            if address is None:
                answer: Any = problem or f"no leader known for coordinator {coordinator_id}"
            else:
                answer = await self._send(address, "GetFileMergeWorkItem", request, deadline)
                if not isinstance(answer, str) and answer.error_code not in RETRIABLE_CODES:
                    return answer  # type: ignore[no-any-return]
                if isinstance(answer, str):
                    self._table.forget_address(address)
            self._table.routes.pop(coordinator_id, None)  # moved, or unknown: asked again before the next try
            if not await self._wait_to_retry(backoff, deadline):
                if isinstance(answer, str):
                    raise RoutingError(f"GetFileMergeWorkItem: {answer}")
                return answer  # type: ignore[no-any-return]

    def _leader_of(self, coordinator_id: int) -> str | None:
        route = self._table.routes.get(coordinator_id)
        return None if route is None else route.address_for(ServedBy.LEADER)

    async def find_batches(self, request: pb.FindBatchesRequest) -> pb.FindBatchesResponse:
        """From each coordinator's read replica, under the call's one byte budget in request order."""
        return await self._partitioned(
            "FindBatches",
            request,
            pb.FindBatchesResponse(),
            lambda merged: trim_to_fetch_budget(request, merged),
        )

    async def list_offsets(self, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
        return await self._partitioned("ListOffsets", request, pb.ListOffsetsResponse())

    async def describe_producers(self, request: pb.DescribeProducersRequest) -> pb.DescribeProducersResponse:
        """Each partition's producers and open transactions from its coordinator's leader (KIP-664)."""
        return await self._partitioned("DescribeProducers", request, pb.DescribeProducersResponse())

    async def delete_records(self, request: pb.DeleteRecordsRequest) -> pb.DeleteRecordsResponse:
        return await self._partitioned("DeleteRecords", request, pb.DeleteRecordsResponse())

    async def commit_remote_log_segments(
        self, request: pb.CommitRemoteLogSegmentsRequest
    ) -> pb.CommitRemoteLogSegmentsResponse:
        """Each partition's offload to its coordinator's leader (DESIGN §4a)."""
        return await self._partitioned("CommitRemoteLogSegments", request, pb.CommitRemoteLogSegmentsResponse())

    async def init_diskless_log(self, request: pb.InitDisklessLogRequest) -> pb.InitDisklessLogResponse:
        """Each partition's switch to its coordinator's leader (design §4d)."""
        return await self._partitioned("InitDisklessLog", request, pb.InitDisklessLogResponse())

    async def repair_diskless_log(self, request: pb.RepairDisklessLogRequest) -> pb.RepairDisklessLogResponse:
        return await self._partitioned("RepairDisklessLog", request, pb.RepairDisklessLogResponse())

    async def describe_diskless_logs(self, request: pb.DescribeDisklessLogsRequest) -> pb.DescribeDisklessLogsResponse:
        return await self._partitioned("DescribeDisklessLogs", request, pb.DescribeDisklessLogsResponse())

    async def describe_files(self, request: pb.DescribeFilesRequest) -> pb.DescribeFilesResponse:
        """Every key asked of a replica of every coordinator; per key, what they know together."""
        deadline = self._deadline()
        if self._table.coordinators_known:
            fast = await self._fast_path("DescribeFiles", request, deadline)
            if fast is not None and not fast[1]:
                return fast[0]  # type: ignore[no-any-return]
        results = await self._describe_everywhere(request, deadline)
        return pb.DescribeFilesResponse(files=results)

    async def coordinators_of(self, topic_id: bytes, partitions: Iterable[int]) -> list[int]:
        """Each partition's coordinator id (-1 where FindCoordinator gave an error), refreshing what is unknown."""
        keys = [(topic_id, p) for p in partitions]
        missing = [k for k in keys if k not in self._table.partitions]
        if missing:
            problem = await self._refresh(missing, self._deadline(), everything=False)
            if problem is not None:
                raise RoutingError(problem)
        return [self._table.partitions.get(k, -1) for k in keys]

    # Topic-wide calls involve every coordinator; a node takes them whole, so they go to one that answers.

    async def create_partitions(self, request: pb.CreatePartitionsRequest) -> pb.CreatePartitionsResponse:
        return await self._any_node("CreatePartitions", request)  # type: ignore[no-any-return]

    async def delete_topics(self, request: pb.DeleteTopicsRequest) -> pb.DeleteTopicsResponse:
        return await self._any_node("DeleteTopics", request)  # type: ignore[no-any-return]

    async def alter_topic_configs(self, request: pb.AlterTopicConfigsRequest) -> pb.AlterTopicConfigsResponse:
        """Changes topics' configurations (DESIGN §4a): set, back to default, or only checked (`validate_only`)."""
        return await self._any_node("AlterTopicConfigs", request)  # type: ignore[no-any-return]

    async def describe_topic_configs(self, request: pb.DescribeTopicConfigsRequest) -> pb.DescribeTopicConfigsResponse:
        """Every known configuration of each topic, sorted by name, with whether it is at its default."""
        return await self._any_node("DescribeTopicConfigs", request)  # type: ignore[no-any-return]

    async def describe_coordinators(self, request: pb.DescribeCoordinatorsRequest) -> pb.DescribeCoordinatorsResponse:
        return await self._any_node("DescribeCoordinators", request)  # type: ignore[no-any-return]

    async def describe_produce_gateways(
        self, brokers: Iterable[pb.DescribeProduceGatewaysRequest.Broker]
    ) -> pb.DescribeProduceGatewaysResponse:
        """Each coordinator's gateways per rack among `brokers`, from any node (each knows every coordinator's
        leader)."""
        request = pb.DescribeProduceGatewaysRequest(brokers=brokers)
        return await self._any_node("DescribeProduceGateways", request)  # type: ignore[no-any-return]

    async def alter_reassignments(
        self, reassignments: Iterable[tuple[int, Sequence[int]]]
    ) -> admin.AlterReassignmentsResponse:
        """Starts each coordinator's reassignment to its replicas (any node of the cluster writes it to etcd)."""
        request = admin.AlterReassignmentsRequest(
            reassignments=[admin.AlterReassignmentsRequest.Reassignment(coordinator_id=c, replicas=r)
                           for c, r in reassignments]
        )  # fmt: skip
        return await self._any_node("AlterReassignments", request)  # type: ignore[no-any-return]

    async def list_reassignments(self, all_coordinators: bool = False) -> admin.ListReassignmentsResponse:
        """The reassignments in progress (every coordinator's replicas with `all_coordinators`) and the live nodes."""
        request = admin.ListReassignmentsRequest(all_coordinators=all_coordinators)
        return await self._any_node("ListReassignments", request)  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ routed paths

    async def _partitioned(
        self,
        method: str,
        request: Any,
        empty_response: MessageT,
        after_merge: Callable[[MessageT], None] | None = None,
    ) -> MessageT:
        """A partition-keyed call: unsplit on the fast path, else routed; `after_merge` sees a merged answer."""
        deadline = self._deadline()
        answered = await self._fast_path(method, request, deadline)
        if answered is not None and not answered[1]:
            return answered[0]  # type: ignore[no-any-return]
        fast = None if answered is None else answered[0]
        keys = partition_keys(request)
        prior: list[Any] = [None] * len(keys) if fast is None else partition_results(fast)
        results = await self._route_items(
            method,
            keys,
            lambda indices: partition_part(request, indices),
            partition_results,
            prior,
            deadline,
        )
        throttle = fast.throttle_time_ms if fast is not None else 0
        merged: MessageT = merge_partition_results(request, empty_response, results, throttle)  # type: ignore[type-var]
        if after_merge is not None:
            after_merge(merged)
        return merged

    async def _route_items(
        self,
        method: str,
        keys: Sequence[PartitionKey],
        part_of: Callable[[Sequence[int]], object],
        results_of: Callable[[Any], list[Any]],
        results: list[Any],
        deadline: float,
        skip: frozenset[int] = frozenset(),
        settled: Callable[[int, Any], bool] = lambda index, result: False,  # a retriable answer that is final
    ) -> list[Any]:
        """Sends every unanswered or retriable item to where it is served (the method's row says: its coordinator's
        leader or a replica) until none is left or the deadline passes."""
        access = BY_METHOD[method].served_by
        pending = [i for i, r in enumerate(results) if i not in skip and (r is None or r.error_code in RETRIABLE_CODES)]
        for index in pending:
            if results[index] is not None:  # answered retriably on the fast path: its route is stale
                self._table.forget_coordinator_of(keys[index])
        unreachable: dict[int, str] = {}  # item -> why its last try reached no node
        backoff = Backoff(self.backoff_initial_ms, self.backoff_max_ms)
        to_leader: set[int] = set()  # items a follower answered as lagging: their leader answers them
        while pending:
            groups, problem = await self._group(keys, pending, access, deadline, to_leader)
            by_follower = self._followers_serve(method, keys, groups)
            grouped = {i for indices in groups.values() for i in indices}
            retry = [i for i in pending if i not in grouped]
            for index in retry:
                unreachable[index] = problem or "no route"
            readers = self._table.readers.regroup(groups, time.monotonic()) if method == READER_METHOD else {}
            answers = await asyncio.gather(
                *(self._send_read(address, method, part_of(indices), deadline) for address, indices in groups.items()),
                *(self._send(reader, method, part_of(indices), deadline) for reader, indices in readers.items()),
            )
            for (address, indices), answer in zip([*groups.items(), *readers.items()], answers, strict=True):
                if isinstance(answer, str) and address in readers:
                    self._table.readers.unreachable(address, time.monotonic())  # its replicas answer next time
                    retry += indices
                    continue
                if isinstance(answer, str):
                    if not isinstance(answer, DeadlinePassed):  # a slow node is not a gone one
                        self._table.forget_address(address)
                    unreachable.update(
                        {
                            i: answer
                            for i in indices
                            if not (isinstance(answer, DeadlinePassed) and results[i] is not None)
                        }
                    )
                    retry += indices
                    continue
                answered = results_of(answer)
                if len(answered) != len(indices):
                    raise RoutingError(f"{address} answered {method} with {len(answered)} results for {len(indices)}")
                for index, result in zip(indices, answered, strict=True):
                    results[index] = result
                    unreachable.pop(index, None)
                    if result.error_code in RETRIABLE_CODES and not settled(index, result):
                        self._table.forget_coordinator_of(keys[index])
                        retry.append(index)
                    elif index in by_follower and result.error_code in FOLLOWER_LAG_CODES:
                        to_leader.add(index)
                        retry.append(index)
            pending = sorted(retry)
            if pending and not await self._wait_to_retry(backoff, deadline):
                lost = sorted({unreachable[i] for i in pending if i in unreachable})
                if lost:
                    raise RoutingError(f"{method}: no node reached within {self.deadline_ms} ms: " + "; ".join(lost))
                break
        return results

    def _followers_serve(self, method: str, keys: Sequence[PartitionKey], groups: dict[str, list[int]]) -> set[int]:
        """The items of `groups` sent to a replica other than their coordinator's leader (reads preferring one)."""
        if method != READER_METHOD or self._table.read_node_id is None:
            return set()
        return {
            index
            for address, indices in groups.items()
            for index in indices
            if address != self._table.address_of(keys[index], ServedBy.LEADER)
        }

    async def _group(
        self,
        keys: Sequence[PartitionKey],
        pending: Sequence[int],
        access: ServedBy,
        deadline: float,
        to_leader: Collection[int] = (),
    ) -> tuple[dict[str, list[int]], str | None]:
        """Pending items by the address that serves them (ascending within each); why some have none. Items in
        `to_leader` go to their coordinator's leader whatever `access` says."""

        def access_of(index: int) -> ServedBy:
            return ServedBy.LEADER if index in to_leader else access

        unrouted = [keys[i] for i in pending if self._table.address_of(keys[i], access_of(i)) is None]
        problem = await self._refresh(unrouted, deadline, everything=False) if unrouted else None
        groups: dict[str, list[int]] = {}
        for index in pending:
            # A node that answered routing gives an unroutable item its real error (unknown partition, …).
            address = self._table.address_of(keys[index], access_of(index)) or self._answered_by
            if address is not None:
                groups.setdefault(address, []).append(index)
        return groups, problem

    async def _describe_everywhere(
        self, request: pb.DescribeFilesRequest, deadline: float
    ) -> list[pb.DescribeFilesResponse.FileResult]:
        """Asks the read replica of every coordinator about every key; retries the keys some could not answer."""
        count = len(request.object_keys)
        results: list[pb.DescribeFilesResponse.FileResult | None] = [None] * count
        pending = list(range(count))
        backoff = Backoff(self.backoff_initial_ms, self.backoff_max_ms)
        problem: str | None = None
        while pending:
            if not self._table.coordinators_known:
                problem = await self._refresh([], deadline, everything=True)
            addresses = self._table.cover() if self._table.coordinators_known else None
            if addresses:
                part = describe_part(request, pending)
                answers = await asyncio.gather(*(self._send(a, "DescribeFiles", part, deadline) for a in addresses))
                pending, problem = self._merge_files(addresses, answers, pending, results)
            if pending and not await self._wait_to_retry(backoff, deadline):
                break
        reason = problem or "not every coordinator could be reached"
        unavailable = pb.COORDINATOR_NOT_AVAILABLE
        return [
            r if r is not None else pb.DescribeFilesResponse.FileResult(object_key=k, error_code=unavailable,
                                                                        error_message=reason)
            for k, r in zip(request.object_keys, results, strict=True)
        ]  # fmt: skip

    def _merge_files(
        self,
        addresses: Sequence[str],
        answers: Sequence[Any],
        pending: Sequence[int],
        results: list[pb.DescribeFilesResponse.FileResult | None],
    ) -> tuple[list[int], str | None]:
        problems = []
        for address, answer in zip(addresses, answers, strict=True):
            if isinstance(answer, str):
                self._table.forget_address(address)
                problems.append(answer)
            elif len(answer.files) != len(pending):
                problems.append(f"{address} answered DescribeFiles with {len(answer.files)} results for {len(pending)}")
        if problems:
            return list(pending), "; ".join(problems)
        retry = []
        for position, index in enumerate(pending):
            merged = merge_file_answers([answer.files[position] for answer in answers])
            results[index] = merged
            if merged.error_code in RETRIABLE_CODES:
                retry.append(index)
        if retry:
            self._table.coordinators_known = False
        return retry, None

    async def _local_commit_problems(
        self, request: pb.CommitFileRequest, keys: Sequence[PartitionKey]
    ) -> dict[int, Any]:
        """Batches refused here because their parts go to several nodes (the overlap rule spans the file)."""
        access = BY_METHOD["CommitFile"].served_by
        pending = [i for i in range(len(keys)) if self._table.address_of(keys[i], access) is None]
        if pending:
            await self._refresh([keys[i] for i in pending], self._deadline(), everything=False)
        if len({self._table.address_of(k, access) for k in keys}) <= 1:
            return {}
        return {i: p for i, p in enumerate(commit_structure_problems(request)) if p is not None}
