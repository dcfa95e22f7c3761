"""An executable model of DESIGN §4 ("Semantics"), for tests/test_model.py.

Written from the design document, not from the server code. It keeps the state a broker can
observe (topics, partitions, offsets, live batches, producer state, object keys committed per
coordinator) and computes the answer every RPC must give. What the model cannot predict it
learns once and then holds the server to:

- which coordinator a partition is assigned to (FindCoordinator; it must never change),
- the append time of each commit (DESIGN §4: "every accepted batch of one commit gets the same
  append time", across coordinators too), taken from the first answer that shows it (CommitFile
  for LOG_APPEND_TIME batches, or FindBatches' `log_append_timestamp`), after which every batch
  of that commit must show the same value,
- each batch's `batch_id` (must stay the same).

Where DESIGN §4 leaves a choice open, the model reads it as follows (Kafka decides ties):
- the duplicate window holds the current epoch's batches only (Kafka's ProducerStateEntry), so a
  retry of an old-epoch batch after a bump is INVALID_PRODUCER_EPOCH, never a duplicate;
- producer state survives DeleteRecords; DeleteTopics drops it with the topic;
- the byte-overlap check covers every earlier batch of the request with size > 0, rejected or not;
- in FindBatches an item keeps its error (unknown, out of range) after the budget is spent;
- `-3` when every live batch has timestamp -1 may answer (-1, -1) or (-1, that batch's offset);
- a deleted topic's id is unknown, so CreatePartitions may create it again;
- `batch_max_timestamp` in BatchInfo is the producer's value, also for LOG_APPEND_TIME batches.
Whether a coordinator that a commit refused (not named in owner_ids) or that was named without
batches "knows" the key afterwards is left open (a hand-over may reach it), so the test never
reuses a key on such a coordinator (`key_unsettled`).

Retried commits (DESIGN §6a): a coordinator's part of a CommitFile whose key it committed before
is a retry when it carries the same file (size, uploader, owner_ids) and, batch for batch, the
same well-formed batches (every field the coordinator keeps: partition, bytes, record count,
timestamps, magic, producer fields when idempotent; malformed ones are not kept, so not
compared, and get their problem again). It gets the first answer again (offsets, append time;
the current log start) only while every well-formed batch of the first part was accepted with
new offsets and is still live, or was rejected then and is now a duplicate (its producer's window) of a live
batch, answered as that duplicate; otherwise, like any other reuse, INVALID_REQUEST.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from protos import coordinator_pb2 as pb

SEQ_MOD = 2**31  # sequences wrap from 2^31-1 to 0
WINDOW = 5  # batches of (partition, producer) remembered for duplicate detection
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class Mismatch(AssertionError):
    """The server's answer differs from the model's."""


def well_formed_id(topic_id: bytes) -> bool:
    return len(topic_id) == 16 and topic_id != bytes(16)


def valid_topic_name(name: str) -> bool:
    return TOPIC_NAME.fullmatch(name) is not None and name not in (".", "..")


def next_seq(seq: int) -> int:
    return (seq + 1) % SEQ_MOD


@dataclass(eq=False)
class AppendTime:
    """The append time of one commit: unknown until an answer shows it."""

    value: int | None = None
    lower: int = 0  # the test's clock just before the request went out
    upper: int = 0  # ... and just after its answer came back

    def bind(self, seen: int, where: str) -> None:
        if self.value is None:
            # The coordinator's clock at check time; same machine as the test, so inside the call's
            # window (1 s of slack for clock granularity).
            if not self.lower - 1000 <= seen <= self.upper + 1000:
                raise Mismatch(f"{where}: append time {seen} outside the call's window [{self.lower}, {self.upper}]")
            self.value = seen
        elif self.value != seen:
            raise Mismatch(f"{where}: append time {seen}, but this commit's append time is {self.value}")


@dataclass(eq=False)
class StoredBatch:
    base: int  # assigned offsets
    last: int
    object_key: str
    byte_offset: int
    size: int
    magic: int
    max_timestamp: int
    timestamp_type: int
    append: AppendTime
    batch_id: int | None = None

    def effective_timestamp(self) -> int:
        if self.timestamp_type == pb.LOG_APPEND_TIME:
            assert self.append.value is not None, "LOG_APPEND_TIME batches learn their time from CommitFile"
            return self.append.value
        return self.max_timestamp


@dataclass
class Sent:
    """One entry of the producer's duplicate window."""

    base_seq: int
    last_seq: int
    base_offset: int
    timestamp_type: int
    append: AppendTime

    def reported_append_time(self) -> int | AppendTime:
        return self.append if self.timestamp_type == pb.LOG_APPEND_TIME else -1


