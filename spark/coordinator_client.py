"""The coordinators as the orphan scan sees them: discovery on the driver; known keys and DescribeFiles on executors.

Discovery (before anything is listed): DescribeCoordinators on the first
`--bootstrap` address that answers names every coordinator and its leader's
endpoint, read by the routing rules every client shares
(`coordinator.client.routes`: an unspecified host is the answering node's, no
leader is a problem; TLS credentials as `coordinator.client.routing_client` builds
them); then every distinct leader node is asked for its own coordinators,
so that each coordinator has answered from where it is led. Any coordinator
with an error, without a leader, or on a node that does not answer aborts the
scan (`CoordinatorsUnavailable`). Coordinator ids must be 0..S-1 (they are
metadata-log partitions): a gap means one was not reported, and the scan
cannot know what that one holds.

Known keys (executors): each coordinator's leader, as discovery found it,
streams every key the coordinator knows (ListFileKeys: one snapshot of its
state, in pages). The leader, not a follower: its state holds every commit it
acknowledged, where a follower's may lag behind. A stream that fails, ends
early or contradicts itself raises CoordinatorsUnavailable (`KnownKeysStream`):
the scan then aborts, since keys missing from the set would look orphaned.

DescribeFiles (executors, before each batch of deletes): each task opens one
channel per node and sends DescribeFiles in batches of `DESCRIBE_BATCH_KEYS`,
every batch to every node. A key is still an orphan only if every node
answered it without error and no coordinator knows it; a node that knows it
decides (the most alive state wins, as in DescribeFiles itself); anything else
(an error, a failed call after its retries, an answer that does not match the
request) leaves it unresolved, and unresolved files are kept.

TLS material travels to the executors as bytes inside `CoordinatorAccess`,
as Spark ships any task argument; on a shared cluster turn on Spark's RPC
encryption (`spark.network.crypto.enabled`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

import grpc

from coordinator.base.backoff import Backoff
from coordinator.client.routes import endpoint_problem, route_of
from coordinator.client.routing_client import channel_credentials
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc

DEFAULT_BOOTSTRAP = "127.0.0.1:50051"
RPC_TIMEOUT_S = 30.0
# Keys per DescribeFiles call: far below diskless.coordinator.request.max.items (10000 by default).
DESCRIBE_BATCH_KEYS = 1000
# Attempts per DescribeFiles call on one node, the first included; the waits double from DESCRIBE_BACKOFF_MS
# (a ListFileKeys stream is retried likewise while no page has come).
DESCRIBE_ATTEMPTS = 3
DESCRIBE_BACKOFF_MS = 500
DESCRIBE_BACKOFF_MAX_MS = 2000
KNOWN_KEYS_ATTEMPTS = DESCRIBE_ATTEMPTS
# One coordinator's whole ListFileKeys stream; the node itself ends one at diskless.coordinator.file.keys.stream.max.ms.
KNOWN_KEYS_TIMEOUT_S = 900.0
RETRIED_STATUS = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})
MESSAGE_MAX_BYTES = 64 * 1024 * 1024

# Verdicts on a candidate, the known ones from the most alive (the order DescribeFiles' state uses).
LIVE = "live"
AWAITING_HANDOVER = "awaiting_handover"
AWAITING_DELETION = "awaiting_deletion"
UNRESOLVED = "unresolved"
ORPHAN = "orphan"
KNOWN_VERDICTS = (LIVE, AWAITING_HANDOVER, AWAITING_DELETION)
VERDICTS = (*KNOWN_VERDICTS, UNRESOLVED, ORPHAN)
_VERDICT_OF_STATE = {
    pb.FILE_STATE_LIVE: LIVE,
    pb.FILE_STATE_AWAITING_HANDOVER: AWAITING_HANDOVER,
    pb.FILE_STATE_AWAITING_DELETION: AWAITING_DELETION,
}

T = TypeVar("T")


class CoordinatorsUnavailable(Exception):
    """A coordinator cannot answer for what it holds; the message says which and why."""


@dataclass(frozen=True, slots=True)
class CoordinatorAccess:
    """How to reach the coordinators: picklable, so executors open their own channels."""

    bootstrap: tuple[str, ...]
    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    rpc_timeout_s: float = RPC_TIMEOUT_S

    def channel(self, address: str) -> grpc.Channel:
        options = [("grpc.max_receive_message_length", MESSAGE_MAX_BYTES)]
        credentials = channel_credentials(self.ca_pem, self.cert_pem, self.key_pem) if self.ca_pem is not None else None
        if credentials is None:
            return grpc.insecure_channel(address, options=options)
        return grpc.secure_channel(address, credentials, options=options)


@dataclass(frozen=True, slots=True)
class CoordinatorFacts:
    coordinator_id: int
    node: str  # HOST:PORT of its leader
    leader_epoch: int
    oldest_live_file_ms: int  # -1: no live file
    live_file_count: int
    files_awaiting_handover: int
    files_awaiting_deletion: int


@dataclass(frozen=True, slots=True)
class Discovery:
    coordinators: tuple[CoordinatorFacts, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({c.node for c in self.coordinators}))

    @property
    def membership(self) -> frozenset[tuple[int, str]]:
        """(coordinator id, node): what must not change between the classification and a deletion."""
        return frozenset((c.coordinator_id, c.node) for c in self.coordinators)


def _call_with(access: CoordinatorAccess, address: str, call: Callable[[pb_grpc.DisklessCoordinatorStub], T]) -> T:
    with access.channel(address) as channel:
        return call(pb_grpc.DisklessCoordinatorStub(channel))


def _describe_coordinators(
    access: CoordinatorAccess, address: str, coordinator_ids: Sequence[int] = ()
) -> pb.DescribeCoordinatorsResponse:
    request = pb.DescribeCoordinatorsRequest(coordinator_ids=coordinator_ids)
    return _call_with(access, address, lambda stub: stub.DescribeCoordinators(request, timeout=access.rpc_timeout_s))


def _rpc_problem(address: str, error: grpc.RpcError) -> str:
    return f"{address}: {error.code().name} {error.details()}"


def _first_answer(access: CoordinatorAccess) -> tuple[str, pb.DescribeCoordinatorsResponse]:
    problems = []
    for address in access.bootstrap:
        try:
            return address, _describe_coordinators(access, address)
        except grpc.RpcError as error:
            problems.append(_rpc_problem(address, error))
    raise CoordinatorsUnavailable("no --bootstrap address answered DescribeCoordinators: " + "; ".join(problems))


def _leader_address(description: pb.CoordinatorDescription, bootstrap_address: str) -> str:
    address = route_of(description.leader, bootstrap_address).leader_address
    if address is None:  # _description_problem refused it first; kept for the type
        raise CoordinatorsUnavailable(f"coordinator {description.coordinator_id} has no leader")
    return address


def _error_name(code: int) -> str:
    """The Kafka error's name, or its number if this version does not know it (a newer coordinator's)."""
    return pb.ErrorCode.Name(code) if code in pb.ErrorCode.values() else f"error {code}"


def _description_problem(description: pb.CoordinatorDescription) -> str | None:
    if description.error_code != pb.NONE:
        name = _error_name(description.error_code)
        return f"coordinator {description.coordinator_id}: {name} {description.error_message}"
    if not description.HasField("leader"):
        return f"coordinator {description.coordinator_id} has no leader"
    return endpoint_problem(description.leader)


def discover(access: CoordinatorAccess) -> Discovery:
    """Every coordinator, asked where it is led; raises CoordinatorsUnavailable if any cannot answer."""
    bootstrap_address, first = _first_answer(access)
    nodes: dict[str, list[int]] = {}
    for description in first.coordinators:
        problem = _description_problem(description)
        if problem:
            raise CoordinatorsUnavailable(f"{bootstrap_address}: {problem}")
        nodes.setdefault(_leader_address(description, bootstrap_address), []).append(description.coordinator_id)
    facts = []
    for node, coordinator_ids in sorted(nodes.items()):
        try:
            answer = _describe_coordinators(access, node, coordinator_ids)
        except grpc.RpcError as error:
            raise CoordinatorsUnavailable(
                f"node {node} (leader of coordinators {coordinator_ids}) did not answer: {_rpc_problem(node, error)}"
            ) from None
        answered = {d.coordinator_id: d for d in answer.coordinators}
        for coordinator_id in coordinator_ids:
            described = answered.get(coordinator_id)
            if described is None:
                raise CoordinatorsUnavailable(f"node {node}: coordinator {coordinator_id} was not described")
            problem = _description_problem(described)
            if problem is None and _leader_address(described, node) != node:
                problem = f"coordinator {coordinator_id}: its leader moved from {node} while the scan asked"
            if problem:
                raise CoordinatorsUnavailable(f"node {node}: {problem}")
            facts.append(_facts(described, node))
    return Discovery(_complete(facts))


def _facts(description: pb.CoordinatorDescription, node: str) -> CoordinatorFacts:
    return CoordinatorFacts(
        coordinator_id=description.coordinator_id,
        node=node,
        leader_epoch=description.leader.leader_epoch,
        oldest_live_file_ms=description.oldest_live_file_timestamp,
        live_file_count=description.live_file_count,
        files_awaiting_handover=description.files_awaiting_handover,
        files_awaiting_deletion=description.files_awaiting_deletion,
    )


def _complete(facts: list[CoordinatorFacts]) -> tuple[CoordinatorFacts, ...]:
    ids = sorted(f.coordinator_id for f in facts)
    if not ids:
        raise CoordinatorsUnavailable("no coordinator was reported: nothing can vouch for any file")
    if ids != list(range(len(ids))):
        missing = sorted(set(range(ids[-1] + 1)) - set(ids))
        raise CoordinatorsUnavailable(f"coordinator ids must be 0..{ids[-1]}; not reported: {missing}")
    return tuple(sorted(facts, key=lambda f: f.coordinator_id))


# ---------------------------------------------------------------------- DescribeFiles (executors)

Answer = pb.DescribeFilesResponse.FileResult | str  # a node's result for one key, or why it gave none


def verdict_of(answers: Sequence[Answer]) -> tuple[str, str]:
    """(verdict, reason) of one key from every node's answer; the reason is set only when unresolved."""
    known: list[str] = []
    reason = ""
    for answer in answers:
        if isinstance(answer, str):
            reason = reason or answer
            continue
        if answer.error_code != pb.NONE:
            reason = reason or f"{_error_name(answer.error_code)} {answer.error_message}".strip()
            continue
        state = _VERDICT_OF_STATE.get(answer.state)
        if answer.has_live_batches:
            state = LIVE
        if state is not None:
            known.append(state)
        elif answer.coordinator_ids:
            reason = reason or f"coordinators {list(answer.coordinator_ids)} know it, in no known state"
    if known:
        return min(known, key=KNOWN_VERDICTS.index), ""
    if reason:
        return UNRESOLVED, reason
    return ORPHAN, ""


