"""Model-based test: random operation sequences against a real node and the model of DESIGN §4.

Every hypothesis example starts its own node (3 coordinators, fresh data directory) and drives it
through gRPC the way a broker would; tests/model.py (written from DESIGN §4, not from
the server) computes what each answer must be, and every field is compared: error codes, assigned
offsets, is_duplicate, log_append_time, log_start_offset, low watermarks, ListOffsets pairs,
FindBatches' log start / high watermark / batches (offsets, key, position, size, magic,
timestamps, batch_id kept stable). After every step an invariant reads the whole state back
(FindBatches from each log start, unbounded and with budgets at exact batch edges; ListOffsets
-1/-2/-3/0; DescribeCoordinators' counts, oldest live file and log positions), so a divergence is
caught at the step that caused it. Restarts are rules: an acknowledged answer must survive them.

Two machines share the rules. `TestCoordinatorModel` runs the node in the test's process
(tests/in_process.py) on a clock the machine moves between commits, so append times are exact
and sometimes equal; its restarts drain and close the node. `TestCoordinatorModelWithKills`
runs a `diskless serve` process, restarted by SIGTERM or kill -9, for fewer examples.

Each step draws its own seeded `random.Random` (hypothesis' choice-level draws skew hard towards
the first option inside long stateful runs, which starved the rarer producer cases); hypothesis
still chooses and shrinks the sequence of steps, and a failure prints every step with its seed.

Sizes: DISKLESS_MODEL_EXAMPLES (in process, default 25; 8 in the fast lane, tests/lanes.py),
DISKLESS_MODEL_PROCESS_EXAMPLES (with kills, default 3) and DISKLESS_MODEL_STEPS (default 35).
Replay: a failure prints its steps and a `@reproduce_failure` blob; the failing example is kept in
.hypothesis/ and replayed first on the next run; `pytest --hypothesis-seed=N` fixes the seed.
Derandomized (a fixed seed per test) when CI is set or DISKLESS_MODEL_DERANDOMIZE=1.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from random import Random
from typing import Any, TypeVar, final

import grpc
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from protos import coordinator_pb2 as pb
from tests.harness import ServerProcess
from tests.in_process import InProcessNode
from tests.lanes import sized
from tests.model import (
    SEQ_MOD,
    AppendTime,
    CommitExpect,
    FindExpect,
    ListExpect,
    Mismatch,
    Model,
    Partition,
    StoredBatch,
    next_seq,
    well_formed_id,
)

COORDINATORS = 3
EXAMPLES = int(os.environ.get("DISKLESS_MODEL_EXAMPLES", str(sized(25, 8))))
STEPS = int(os.environ.get("DISKLESS_MODEL_STEPS", "35"))
# Examples against a `diskless serve` process, whose restarts include kill -9 (about 3 s each).
PROCESS_EXAMPLES = int(os.environ.get("DISKLESS_MODEL_PROCESS_EXAMPLES", "3"))
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
DERANDOMIZE = os.environ.get("DISKLESS_MODEL_DERANDOMIZE", "1" if CI else "0") == "1"
RPC_TIMEOUT_S = 30
BIG = 2**31 - 1

MALFORMED_IDS = [bytes(16), b"", b"\x01" * 15, b"\x01" * 17]
BAD_NAMES = ["", ".", "..", "a" * 250, "has space", "slash/name", "caf\u00e9", "colon:name"]
CREATE_TIMESTAMPS = [1000, 2000, 3000, 5000, 0]
BATCH_DEFECTS = [
    "size_zero", "size_negative", "byte_offset_negative", "outside_file", "overlap", "base_negative",
    "last_below_base", "magic_3", "magic_negative", "magic0_create_time", "magic2_no_type", "type_5",
    "max_ts_below", "producer_below", "epoch_negative", "sequence_negative", "last_sequence_off",
]  # fmt: skip
CREATE_KINDS = {
    "fresh": 4, "repeat": 1, "bad_name": 1, "bad_id": 1, "taken_name": 1, "old_name": 1, "bad_count": 1,
    "deleted_id": 1,
}  # fmt: skip
REQUEST_DEFECTS = ["empty_key", "long_key", "multibyte_long_key", "zero_file_size", "no_owners", "repeat_owner"]

ID_PREFIX = b"\x7e\x57"  # topic ids made by the test: the prefix, then a counter
T = TypeVar("T")
Overlay = dict[tuple[bytes, int, int], tuple[int, int]]  # (topic, partition, producer) -> (epoch, last seq)


def pick(rnd: Random, weighted: dict[T, int]) -> T:
    """One key of `weighted`, with probability proportional to its weight."""
    return rnd.choices(list(weighted), weights=list(weighted.values()))[0]


def chance(rnd: Random, probability: float) -> bool:
    return rnd.random() < probability


def code_name(code: int) -> str:
    try:
        return pb.ErrorCode.Name(code)
    except ValueError:
        return str(code)


def expect_equal(where: str, what: str, got: Any, want: Any, message: str = "") -> None:
    if got != want:
        if what == "error_code":
            got, want = code_name(got), code_name(want)
        said = f" (server's message: {message!r})" if message else ""
        raise Mismatch(f"{where}: {what} is {got!r}, the model says {want!r}{said}")


def short_id(topic_id: bytes) -> str:
    """The test's own ids by their number (id7), others in hex."""
    if len(topic_id) == 16 and topic_id[:2] == ID_PREFIX:
        return f"id{int.from_bytes(topic_id[2:], 'big')}"
    return f"0x{topic_id.hex()}"


def batch_summary(b: pb.CommitFileRequest.Batch) -> str:
    return (
        f"[{short_id(b.topic_id)}/{b.partition} bytes {b.byte_offset}+{b.size} offsets {b.base_offset}.."
        f"{b.last_offset} magic {b.magic} ts {b.timestamp_type}/{b.batch_max_timestamp} producer {b.producer_id} "
        f"epoch {b.producer_epoch} seq {b.base_sequence}..{b.last_sequence}]"
    )


