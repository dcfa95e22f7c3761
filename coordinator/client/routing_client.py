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
their last per-item error, or the call raises RoutingError if a part could not reach any node. Other
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
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar, final

import grpc

from coordinator.base.backoff import Backoff
from coordinator.client.channels import ChannelPool, channel_credentials, decode_answer
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
    trim_to_fetch_budget,
)
from coordinator.client.routes import RETRIABLE_CODES, CoordinatorRoute, RoutingTable, parse_bootstrap
from coordinator.edge.access_control import FORWARDED_FOR
from coordinator.edge.rpcs import BY_METHOD, ServedBy
from protos import admin_pb2 as admin
from protos import admin_pb2_grpc as admin_grpc
from protos import coordinator_pb2 as pb

DEADLINE_MS_DEFAULT = 30_000
RPC_TIMEOUT_MS_DEFAULT = 10_000
BACKOFF_INITIAL_MS_DEFAULT = 20
BACKOFF_MAX_MS_DEFAULT = 1_000
CHANNELS_MAX_DEFAULT = 64
MESSAGE_MAX_BYTES_DEFAULT = 64 * 1024 * 1024
CHANNEL_CLOSE_GRACE_MS_DEFAULT = 1_000
# Statuses meaning the call never ran (the contract: UNAVAILABLE while a node shuts down; also a refused connection).
RETRIED_STATUS = frozenset({grpc.StatusCode.UNAVAILABLE})
ADMIN_METHODS = frozenset({"AlterReassignments", "ListReassignments"})  # of the operator service (admin.proto)
READER_METHOD = "FindBatches"  # the one method a replica's reader processes serve
# What a follower answers where it lags its leader (a partition it has not applied yet, an offset past its high
# watermark that the leader gave): asked again of the leader, whose word it is (KIP-392's follower fetching).
FOLLOWER_LAG_CODES = frozenset({pb.UNKNOWN_TOPIC_OR_PARTITION, pb.OFFSET_OUT_OF_RANGE})

MessageT = TypeVar("MessageT")


__all__ = ["RoutingClient", "RoutingError", "channel_credentials"]


class RoutingError(Exception):
    """No node could be reached for part of a call before its deadline; the message names the addresses and why."""