class FileDescriber:
    """Channels to every node for one executor partition; `describe` asks each node about a batch of keys."""

    def __init__(
        self, access: CoordinatorAccess, nodes: Sequence[str], sleep: Callable[[float], None] = time.sleep
    ) -> None:
        if not nodes:
            raise ValueError("no node to ask")
        self._access = access
        self._sleep = sleep
        self._channels = [(node, access.channel(node)) for node in nodes]
        self._stubs = [(node, pb_grpc.DisklessCoordinatorStub(channel)) for node, channel in self._channels]

    def __enter__(self) -> FileDescriber:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        for _, channel in self._channels:
            channel.close()

    def describe(self, keys: Sequence[str]) -> list[tuple[str, str]]:
        """(verdict, reason) per key, in order; at most DESCRIBE_BATCH_KEYS keys."""
        if len(keys) > DESCRIBE_BATCH_KEYS:
            raise ValueError(f"{len(keys)} keys in one DescribeFiles batch (at most {DESCRIBE_BATCH_KEYS})")
        if not keys:
            return []
        per_node = [self._ask(node, stub, keys) for node, stub in self._stubs]
        return [verdict_of([answers[i] for answers in per_node]) for i in range(len(keys))]

    def _ask(self, node: str, stub: pb_grpc.DisklessCoordinatorStub, keys: Sequence[str]) -> list[Answer]:
        timeout_s = self._access.rpc_timeout_s
        request = pb.DescribeFilesRequest(object_keys=keys, timeout_ms=int(timeout_s * 1000))
        backoff = Backoff(DESCRIBE_BACKOFF_MS, DESCRIBE_BACKOFF_MAX_MS)
        for attempt in range(1, DESCRIBE_ATTEMPTS + 1):
            try:
                response = stub.DescribeFiles(request, timeout=timeout_s)
            except grpc.RpcError as error:
                if error.code() not in RETRIED_STATUS or attempt == DESCRIBE_ATTEMPTS:
                    return [f"DescribeFiles on {_rpc_problem(node, error)}"] * len(keys)
                self._sleep(backoff.failed() / 1000)
                continue
            files = list(response.files)
            if len(files) != len(keys) or any(f.object_key != k for f, k in zip(files, keys, strict=False)):
                return [f"DescribeFiles on {node} answered other keys than asked"] * len(keys)
            return list(files)
        raise AssertionError("unreachable: the last attempt returns")


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Lists of `size` items (the last may be shorter); itertools.batched needs Python 3.12."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# ---------------------------------------------------------------------- known keys (executors)

