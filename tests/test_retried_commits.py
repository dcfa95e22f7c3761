"""Retried commits (DESIGN §6a): an identical CommitFile of a committed key gets the first answer again.

Through the real socket: the retry is answered with the first commit's offsets and append time
and writes nothing (no log record, no offsets, no producer state), also after a restart and
while the first commit is still pending; any other reuse of the key stays INVALID_REQUEST,
and so does a retry of a commit that some batches were rejected by (unless as duplicates of batches still stored)
or deleted from since.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from coordinator.base.errors import ErrorCode
from coordinator.base.result import Result
from coordinator.commits import parts, rules
from coordinator.machine import kinds
from coordinator.machine.state.store import StateStore
from coordinator.machine.view import CoordinatorView, FileFacts
from coordinator.topics import partition_checks
from protos import coordinator_pb2 as pb
from protos import records_pb2 as rec
from tests.harness import (
    Broker,
    batch,
    coordinator_of,
    delete_records,
    describe_coordinator,
    fetch,
    high_watermark,
    laid_out,
    topic_name,
)
from tests.in_process import InProcessNode

Batch = pb.CommitFileRequest.Batch
PID = 5151
TOPIC = bytes(range(1, 17))


def new_request(batches: Sequence[Batch], owner_ids: Sequence[int]) -> pb.CommitFileRequest:
    return pb.CommitFileRequest(
        object_key=f"wal/{uuid.uuid4()}",
        object_format=1,
        file_size=max(b.byte_offset + b.size for b in batches) + 10,
        uploader_broker_id=3,
        owner_ids=owner_ids,
        batches=batches,
    )


def answers(response: pb.CommitFileResponse) -> list[tuple[int, int, int, int, bool]]:
    """Per batch: what a broker acts on (error, base offset, append time, log start, duplicate)."""
    return [
        (b.error_code, b.assigned_base_offset, b.log_append_time, b.log_start_offset, b.is_duplicate)
        for b in response.batches
    ]


def log_end(stub: object, coordinator_id: int) -> int:
    return describe_coordinator(stub, coordinator_id).log_end_offset  # type: ignore[arg-type]


def spread(broker: Broker) -> tuple[bytes, list[int], list[int]]:
    """A topic with a partition on each coordinator: (topic id, its partitions, their coordinators)."""
    topic_id = broker.create_topic(topic_name("retry"), broker.coordinators)
    partitions = list(range(broker.coordinators))
    return topic_id, partitions, [coordinator_of(broker.stub, topic_id, p) for p in partitions]


def mixed_request(broker: Broker) -> tuple[bytes, pb.CommitFileRequest]:
    """Two coordinators' batches: plain and idempotent, CREATE_TIME and LOG_APPEND_TIME, one malformed."""
    topic_id, _, coordinators = spread(broker)
    batches = laid_out(
        [
            batch(topic_id, 0, 3, timestamp_type=pb.LOG_APPEND_TIME),
            batch(topic_id, 1, 2, producer_id=PID, epoch=1, sequence=0),
            batch(topic_id, 0, 1, magic=7),  # INVALID_RECORD, then and again
            batch(topic_id, 1, 4, producer_id=PID, epoch=1, sequence=2, timestamp_type=pb.LOG_APPEND_TIME),
            batch(topic_id, 0, 2),
        ]
    )
    return topic_id, new_request(batches, [coordinators[0], coordinators[1]])


def test_identical_retry_gets_the_first_answer_and_writes_nothing(broker: Broker, server: InProcessNode) -> None:
    topic_id, request = mixed_request(broker)
    first = broker.stub.CommitFile(request)
    assert [b.error_code for b in first.batches] == [pb.NONE, pb.NONE, pb.INVALID_RECORD, pb.NONE, pb.NONE]
    ends = {c: log_end(broker.stub, c) for c in request.owner_ids}
    high_watermarks = [high_watermark(broker.stub, topic_id, p) for p in (0, 1)]
    batches_before = [list(fetch(broker.stub, topic_id, p, 0).batches) for p in (0, 1)]

    server.advance(5_000)  # a later clock: the retry must still show the first append time
    retried = broker.stub.CommitFile(request)

    assert answers(retried) == answers(first)
    assert retried.batches[0].log_append_time > 0
    assert {c: log_end(broker.stub, c) for c in request.owner_ids} == ends
    assert [high_watermark(broker.stub, topic_id, p) for p in (0, 1)] == high_watermarks == [5, 6]
    assert [list(fetch(broker.stub, topic_id, p, 0).batches) for p in (0, 1)] == batches_before
    # No producer state moved: the next sequence after the first commit is still the one accepted.
    after = broker.commit([batch(topic_id, 1, 1, producer_id=PID, epoch=1, sequence=6)])
    assert answers(after)[0][:2] == (pb.NONE, 6)