@final
class RoutingClient:
    """Routes each item of a call to the node that serves it; retries what moved. Use `async with`."""

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        *,
        credentials: grpc.ChannelCredentials | None = None,
        read_node_id: int | None = None,
        deadline_ms: int = DEADLINE_MS_DEFAULT,
        rpc_timeout_ms: int = RPC_TIMEOUT_MS_DEFAULT,
        backoff_initial_ms: int = BACKOFF_INITIAL_MS_DEFAULT,
        backoff_max_ms: int = BACKOFF_MAX_MS_DEFAULT,
        channels_max: int = CHANNELS_MAX_DEFAULT,
        message_max_bytes: int = MESSAGE_MAX_BYTES_DEFAULT,
        channel_close_grace_ms: int = CHANNEL_CLOSE_GRACE_MS_DEFAULT,
        retry: bool = True,
        metadata: Sequence[tuple[str, str]] = (),
        caller: Callable[[], str | None] | None = None,
    ) -> None:
        """`retry=False`: one try per item, retriable answers kept; `metadata` goes with every call; `caller`: the
        principal each call is passed on for, as `diskless-forwarded-for` (all three for a node's first process
        passing calls on to its commit processes)."""
        self.bootstrap = parse_bootstrap(bootstrap)
        if deadline_ms <= 0 or rpc_timeout_ms <= 0 or channels_max < 1 or message_max_bytes <= 0:
            raise ValueError(
                f"deadline_ms, rpc_timeout_ms and message_max_bytes must be > 0 and channels_max >= 1, got "
                f"{deadline_ms}, {rpc_timeout_ms}, {message_max_bytes}, {channels_max}"
            )
        Backoff(backoff_initial_ms, backoff_max_ms)  # validates the pair now, not at the first failure
        self.deadline_ms = deadline_ms
        self.rpc_timeout_ms = rpc_timeout_ms
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self._channels = ChannelPool(credentials, message_max_bytes, channels_max, channel_close_grace_ms)
        self._table = RoutingTable(read_node_id)
        self._answered_by: str | None = None  # the last node that answered a routing question
        self._next_bootstrap = 0
        self._refreshing = asyncio.Lock()
        self._retry = retry
        self._fixed_metadata = tuple(metadata)
        self._caller = caller
        # Calls sent, by method (every try, routing questions included): what a broker's metrics would count, and
        # how the produce-gateway benchmark measures commit calls per WAL file.
        self.calls_sent: Counter[str] = Counter()

    async def __aenter__(self) -> RoutingClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes every channel (in-flight calls get the grace period)."""
        await self._channels.close()

    # ------------------------------------------------------------------ what is cached

    def routes(self) -> dict[int, CoordinatorRoute]:
        """The cached route of each coordinator (a copy)."""
        return dict(self._table.routes)

    @property
    def single_address(self) -> str | None:
        """The one address serving every known route, when the fast path is on."""
        return self._table.single_address

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
        )
        return pb.CommitFileResponse(throttle_time_ms=fast.throttle_time_ms if fast is not None else 0, batches=results)

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

    async def delete_records(self, request: pb.DeleteRecordsRequest) -> pb.DeleteRecordsResponse:
        return await self._partitioned("DeleteRecords", request, pb.DeleteRecordsResponse())

    async def commit_remote_log_segments(
        self, request: pb.CommitRemoteLogSegmentsRequest
    ) -> pb.CommitRemoteLogSegmentsResponse:
        """Each partition's offload to its coordinator's leader (DESIGN §4a)."""
        return await self._partitioned("CommitRemoteLogSegments", request, pb.CommitRemoteLogSegmentsResponse())

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

    async def _fast_path(self, method: str, request: Any, deadline: float) -> tuple[Any, bool] | None:
        """(answer, whether an item may be retriable) from the one address; None if there is none or it failed."""
        address = self._table.single_address
        if address is None:
            return None
        reader = self._table.readers.pick(address, time.monotonic()) if method == READER_METHOD else None
        if reader is not None:
            answered = await self._send_raw(reader, method, request, deadline)
            if answered is not None:
                return answered
            self._table.readers.unreachable(reader, time.monotonic())  # the node itself answers meanwhile
        answered = await self._send_raw(address, method, request, deadline)
        if answered is None:
            self._table.forget_address(address)
        return answered

    def _call_metadata(self) -> tuple[tuple[str, str], ...] | None:
        caller = self._caller() if self._caller is not None else None
        metadata = self._fixed_metadata + (((FORWARDED_FOR, caller),) if caller is not None else ())
        return metadata or None

    async def _send_raw(self, address: str, method: str, request: Any, deadline: float) -> tuple[Any, bool] | None:
        """The answer decoded on the fast path's terms; None when the address did not answer (UNAVAILABLE)."""
        timeout_s = min(self.rpc_timeout_ms / 1000, deadline - time.monotonic())
        self.calls_sent[method] += 1
        try:
            raw: bytes = await (await self._channels.get(address)).raw(method)(
                request, timeout=timeout_s, metadata=self._call_metadata()
            )
        except grpc.aio.AioRpcError as error:
            if error.code() not in RETRIED_STATUS:
                raise
            return None
        return decode_answer(method, raw)

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
                    self._table.forget_address(address)
                    unreachable.update(dict.fromkeys(indices, answer))
                    retry += indices
                    continue
                answered = results_of(answer)
                if len(answered) != len(indices):
                    raise RoutingError(f"{address} answered {method} with {len(answered)} results for {len(indices)}")
                for index, result in zip(indices, answered, strict=True):
                    results[index] = result
                    unreachable.pop(index, None)
                    if result.error_code in RETRIABLE_CODES:
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

    async def _wait_to_retry(self, backoff: Backoff, deadline: float) -> bool:
        """Sleeps the next backoff wait; False when it would end past the deadline, or retries are off."""
        if not self._retry:
            return False
        wait_s = backoff.failed() / 1000
        if time.monotonic() + wait_s >= deadline:
            return False
        await asyncio.sleep(wait_s)
        return True

    # ------------------------------------------------------------------ routes

    async def _refresh(self, keys: Sequence[PartitionKey], deadline: float, everything: bool) -> str | None:
        """Asks FindCoordinator about `keys` (and DescribeCoordinators when `everything`); why no node answered."""
        async with self._refreshing:  # concurrent callers wait for one refresh rather than repeat it
            keys = [k for k in keys if self._table.address_of(k, ServedBy.LEADER) is None]  # no route known
            if not keys and not (everything and not self._table.coordinators_known):
                return None
            problems = []
            for address in self._routing_candidates():
                answer = await self._ask_routes(address, keys, everything, deadline)
                if isinstance(answer, str):
                    problems.append(answer)
                    self._next_bootstrap += 1  # the next refresh starts from another bootstrap node
                    continue
                self._answered_by = address
                return None
            return "no node answered FindCoordinator: " + "; ".join(problems)

    async def _ask_routes(
        self, address: str, keys: Sequence[PartitionKey], everything: bool, deadline: float
    ) -> str | None:
        calls = []
        if keys:
            topics: dict[bytes, list[int]] = {}
            for topic_id, partition in dict.fromkeys(keys):
                topics.setdefault(topic_id, []).append(partition)
            request = pb.FindCoordinatorRequest(
                topics=[pb.FindCoordinatorRequest.Topic(topic_id=t, partitions=p) for t, p in topics.items()]
            )
            calls.append(self._send(address, "FindCoordinator", request, deadline))
        if everything:
            calls.append(self._send(address, "DescribeCoordinators", pb.DescribeCoordinatorsRequest(), deadline))
        answers = await asyncio.gather(*calls)
        failed = [a for a in answers if isinstance(a, str)]
        if failed:
            self._table.forget_address(address)
            return failed[0]
        if keys:
            self._table.learn_found(answers[0], address)
        if everything:
            self._table.learn_described(answers[-1], address)
        return None

    def _routing_candidates(self) -> list[str]:
        """Bootstrap nodes (starting after the last that failed), then every node a route names."""
        start = self._next_bootstrap % len(self.bootstrap)
        ordered = [*self.bootstrap[start:], *self.bootstrap[:start]]
        return list(dict.fromkeys([*ordered, *self._table.addresses()]))

    # ------------------------------------------------------------------ calls and channels

    def _deadline(self) -> float:
        return time.monotonic() + self.deadline_ms / 1000

    async def _any_node(self, method: str, request: object) -> Any:
        """The call to the first node that answers (the last that answered first), retried until the deadline."""
        deadline = self._deadline()
        backoff = Backoff(self.backoff_initial_ms, self.backoff_max_ms)
        while True:
            candidates = self._routing_candidates()
            if self._answered_by is not None:
                candidates = list(dict.fromkeys([self._answered_by, *candidates]))
            problems = []
            for address in candidates:
                answer = await self._send(address, method, request, deadline)
                if not isinstance(answer, str):
                    self._answered_by = address
                    return answer
                problems.append(answer)
            if not await self._wait_to_retry(backoff, deadline):
                raise RoutingError(f"{method}: no node answered within {self.deadline_ms} ms: " + "; ".join(problems))

    async def _send_read(self, address: str, method: str, request: object, deadline: float) -> Any:
        """As `_send`; FindBatches goes to one of the replica's readers first, if it has any reachable."""
        reader = self._table.readers.pick(address, time.monotonic()) if method == READER_METHOD else None
        if reader is not None:
            answer = await self._send(reader, method, request, deadline)
            if not isinstance(answer, str):
                return answer
            self._table.readers.unreachable(reader, time.monotonic())
        return await self._send(address, method, request, deadline)

    async def _send(self, address: str, method: str, request: object, deadline: float) -> Any:
        """The answer, or why the node could not be reached (a string); other failures raise."""
        timeout_s = min(self.rpc_timeout_ms / 1000, deadline - time.monotonic())
        if timeout_s <= 0:
            return f"{address}: the call's deadline passed"
        channel = await self._channels.get(address)
        stub = admin_grpc.CoordinatorAdminStub(channel.channel) if method in ADMIN_METHODS else channel.stub
        self.calls_sent[method] += 1
        try:
            return await getattr(stub, method)(request, timeout=timeout_s, metadata=self._call_metadata())
        except grpc.aio.AioRpcError as error:
            if error.code() in RETRIED_STATUS:
                return f"{address}: {error.code().name} {error.details()}"
            raise