# A key a coordinator knows: (object key, its FileState there: 1 live, 2 awaiting hand-over, 3 awaiting
# deletion). The lowest is the most alive, as DescribeFiles orders them.
KnownKeyRow = tuple[str, int]


@dataclass(slots=True)
class KnownKeysStream:
    """One coordinator's ListFileKeys stream as it arrives, each page checked before its keys are used.

    Every page must be error-free, of this coordinator and of the first page's snapshot, with a state per
    key; the stream must end with its last page, whose count is every key given. Anything else raises
    CoordinatorsUnavailable: the keys given are then not known to be all the coordinator knows.
    """

    coordinator_id: int
    node: str
    pages: int = 0
    keys: int = 0
    snapshot: tuple[int, int] | None = None  # (leader epoch, applied offset) of the first page
    ended: bool = False

    def take(self, page: pb.ListFileKeysPage) -> list[KnownKeyRow]:
        problem = self._problem(page)
        if problem is not None:
            raise CoordinatorsUnavailable(f"coordinator {self.coordinator_id} on {self.node}: {problem}")
        self.pages += 1
        self.keys += len(page.object_keys)
        self.snapshot = self.snapshot or (page.leader_epoch, page.applied_offset)
        self.ended = page.last
        if page.last and page.key_count != self.keys:
            raise CoordinatorsUnavailable(
                f"coordinator {self.coordinator_id} on {self.node}: its last page counts {page.key_count} keys, "
                f"{self.keys} came"
            )
        return list(zip(page.object_keys, page.states, strict=True))

    def finish(self) -> None:
        if not self.ended:
            raise CoordinatorsUnavailable(
                f"coordinator {self.coordinator_id} on {self.node}: its key stream ended before its last page "
                f"({self.pages} pages, {self.keys} keys)"
            )

    def _problem(self, page: pb.ListFileKeysPage) -> str | None:
        if page.error_code != pb.NONE:
            return f"{_error_name(page.error_code)} {page.error_message}"
        if self.ended:
            return "a page after the last one"
        if page.coordinator_id != self.coordinator_id:
            return f"a page of coordinator {page.coordinator_id}"
        if len(page.states) != len(page.object_keys):
            return f"a page of {len(page.object_keys)} keys and {len(page.states)} states"
        if self.snapshot is not None and self.snapshot != (page.leader_epoch, page.applied_offset):
            return f"a page of another snapshot ({(page.leader_epoch, page.applied_offset)} after {self.snapshot})"
        unknown = set(page.states) - _VERDICT_OF_STATE.keys()
        if unknown:
            return f"keys in states {sorted(unknown)}, not those of a known file"
        return None


