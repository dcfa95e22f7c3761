"""Model-based test: random operation sequences against a real `diskless serve` and the model of DESIGN §4.

Every hypothesis example starts its own node (3 coordinators, fresh data directory, ~0.4 s) and
drives it through gRPC exactly like a broker would; tests/model.py computes what each answer must
be, and every field is compared. After every step an invariant re-reads the whole state
(FindBatches from each log start, ListOffsets -1/-2/-3), so a divergence is caught at the step
that caused it. Restarts (SIGTERM, and kill -9) are rules: an acknowledged answer must survive both.

Sizes: DISKLESS_MODEL_EXAMPLES (default 25) and DISKLESS_MODEL_STEPS (default 35).
Replay: a failure prints its steps and a `@reproduce_failure` blob; the failing example is also kept
in .hypothesis/ and replayed first on the next run; `pytest --hypothesis-seed=N` fixes the seed.
Derandomized (a fixed seed per test) when CI is set or DISKLESS_MODEL_DERANDOMIZE=1.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from protos import coordinator_pb2 as pb
from tests.harness import ServerProcess
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
EXAMPLES = int(os.environ.get("DISKLESS_MODEL_EXAMPLES", "25"))
STEPS = int(os.environ.get("DISKLESS_MODEL_STEPS", "35"))
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
DERANDOMIZE = os.environ.get("DISKLESS_MODEL_DERANDOMIZE", "1" if CI else "0") == "1"
RPC_TIMEOUT_S = 30
BIG = 2**31 - 1

MALFORMED_IDS = [bytes(16), b"", b"\x01" * 15, b"\x01" * 17]
BAD_NAMES = ["", ".", "..", "a" * 250, "has space", "slash/name", "caf\u00e9", "colon:name"]
CREATE_TIMESTAMPS = [1000, 2000, 2000, 3000, 5000, 0]
PRODUCER_IDS = [1, 2, 0, 7]
BATCH_DEFECTS = [
    "size_zero", "size_negative", "byte_offset_negative", "outside_file", "overlap", "base_negative",
    "last_below_base", "magic_3", "magic_negative", "magic0_create_time", "magic2_no_type", "type_5",
    "max_ts_below", "producer_below", "epoch_negative", "sequence_negative", "last_sequence_off",
]  # fmt: skip
REQUEST_DEFECTS = ["empty_key", "long_key", "multibyte_long_key", "zero_file_size", "no_owners", "repeat_owner"]


def code_name(code: int) -> str:
    try:
        return pb.ErrorCode.Name(code)
    except ValueError:
        return str(code)


def expect_equal(where: str, what: str, got: Any, want: Any) -> None:
    if got != want:
        if what == "error_code":
            got, want = code_name(got), code_name(want)
        raise Mismatch(f"{where}: {what} is {got!r}, the model says {want!r}")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def batch_summary(b: pb.CommitFileRequest.Batch) -> str:
    return (
        f"[{b.topic_id.hex()[:8]}/{b.partition} bytes {b.byte_offset}+{b.size} offs {b.base_offset}..{b.last_offset} "
        f"magic {b.magic} ts {b.timestamp_type}/{b.batch_max_timestamp} pid {b.producer_id} e {b.producer_epoch} "
        f"seq {b.base_sequence}..{b.last_sequence}]"
    )


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="diskless-model-"))
        self.server = ServerProcess(self.dir / "data", coordinators=COORDINATORS).start()
        self.model = Model(COORDINATORS)
        self.topic_count = 0
        self.id_count = 0
        self.key_count = 0
        self.sent: list[pb.CommitFileRequest.Batch] = []  # batches sent before, for retries

    def teardown(self) -> None:
        try:
            process = self.server.process
            if process is not None and process.poll() is None:
                code = self.server.stop()
                assert code == 0, f"SIGTERM exit code {code}:\n{self.output_tail()}"
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ plumbing

    def output_tail(self) -> str:
        return "".join(self.server.output[-40:])

    def call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self.server.stub, method)(request, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as error:
            raise AssertionError(f"{method} failed as a whole: {error}\nserver output:\n{self.output_tail()}") from error

    def fresh_id(self) -> bytes:
        """A topic id never used before; deterministic, so that examples replay (no uuid4)."""
        self.id_count += 1
        return uuid.UUID(int=(0x7E57 << 112) | self.id_count).bytes

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
        items = [(tid, i, p) for tid, i, p in self.model.all_partitions()]
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
            where = f"FindCoordinator {tid.hex()[:8]}/{i}"
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
            where = f"FindCoordinator deleted {tid.hex()[:8]}"
            expect_equal(where, "error_code", got.partitions[0].error_code, pb.UNKNOWN_TOPIC_OR_PARTITION)
            expect_equal(where, "coordinator_id", got.partitions[0].coordinator_id, -1)

    def draw_topic_id(self, data: st.DataObject, live_weight: int = 6) -> bytes:
        """Mostly a live topic; sometimes a deleted, unknown or malformed id."""
        kind = data.draw(
            st.sampled_from(["live"] * live_weight + ["deleted", "unknown", "malformed"]), label="topic kind"
        )
        if kind == "live" and self.model.topics:
            return data.draw(st.sampled_from(self.live_topics()), label="topic")
        if kind == "deleted" and self.model.deleted:
            return data.draw(st.sampled_from(sorted(self.model.deleted)), label="deleted topic")
        if kind == "malformed":
            return data.draw(st.sampled_from(MALFORMED_IDS), label="malformed id")
        return self.fresh_id()

    def draw_partition(self, data: st.DataObject, topic_id: bytes) -> int:
        topic = self.model.topics.get(topic_id)
        count = len(topic.partitions) if topic else 1
        return data.draw(st.integers(0, count + 1) if data.draw(st.integers(0, 5)) == 5 else st.integers(0, count - 1))

    # ------------------------------------------------------------ checks

    def check_find(self, request: pb.FindBatchesRequest, response: pb.FindBatchesResponse) -> None:
        expected = self.model.find_batches(request)
        expect_equal("FindBatches", "topic count", len(response.topics), len(request.topics))
        for t, (asked, got, want) in enumerate(zip(request.topics, response.topics, expected, strict=True)):
            expect_equal(f"FindBatches topic {t}", "topic_id", got.topic_id, asked.topic_id)
            expect_equal(f"FindBatches topic {t}", "partition count", len(got.partitions), len(want))
            for item, result, exp in zip(asked.partitions, got.partitions, want, strict=True):
                where = f"FindBatches {asked.topic_id.hex()[:8]}/{item.partition}@{item.offset} (item of topic {t})"
                self.compare_find(where, item, result, exp)

    def compare_find(
        self,
        where: str,
        item: pb.FindBatchesRequest.Partition,
        got: pb.FindBatchesResponse.PartitionResult,
        want: FindExpect,
    ) -> None:
        expect_equal(where, "partition", got.partition, item.partition)
        expect_equal(where, "error_code", got.error_code, want.error)
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
                self.compare_list(f"ListOffsets {asked.topic_id.hex()[:8]}/{item.partition} t={item.timestamp}", item,
                                  result, want)  # fmt: skip

    def compare_list(
        self,
        where: str,
        item: pb.ListOffsetsRequest.Partition,
        got: pb.ListOffsetsResponse.PartitionResult,
        want: ListExpect,
    ) -> None:
        expect_equal(where, "partition", got.partition, item.partition)
        expect_equal(where, "error_code", got.error_code, want.error)
        pair = (got.timestamp, got.offset)
        if want.alternative is not None and pair == want.alternative:
            return
        expect_equal(where, "(timestamp, offset)", pair, (want.timestamp, want.offset))

    @invariant()
    def whole_state_matches(self) -> None:
        """Every partition read back in full: batches, log start, high watermark, -1/-2/-3 offsets."""
        items = [(tid, i) for tid, i, _ in self.model.all_partitions()]
        items += [(tid, 0) for tid in sorted(self.model.deleted)]
        if not items:
            return
        find = pb.FindBatchesRequest(
            fetch_max_bytes=BIG,
            topics=[
                pb.FindBatchesRequest.Topic(
                    topic_id=tid,
                    partitions=[
                        pb.FindBatchesRequest.Partition(
                            partition=i,
                            offset=p.log_start if (p := self.model.partition(tid, i)) else 0,
                            max_partition_fetch_bytes=BIG,
                        )
                    ],
                )
                for tid, i in items
            ],
        )
        self.check_find(find, self.call("FindBatches", find))
        listing = pb.ListOffsetsRequest(
            topics=[
                pb.ListOffsetsRequest.Topic(
                    topic_id=tid, partitions=[pb.ListOffsetsRequest.Partition(partition=i, timestamp=t) for t in (-1, -2, -3)]
                )
                for tid, i in items
            ]
        )
        self.check_list(listing, self.call("ListOffsets", listing))

    # ------------------------------------------------------------ topics

    def create(self, data: st.DataObject, items: list[tuple[bytes, str, int]]) -> None:
        request = pb.CreatePartitionsRequest(
            topics=[pb.CreatePartitionsRequest.Topic(topic_id=tid, name=name, num_partitions=n) for tid, name, n in items]
        )
        response = self.call("CreatePartitions", request)
        expect_equal("CreatePartitions", "result count", len(response.topics), len(items))
        for (tid, name, n), got in zip(items, response.topics, strict=True):
            want, _ = self.model.create_partitions(tid, name, n)
            where = f"CreatePartitions {tid.hex()[:8]} {name!r} n={n}"
            expect_equal(where, "topic_id", got.topic_id, tid)
            expect_equal(where, "error_code", got.error_code, want)
        self.learn_coordinators()

    @rule(data=st.data())
    def create_topics(self, data: st.DataObject) -> None:
        items: list[tuple[bytes, str, int]] = []
        for _ in range(data.draw(st.integers(1, 3), label="topics")):
            kind = data.draw(
                st.sampled_from(["fresh"] * 4 + ["repeat", "bad_name", "bad_id", "taken_name", "old_name", "bad_count"]),
                label="create kind",
            )
            count = data.draw(st.integers(1, 4), label="partitions")
            if kind == "repeat" and items:
                items.append(items[-1])
                continue
            topic_id, name = self.fresh_id(), self.new_name()
            if kind == "bad_name":
                name = data.draw(st.sampled_from(BAD_NAMES), label="bad name")
            elif kind == "bad_id":
                topic_id = data.draw(st.sampled_from(MALFORMED_IDS), label="bad id")
            elif kind == "taken_name" and self.model.names:
                name = data.draw(st.sampled_from(sorted(self.model.names)), label="taken name")
            elif kind == "old_name":
                old = sorted({t.name for t in self.model.topics.values()} | {"a" * 249, "._-Az09"})
                name = data.draw(st.sampled_from(old), label="name")
                if name in self.model.names:
                    name = "a" * 249 if name != "a" * 249 else "._-Az09"
                if name in self.model.names:
                    name = self.new_name()
            elif kind == "bad_count":
                count = data.draw(st.sampled_from([0, -1]), label="bad count")
            items.append((topic_id, name, count))
        self.create(data, items)

    @precondition(lambda self: self.model.topics)
    @rule(data=st.data())
    def grow_topic(self, data: st.DataObject) -> None:
        topic = self.model.topics[data.draw(st.sampled_from(self.live_topics()), label="topic")]
        kind = data.draw(st.sampled_from(["grow", "same", "shrink", "other_name", "zero"]), label="grow kind")
        current = len(topic.partitions)
        name, count = topic.name, current
        if kind == "grow":
            count = current + data.draw(st.integers(1, 2), label="more")
        elif kind == "shrink":
            count = current - 1
        elif kind == "other_name":
            name, count = self.new_name(), current + 1
        elif kind == "zero":
            count = 0
        items = [(topic.topic_id, name, count)]
        if data.draw(st.booleans(), label="repeat item"):
            items.append(items[0])
        self.create(data, items)

    @rule(data=st.data())
    def delete_topics(self, data: st.DataObject) -> None:
        ids = [self.draw_topic_id(data, live_weight=3) for _ in range(data.draw(st.integers(1, 2), label="ids"))]
        if data.draw(st.booleans(), label="repeat id"):
            ids.append(ids[0])
        response = self.call("DeleteTopics", pb.DeleteTopicsRequest(topic_ids=ids))
        expect_equal("DeleteTopics", "result count", len(response.topics), len(ids))
        for tid, got in zip(ids, response.topics, strict=True):
            where = f"DeleteTopics {tid.hex()[:8]}"
            expect_equal(where, "topic_id", got.topic_id, tid)
            expect_equal(where, "error_code", got.error_code, self.model.delete_topic(tid))
        self.learn_coordinators()

    # ------------------------------------------------------------ CommitFile

    def producer_view(
        self, overlay: dict[tuple[bytes, int, int], tuple[int, int]], tid: bytes, partition: int, pid: int
    ) -> tuple[int, int] | None:
        key = (tid, partition, pid)
        if key in overlay:
            return overlay[key]
        p = self.model.partition(tid, partition)
        state = p.producers.get(pid) if p else None
        return (state.epoch, state.last_seq) if state else None

    def draw_batch(
        self,
        data: st.DataObject,
        overlay: dict[tuple[bytes, int, int], tuple[int, int]],
        allowed: Callable[[bytes, int], bool],
    ) -> tuple[pb.CommitFileRequest.Batch, str | None]:
        kind = data.draw(st.sampled_from(["idempotent", "idempotent", "plain", "retry"]), label="batch kind")
        retries = [b for b in self.sent if allowed(b.topic_id, b.partition)]
        if kind == "retry" and retries:
            b = pb.CommitFileRequest.Batch()
            b.CopyFrom(data.draw(st.sampled_from(retries[-12:]), label="retry of"))
            if data.draw(st.integers(0, 3), label="retype") == 3 and b.magic > 0:
                b.timestamp_type = pb.LOG_APPEND_TIME if b.timestamp_type == pb.CREATE_TIME else pb.CREATE_TIME
            return b, None

        for _ in range(10):
            tid = self.draw_topic_id(data)
            partition = self.draw_partition(data, tid)
            if allowed(tid, partition):
                break
        else:
            tid, partition = self.fresh_id(), 0
        records = data.draw(st.integers(1, 4), label="records")
        base = data.draw(st.sampled_from([0, 0, 5, 1000]), label="producer base offset")
        magic = data.draw(st.sampled_from([2, 2, 2, 1, 0]), label="magic")
        if magic == 0:
            ts_type, max_ts = pb.NO_TIMESTAMP_TYPE, -1
        else:
            ts_type = data.draw(st.sampled_from([pb.CREATE_TIME] * 3 + [pb.LOG_APPEND_TIME]), label="ts type")
            max_ts = data.draw(st.sampled_from(CREATE_TIMESTAMPS), label="max ts")
        b = pb.CommitFileRequest.Batch(
            magic=magic,
            request_id=data.draw(st.integers(0, 3), label="request id"),
            topic_id=tid,
            partition=partition,
            size=data.draw(st.sampled_from([100, 40, 250, 1]), label="size"),
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
            pid = data.draw(st.sampled_from(PRODUCER_IDS), label="producer")
            view = self.producer_view(overlay, tid, partition, pid)
            if view is None:
                epoch = data.draw(st.integers(0, 2), label="epoch")
                seq = data.draw(st.sampled_from([0, 0, 17, SEQ_MOD - 2]), label="first sequence")
            else:
                epoch, last = view
                seq = next_seq(last)
                mode = data.draw(
                    st.sampled_from(["next"] * 5 + ["gap", "bump", "bump_bad", "stale", "restart_seq"]), label="seq mode"
                )
                if mode == "gap":
                    seq = (seq + data.draw(st.sampled_from([1, 2, -2, -1]), label="gap")) % SEQ_MOD
                elif mode == "bump":
                    epoch, seq = epoch + 1, 0
                elif mode == "bump_bad":
                    epoch, seq = epoch + 1, data.draw(st.integers(1, 3), label="bumped sequence")
                elif mode == "stale" and epoch > 0:
                    epoch -= 1
                elif mode == "restart_seq":
                    seq = 0
            b.producer_id, b.producer_epoch, b.base_sequence = pid, epoch, seq
            b.last_sequence = (seq + records - 1) % SEQ_MOD
            overlay[(tid, partition, pid)] = (epoch, b.last_sequence)
        elif data.draw(st.integers(0, 3), label="garbage producer fields") == 3:
            b.producer_epoch, b.base_sequence, b.last_sequence = 3, 99, -7  # ignored when producer_id = -1

        defect = None
        if well_formed_id(tid) and data.draw(st.integers(0, 9), label="defect?") == 9:
            defect = data.draw(st.sampled_from(BATCH_DEFECTS), label="defect")
            self.apply_defect(b, defect)
        return b, defect

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

    def commit(self, data: st.DataObject) -> None:
        # The object key first: reusing one restricts the partitions to coordinators whose answer
        # the design settles (see Model.key_unsettled).
        key_kind = data.draw(st.sampled_from(["fresh"] * 6 + ["reuse", "long", "multibyte"]), label="key kind")
        key = self.fresh_key()
        allowed: Callable[[bytes, int], bool] = lambda tid, partition: True  # noqa: E731
        if key_kind == "reuse" and self.model.key_unsettled:
            key = data.draw(st.sampled_from(sorted(self.model.key_unsettled)), label="reused key")
            settled = self.model.settled_coordinators(key)

            def allowed(tid: bytes, partition: int) -> bool:
                p = self.model.partition(tid, partition)
                return p is None or p.coordinator in settled

        elif key_kind == "long":
            key = self.fresh_key()
            key += "k" * (1024 - len(key))
        elif key_kind == "multibyte":
            key = self.fresh_key()
            room = 1024 - len(key)
            key += "x" * (room % 2) + "\u00e9" * (room // 2)  # exactly 1024 bytes, fewer characters

        overlay: dict[tuple[bytes, int, int], tuple[int, int]] = {}
        drawn = [draw_batch for draw_batch in (self.draw_batch(data, overlay, allowed) for _ in
                                               range(data.draw(st.integers(1, 6), label="batches")))]  # fmt: skip
        batches = [b for b, _ in drawn]

        # Lay the batches out in the file.
        position = 0
        for i, (b, defect) in enumerate(drawn):
            previous = batches[i - 1] if i else None
            if defect == "overlap" and previous is not None and previous.size > 0:
                b.byte_offset = previous.byte_offset + data.draw(st.integers(0, previous.size - 1), label="overlap at")
            else:
                b.byte_offset = position + data.draw(st.sampled_from([0, 0, 0, 13]), label="gap")
            if defect == "byte_offset_negative":
                b.byte_offset = -1
            position = max(position, b.byte_offset + max(b.size, 0))
        file_size = position + data.draw(st.sampled_from([0, 0, 64]), label="slack")
        for b, defect in drawn:
            if defect == "outside_file":
                b.byte_offset = file_size - max(b.size, 1) + data.draw(st.integers(1, 5), label="past the end")

        involved: list[int] = []
        for b in batches:
            p = self.model.partition(b.topic_id, b.partition)
            if p is not None and p.coordinator not in involved:
                assert p.coordinator is not None
                involved.append(p.coordinator)
        owners = data.draw(st.permutations(involved), label="owners") if involved else []
        owner_kind = data.draw(st.sampled_from(["exact"] * 4 + ["extra", "missing"]), label="owner kind")
        others = [c for c in range(COORDINATORS) if c not in owners]
        if owner_kind == "extra" and others or not owners:
            owners.insert(data.draw(st.integers(0, len(owners)), label="extra at"), data.draw(st.sampled_from(others)))
        elif owner_kind == "missing" and len(owners) > 1:
            owners.pop(data.draw(st.integers(0, len(owners) - 1), label="missing"))

        if data.draw(st.integers(0, 19), label="request defect?") == 19:
            defect = data.draw(st.sampled_from(REQUEST_DEFECTS), label="request defect")
            if defect == "empty_key":
                key = ""
            elif defect == "long_key":
                key = "k" * 1025
            elif defect == "multibyte_long_key":
                key = "\u00e9" * 513  # 1026 bytes
            elif defect == "zero_file_size":
                file_size = data.draw(st.sampled_from([0, -1]), label="file size")
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
        lower = now_ms()
        response = self.call("CommitFile", request)
        upper = now_ms()
        expected = self.model.commit(request, lower, upper)
        self.compare_commit(request, response, expected)
        self.sent.extend(b for b in batches if well_formed_id(b.topic_id))
        del self.sent[:-40]

    def compare_commit(
        self, request: pb.CommitFileRequest, response: pb.CommitFileResponse, expected: list[CommitExpect]
    ) -> None:
        expect_equal("CommitFile", "result count", len(response.batches), len(expected))
        for i, (b, got, want) in enumerate(zip(request.batches, response.batches, expected, strict=True)):
            where = f"CommitFile (key {request.object_key[:12]!r}, owners {list(request.owner_ids)}) batch {i} {batch_summary(b)}"
            event(f"CommitFile batch: {code_name(want.error)}{' duplicate' if want.duplicate else ''}")
            expect_equal(where, "error_code", got.error_code, want.error)
            expect_equal(where, "assigned_base_offset", got.assigned_base_offset, want.base)
            expect_equal(where, "is_duplicate", got.is_duplicate, want.duplicate)
            expect_equal(where, "log_start_offset", got.log_start_offset, want.log_start)
            if isinstance(want.append, AppendTime):
                want.append.bind(got.log_append_time, f"{where} log_append_time")
            else:
                expect_equal(where, "log_append_time", got.log_append_time, want.append)

    @rule(data=st.data())
    def commit_file(self, data: st.DataObject) -> None:
        self.commit(data)

    @rule(data=st.data())
    def commit_another_file(self, data: st.DataObject) -> None:
        """Commits are the heart: a second rule doubles their share of the steps."""
        self.commit(data)

    # ------------------------------------------------------------ DeleteRecords

    def draw_offset(self, data: st.DataObject, p: Partition | None, label: str) -> int:
        if p is None:
            return data.draw(st.sampled_from([0, -1, 5]), label=label)
        inside = sorted({p.log_start, p.high_watermark} | {b.base for b in p.batches} | {b.last for b in p.batches})
        choice = data.draw(
            st.sampled_from(["inside", "inside", "inside", "hwm", "start", "below", "above", "minus1", "minus2"]),
            label=f"{label} kind",
        )
        if choice == "inside":
            return data.draw(st.sampled_from(inside), label=label)
        return {
            "hwm": p.high_watermark,
            "start": p.log_start,
            "below": p.log_start - 1,
            "above": p.high_watermark + 1,
            "minus1": -1,
            "minus2": -2,
        }[choice]

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        topics: list[pb.DeleteRecordsRequest.Topic] = []
        for _ in range(data.draw(st.integers(1, 2), label="topics")):
            tid = self.draw_topic_id(data)
            partitions = []
            for _ in range(data.draw(st.integers(1, 3), label="partitions")):
                partition = self.draw_partition(data, tid)
                offset = self.draw_offset(data, self.model.partition(tid, partition), "delete below")
                partitions.append(pb.DeleteRecordsRequest.Partition(partition=partition, offset=offset))
            topics.append(pb.DeleteRecordsRequest.Topic(topic_id=tid, partitions=partitions))
        request = pb.DeleteRecordsRequest(topics=topics)
        response = self.call("DeleteRecords", request)
        expect_equal("DeleteRecords", "topic count", len(response.topics), len(topics))
        for asked, got in zip(topics, response.topics, strict=True):
            expect_equal("DeleteRecords", "topic_id", got.topic_id, asked.topic_id)
            expect_equal("DeleteRecords", "partition count", len(got.partitions), len(asked.partitions))
            for item, result in zip(asked.partitions, got.partitions, strict=True):
                where = f"DeleteRecords {asked.topic_id.hex()[:8]}/{item.partition} below {item.offset}"
                error, low = self.model.delete_records(asked.topic_id, item.partition, item.offset)
                expect_equal(where, "partition", result.partition, item.partition)
                expect_equal(where, "error_code", result.error_code, error)
                expect_equal(where, "low_watermark", result.low_watermark, low)

    # ------------------------------------------------------------ reads

    @rule(data=st.data())
    def list_offsets(self, data: st.DataObject) -> None:
        topics: list[pb.ListOffsetsRequest.Topic] = []
        for _ in range(data.draw(st.integers(1, 2), label="topics")):
            tid = self.draw_topic_id(data)
            partitions = []
            for _ in range(data.draw(st.integers(1, 4), label="partitions")):
                partition = self.draw_partition(data, tid)
                p = self.model.partition(tid, partition)
                known = sorted({b.effective_timestamp() + d for b in (p.batches if p else []) for d in (-1, 0, 1)})
                kind = data.draw(st.sampled_from(["special", "known", "fixed"]), label="timestamp kind")
                if kind == "known" and known:
                    timestamp = data.draw(st.sampled_from(known), label="timestamp")
                elif kind == "fixed":
                    timestamp = data.draw(st.sampled_from([0, 1, 2500, 2**62]), label="timestamp")
                else:
                    timestamp = data.draw(st.sampled_from([-1, -2, -3, -4, -5, -6, -100]), label="timestamp")
                partitions.append(pb.ListOffsetsRequest.Partition(partition=partition, timestamp=timestamp))
            topics.append(pb.ListOffsetsRequest.Topic(topic_id=tid, partitions=partitions))
        request = pb.ListOffsetsRequest(topics=topics)
        self.check_list(request, self.call("ListOffsets", request))

    @rule(data=st.data())
    def find_batches(self, data: st.DataObject) -> None:
        budgets = st.sampled_from([BIG, 0, -1, 1, 100, 150, 300, 1000])
        topics: list[pb.FindBatchesRequest.Topic] = []
        for _ in range(data.draw(st.integers(1, 3), label="topics")):
            tid = self.draw_topic_id(data)
            partitions = []
            for _ in range(data.draw(st.integers(1, 3), label="partitions")):
                partition = self.draw_partition(data, tid)
                offset = self.draw_offset(data, self.model.partition(tid, partition), "fetch from")
                partitions.append(
                    pb.FindBatchesRequest.Partition(
                        partition=partition,
                        offset=offset,
                        max_partition_fetch_bytes=data.draw(budgets, label="partition budget"),
                    )
                )
            topics.append(pb.FindBatchesRequest.Topic(topic_id=tid, partitions=partitions))
        request = pb.FindBatchesRequest(
            fetch_max_bytes=data.draw(budgets, label="fetch budget"),
            max_batches_per_partition=data.draw(st.sampled_from([0, -1, 1, 2, 3]), label="max batches"),
            topics=topics,
        )
        self.check_find(request, self.call("FindBatches", request))

    # ------------------------------------------------------------ restarts

    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        """Stop (SIGTERM) or kill -9, start on the same data dir; everything acknowledged must be there."""
        if data.draw(st.sampled_from(["sigterm", "kill"]), label="how") == "kill":
            self.server.kill()
        else:
            code = self.server.stop()
            assert code == 0, f"SIGTERM exit code {code}:\n{self.output_tail()}"
        self.server.start()
        self.learn_coordinators()


SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    derandomize=DERANDOMIZE,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@pytest.mark.timeout(max(300, EXAMPLES * STEPS))
def test_model_against_server() -> None:
    run_state_machine_as_test(CoordinatorMachine, settings=SETTINGS)