def test_retry_after_a_restart_gets_the_first_answer(fresh_node: InProcessNode) -> None:
    fresh_node.start()
    broker = Broker(fresh_node.stub, fresh_node.coordinators)
    topic_id, request = mixed_request(broker)
    first = broker.stub.CommitFile(request)

    fresh_node.restart()
    broker = Broker(fresh_node.stub, fresh_node.coordinators)
    ends = {c: log_end(broker.stub, c) for c in request.owner_ids}  # a restart's leader change included
    retried = broker.stub.CommitFile(request)

    assert answers(retried) == answers(first)
    assert {c: log_end(broker.stub, c) for c in request.owner_ids} == ends
    assert [high_watermark(broker.stub, topic_id, p) for p in (0, 1)] == [5, 6]


def test_retries_while_the_first_commit_is_pending_get_its_answer(broker: Broker) -> None:
    topic_id = broker.create_topic(topic_name("retry"), 1)
    owner = coordinator_of(broker.stub, topic_id, 0)
    request = new_request(laid_out([batch(topic_id, 0, 2, timestamp_type=pb.LOG_APPEND_TIME)]), [owner])
    # Sent together: the later ones are checked while the first is written, not yet applied.
    futures = [broker.stub.CommitFile.future(request) for _ in range(8)]
    results = [answers(f.result(timeout=30)) for f in futures]
    assert all(result == results[0] for result in results), results
    assert results[0][0][:2] == (pb.NONE, 0)
    assert high_watermark(broker.stub, topic_id, 0) == 2
    assert len(fetch(broker.stub, topic_id, 0, 0).batches) == 1


BATCH_CHANGES: dict[str, tuple[str, int]] = {
    "byte_offset": ("byte_offset", 105),
    "size": ("size", 99),
    "record count": ("last_offset", 3),
    "max timestamp": ("batch_max_timestamp", 1_700_000_000_001),
    "timestamp type": ("timestamp_type", pb.LOG_APPEND_TIME),
    "magic": ("magic", 1),
    "producer epoch": ("producer_epoch", 2),
    "base sequence": ("base_sequence", 1),
    "producer id": ("producer_id", PID + 1),
    "partition": ("partition", 1),
}


@pytest.mark.parametrize("change", list(BATCH_CHANGES))
def test_reuse_with_a_batch_that_differs_is_invalid_request(broker: Broker, change: str) -> None:
    topic_id = broker.create_topic(topic_name("retry"), 2)
    partitions = [0, 1]
    owners = sorted({coordinator_of(broker.stub, topic_id, p) for p in partitions})
    # The batch that changes comes last, so a new byte offset stays inside the file without overlapping.
    first_batches = laid_out([batch(topic_id, 1, 1), batch(topic_id, 0, 2, producer_id=PID, epoch=1, sequence=0)])
    request = new_request(first_batches, owners)
    assert [b.error_code for b in broker.stub.CommitFile(request).batches] == [pb.NONE, pb.NONE]
    ends = {c: log_end(broker.stub, c) for c in owners}

    other = pb.CommitFileRequest()
    other.CopyFrom(request)
    changed = other.batches[1]
    field, value = BATCH_CHANGES[change]
    setattr(changed, field, value)
    if field == "base_sequence":
        changed.last_sequence = value + 1
    if field == "last_offset":
        changed.last_sequence = value
    response = broker.stub.CommitFile(other)

    codes = [b.error_code for b in response.batches]
    assert codes[1] == pb.INVALID_REQUEST, response
    assert "already committed" in response.batches[1].error_message
    # The other batch is refused with the part of its coordinator, or answered again as its own part's retry.
    same_part = coordinator_of(broker.stub, topic_id, 1) == coordinator_of(broker.stub, topic_id, changed.partition)
    assert codes[0] == (pb.INVALID_REQUEST if same_part else pb.NONE)
    assert {c: log_end(broker.stub, c) for c in owners} == ends
    assert [high_watermark(broker.stub, topic_id, p) for p in partitions] == [2, 1]