@dataclass
class ProducerState:
    epoch: int
    last_seq: int
    window: list[Sent] = field(default_factory=list)  # of the current epoch, oldest first


@dataclass
class Partition:
    coordinator: int | None = None  # learned from FindCoordinator
    high_watermark: int = 0
    log_start: int = 0
    batches: list[StoredBatch] = field(default_factory=list)  # live ones, in offset order
    producers: dict[int, ProducerState] = field(default_factory=dict)


@dataclass
class Topic:
    topic_id: bytes
    name: str
    partitions: list[Partition] = field(default_factory=list)


@dataclass
class CommitExpect:
    error: int
    base: int = -1
    append: int | AppendTime = -1
    log_start: int = -1
    duplicate: bool = False
    depth: int = 0  # for statistics: a duplicate's place in the window (1 = newest)
    retry: bool = False  # the first answer again, for a retried commit


BatchIdentity = tuple[int, ...]  # what a coordinator keeps of a request's batch (see `batch_identity`)


def batch_identity(b: pb.CommitFileRequest.Batch) -> BatchIdentity:
    """The fields a retry must repeat: base offset only as the record count, producer fields only when idempotent."""
    producer = (b.producer_epoch, b.base_sequence, b.last_sequence) if b.producer_id >= 0 else ()
    return (
        b.partition, b.byte_offset, b.size, b.last_offset - b.base_offset, b.batch_max_timestamp, b.magic,
        b.timestamp_type, b.producer_id, *producer,
    )  # fmt: skip


@dataclass
class FirstPart:
    """One coordinator's part of the commit that first recorded a key there, with its first answers."""

    file: tuple[int, int, tuple[int, ...]]  # file_size, uploader_broker_id, owner_ids
    # Per batch of the part: its topic, identity, whether it was malformed, and the batch it stored (or None).
    batches: list[tuple[bytes, BatchIdentity, bool, StoredBatch | None]]
    answers: list[CommitExpect]


@dataclass
class FindExpect:
    error: int
    log_start: int = -1
    high_watermark: int = -1
    batches: list[StoredBatch] = field(default_factory=list)
    truncated: bool = False  # the budget stopped the scan (for test statistics)


@dataclass
class ListExpect:
    error: int
    timestamp: int = -1
    offset: int = -1
    # For -3 when every live batch has timestamp -1, the design leaves open whether a batch
    # "holds" -1: accept (-1, -1) too.
    alternative: tuple[int, int] | None = None


def record_count(b: pb.CommitFileRequest.Batch) -> int:
    return b.last_offset - b.base_offset + 1