def stream_known_keys(
    access: CoordinatorAccess, coordinator_id: int, node: str, sleep: Callable[[float], None] = time.sleep
) -> Iterator[KnownKeyRow]:
    """Every key the coordinator knows, from its leader at `node`: one snapshot's, page by page.

    A call refused before its first page (the node busy, or unreachable) is retried; past that, or on any
    problem with the stream (see KnownKeysStream), raises CoordinatorsUnavailable.
    """
    request = pb.ListFileKeysRequest(coordinator_id=coordinator_id)
    backoff = Backoff(DESCRIBE_BACKOFF_MS, DESCRIBE_BACKOFF_MAX_MS)
    for attempt in range(1, KNOWN_KEYS_ATTEMPTS + 1):
        stream = KnownKeysStream(coordinator_id, node)
        try:
            with access.channel(node) as channel:
                for page in pb_grpc.DisklessCoordinatorStub(channel).ListFileKeys(
                    request, timeout=KNOWN_KEYS_TIMEOUT_S
                ):
                    yield from stream.take(page)
            stream.finish()
            return
        except grpc.RpcError as error:
            if stream.pages or error.code() not in RETRIED_STATUS or attempt == KNOWN_KEYS_ATTEMPTS:
                raise CoordinatorsUnavailable(
                    f"coordinator {coordinator_id}: ListFileKeys on {_rpc_problem(node, error)}"
                ) from None
            sleep(backoff.failed() / 1000)
    raise AssertionError("unreachable: the last attempt returns or raises")


def known_keys_task(coordinators: Iterable[tuple[int, str]], access: CoordinatorAccess) -> Iterator[KnownKeyRow]:
    """One known-keys task (a Spark partition): the keys of its coordinators, (id, leader node) each."""
    for coordinator_id, node in coordinators:
        yield from stream_known_keys(access, coordinator_id, node)