def test_reuse_for_another_file_is_invalid_request(broker: Broker) -> None:
    topic_id = broker.create_topic(topic_name("retry"), 1)
    owner = coordinator_of(broker.stub, topic_id, 0)
    request = new_request(laid_out([batch(topic_id, 0, 2)]), [owner])
    assert [b.error_code for b in broker.stub.CommitFile(request).batches] == [pb.NONE]
    for field, value in (("file_size", request.file_size + 1), ("uploader_broker_id", 9)):
        other = pb.CommitFileRequest()
        other.CopyFrom(request)
        setattr(other, field, value)
        response = broker.stub.CommitFile(other)
        assert [b.error_code for b in response.batches] == [pb.INVALID_REQUEST], field
    assert high_watermark(broker.stub, topic_id, 0) == 2


def test_reuse_with_fewer_or_more_batches_is_invalid_request(broker: Broker) -> None:
    topic_id = broker.create_topic(topic_name("retry"), 1)
    owner = coordinator_of(broker.stub, topic_id, 0)
    batches = laid_out([batch(topic_id, 0, 2), batch(topic_id, 0, 1), batch(topic_id, 0, 3)])
    request = new_request(batches, [owner])
    assert [b.error_code for b in broker.stub.CommitFile(request).batches] == [pb.NONE] * 3

    fewer = pb.CommitFileRequest()
    fewer.CopyFrom(request)
    del fewer.batches[2]
    assert [b.error_code for b in broker.stub.CommitFile(fewer).batches] == [pb.INVALID_REQUEST] * 2
    more = pb.CommitFileRequest()
    more.CopyFrom(request)
    more.batches.append(batch(topic_id, 0, 1, byte_offset=request.file_size - 10, size=10))
    assert [b.error_code for b in broker.stub.CommitFile(more).batches] == [pb.INVALID_REQUEST] * 4
    reordered = pb.CommitFileRequest()
    reordered.CopyFrom(request)
    reordered.batches[0].CopyFrom(request.batches[1])
    reordered.batches[1].CopyFrom(request.batches[0])
    assert [b.error_code for b in broker.stub.CommitFile(reordered).batches] == [pb.INVALID_REQUEST] * 3
    assert high_watermark(broker.stub, topic_id, 0) == 6


def test_retry_with_only_one_coordinators_part_is_answered_for_that_part(broker: Broker) -> None:
    """Each coordinator judges its own part: a retry may carry a subset of the coordinators' parts."""
    topic_id, _, coordinators = spread(broker)
    batches = laid_out([batch(topic_id, 0, 2), batch(topic_id, 1, 3)])
    request = new_request(batches, [coordinators[0], coordinators[1]])
    first = broker.stub.CommitFile(request)
    part = pb.CommitFileRequest()
    part.CopyFrom(request)
    del part.batches[1]
    assert answers(broker.stub.CommitFile(part)) == answers(first)[:1]


def test_retry_after_some_batches_were_deleted_is_invalid_request(broker: Broker) -> None:
    topic_id = broker.create_topic(topic_name("retry"), 1)
    owner = coordinator_of(broker.stub, topic_id, 0)
    request = new_request(laid_out([batch(topic_id, 0, 2), batch(topic_id, 0, 3)]), [owner])
    first = broker.stub.CommitFile(request)
    assert answers(broker.stub.CommitFile(request)) == answers(first)  # a retry while all are stored

    assert delete_records(broker.stub, topic_id, 0, 2).error_code == pb.NONE  # the first batch goes
    response = broker.stub.CommitFile(request)

    assert [b.error_code for b in response.batches] == [pb.INVALID_REQUEST] * 2
    assert "deleted since" in response.batches[0].error_message
    assert high_watermark(broker.stub, topic_id, 0) == 5


def test_retry_of_a_commit_that_rejected_a_batch_is_invalid_request(broker: Broker) -> None:
    """A producer error's answer is not kept: the first answer cannot be given again."""
    topic_id = broker.create_topic(topic_name("retry"), 1)
    owner = coordinator_of(broker.stub, topic_id, 0)
    assert answers(broker.commit([batch(topic_id, 0, 1, producer_id=PID, epoch=3, sequence=0)]))[0][0] == pb.NONE
    request = new_request(
        laid_out([batch(topic_id, 0, 1), batch(topic_id, 0, 1, producer_id=PID, epoch=3, sequence=7)]), [owner]
    )
    assert [b.error_code for b in broker.stub.CommitFile(request).batches] == [
        pb.NONE,
        pb.OUT_OF_ORDER_SEQUENCE_NUMBER,
    ]
    response = broker.stub.CommitFile(request)
    assert [b.error_code for b in response.batches] == [pb.INVALID_REQUEST] * 2
    assert high_watermark(broker.stub, topic_id, 0) == 2