def structure_error(b: pb.CommitFileRequest.Batch, file_size: int, earlier: Sequence[tuple[int, int]]) -> str | None:
    """Why the batch is INVALID_RECORD (DESIGN §4, CommitFile checks), or None."""
    if b.size <= 0:
        return "size <= 0"
    if b.byte_offset < 0 or b.byte_offset + b.size > file_size:
        return "byte range outside the file"
    start, end = b.byte_offset, b.byte_offset + b.size
    if any(s < end and start < e for s, e in earlier):
        return "byte range overlaps an earlier batch"
    if b.base_offset < 0 or b.last_offset < b.base_offset:
        return "bad offsets"
    if not 0 <= b.magic <= 2:
        return "bad magic"
    if (b.magic == 0) != (b.timestamp_type == pb.NO_TIMESTAMP_TYPE):
        return "timestamp type -1 exactly when magic is 0"
    if b.magic != 0 and b.timestamp_type not in (pb.CREATE_TIME, pb.LOG_APPEND_TIME):
        return "bad timestamp type"
    if b.batch_max_timestamp < -1:
        return "max timestamp < -1"
    if b.producer_id < -1:
        return "producer id < -1"
    if b.producer_id >= 0:
        if b.producer_epoch < 0 or b.base_sequence < 0:
            return "negative epoch or sequence"
        if b.last_sequence != (b.base_sequence + b.last_offset - b.base_offset) % SEQ_MOD:
            return "last sequence inconsistent"
    return None