def server_log_on_failure(method: Callable[..., None]) -> Callable[..., None]:
    """A failing step shows the server's last log lines too."""

    @functools.wraps(method)
    def wrapper(self: CoordinatorMachine, *args: Any, **kwargs: Any) -> None:
        try:
            method(self, *args, **kwargs)
        except Mismatch as error:
            raise Mismatch(f"{error}\n--- server output (tail) ---\n{self.output_tail()}") from None

    return wrapper


randoms = st.randoms(use_true_random=True)


class CoordinatorMachine(RuleBasedStateMachine):
    """The rules and checks; a subclass says where the node runs and how it restarts."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="diskless-model-"))
        self.server = self.new_node(self.dir / "data")
        try:
            self.server.start()
        except BaseException:
            self.abandon()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self.model = Model(COORDINATORS)
        self.topic_count = 0
        self.id_count = 0
        self.key_count = 0
        self.sent: list[pb.CommitFileRequest.Batch] = []  # batches sent before, for retries
        # Per (topic, partition, producer): (epoch, base sequence, records) of each batch accepted
        # with new offsets, oldest first; retrying the 5th and 6th newest probes the window's edge.
        self.accepted: dict[tuple[bytes, int, int], list[tuple[int, int, int]]] = {}
        self.requests: list[pb.CommitFileRequest] = []  # CommitFiles sent before, for retries of the whole call

    def new_node(self, data_dir: Path) -> InProcessNode | ServerProcess:
        raise NotImplementedError

    def abandon(self) -> None:
        """Ends a node that failed to start."""
        raise NotImplementedError

    def now_ms(self) -> int:
        """The node's clock (the append times it assigns are read from it)."""
        raise NotImplementedError

    def pass_time(self, rnd: Random) -> None:
        """Lets some time pass between commits: append times apart, and equal now and then."""

    def let_purges_run(self) -> None:
        """Deleted topics' batches leave in background passes (DESIGN §4a): they are let run before the state is
        compared with the model, which forgets a deleted topic's batches at once."""
        raise NotImplementedError

    def teardown(self) -> None:
        try:
            if self.running():
                code = self.server.stop()
                assert code == 0, f"SIGTERM exit code {code}:\n{self.output_tail()}"
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def running(self) -> bool:
        raise NotImplementedError

    # ------------------------------------------------------------ plumbing

    def output_tail(self) -> str:
        return "".join(self.server.output[-40:])

    def call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self.server.stub, method)(request, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as error:
            tail = self.output_tail()
            raise AssertionError(f"{method} failed as a whole: {error}\nserver output:\n{tail}") from error

    def fresh_id(self) -> bytes:
        """A topic id never used before; deterministic, so that examples replay (no uuid4)."""
        self.id_count += 1
        return ID_PREFIX + self.id_count.to_bytes(14, "big")

    def fresh_key(self) -> str:
        self.key_count += 1
        return f"wal/example-file-{self.key_count:06d}"

    def new_name(self) -> str:
        self.topic_count += 1
        return f"topic-{self.topic_count}"

    def live_topics(self) -> list[bytes]:
        return list(self.model.topics)

    def learn_coordinators(self) -> None:
        """Ask FindCoordinator for every partition; learn new assignments, hold old ones fixed."""
        items = list(self.model.all_partitions())
        deleted = sorted(self.model.deleted)
        if not items and not deleted:
            return
        request = pb.FindCoordinatorRequest(
            topics=[pb.FindCoordinatorRequest.Topic(topic_id=tid, partitions=[i]) for tid, i, _ in items]
            + [pb.FindCoordinatorRequest.Topic(topic_id=tid, partitions=[0]) for tid in deleted]
        )
        response = self.call("FindCoordinator", request)
        expect_equal("FindCoordinator", "topic count", len(response.topics), len(request.topics))
        for (tid, i, p), got in zip(items, response.topics, strict=False):
            where = f"FindCoordinator {short_id(tid)}/{i}"
            expect_equal(where, "partition count", len(got.partitions), 1)
            result = got.partitions[0]
            expect_equal(where, "error_code", result.error_code, pb.NONE)
            if p.coordinator is None:
                if not 0 <= result.coordinator_id < COORDINATORS:
                    raise Mismatch(f"{where}: coordinator {result.coordinator_id} out of range")
                p.coordinator = result.coordinator_id
            else:
                expect_equal(where, "coordinator_id (assignments never move)", result.coordinator_id, p.coordinator)
        for tid, got in zip(deleted, response.topics[len(items) :], strict=True):
            where = f"FindCoordinator deleted {short_id(tid)}"
            expect_equal(where, "error_code", got.partitions[0].error_code, pb.UNKNOWN_TOPIC_OR_PARTITION)
            expect_equal(where, "coordinator_id", got.partitions[0].coordinator_id, -1)

    def pick_topic_id(self, rnd: Random, live: int = 6) -> bytes:
        """Mostly a live topic; sometimes a deleted, unknown or malformed id."""
        kind = pick(rnd, {"live": live, "deleted": 1, "unknown": 1, "malformed": 1})
        if kind == "live" and self.model.topics:
            return rnd.choice(self.live_topics())
        if kind == "deleted" and self.model.deleted:
            return rnd.choice(sorted(self.model.deleted))
        if kind == "malformed":
            return rnd.choice(MALFORMED_IDS)
        return self.fresh_id()

    def pick_partition(self, rnd: Random, topic_id: bytes) -> int:
        topic = self.model.topics.get(topic_id)
        count = len(topic.partitions) if topic else 1
        return rnd.randint(count, count + 1) if chance(rnd, 0.1) else rnd.randrange(count)

    def pick_offset(self, rnd: Random, p: Partition | None) -> int:
        if p is None:
            return rnd.choice([0, -1, 5])
        inside = sorted({p.log_start, p.high_watermark} | {b.base for b in p.batches} | {b.last for b in p.batches})
        inside += [rnd.randint(p.log_start, p.high_watermark)]
        choice = pick(rnd, {"inside": 8, "hwm": 1, "start": 1, "below": 1, "above": 1, "minus1": 1, "minus2": 1})
        if choice == "inside":
            return rnd.choice(inside)
        return {
            "hwm": p.high_watermark,
            "start": p.log_start,
            "below": p.log_start - 1,
            "above": p.high_watermark + 1,
            "minus1": -1,
            "minus2": -2,
        }[choice]

    # ------------------------------------------------------------ checks

    def check_find(self, request: pb.FindBatchesRequest, response: pb.FindBatchesResponse) -> None:
        expected = self.model.find_batches(request)
        expect_equal("FindBatches", "topic count", len(response.topics), len(request.topics))
        for t, (asked, got, want) in enumerate(zip(request.topics, response.topics, expected, strict=True)):
            expect_equal(f"FindBatches topic {t}", "topic_id", got.topic_id, asked.topic_id)
            expect_equal(f"FindBatches topic {t}", "partition count", len(got.partitions), len(want))
            for item, result, exp in zip(asked.partitions, got.partitions, want, strict=True):
                where = (
                    f"FindBatches {short_id(asked.topic_id)}/{item.partition} from {item.offset} (topic item {t}; "
                    f"budgets: partition {item.max_partition_fetch_bytes}, fetch {request.fetch_max_bytes}, "
                    f"batches {request.max_batches_per_partition})"
                )
                self.compare_find(where, item, result, exp)

    def compare_find(
        self,
        where: str,
        item: pb.FindBatchesRequest.Partition,
        got: pb.FindBatchesResponse.PartitionResult,
        want: FindExpect,
    ) -> None:
        event(f"FindBatches: {code_name(want.error)}{' cut by budget' if want.truncated else ''}")
        expect_equal(where, "partition", got.partition, item.partition)
        expect_equal(where, "error_code", got.error_code, want.error, got.error_message)
        expect_equal(where, "log_start_offset", got.log_start_offset, want.log_start)
        expect_equal(where, "high_watermark", got.high_watermark, want.high_watermark)
        got_offsets = [(b.base_offset, b.last_offset) for b in got.batches]
        want_offsets = [(b.base, b.last) for b in want.batches]
        expect_equal(where, "batches (base, last)", got_offsets, want_offsets)
        for info, stored in zip(got.batches, want.batches, strict=True):
            self.compare_batch(f"{where} batch {stored.base}", info, stored)

    def compare_batch(self, where: str, info: pb.BatchInfo, stored: StoredBatch) -> None:
        expect_equal(where, "object_key", info.object_key, stored.object_key)
        expect_equal(where, "byte_offset", info.byte_offset, stored.byte_offset)
        expect_equal(where, "byte_size", info.byte_size, stored.size)
        expect_equal(where, "magic", info.magic, stored.magic)
        expect_equal(where, "batch_max_timestamp", info.batch_max_timestamp, stored.max_timestamp)
        expect_equal(where, "timestamp_type", info.timestamp_type, stored.timestamp_type)
        stored.append.bind(info.log_append_timestamp, f"{where} log_append_timestamp")
        if stored.batch_id is None:
            stored.batch_id = info.batch_id
        else:
            expect_equal(where, "batch_id (stable)", info.batch_id, stored.batch_id)

    def check_list(self, request: pb.ListOffsetsRequest, response: pb.ListOffsetsResponse) -> None:
        expect_equal("ListOffsets", "topic count", len(response.topics), len(request.topics))
        for asked, got in zip(request.topics, response.topics, strict=True):
            expect_equal("ListOffsets", "topic_id", got.topic_id, asked.topic_id)
            expect_equal("ListOffsets", "partition count", len(got.partitions), len(asked.partitions))
            for item, result in zip(asked.partitions, got.partitions, strict=True):
                want = self.model.list_offsets(asked.topic_id, item.partition, item.timestamp)
                where = f"ListOffsets {short_id(asked.topic_id)}/{item.partition} timestamp {item.timestamp}"
                self.compare_list(where, item, result, want)

    def compare_list(
        self,
        where: str,
        item: pb.ListOffsetsRequest.Partition,
        got: pb.ListOffsetsResponse.PartitionResult,
        want: ListExpect,
    ) -> None:
        event(f"ListOffsets: {code_name(want.error)}{' found' if want.offset >= 0 else ''}")
        expect_equal(where, "partition", got.partition, item.partition)
        expect_equal(where, "error_code", got.error_code, want.error, got.error_message)
        pair = (got.timestamp, got.offset)
        if want.alternative is not None and pair == want.alternative:
            return
        expect_equal(where, "(timestamp, offset)", pair, (want.timestamp, want.offset))

    @invariant()
    @server_log_on_failure
    def whole_state_matches(self) -> None:
        """Every partition read back in full: batches, log start, high watermark, offsets for -1/-2/-3/0."""
        items = [(tid, i, p.log_start) for tid, i, p in self.model.all_partitions()]
        items += [(tid, 0, 0) for tid in sorted(self.model.deleted)]
        if not items:
            return
        find = pb.FindBatchesRequest(
            fetch_max_bytes=BIG,
            topics=[
                pb.FindBatchesRequest.Topic(
                    topic_id=tid,
                    partitions=[
                        pb.FindBatchesRequest.Partition(partition=i, offset=start, max_partition_fetch_bytes=BIG)
                    ],
                )
                for tid, i, start in items
            ],
        )
        self.check_find(find, self.call("FindBatches", find))
        self.check_find_edges(items)
        listing = pb.ListOffsetsRequest(
            topics=[
                pb.ListOffsetsRequest.Topic(
                    topic_id=tid,
                    partitions=[pb.ListOffsetsRequest.Partition(partition=i, timestamp=t) for t in (-1, -2, -3, 0)],
                )
                for tid, i, _ in items
            ]
        )
        self.check_list(listing, self.call("ListOffsets", listing))
        self.check_coordinators()

    def check_find_edges(self, items: Sequence[tuple[bytes, int, int]]) -> None:
        """FindBatches with budgets exactly at batch edges: each partition's budget is its first
        batch's size (so exactly one batch each), then a total budget that the first partition
        with batches spends exactly (so the partitions after it get none)."""
        firsts = [p.batches[0].size if (p := self.model.partition(tid, i)) and p.batches else 1 for tid, i, _ in items]
        spent = next((sum(b.size for b in p.batches) for _, _, p in self.model.all_partitions() if p.batches), 1)
        for per_partition, total in ((firsts, BIG), ([BIG] * len(items), spent)):
            find = pb.FindBatchesRequest(
                fetch_max_bytes=total,
                topics=[
                    pb.FindBatchesRequest.Topic(
                        topic_id=tid,
                        partitions=[
                            pb.FindBatchesRequest.Partition(partition=i, offset=start, max_partition_fetch_bytes=budget)
                        ],
                    )
                    for (tid, i, start), budget in zip(items, per_partition, strict=True)
                ],
            )
            self.check_find(find, self.call("FindBatches", find))

    def check_coordinators(self) -> None:
        """DescribeCoordinators agrees with the state read back, and an idle coordinator has applied its whole log."""
        response = self.call("DescribeCoordinators", pb.DescribeCoordinatorsRequest())
        got = {d.coordinator_id: d for d in response.coordinators}
        expect_equal("DescribeCoordinators", "coordinator ids", sorted(got), list(range(COORDINATORS)))
        for c, d in sorted(got.items()):
            where = f"DescribeCoordinators {c}"
            expect_equal(where, "error_code", d.error_code, pb.NONE, d.error_message)
            facts = (d.partition_count, d.live_batch_count, d.live_file_count, d.oldest_live_file_timestamp)
            expect_equal(
                where,
                "(partition_count, live_batch_count, live_file_count, oldest_live_file_timestamp)",
                facts,
                self.model.coordinator_facts(c),
            )
            positions = (d.log_end_offset, d.high_watermark, d.applied_offset)
            if len(set(positions)) != 1:
                raise Mismatch(f"{where}: idle, yet (log_end_offset, high_watermark, applied_offset) = {positions}")

    # ------------------------------------------------------------ topics

    def create(self, items: Sequence[tuple[bytes, str, int]]) -> None:
        topics = [pb.CreatePartitionsRequest.Topic(topic_id=tid, name=name, num_partitions=n) for tid, name, n in items]
        request = pb.CreatePartitionsRequest(topics=topics)
        response = self.call("CreatePartitions", request)
        expect_equal("CreatePartitions", "result count", len(response.topics), len(items))
        for (tid, name, n), got in zip(items, response.topics, strict=True):
            want, _ = self.model.create_partitions(tid, name, n)
            where = f"CreatePartitions {short_id(tid)} {name[:40]!r} num_partitions={n}"
            event(f"CreatePartitions: {code_name(want)}")
            expect_equal(where, "topic_id", got.topic_id, tid)
            expect_equal(where, "error_code", got.error_code, want, got.error_message)
        self.learn_coordinators()

    @initialize(rnd=randoms)
    @server_log_on_failure
    def first_topics(self, rnd: Random) -> None:
        self.create([(self.fresh_id(), self.new_name(), rnd.randint(1, 3)) for _ in range(rnd.randint(1, 2))])

    @rule(rnd=randoms)
    @server_log_on_failure
    def create_topics(self, rnd: Random) -> None:
        items: list[tuple[bytes, str, int]] = []
        for _ in range(rnd.randint(1, 3)):
            kind = pick(rnd, CREATE_KINDS)
            count = rnd.randint(1, 4)
            if kind == "repeat" and items:
                items.append(items[-1])
                continue
            topic_id, name = self.fresh_id(), self.new_name()
            if kind == "bad_name":
                name = rnd.choice(BAD_NAMES)
            elif kind == "bad_id":
                topic_id = rnd.choice(MALFORMED_IDS)
            elif kind == "taken_name" and self.model.names:
                name = rnd.choice(sorted(self.model.names))
            elif kind == "old_name":
                # A deleted topic's name (free again), or the longest / oddest valid names.
                old = {name for name in self.old_names() if name not in self.model.names}
                name = rnd.choice(sorted(old | {"a" * 249, "._-Az09"} - set(self.model.names)) or [name])
            elif kind == "bad_count":
                count = rnd.choice([0, -1])
            elif kind == "deleted_id" and self.model.deleted:
                topic_id = rnd.choice(sorted(self.model.deleted))
                if chance(rnd, 0.7):
                    name = self.model.deleted[topic_id]
            items.append((topic_id, name, count))
        self.create(items)

    def old_names(self) -> set[str]:
        return {f"topic-{i}" for i in range(1, self.topic_count + 1)}

    @rule(rnd=randoms)
    @server_log_on_failure
    def grow_topic(self, rnd: Random) -> None:
        if not self.model.topics:
            self.create([(self.fresh_id(), self.new_name(), 1)])
            return
        topic = self.model.topics[rnd.choice(self.live_topics())]
        kind = pick(rnd, {"grow": 3, "same": 1, "shrink": 1, "other_name": 1, "zero": 1})
        current = len(topic.partitions)
        name, count = topic.name, current
        if kind == "grow":
            count = current + rnd.randint(1, 2)
        elif kind == "shrink":
            count = current - 1
        elif kind == "other_name":
            name, count = self.new_name(), current + 1
        elif kind == "zero":
            count = 0
        items = [(topic.topic_id, name, count)]
        if chance(rnd, 0.3):
            items.append(items[0])
        self.create(items)

    @rule(rnd=randoms)
    @server_log_on_failure
    def delete_topics(self, rnd: Random) -> None:
        ids = [self.pick_topic_id(rnd, live=3) for _ in range(rnd.randint(1, 2))]
        if chance(rnd, 0.3):
            ids.append(ids[0])
        response = self.call("DeleteTopics", pb.DeleteTopicsRequest(topic_ids=ids))
        expect_equal("DeleteTopics", "result count", len(response.topics), len(ids))
        for tid, got in zip(ids, response.topics, strict=True):
            where = f"DeleteTopics {short_id(tid)}"
            expect_equal(where, "topic_id", got.topic_id, tid)
            want = self.model.delete_topic(tid)
            for key in [key for key in self.accepted if key[0] == tid]:
                del self.accepted[key]
            event(f"DeleteTopics: {code_name(want)}")
            expect_equal(where, "error_code", got.error_code, want, got.error_message)
        self.learn_coordinators()
        self.let_purges_run()

    # ------------------------------------------------------------ CommitFile

    def producer_view(self, overlay: Overlay, tid: bytes, partition: int, pid: int) -> tuple[int, int] | None:
        if (tid, partition, pid) in overlay:
            return overlay[(tid, partition, pid)]
        p = self.model.partition(tid, partition)
        state = p.producers.get(pid) if p else None
        return (state.epoch, state.last_seq) if state else None

    def make_batch(
        self,
        rnd: Random,
        overlay: Overlay,
        allowed: Callable[[bytes, int], bool],
        so_far: Sequence[pb.CommitFileRequest.Batch],
    ) -> tuple[pb.CommitFileRequest.Batch, str | None]:
        kind = pick(rnd, {"idempotent": 5, "plain": 2, "retry": 2, "window_edge": 2, "same_request": 1})
        if kind == "same_request" and so_far:
            # The same batch twice in one file: checked in order against each other.
            b = pb.CommitFileRequest.Batch()
            b.CopyFrom(rnd.choice(so_far))
            return b, None
        if kind == "window_edge":
            edge = self.window_edge_retry(rnd, allowed)
            if edge is not None:
                return edge, None
            kind = "retry"
        retries = [b for b in self.sent if allowed(b.topic_id, b.partition)]
        if kind == "retry" and retries:
            # A batch sent before (in or out of the 5-batch window by now), in a new file.
            b = pb.CommitFileRequest.Batch()
            b.CopyFrom(rnd.choice(retries[-15:]))
            if chance(rnd, 0.2) and b.magic > 0:
                b.timestamp_type = pb.LOG_APPEND_TIME if b.timestamp_type == pb.CREATE_TIME else pb.CREATE_TIME
            return b, None

        for _ in range(10):
            tid = self.pick_topic_id(rnd, live=20)
            partition = self.pick_partition(rnd, tid)
            if self.model.topics and chance(rnd, 0.3):  # a hot partition: long producer histories
                tid, partition = self.live_topics()[0], 0
            if allowed(tid, partition):
                break
        else:
            tid, partition = self.fresh_id(), 0
        records = rnd.randint(1, 4)
        base = rnd.choice([0, 0, 5, 1000])  # as the producer wrote it
        magic = pick(rnd, {2: 6, 1: 1, 0: 1})
        if magic == 0:
            ts_type, max_ts = pb.NO_TIMESTAMP_TYPE, -1
        else:
            ts_type = pick(rnd, {pb.CREATE_TIME: 3, pb.LOG_APPEND_TIME: 1})
            max_ts = rnd.choice(CREATE_TIMESTAMPS)
        b = pb.CommitFileRequest.Batch(
            magic=magic,
            request_id=rnd.randint(0, 3),
            topic_id=tid,
            partition=partition,
            size=rnd.choice([100, 40, 250, 1]),
            base_offset=base,
            last_offset=base + records - 1,
            batch_max_timestamp=max_ts,
            timestamp_type=ts_type,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            last_sequence=-1,
        )
        if kind == "idempotent":
            pid = pick(rnd, {1: 6, 2: 2, 0: 1, 7: 1})
            view = self.producer_view(overlay, tid, partition, pid)
            if view is None:
                epoch = rnd.randint(0, 2)
                seq = pick(rnd, {0: 3, 17: 1, SEQ_MOD - 2: 1})  # no state: any sequence (KIP-360)
            else:
                epoch, last = view
                seq = next_seq(last)
                mode = pick(rnd, {"next": 10, "gap": 2, "bump": 2, "bump_bad": 1, "stale": 2, "restart_seq": 1})
                if mode == "gap":
                    seq = (seq + rnd.choice([1, 2, -2, -1, -6])) % SEQ_MOD
                elif mode == "bump":
                    epoch, seq = epoch + 1, 0
                elif mode == "bump_bad":
                    epoch, seq = epoch + 1, rnd.randint(1, 3)
                elif mode == "stale" and epoch > 0:
                    epoch -= 1
                elif mode == "restart_seq":
                    seq = 0
            b.producer_id, b.producer_epoch, b.base_sequence = pid, epoch, seq
            b.last_sequence = (seq + records - 1) % SEQ_MOD
            overlay[(tid, partition, pid)] = (epoch, b.last_sequence)
        elif chance(rnd, 0.25):
            b.producer_epoch, b.base_sequence, b.last_sequence = 3, 99, -7  # ignored when producer_id = -1

        defect = None
        if well_formed_id(tid) and chance(rnd, 0.12):
            defect = rnd.choice(BATCH_DEFECTS)
            self.apply_defect(b, defect)
        return b, defect

    def window_edge_retry(
        self, rnd: Random, allowed: Callable[[bytes, int], bool]
    ) -> pb.CommitFileRequest.Batch | None:
        """A retry of one of the newest accepted batches of a producer, often the 5th or 6th newest."""
        candidates = [key for key, history in self.accepted.items() if len(history) >= 2 and allowed(key[0], key[1])]
        if not candidates:
            return None
        candidates.sort(key=lambda key: (-len(self.accepted[key]), key))
        tid, partition, pid = candidates[0] if chance(rnd, 0.6) else rnd.choice(candidates)
        history = self.accepted[(tid, partition, pid)]
        back = pick(rnd, {5: 3, 6: 3, 1: 1, 2: 1, 4: 1, 7: 1})
        epoch, seq, records = history[-min(back, len(history))]
        return self.idempotent_batch(rnd, tid, partition, pid, epoch, seq, records)

    @staticmethod
    def apply_defect(b: pb.CommitFileRequest.Batch, defect: str) -> None:
        if defect == "size_zero":
            b.size = 0
        elif defect == "size_negative":
            b.size = -5
        elif defect == "base_negative":
            b.base_offset, b.last_offset = -1, b.last_offset - b.base_offset - 1
        elif defect == "last_below_base":
            b.base_offset, b.last_offset = b.base_offset + 3, b.base_offset + 2
            if b.producer_id >= 0:
                b.last_sequence = -1
        elif defect == "magic_3":
            b.magic = 3
        elif defect == "magic_negative":
            b.magic = -1
        elif defect == "magic0_create_time":
            b.magic, b.timestamp_type = 0, pb.CREATE_TIME
        elif defect == "magic2_no_type":
            b.magic, b.timestamp_type = 2, pb.NO_TIMESTAMP_TYPE
        elif defect == "type_5":
            b.magic, b.timestamp_type = 2, 5
        elif defect == "max_ts_below":
            b.batch_max_timestamp = -2
        elif defect == "producer_below":
            b.producer_id = -2
        elif defect == "epoch_negative":
            b.producer_id, b.producer_epoch, b.base_sequence = max(b.producer_id, 1), -1, max(b.base_sequence, 0)
            b.last_sequence = (b.base_sequence + b.last_offset - b.base_offset) % SEQ_MOD
        elif defect == "sequence_negative":
            b.producer_id, b.producer_epoch, b.base_sequence = max(b.producer_id, 1), max(b.producer_epoch, 0), -1
            b.last_sequence = b.last_offset - b.base_offset - 1
        elif defect == "last_sequence_off":
            b.producer_id, b.producer_epoch, b.base_sequence = max(b.producer_id, 1), max(b.producer_epoch, 0), 4
            b.last_sequence = 4 + b.last_offset - b.base_offset + 1
        # byte_offset_negative, outside_file and overlap are applied when the file is laid out

    def commit(self, rnd: Random, given: Sequence[pb.CommitFileRequest.Batch] = ()) -> None:
        """One CommitFile of random batches, or of `given` ones in a well-formed file and request."""
        # The object key first: reusing one restricts the partitions to coordinators whose answer
        # the design settles (see Model.key_unsettled).
        key_kind = pick(rnd, {"fresh": 12, "reuse": 2, "retry": 2, "long": 1, "multibyte": 1}) if not given else "fresh"
        if key_kind == "retry":
            retry = self.retry_request(rnd)
            if retry is not None:
                self.send_commit(rnd, retry)
                return
            key_kind = "fresh"
        key = self.fresh_key()
        allowed: Callable[[bytes, int], bool] = lambda tid, partition: True  # noqa: E731
        if key_kind == "reuse" and self.model.key_unsettled:
            key = rnd.choice(sorted(self.model.key_unsettled))
            settled = self.model.settled_coordinators(key)

            def allowed(tid: bytes, partition: int) -> bool:
                p = self.model.partition(tid, partition)
                return p is None or p.coordinator in settled

        elif key_kind == "long":
            key += "k" * (1024 - len(key))
        elif key_kind == "multibyte":
            room = 1024 - len(key)
            key += "x" * (room % 2) + "\u00e9" * (room // 2)  # exactly 1024 bytes, fewer characters

        overlay: Overlay = {}
        made: list[tuple[pb.CommitFileRequest.Batch, str | None]] = []
        for _ in range(rnd.randint(1, 6)) if not given else ():
            made.append(self.make_batch(rnd, overlay, allowed, [b for b, _ in made]))
        made += [(b, None) for b in given]
        batches = [b for b, _ in made]

        # Lay the batches out in the file.
        position = 0
        for i, (b, defect) in enumerate(made):
            previous = batches[i - 1] if i else None
            if (defect == "overlap" or chance(rnd, 0.04)) and previous is not None and previous.size > 0:
                b.byte_offset = previous.byte_offset + rnd.randrange(previous.size)
            else:
                b.byte_offset = position + pick(rnd, {0: 3, 13: 1})
            if defect == "byte_offset_negative":
                b.byte_offset = -1
            position = max(position, b.byte_offset + max(b.size, 0))
        file_size = position + pick(rnd, {0: 3, 64: 1})
        for b, defect in made:
            if defect == "outside_file":
                b.byte_offset = file_size - max(b.size, 1) + rnd.randint(1, 5)

        involved: list[int] = []
        for b in batches:
            p = self.model.partition(b.topic_id, b.partition)
            if p is not None and p.coordinator not in involved:
                assert p.coordinator is not None
                involved.append(p.coordinator)
        owners = rnd.sample(involved, len(involved))  # broker-permuted
        owner_kind = pick(rnd, {"exact": 8, "extra": 2, "missing": 2}) if not given else "exact"
        others = [c for c in range(COORDINATORS) if c not in owners]
        if (owner_kind == "extra" and others) or not owners:
            owners.insert(rnd.randint(0, len(owners)), rnd.choice(others))
        elif owner_kind == "missing":  # a coordinator with batches that owner_ids does not name
            owners.pop(rnd.randrange(len(owners)))
            if not owners:
                owners.append(rnd.choice(others))

        if chance(rnd, 0.05) and not given:
            defect = rnd.choice(REQUEST_DEFECTS)
            if defect == "empty_key":
                key = ""
            elif defect == "long_key":
                key = "k" * 1025
            elif defect == "multibyte_long_key":
                key = "\u00e9" * 513  # 1026 bytes
            elif defect == "zero_file_size":
                file_size = rnd.choice([0, -1])
            elif defect == "no_owners":
                owners = []
            elif defect == "repeat_owner":
                owners.append(owners[0])

        request = pb.CommitFileRequest(
            object_key=key,
            object_format=1,
            file_size=file_size,
            uploader_broker_id=1,
            owner_ids=owners,
            batches=batches,
        )
        self.send_commit(rnd, request)
        self.requests.append(request)
        del self.requests[:-20]

    def retry_request(self, rnd: Random) -> pb.CommitFileRequest | None:
        """An earlier CommitFile sent again as it was (a broker's retry after a lost answer), when settled."""
        for _ in range(3):
            if not self.requests:
                return None
            request = rnd.choice(self.requests)
            settled = self.model.settled_coordinators(request.object_key)
            reached = [self.model.partition(b.topic_id, b.partition) for b in request.batches]
            if all(p is None or p.coordinator in settled for p in reached):
                event("CommitFile: sent again")
                return request
        return None

    def send_commit(self, rnd: Random, request: pb.CommitFileRequest) -> None:
        batches = request.batches
        self.pass_time(rnd)
        lower = self.now_ms()
        response = self.call("CommitFile", request)
        upper = self.now_ms()
        expected = self.model.commit(request, lower, upper)
        self.compare_commit(request, response, expected)
        for b, want in zip(batches, expected, strict=True):
            if b.producer_id >= 0 and want.error == pb.NONE and not want.duplicate and not want.retry:
                history = self.accepted.setdefault((b.topic_id, b.partition, b.producer_id), [])
                history.append((b.producer_epoch, b.base_sequence, b.last_offset - b.base_offset + 1))
                del history[:-8]
        self.sent.extend(b for b in batches if well_formed_id(b.topic_id))
        del self.sent[:-40]

    def compare_commit(
        self, request: pb.CommitFileRequest, response: pb.CommitFileResponse, expected: list[CommitExpect]
    ) -> None:
        expect_equal("CommitFile", "result count", len(response.batches), len(expected))
        for i, (b, got, want) in enumerate(zip(request.batches, response.batches, expected, strict=True)):
            where = (
                f"CommitFile (key {request.object_key[:30]!r}, file_size {request.file_size}, "
                f"owners {list(request.owner_ids)}) batch {i} of {len(expected)} {batch_summary(b)}"
            )
            event(
                f"CommitFile batch: {code_name(want.error)}{f' duplicate {want.depth}' if want.duplicate else ''}"
                f"{' retried' if want.retry else ''}"
            )
            expect_equal(where, "error_code", got.error_code, want.error, got.error_message)
            expect_equal(where, "assigned_base_offset", got.assigned_base_offset, want.base)
            expect_equal(where, "is_duplicate", got.is_duplicate, want.duplicate)
            expect_equal(where, "log_start_offset", got.log_start_offset, want.log_start)
            if isinstance(want.append, AppendTime):
                want.append.bind(got.log_append_time, f"{where} log_append_time")
            else:
                expect_equal(where, "log_append_time", got.log_append_time, want.append)

    @rule(rnd=randoms)
    @server_log_on_failure
    def commit_file(self, rnd: Random) -> None:
        self.commit(rnd)

    @rule(rnd=randoms)
    @server_log_on_failure
    def commit_files(self, rnd: Random) -> None:
        """Commits are the heart: a burst of them, so producers build long histories."""
        for _ in range(rnd.randint(2, 5)):
            self.commit(rnd)

    @rule(rnd=randoms)
    @server_log_on_failure
    def producer_run(self, rnd: Random) -> None:
        """One producer's in-order batches to one partition over a few files, then a retry at the
        window's edge (the 5th newest is a duplicate, the 6th is not)."""
        if not self.model.topics:
            return
        topic = self.model.topics[rnd.choice(self.live_topics())]
        tid, partition, pid = topic.topic_id, rnd.randrange(len(topic.partitions)), rnd.choice([1, 2, 3])
        view = self.producer_view({}, tid, partition, pid)
        if view is None:
            epoch, seq = rnd.randint(0, 2), pick(rnd, {0: 3, SEQ_MOD - 3: 1})
        else:
            epoch, seq = view[0], next_seq(view[1])
        run = []
        for _ in range(rnd.randint(4, 8)):
            records = rnd.randint(1, 3)
            run.append(self.idempotent_batch(rnd, tid, partition, pid, epoch, seq, records))
            seq = (seq + records) % SEQ_MOD
        while run:
            files = rnd.randint(1, 3)
            self.commit(rnd, run[:files])
            run = run[files:]
        history = self.accepted.get((tid, partition, pid), [])
        if history:
            epoch, seq, records = history[-min(len(history), pick(rnd, {5: 2, 6: 2, 4: 1, 7: 1}))]
            self.commit(rnd, [self.idempotent_batch(rnd, tid, partition, pid, epoch, seq, records)])

    @staticmethod
    def idempotent_batch(
        rnd: Random, tid: bytes, partition: int, pid: int, epoch: int, seq: int, records: int
    ) -> pb.CommitFileRequest.Batch:
        return pb.CommitFileRequest.Batch(
            magic=2,
            topic_id=tid,
            partition=partition,
            size=rnd.choice([100, 40]),
            base_offset=0,
            last_offset=records - 1,
            batch_max_timestamp=rnd.choice(CREATE_TIMESTAMPS),
            timestamp_type=pick(rnd, {pb.CREATE_TIME: 3, pb.LOG_APPEND_TIME: 1}),
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            last_sequence=(seq + records - 1) % SEQ_MOD,
        )

    # ------------------------------------------------------------ DeleteRecords

    @rule(rnd=randoms)
    @server_log_on_failure
    def delete_records(self, rnd: Random) -> None:
        topics: list[pb.DeleteRecordsRequest.Topic] = []
        for _ in range(rnd.randint(1, 2)):
            tid = self.pick_topic_id(rnd)
            partitions = []
            for _ in range(rnd.randint(1, 3)):
                partition = self.pick_partition(rnd, tid)
                offset = self.pick_offset(rnd, self.model.partition(tid, partition))
                partitions.append(pb.DeleteRecordsRequest.Partition(partition=partition, offset=offset))
            topics.append(pb.DeleteRecordsRequest.Topic(topic_id=tid, partitions=partitions))
        request = pb.DeleteRecordsRequest(topics=topics)
        response = self.call("DeleteRecords", request)
        expect_equal("DeleteRecords", "topic count", len(response.topics), len(topics))
        for asked, got in zip(topics, response.topics, strict=True):
            expect_equal("DeleteRecords", "topic_id", got.topic_id, asked.topic_id)
            expect_equal("DeleteRecords", "partition count", len(got.partitions), len(asked.partitions))
            for item, result in zip(asked.partitions, got.partitions, strict=True):
                where = f"DeleteRecords {short_id(asked.topic_id)}/{item.partition} below {item.offset}"
                p = self.model.partition(asked.topic_id, item.partition)
                before = p.log_start if p else None
                error, low = self.model.delete_records(asked.topic_id, item.partition, item.offset)
                event(f"DeleteRecords: {code_name(error)}{' moved' if before is not None and low > before else ''}")
                expect_equal(where, "partition", result.partition, item.partition)
                expect_equal(where, "error_code", result.error_code, error, result.error_message)
                expect_equal(where, "low_watermark", result.low_watermark, low)

    # ------------------------------------------------------------ reads

    @rule(rnd=randoms)
    @server_log_on_failure
    def list_offsets(self, rnd: Random) -> None:
        topics: list[pb.ListOffsetsRequest.Topic] = []
        for _ in range(rnd.randint(1, 2)):
            tid = self.pick_topic_id(rnd)
            partitions = []
            for _ in range(rnd.randint(1, 4)):
                partition = self.pick_partition(rnd, tid)
                p = self.model.partition(tid, partition)
                known = sorted({b.effective_timestamp() + d for b in (p.batches if p else []) for d in (-1, 0, 1)})
                kind = pick(rnd, {"special": 3, "known": 3, "first": 1, "fixed": 1})
                if kind == "known" and known:
                    timestamp = rnd.choice(known)
                elif kind == "first" and p and p.batches:  # the first live batch, perhaps below the log start
                    timestamp = max(0, p.batches[0].effective_timestamp()) + rnd.choice([-1, 0])
                elif kind == "fixed":
                    timestamp = rnd.choice([0, 1, 2500, 2**62])
                else:
                    timestamp = rnd.choice([-1, -2, -3, -4, -5, -6, -100])
                partitions.append(pb.ListOffsetsRequest.Partition(partition=partition, timestamp=timestamp))
            topics.append(pb.ListOffsetsRequest.Topic(topic_id=tid, partitions=partitions))
        request = pb.ListOffsetsRequest(topics=topics)
        self.check_list(request, self.call("ListOffsets", request))

    @rule(rnd=randoms)
    @server_log_on_failure
    def find_batches(self, rnd: Random) -> None:
        budgets = [BIG, 0, -1, 1, 100, 150, 300, 1000]
        sums: list[int] = []  # running byte totals of what would be returned: budgets right at the edges
        topics: list[pb.FindBatchesRequest.Topic] = []
        for _ in range(rnd.randint(1, 3)):
            tid = self.pick_topic_id(rnd)
            partitions = []
            for _ in range(rnd.randint(1, 3)):
                partition = self.pick_partition(rnd, tid)
                p = self.model.partition(tid, partition)
                offset = self.pick_offset(rnd, p)
                edges = [0]
                for b in p.batches if p else []:
                    if b.last >= offset:
                        edges.append(edges[-1] + b.size)
                        sums.append((sums[-1] if sums else 0) + b.size)
                budget = rnd.choice(edges[1:]) + rnd.choice([-1, 0, 1]) if len(edges) > 1 and chance(rnd, 0.5) else None
                partitions.append(
                    pb.FindBatchesRequest.Partition(
                        partition=partition,
                        offset=offset,
                        max_partition_fetch_bytes=rnd.choice(budgets) if budget is None else budget,
                    )
                )
            topics.append(pb.FindBatchesRequest.Topic(topic_id=tid, partitions=partitions))
        fetch_budget = rnd.choice(sums) + rnd.choice([-1, 0, 1]) if sums and chance(rnd, 0.5) else rnd.choice(budgets)
        request = pb.FindBatchesRequest(
            fetch_max_bytes=fetch_budget,
            max_batches_per_partition=rnd.choice([0, -1, 1, 2, 3]),
            topics=topics,
        )
        self.check_find(request, self.call("FindBatches", request))


@final
class InProcessMachine(CoordinatorMachine):
    """The node in the test's process on a clock the machine moves; restarts drain and close it (SIGTERM's path)."""

    server: InProcessNode

    def new_node(self, data_dir: Path) -> InProcessNode:
        return InProcessNode(data_dir, coordinators=COORDINATORS)

    def abandon(self) -> None:
        if self.server.is_running():
            self.server.stop()

    def running(self) -> bool:
        return self.server.is_running()

    def now_ms(self) -> int:
        return self.server.clock.now_ms()

    def pass_time(self, rnd: Random) -> None:
        self.server.advance(pick(rnd, {0: 2, 1: 3, 7: 2, 1000: 1}))

    def let_purges_run(self) -> None:
        self.server.run_purge_passes()  # an example's topics are far smaller than one pass

    @rule()
    @server_log_on_failure
    def restart(self) -> None:
        """Stop and start on the same data dir; everything acknowledged must be there."""
        event("restart: in process")
        self.server.restart()
        self.learn_coordinators()


@final
class ProcessMachine(CoordinatorMachine):
    """A `diskless serve` process, restarted by SIGTERM or kill -9: acknowledged answers survive both."""

    server: ServerProcess

    def new_node(self, data_dir: Path) -> ServerProcess:
        return ServerProcess(data_dir, coordinators=COORDINATORS)

    def abandon(self) -> None:
        if self.running():
            assert self.server.process is not None
            self.server.process.kill()
            self.server.process.wait(timeout=30)

    def running(self) -> bool:
        return self.server.process is not None and self.server.process.poll() is None

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def let_purges_run(self) -> None:
        """On real time: until every coordinator holds as many live batches as the model says (a bound, 10 s)."""
        deadline = time.monotonic() + 10
        while True:
            described = self.call("DescribeCoordinators", pb.DescribeCoordinatorsRequest()).coordinators
            if all(d.live_batch_count == self.model.coordinator_facts(d.coordinator_id)[1] for d in described):
                return
            if time.monotonic() > deadline:
                return  # the invariant after this step names what differs
            time.sleep(0.02)

    @rule(kill=st.booleans())
    @server_log_on_failure
    def restart(self, kill: bool) -> None:
        """Stop (SIGTERM) or kill -9, start on the same data dir; everything acknowledged must be there."""
        event(f"restart: {'kill -9' if kill else 'SIGTERM'}")
        if kill:
            self.server.kill()
        else:
            code = self.server.stop()
            assert code == 0, f"SIGTERM exit code {code}:\n{self.output_tail()}"
        self.server.start()
        self.learn_coordinators()


def machine_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=STEPS,
        deadline=None,
        derandomize=DERANDOMIZE,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


pytestmark = pytest.mark.timeout(max(300, (EXAMPLES + PROCESS_EXAMPLES) * STEPS))

InProcessMachine.TestCase.settings = machine_settings(EXAMPLES)
TestCoordinatorModel = InProcessMachine.TestCase
ProcessMachine.TestCase.settings = machine_settings(PROCESS_EXAMPLES)
TestCoordinatorModelWithKills = pytest.mark.slow(ProcessMachine.TestCase)  # `diskless serve` with kill -9