def test_retry_of_a_commit_that_answered_a_duplicate_gets_the_duplicate_again(broker: Broker) -> None:
    """Found on a lossy network (tests/test_network_partitions.py): a batch stored in one file, resent in a second
    file (answered as a duplicate), and that second commit retried as it was after its answer was lost. The retry is
    answered as the first time, the stored batch's offset and a duplicate, and writes nothing; once the stored copy
    is deleted the duplicate's answer is gone, and the retry is refused again."""
    topic_id = broker.create_topic(topic_name("retry"), 1)
    owner = coordinator_of(broker.stub, topic_id, 0)
    assert answers(broker.commit([batch(topic_id, 0, 2)]))[0][0] == pb.NONE  # offsets 0-1
    resent = batch(topic_id, 0, 3, producer_id=PID, epoch=3, sequence=0)
    assert answers(broker.commit([resent]))[0][:2] == (pb.NONE, 2)  # offsets 2-4
    request = new_request(laid_out([batch(topic_id, 0, 1), resent]), [owner])
    first = answers(broker.stub.CommitFile(request))
    assert [(a[0], a[1], a[4]) for a in first] == [(pb.NONE, 5, False), (pb.NONE, 2, True)]
    end = log_end(broker.stub, owner)

    assert answers(broker.stub.CommitFile(request)) == first
    assert log_end(broker.stub, owner) == end  # nothing written
    assert high_watermark(broker.stub, topic_id, 0) == 6

    assert delete_records(broker.stub, topic_id, 0, 5).error_code == pb.NONE  # the duplicate's stored copy goes
    refused = broker.stub.CommitFile(request)
    assert [b.error_code for b in refused.batches] == [pb.INVALID_REQUEST] * 2
    assert "rejected then or deleted since" in refused.batches[0].error_message


def on_coordinator(broker: Broker, topic_id: bytes, partitions: int, coordinator_id: int) -> int:
    """A partition of the topic that `coordinator_id` holds."""
    return next(p for p in range(partitions) if coordinator_of(broker.stub, topic_id, p) == coordinator_id)


@pytest.mark.parametrize("first_answer", [pb.NONE, pb.OUT_OF_ORDER_SEQUENCE_NUMBER])
def test_retry_after_a_topic_of_the_commit_was_deleted_is_invalid_request(
    broker: Broker, server: InProcessNode, first_answer: int
) -> None:
    """The deleted topic's batch (stored or rejected then) leaves the retry's part: still no first answer to give,
    while the batch awaits purge and once it is purged."""
    kept = broker.create_topic(topic_name("retry"), 1)
    owner = coordinator_of(broker.stub, kept, 0)
    deleted = broker.create_topic(topic_name("retry"), 4 * broker.coordinators)
    partition = on_coordinator(broker, deleted, 4 * broker.coordinators, owner)
    assert answers(broker.commit([batch(deleted, partition, 1, producer_id=PID, epoch=3, sequence=0)]))[0][0] == pb.NONE
    sequence = 1 if first_answer == pb.NONE else 7
    request = new_request(
        laid_out([batch(deleted, partition, 2, producer_id=PID, epoch=3, sequence=sequence), batch(kept, 0, 3)]),
        [owner],
    )
    assert [b.error_code for b in broker.stub.CommitFile(request).batches] == [first_answer, pb.NONE]
    topics = broker.stub.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[deleted])).topics
    assert [t.error_code for t in topics] == [pb.NONE]

    awaiting_purge = broker.stub.CommitFile(request)
    server.run_purge_passes()
    purged = broker.stub.CommitFile(request)

    for response in (awaiting_purge, purged):
        assert [b.error_code for b in response.batches] == [pb.UNKNOWN_TOPIC_OR_PARTITION, pb.INVALID_REQUEST]
    if first_answer == pb.NONE:  # the deleted topic's batch is stored here until purged
        assert "batches on partitions this request does not carry" in awaiting_purge.batches[1].error_message
    assert "rejected then or deleted since" in purged.batches[1].error_message
    assert high_watermark(broker.stub, kept, 0) == 3


