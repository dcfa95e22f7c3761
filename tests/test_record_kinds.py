"""One registration per record kind (coordinator.machine.kinds): every kind is registered, and every place that
asks what a record does or means (the topic catalog, the pipeline's report to it, a log recovery's offsets and
descriptions) gets it from the kind, never by matching oneof names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.cli.log_recovery.plan import _replay_offsets
from coordinator.cli.log_recovery.record_descriptions import Names, describe_record
from coordinator.machine import kinds, records
from coordinator.machine.catalog import TopicCatalog
from coordinator.machine.kinds import CreatedPartition, NamesGiven, PartitionChanges
from coordinator.machine.records import CommittedBatch, ExpiredProducer
from coordinator.runtime.log.frame import Frame
from coordinator.runtime.ports import topic_records
from protos import records_pb2 as rec

REPO = Path(__file__).resolve().parent.parent
TOPIC = bytes(range(1, 17))
CREATED = CreatedPartition(0, TOPIC, "orders", 2)
PRODUCED = CommittedBatch(7, 0, 0, 100, 0, 9, 1700, 42, 1, 0, 9, 2, 0)  # partition key 0, offsets 0..9
UNNAMED = CommittedBatch(8, 1, 100, 50, 3, 3, 1700, -1, -1, -1, -1, 2, 0)  # partition key 1, no producer

# One record of each kind, built where records are built, in an order a log could hold them. A new kind
# fails test_every_kind_has_a_sample_record until it has a row here and in EXPECTED.
SAMPLES: dict[str, rec.MetadataRecord] = {
    "leader_change": records.leader_change(3, 5),
    "partition_created": records.partition_created(0, TOPIC, "orders", 2),
    "topic_configs_changed": records.topic_configs_changed(TOPIC, {"retention.ms": "60000"}),
    # Switched before its first commit, at an empty classic log (a seal above 0 would move the next offset there).
    "diskless_logs_initialized": records.diskless_logs_initialized(
        [records.DisklessLogInit(0, 0, 0, 3, -1, True, (records.CarriedProducer(42, 0, b"", -1, -1, -1),), 0)]
    ),
    "records_deleted": records.records_deleted(0, 4),
    "file_committed": records.file_committed(8, "wal/a", 100, 1, [0], 1000, [PRODUCED, UNNAMED]),
    "remote_log_segments_committed": records.remote_log_segments_committed(0, 10),
    "file_ownership_taken": records.file_ownership_taken(9, True, "wal/b", 50, 2, [1, 0], 900, -1),
    "file_handed_over": records.file_handed_over(8, 1),
    "file_deletion_scheduled": records.file_deletion_scheduled(8, 5000),
    "file_deleted": records.file_deleted(8),
    "producers_expired": records.producers_expired(1500, [ExpiredProducer(0, 42, 1, 0, 1000)]),
    "batches_purged": records.batches_purged([(0, 10), (1, 2**63 - 1)]),
    "retention_applied": records.retention_applied([(0, 6)]),
    "batches_replaced": records.batches_replaced(
        10,
        "wal/c",
        300,
        3,
        [0, 1],
        2000,
        [rec.BatchesReplaced.Run(partition_key=0, base_offset=6, last_offset=9, byte_offset=0, batches=1)],
        [
            rec.BatchesReplaced.Extent(topic_id=TOPIC, partition=2, base_offset=6, last_offset=9, size=100),
            rec.BatchesReplaced.Extent(topic_id=TOPIC, partition=2, base_offset=0, last_offset=5, error_code=1),
        ],
    ),
    "partition_move_started": records.partition_move_started(0, 2, 11, catch_up=True),
    "partition_move_frozen": records.partition_move_frozen(0, 11),
    "partition_move_cancelled": records.partition_move_cancelled(0, 11),
    "partition_adoption_chunk": records.partition_adoption_chunk(
        2,
        11,
        5,
        0,
        TOPIC,
        2,
        [rec.PartitionAdoptionChunk.File(file_id=10, object_key="wal/c", loaned=True, owner_ids=[2])],
        [(CommittedBatch(9, 5, 0, 100, 0, 9, 1700, -1, -1, -1, -1, 2, 0), 0, 1500, 0)],
    ),
    "partition_adopted": records.partition_adopted(
        2,
        11,
        5,
        records.AdoptedPartition(
            TOPIC,
            "orders",
            3,
            0,
            10,
            0,
            -1,
            -1,
            -1,
            -1,
            0,
            (records.CarriedProducer(42, 1, b"", 1700, -1, -1),),
            (("retention.ms", "1000"),),
        ),
    ),
    "partition_moved_out": rec.MetadataRecord(
        partition_moved_out=rec.PartitionMovedOut(
            partition_key=0,
            move_id=11,
            to_coordinator=2,
            loans=[rec.PartitionMovedOut.Loan(file_id=8, object_key="wal/a", borrower=2)],
        )
    ),
    "file_loan_returned": rec.MetadataRecord(file_loan_returned=rec.FileLoanReturned(file_id=8, borrower=2)),
    "file_returned": rec.MetadataRecord(file_returned=rec.FileReturned(file_id=9)),
    "partition_adoption_abandoned": rec.MetadataRecord(
        partition_adoption_abandoned=rec.PartitionAdoptionAbandoned(from_coordinator=2, move_id=12)
    ),
    "topic_deleted": records.topic_deleted(TOPIC),
}

# What each sample does to the partitions, the names it gives, and its description once orders-2 is known.
EXPECTED: dict[str, tuple[PartitionChanges, NamesGiven, str]] = {
    "leader_change": (PartitionChanges(), NamesGiven(leader_node_id=5), "leader change: epoch 3 on node 5"),
    "partition_created": (
        PartitionChanges(created=(CREATED,)),
        NamesGiven(partitions=(CREATED,)),
        f"partition created: orders-2 (topic id {TOPIC.hex()})",
    ),
    "topic_configs_changed": (
        PartitionChanges(),
        NamesGiven(),
        f"topic configs changed: orders (topic id {TOPIC.hex()}): retention.ms=60000",
    ),
    "diskless_logs_initialized": (
        PartitionChanges(next_offsets=((0, 0),)),
        NamesGiven(),
        "diskless logs initialized: orders-2 switched at seal 0 (log start 0, leader epoch 3, 1 producer)",
    ),
    "records_deleted": (PartitionChanges(), NamesGiven(), "records deleted: orders-2 log start offset moved to 4"),
    "file_committed": (
        PartitionChanges(next_offsets=((0, 10), (1, 4))),
        NamesGiven(files=((8, "wal/a"),)),
        "file committed: wal/a (100 bytes, broker 1, append time 1000): 2 batches: orders-2 offsets 0..9 producer 42 "
        "epoch 1 sequences 0..9; partition key 1 (name unknown) offsets 3..3",
    ),
    "remote_log_segments_committed": (
        PartitionChanges(),
        NamesGiven(),
        "remote log segments committed: orders-2 local log start offset moved to 10",
    ),
    "file_ownership_taken": (
        PartitionChanges(),
        NamesGiven(files=((9, "wal/b"),)),
        "file ownership taken: wal/b (file id 9) from coordinators before it",
    ),
    "file_handed_over": (PartitionChanges(), NamesGiven(), "file handed over: wal/a (file id 8) to coordinator 1"),
    "file_deletion_scheduled": (
        PartitionChanges(),
        NamesGiven(),
        "file deletion scheduled: wal/a (file id 8) after 5000 ms",
    ),
    "file_deleted": (PartitionChanges(), NamesGiven(), "file deleted: wal/a (file id 8)"),
    "producers_expired": (
        PartitionChanges(),
        NamesGiven(),
        "producers expired: 1 with a last batch older than 1500: orders-2 producer 42 epoch 1 last batch at offset 0, "
        "timestamp 1000",
    ),
    "batches_purged": (
        PartitionChanges(),
        NamesGiven(),
        f"batches purged: orders-2 below offset 10; partition key 1 (name unknown) below offset {2**63 - 1}",
    ),
    "retention_applied": (PartitionChanges(), NamesGiven(), "retention applied: orders-2 log start offset moved to 6"),
    "batches_replaced": (
        PartitionChanges(),  # offsets do not move
        NamesGiven(files=((10, "wal/c"),)),
        "batches replaced: wal/c (300 bytes, broker 3): 1 run moved, 1 extent refused: orders-2 offsets 6..9 "
        "(1 batch) at byte 0",
    ),
    "partition_move_started": (
        PartitionChanges(),
        NamesGiven(),
        "partition move started: orders-2 catching up, moving to coordinator 2 (move 11)",
    ),
    "partition_move_frozen": (
        PartitionChanges(),
        NamesGiven(),
        "partition move frozen: orders-2 caught up, its writes refused (move 11)",
    ),
    "partition_move_cancelled": (
        PartitionChanges(),
        NamesGiven(),
        "partition move cancelled: orders-2 takes writes again (move 11)",
    ),
    "partition_adoption_chunk": (
        PartitionChanges(),  # staged batches belong to no partition here yet
        NamesGiven(files=((10, "wal/c"),)),
        "partition adoption chunk: orders-2 chunk 0 from coordinator 2 (move 11), 1 batch, offsets 0..9 staged as "
        "partition key 5, 1 file borrowed",
    ),
    "partition_adopted": (
        PartitionChanges(created=(CreatedPartition(5, TOPIC, "orders", 3),), next_offsets=((5, 10),)),
        NamesGiven(partitions=(CreatedPartition(5, TOPIC, "orders", 3),)),
        "partition adopted: orders-3 from coordinator 2 (move 11) as partition key 5, offsets 0..10, 1 producer",
    ),
    "partition_moved_out": (
        # the target's adoption placed the partition there already; its batches wait for the purge
        PartitionChanges(purge_pending=True),
        NamesGiven(),
        "partition moved out: orders-2 left for coordinator 2 (move 11), 1 file lent to it",
    ),
    "file_loan_returned": (PartitionChanges(), NamesGiven(), "file loan returned: wal/a (file id 8) by coordinator 2"),
    "file_returned": (PartitionChanges(), NamesGiven(), "file returned: wal/b (file id 9) to its lender"),
    "partition_adoption_abandoned": (
        PartitionChanges(purge_pending=True),  # the staged batches wait for the purge
        NamesGiven(),
        "partition adoption abandoned: move 12 from coordinator 2, its staged batches dropped",
    ),
    "topic_deleted": (
        PartitionChanges(deleted_topics=(TOPIC,)),
        NamesGiven(),
        f"topic deleted: orders (topic id {TOPIC.hex()})",
    ),
}


def _body(name: str) -> object:
    return getattr(SAMPLES[name], name)


def test_every_oneof_field_of_a_metadata_record_has_one_registered_kind() -> None:
    fields = {field.name for field in rec.MetadataRecord.DESCRIPTOR.oneofs_by_name["record"].fields}
    assert set(kinds.KINDS) == fields, f"fields with no kind: {fields - set(kinds.KINDS)}"
    assert all(kind.name == name for name, kind in kinds.KINDS.items())


def test_every_kind_has_a_sample_record_of_its_kind() -> None:
    assert set(SAMPLES) == set(EXPECTED) == set(kinds.KINDS)
    for name, record in SAMPLES.items():
        found = kinds.find(record)
        assert found is not None and found[0] is kinds.KINDS[name], name


@pytest.mark.parametrize("name", sorted(kinds.KINDS))
def test_a_kind_says_what_its_record_does_to_partitions_and_names(name: str) -> None:
    kind = kinds.KINDS[name]
    changes, given, _ = EXPECTED[name]
    assert kind.partition_changes(_body(name)) == changes
    assert kind.names_given(_body(name)) == given
    # The flag the pipeline filters by (without unpacking a commit's batches) agrees with what the node follows: the
    # catalog's partitions, and the purge that batches set aside start.
    assert kind.changes_catalog == bool(changes.created or changes.deleted_topics or changes.purge_pending)
    assert kinds.changes_catalog(SAMPLES[name]) == kind.changes_catalog


@pytest.mark.parametrize("name", sorted(kinds.KINDS))
def test_a_kind_describes_a_record_of_its_kind_for_an_operator(name: str) -> None:
    names = Names(partitions={0: ("orders", TOPIC, 2)}, files={8: "wal/a", 9: "wal/b"})
    described = describe_record(SAMPLES[name], names)
    assert described.kind == name
    assert described.summary == EXPECTED[name][2]
    assert described.summary.startswith(name.replace("_", " ") + ": ")
    assert described.fields and json.loads(json.dumps(described.fields)) == described.fields  # as report.json has it


def test_names_unknown_are_described_by_key_and_id() -> None:
    described = [describe_record(record, Names()).summary for record in SAMPLES.values()]
    assert "records deleted: partition key 0 (name unknown) log start offset moved to 4" in described
    assert "file deleted: file id 8" in described
    assert f"topic deleted: name unknown (topic id {TOPIC.hex()})" in described
    empty = describe_record(rec.MetadataRecord(), Names())  # no field set (or one this version does not know)
    assert (empty.kind, empty.summary, empty.fields) == ("empty", "a record of no known kind", {})


def test_the_pipeline_reports_and_the_catalog_follows_only_the_kinds_that_change_it() -> None:
    applied = [(end + 1, [record]) for end, record in enumerate(SAMPLES.values())]
    reported = topic_records(applied)
    # The catalog's kinds, and those that set batches aside for the purge (the node starts it on them).
    follows = ("partition_created", "partition_adopted", "partition_moved_out", "partition_adoption_abandoned",
               "topic_deleted")  # fmt: skip
    assert sorted(reported, key=list(SAMPLES.values()).index) == reported
    assert len(reported) == len(follows) and {r.WhichOneof("record") for r in reported} == set(follows)
    catalog = TopicCatalog()
    catalog.apply_records(4, list(SAMPLES.values())[:-1])  # all but the topic's deletion
    assert catalog.topic_id_of("orders") == TOPIC and catalog.coordinator_of(TOPIC, 2) == 4
    assert catalog.coordinator_of(TOPIC, 3) == 4  # adopted: placed at the coordinator that adopted it
    catalog.apply_records(4, [SAMPLES["topic_deleted"]])
    assert catalog.topic(TOPIC) is None and catalog.topic_id_of("orders") is None


def test_a_recovery_follows_next_offsets_and_names_through_records_of_every_kind() -> None:
    frames = [Frame(offset, 1, 1, records.encode_batch([record])) for offset, record in enumerate(SAMPLES.values())]
    names, next_offsets = Names(), {}
    _replay_offsets(iter(frames[:-1]), names, next_offsets)
    assert next_offsets == {0: 10, 1: 4, 5: 10}  # an adopted partition starts at its high watermark
    assert names.partitions == {0: ("orders", TOPIC, 2), 5: ("orders", TOPIC, 3)}
    assert names.files == {8: "wal/a", 9: "wal/b", 10: "wal/c"}
    assert names.leader_node_id == 5
    _replay_offsets(iter(frames[-1:]), names, next_offsets)  # the topic's partitions go; an unnamed one stays
    assert next_offsets == {1: 4}


def test_only_the_registry_matches_a_record_by_its_oneof_field() -> None:
    registry = REPO / "coordinator" / "machine" / "kinds" / "__init__.py"
    matches = ('WhichOneof("record")', "WhichOneof('record')")
    matching = [
        str(path.relative_to(REPO))
        for package in ("coordinator", "bench")
        for path in sorted((REPO / package).rglob("*.py"))
        if path != registry and any(match in path.read_text() for match in matches)
    ]
    assert not matching, f"ask coordinator.machine.kinds (find, changes_catalog) instead: {matching}"