class Model:
    def __init__(self, coordinators: int) -> None:
        self.coordinators = coordinators
        self.topics: dict[bytes, Topic] = {}
        self.deleted: dict[bytes, str] = {}  # id -> name of deleted topics (the ids are unknown now)
        self.names: dict[str, bytes] = {}  # live topics
        # Object keys each coordinator has recorded (rule: "committed to it before").
        self.keys: dict[int, set[str]] = {c: set() for c in range(coordinators)}
        # Per key, coordinators that may know it without having committed it (named in owner_ids,
        # so a hand-over can reach them; or with batches but not named). Whether a later commit of
        # the key to them is refused is not settled by the design, so the generator avoids it.
        self.key_unsettled: dict[str, set[int]] = {}
        # (coordinator, key) -> the part of the commit that recorded the key there (retries repeat its answer).
        self.first_parts: dict[tuple[int, str], FirstPart] = {}

    # ------------------------------------------------------------ look-ups

    def partition(self, topic_id: bytes, partition: int) -> Partition | None:
        topic = self.topics.get(topic_id)
        if topic is None or not 0 <= partition < len(topic.partitions):
            return None
        return topic.partitions[partition]

    def all_partitions(self) -> Iterable[tuple[bytes, int, Partition]]:
        for topic in self.topics.values():
            for index, p in enumerate(topic.partitions):
                yield topic.topic_id, index, p

    def settled_coordinators(self, key: str) -> set[int]:
        """Coordinators whose answer to a commit of `key` the design settles."""
        unsettled = self.key_unsettled.get(key, set())
        return {c for c in range(self.coordinators) if key in self.keys[c] or c not in unsettled}

    def coordinator_facts(self, coordinator: int) -> tuple[int, int, int, int]:
        """(partition_count, live_batch_count, live_file_count, oldest_live_file_timestamp) of DescribeCoordinators."""
        partitions = [p for _, _, p in self.all_partitions() if p.coordinator == coordinator]
        batches = [b for p in partitions for b in p.batches]
        files: dict[str, int] = {}
        for b in batches:
            assert b.append.value is not None, "read back (and bound) before describing"
            files[b.object_key] = min(files.get(b.object_key, b.append.value), b.append.value)
        return len(partitions), len(batches), len(files), min(files.values(), default=-1)

    # ------------------------------------------------------------ CreatePartitions

    def create_partitions(self, topic_id: bytes, name: str, count: int) -> tuple[int, list[Partition]]:
        """The error code, and the partitions created (whose coordinators the caller learns)."""
        if not well_formed_id(topic_id):
            return pb.INVALID_REQUEST, []
        if not valid_topic_name(name):
            return pb.INVALID_TOPIC_EXCEPTION, []
        topic = self.topics.get(topic_id)
        if topic is not None and topic.name != name:
            return pb.INCONSISTENT_TOPIC_ID, []
        if topic is None and name in self.names:
            return pb.TOPIC_ALREADY_EXISTS, []
        current = len(topic.partitions) if topic is not None else 0
        if count <= 0 or count < current:
            return pb.INVALID_PARTITIONS, []
        if topic is None:  # unknown, or deleted ("a deleted topic's id is unknown afterwards")
            topic = self.topics[topic_id] = Topic(topic_id, name)
            self.names[name] = topic_id
            self.deleted.pop(topic_id, None)
        created = [Partition() for _ in range(count - current)]
        topic.partitions.extend(created)
        return pb.NONE, created

    # ------------------------------------------------------------ DeleteTopics

    def delete_topic(self, topic_id: bytes) -> int:
        if not well_formed_id(topic_id):
            return pb.INVALID_REQUEST
        topic = self.topics.pop(topic_id, None)
        if topic is None:
            return pb.UNKNOWN_TOPIC_ID
        del self.names[topic.name]
        self.deleted[topic_id] = topic.name
        return pb.NONE

    # ------------------------------------------------------------ CommitFile

    def commit(self, request: pb.CommitFileRequest, lower: int, upper: int) -> list[CommitExpect]:
        batches = request.batches
        owners = list(request.owner_ids)
        key = request.object_key
        if (
            not 1 <= len(key.encode()) <= 1024
            or request.file_size <= 0
            or not batches
            or not owners
            or len(set(owners)) != len(owners)
        ):
            return [CommitExpect(pb.INVALID_REQUEST) for _ in batches]

        parts = [self.partition(b.topic_id, b.partition) for b in batches]
        malformed: list[bool] = []
        earlier: list[tuple[int, int]] = []
        for b in batches:
            malformed.append(structure_error(b, request.file_size, earlier) is not None)
            if b.size > 0:
                earlier.append((b.byte_offset, b.byte_offset + b.size))
        involved = {p.coordinator for p in parts if p is not None}
        refused = {c for c in involved if c not in owners}
        retried: dict[int, list[CommitExpect]] = {}
        for c in involved - refused:
            if key in self.keys[c]:
                indexes = [i for i, p in enumerate(parts) if p is not None and p.coordinator == c]
                answers = self._retry_answers(c, request, [(i, malformed[i]) for i in indexes])
                if answers is None:
                    refused.add(c)
                else:
                    retried[c] = answers
        append = AppendTime(lower=lower, upper=upper)

        results: list[CommitExpect] = []
        first_parts: dict[int, FirstPart] = {}
        file = (request.file_size, request.uploader_broker_id, tuple(owners))
        earlier = []
        for i, (b, p) in enumerate(zip(batches, parts, strict=True)):
            if p is not None and p.coordinator in retried:
                results.append(retried[p.coordinator].pop(0))
            else:
                stored_before = len(p.batches) if p is not None else 0
                results.append(self._commit_batch(b, p, request, refused, earlier, append))
                if p is not None and p.coordinator is not None and p.coordinator not in refused:
                    stored = p.batches[-1] if len(p.batches) > stored_before else None
                    first = first_parts.setdefault(p.coordinator, FirstPart(file, [], []))
                    first.batches.append((b.topic_id, batch_identity(b), malformed[i], stored))
                    first.answers.append(results[-1])
            if b.size > 0:
                earlier.append((b.byte_offset, b.byte_offset + b.size))

        for c in involved - refused - set(retried):
            self.keys[c].add(key)
            self.first_parts[(c, key)] = first_parts[c]
        unsettled = self.key_unsettled.setdefault(key, set())
        unsettled.update(owners)
        unsettled.update(c for c in involved if c not in owners)
        return results

    def _retry_answers(
        self, coordinator: int, request: pb.CommitFileRequest, part: list[tuple[int, bool]]
    ) -> list[CommitExpect] | None:
        """The first answers again if this part retries the commit that recorded the key here, else None."""
        first = self.first_parts.get((coordinator, request.object_key))
        if first is None:
            return None
        if first.file != (request.file_size, request.uploader_broker_id, tuple(request.owner_ids)):
            return None
        # Malformed batches are not stored: they are not compared, and get their problem again.
        firsts = [(topic_id, identity, stored, answer) for (topic_id, identity, bad, stored), answer
                  in zip(first.batches, first.answers, strict=True) if not bad]  # fmt: skip
        asked = [request.batches[i] for i, bad in part if not bad]
        if [(b.topic_id, batch_identity(b)) for b in asked] != [(t, identity) for t, identity, _, _ in firsts]:
            return None
        again = iter(firsts)
        answers: list[CommitExpect] = []
        for index, bad in part:
            if bad:
                answers.append(CommitExpect(pb.INVALID_RECORD))
                continue
            topic_id, identity, stored, answer = next(again)
            p = self.partition(topic_id, identity[0])
            if stored is None and p is not None:
                # Rejected then: answered again only as a duplicate of a batch still stored.
                duplicate = self._duplicate_of_live(p, request.batches[index])
                if duplicate is None:
                    return None
                answers.append(duplicate)
                continue
            # Deleted since: the first answer is gone.
            if stored is None or p is None or not any(live is stored for live in p.batches):
                return None
            answers.append(CommitExpect(pb.NONE, answer.base, answer.append, p.log_start, False, retry=True))
        return answers

    @staticmethod
    def _duplicate_of_live(p: Partition, b: pb.CommitFileRequest.Batch) -> CommitExpect | None:
        """The duplicate's answer if the batch is in its producer's window and that copy is still live."""
        state = p.producers.get(b.producer_id) if b.producer_id >= 0 else None
        if state is None or state.epoch != b.producer_epoch:
            return None
        for sent in state.window:
            if (sent.base_seq, sent.last_seq) == (b.base_sequence, b.last_sequence) and sent.base_offset >= p.log_start:
                return CommitExpect(
                    pb.NONE, sent.base_offset, sent.reported_append_time(), p.log_start, True, retry=True
                )
        return None

    def _commit_batch(
        self,
        b: pb.CommitFileRequest.Batch,
        p: Partition | None,
        request: pb.CommitFileRequest,
        refused: set[int],
        earlier: list[tuple[int, int]],
        cell: AppendTime,
    ) -> CommitExpect:
        if not well_formed_id(b.topic_id):
            return CommitExpect(pb.INVALID_REQUEST)
        if p is not None and p.coordinator in refused:
            return CommitExpect(pb.INVALID_REQUEST)
        if structure_error(b, request.file_size, earlier) is not None:
            return CommitExpect(pb.INVALID_RECORD)
        if p is None:
            return CommitExpect(pb.UNKNOWN_TOPIC_OR_PARTITION)
        count = record_count(b)

        state = p.producers.get(b.producer_id) if b.producer_id >= 0 else None
        if b.producer_id >= 0 and state is not None:
            # duplicate -> epoch -> sequence
            if b.producer_epoch == state.epoch:
                for depth, sent in enumerate(reversed(state.window), 1):
                    if (sent.base_seq, sent.last_seq) == (b.base_sequence, b.last_sequence):
                        reported = sent.reported_append_time()
                        return CommitExpect(pb.NONE, sent.base_offset, reported, p.log_start, True, depth)
            if b.producer_epoch < state.epoch:
                return CommitExpect(pb.INVALID_PRODUCER_EPOCH)
            if b.producer_epoch > state.epoch:
                if b.base_sequence != 0:
                    return CommitExpect(pb.OUT_OF_ORDER_SEQUENCE_NUMBER)
            elif b.base_sequence != next_seq(state.last_seq):
                return CommitExpect(pb.OUT_OF_ORDER_SEQUENCE_NUMBER)

        base = p.high_watermark
        p.high_watermark += count
        stored = StoredBatch(
            base=base,
            last=base + count - 1,
            object_key=request.object_key,
            byte_offset=b.byte_offset,
            size=b.size,
            magic=b.magic,
            max_timestamp=b.batch_max_timestamp,
            timestamp_type=b.timestamp_type,
            append=cell,
        )
        p.batches.append(stored)
        if b.producer_id >= 0:
            if state is None or state.epoch != b.producer_epoch:
                state = p.producers[b.producer_id] = ProducerState(b.producer_epoch, b.last_sequence)
            state.last_seq = b.last_sequence
            state.window.append(Sent(b.base_sequence, b.last_sequence, base, b.timestamp_type, cell))
            del state.window[:-WINDOW]
        reported: int | AppendTime = cell if b.timestamp_type == pb.LOG_APPEND_TIME else -1
        return CommitExpect(pb.NONE, base, reported, p.log_start, False)

    # ------------------------------------------------------------ DeleteRecords

    def delete_records(self, topic_id: bytes, partition: int, offset: int) -> tuple[int, int]:
        """(error, low watermark)."""
        if not well_formed_id(topic_id):
            return pb.INVALID_REQUEST, -1
        p = self.partition(topic_id, partition)
        if p is None:
            return pb.UNKNOWN_TOPIC_OR_PARTITION, -1
        if offset == -1:
            offset = p.high_watermark
        if offset < 0 or offset > p.high_watermark:
            return pb.OFFSET_OUT_OF_RANGE, -1
        if offset > p.log_start:
            p.log_start = offset
            p.batches = [b for b in p.batches if b.last >= offset]
        return pb.NONE, p.log_start

    # ------------------------------------------------------------ ListOffsets

    def list_offsets(self, topic_id: bytes, partition: int, timestamp: int) -> ListExpect:
        if not well_formed_id(topic_id):
            return ListExpect(pb.INVALID_REQUEST)
        p = self.partition(topic_id, partition)
        if p is None:
            return ListExpect(pb.UNKNOWN_TOPIC_OR_PARTITION)
        if timestamp == -1:
            return ListExpect(pb.NONE, -1, p.high_watermark)
        if timestamp in (-2, -4):
            return ListExpect(pb.NONE, -1, p.log_start)
        if timestamp == -5:
            return ListExpect(pb.NONE, -1, -1)
        if timestamp == -3:
            if not p.batches:
                return ListExpect(pb.NONE, -1, -1)
            best = max(b.effective_timestamp() for b in p.batches)
            first = next(b for b in p.batches if b.effective_timestamp() == best)
            expect = ListExpect(pb.NONE, best, max(first.base, p.log_start))
            if best == -1:
                expect.alternative = (-1, -1)
            return expect
        if timestamp < 0:
            return ListExpect(pb.UNSUPPORTED_VERSION)
        for b in p.batches:
            if b.effective_timestamp() >= timestamp:
                return ListExpect(pb.NONE, b.effective_timestamp(), max(b.base, p.log_start))
        return ListExpect(pb.NONE, -1, -1)

    # ------------------------------------------------------------ FindBatches

    def find_batches(self, request: pb.FindBatchesRequest) -> list[list[FindExpect]]:
        total = 0
        first = True
        out: list[list[FindExpect]] = []
        for topic in request.topics:
            results: list[FindExpect] = []
            out.append(results)
            for item in topic.partitions:
                if not well_formed_id(topic.topic_id):
                    results.append(FindExpect(pb.INVALID_REQUEST))
                    continue
                p = self.partition(topic.topic_id, item.partition)
                if p is None:
                    results.append(FindExpect(pb.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                expect = FindExpect(pb.NONE, p.log_start, p.high_watermark)
                results.append(expect)
                if item.offset < p.log_start or item.offset > p.high_watermark:
                    expect.error = pb.OFFSET_OUT_OF_RANGE
                    continue
                partition_bytes = 0
                for b in p.batches:
                    if b.last < item.offset:
                        continue
                    if not first and not (
                        partition_bytes < item.max_partition_fetch_bytes
                        and total < request.fetch_max_bytes
                        and (
                            request.max_batches_per_partition <= 0
                            or len(expect.batches) < request.max_batches_per_partition
                        )
                    ):
                        expect.truncated = True
                        break
                    first = False
                    expect.batches.append(b)
                    partition_bytes += b.size
                    total += b.size
        return out