def test_retry_of_a_commit_whose_batches_were_all_malformed_gets_the_same_answer(broker: Broker) -> None:
    topic_id = broker.create_topic(topic_name("retry"), 1)
    owner = coordinator_of(broker.stub, topic_id, 0)
    request = new_request(laid_out([batch(topic_id, 0, 1, magic=9)]), [owner])
    first = broker.stub.CommitFile(request)
    assert [b.error_code for b in first.batches] == [pb.INVALID_RECORD]
    end = log_end(broker.stub, owner)
    assert answers(broker.stub.CommitFile(request)) == answers(first)
    assert log_end(broker.stub, owner) == end


# ---------------------------------------------------------------- the check itself, without a server


def _outcomes(result: Result[list[parts.BatchOutcome]]) -> list[tuple[int, int, int, int, bool]]:
    return [
        (o.error_code, o.assigned_base_offset, o.log_append_time, o.log_start_offset, o.is_duplicate)
        for o in result.response
    ]


def _part(batches: list[Batch], key: str) -> parts.CommitPart:
    read = parts.request_batches(batches)
    size = max(b.byte_offset + b.size for b in batches)
    return parts.CommitPart(key, size, 1, (0,), tuple(read), tuple(rules.batch_structure_problems(read, size)))


def test_the_check_answers_a_retry_alike_from_the_pending_record_and_from_sqlite(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.sqlite", 0)
    view = store.load_view()
    end_offset = store.applied_offset

    def write(records: list[rec.MetadataRecord]) -> None:
        nonlocal end_offset
        end_offset += len(records)
        for record in records:
            kinds.replay(view, record, end_offset)
        store.apply([(end_offset, records)])
        view.forget_applied_files(store.applied_offset)

    write(
        partition_checks.check_create_partitions(
            view, partition_checks.CreatePartitions(TOPIC, "t", (0, 1, 2)), 0
        ).records
    )
    # Other files around the retried one on the same partitions: the search must find its run.
    for number in range(40):
        other = laid_out([batch(TOPIC, number % 3, 1 + number % 4), batch(TOPIC, (number + 1) % 3, 2)])
        write(rules.check_commit_part(view, _part(other, f"wal/before-{number}"), number).records)
    batches = laid_out(
        [
            batch(TOPIC, 1, 3, timestamp_type=pb.LOG_APPEND_TIME),
            batch(TOPIC, 0, 1, magic=9),
            batch(TOPIC, 2, 2, producer_id=PID, epoch=0, sequence=0),
            batch(TOPIC, 1, 1),
        ]
    )
    part = _part(batches, "wal/retried")
    first = rules.check_commit_part(view, part, 5_000)
    assert len(first.records) == 1
    # Pending: checked into the view, not yet applied.
    end_offset += 1
    kinds.replay(view, first.records[0], end_offset)
    pending_retry = rules.check_commit_part(view, part, 6_000)
    assert pending_retry.records == []
    assert _outcomes(pending_retry) == _outcomes(first)
    assert [o.is_retry for o in pending_retry.response] == [True, False, True, True]

    store.apply([(end_offset, first.records)])
    view.forget_applied_files(store.applied_offset)
    for number in range(40):
        other = laid_out([batch(TOPIC, number % 3, 1), batch(TOPIC, (number + 2) % 3, 3)])
        write(rules.check_commit_part(view, _part(other, f"wal/after-{number}"), 7_000 + number).records)
    committed_retry = rules.check_commit_part(view, part, 9_000)
    assert committed_retry.records == []
    assert _outcomes(committed_retry) == _outcomes(first)

    # A DeleteRecords not yet applied: a batch it straddles stays (and so does the first answer) ...
    first_base = first.response[0].assigned_base_offset
    straddled = partition_checks.check_delete_records(
        view, partition_checks.DeleteRecords(((TOPIC, 1, first_base + 2),)), 0
    )
    end_offset += len(straddled.records)
    for record in straddled.records:
        kinds.replay(view, record, end_offset)
    assert _outcomes(rules.check_commit_part(view, part, 9_000))[0][:2] == (ErrorCode.NONE, first_base)
    # ... one that removes a batch of it leaves no first answer to give.
    deleted = partition_checks.check_delete_records(
        view, partition_checks.DeleteRecords(((TOPIC, 1, first_base + 3),)), 0
    )
    end_offset += len(deleted.records)
    for record in deleted.records:
        kinds.replay(view, record, end_offset)
    refused = rules.check_commit_part(view, part, 9_000)
    assert refused.records == []
    assert {o.error_code for o in refused.response} == {ErrorCode.INVALID_REQUEST}
    store.close()


@pytest.mark.parametrize("sequence", [1, 7], ids=["stored", "rejected"])
def test_the_check_refuses_a_retry_whose_deleted_topic_left_its_part(tmp_path: Path, sequence: int) -> None:
    """The router no longer sends a deleted topic's batch: the pending record and SQLite count it missing."""
    store = StateStore(tmp_path / "state.sqlite", 0)
    view = store.load_view()
    end_offset = store.applied_offset
    pending: list[tuple[int, list[rec.MetadataRecord]]] = []

    def write(records: list[rec.MetadataRecord]) -> None:
        nonlocal end_offset
        end_offset += len(records)
        for record in records:
            kinds.replay(view, record, end_offset)
        pending.append((end_offset, records))

    deleted = bytes(range(2, 18))
    write(
        partition_checks.check_create_partitions(view, partition_checks.CreatePartitions(TOPIC, "t", (0,)), 0).records
    )
    write(
        partition_checks.check_create_partitions(view, partition_checks.CreatePartitions(deleted, "d", (0,)), 0).records
    )
    before = laid_out([batch(deleted, 0, 1, producer_id=PID, epoch=0, sequence=0)])
    write(rules.check_commit_part(view, _part(before, "wal/before"), 1_000).records)
    # The deleted topic's batch first, so that the part without it has the same file size.
    batches = laid_out([batch(deleted, 0, 2, producer_id=PID, epoch=0, sequence=sequence), batch(TOPIC, 0, 3)])
    first = rules.check_commit_part(view, _part(batches, "wal/retried"), 2_000)
    assert [o.error_code for o in first.response][1] == ErrorCode.NONE
    write(first.records)
    write(partition_checks.check_delete_topic(view, partition_checks.DeleteTopic(deleted), 3_000).records)
    retry = _part(batches[1:], "wal/retried")

    from_pending = rules.check_commit_part(view, retry, 4_000)
    store.apply(pending)
    view.forget_applied_files(store.applied_offset)
    from_sqlite = rules.check_commit_part(view, retry, 5_000)

    for refused in (from_pending, from_sqlite):
        assert refused.records == []
        assert [o.error_code for o in refused.response] == [ErrorCode.INVALID_REQUEST]
    store.close()


def test_the_per_part_retry_check_asks_sqlite_only_whether_the_key_is_committed(tmp_path: Path) -> None:
    """file_known (once per commit part) answers from the key's index, never reads the file's row: the row is
    read only for a retry, to answer it; and the index's answer agrees with the row's for every key."""
    store = StateStore(tmp_path / "state.sqlite", 0)
    view = store.load_view()
    end_offset = store.applied_offset

    def write(records: list[rec.MetadataRecord]) -> None:
        nonlocal end_offset
        end_offset += len(records)
        for record in records:
            kinds.replay(view, record, end_offset)
        store.apply([(end_offset, records)])
        view.forget_applied_files(store.applied_offset)

    write(
        partition_checks.check_create_partitions(view, partition_checks.CreatePartitions(TOPIC, "t", (0,)), 0).records
    )
    write(rules.check_commit_part(view, _part(laid_out([batch(TOPIC, 0, 1)]), "wal/committed"), 1).records)
    for key in ("wal/committed", "wal/unknown"):
        assert store.file_is_committed(key) == (store.committed_file(key) is not None)
    assert store.file_is_committed("wal/committed") and not store.file_is_committed("wal/unknown")

    rows_read: list[str] = []

    def committed_file(key: str) -> FileFacts | None:
        rows_read.append(key)
        return store.committed_file(key)

    asked = CoordinatorView(0, committed_file, file_is_committed=store.file_is_committed)
    assert asked.file_known("wal/committed") and not asked.file_known("wal/unknown")
    assert rows_read == []
    # Without the index's answer (a view built by hand), the row's presence still decides.
    assert CoordinatorView(0, committed_file).file_known("wal/committed") and rows_read == ["wal/committed"]
