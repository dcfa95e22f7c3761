"""The record kind of a partition move's cut-over at its target (design §5a): PartitionAdopted.

The batches a move staged here (PartitionAdoptionChunk, coordinator/machine/kinds/adoptions.py) become the partition:
a `partitions` row names their key with the source's positions, the producers' state and the topic's configurations
are the source's, and the move is remembered as adopted (a repeated adoption then writes nothing). From this record
on the partition is served here, and the node's topic catalog places it here. Both effects check the same
invariants: the move staged here and not adopted, its key and partition the staged ones, the partition not served
here already, positions in order.
"""

from __future__ import annotations

from coordinator.base.invariants import check_invariant
from coordinator.machine.kinds.kind import (
    CreatedPartition,
    NamesGiven,
    PartitionChanges,
    RecordDescription,
    RecordNames,
)
from coordinator.machine.producers import decode_window
from coordinator.machine.transaction import StateTransaction
from coordinator.machine.view import CoordinatorView, PartitionView
from protos import records_pb2 as rec


def _move(adopted: rec.PartitionAdopted) -> str:
    return f"move {adopted.move_id} from coordinator {adopted.from_coordinator}"


def _check_positions(adopted: rec.PartitionAdopted) -> None:
    check_invariant(
        0 <= adopted.log_start_offset <= adopted.local_log_start_offset <= adopted.high_watermark,
        f"{_move(adopted)} adopted with log start {adopted.log_start_offset}, local log start "
        f"{adopted.local_log_start_offset} and high watermark {adopted.high_watermark}",
    )


def _check_staged(adopted: rec.PartitionAdopted, staged: tuple[int, bytes, int] | None, served: bool) -> None:
    """The move's (staged key, topic id, partition) as staged here and not adopted; the partition not served here."""
    check_invariant(
        staged == (adopted.staged_partition_key, adopted.topic_id, adopted.partition) and not served,
        f"adoption of {_move(adopted)}: staged {staged}, the partition served here already: {served}",
    )


def _created(adopted: rec.PartitionAdopted) -> CreatedPartition:
    return CreatedPartition(adopted.staged_partition_key, adopted.topic_id, adopted.topic_name, adopted.partition)


class PartitionAdoptedKind:
    name = "partition_adopted"
    changes_catalog = True  # the partition is placed here from this record on

    def replay(self, view: CoordinatorView, adopted: rec.PartitionAdopted, end_offset: int) -> None:
        _check_positions(adopted)
        move = (adopted.from_coordinator, adopted.move_id)
        staged = view.staged_moves.get(move)
        _check_staged(
            adopted,
            None if staged is None else (staged.partition_key, staged.topic_id, staged.partition),
            view.partition(adopted.topic_id, adopted.partition) is not None,
        )
        del view.staged_moves[move]
        view.adopted_moves.add(move)
        key = adopted.staged_partition_key
        view.adopted_keys[key] = adopted.from_coordinator
        view.load_partition(
            PartitionView(
                key, adopted.topic_id, adopted.topic_name, adopted.partition, adopted.log_start_offset,
                adopted.high_watermark, adopted.local_log_start_offset, adopted.seal_offset,
                adopted.switch_leader_epoch, adopted.classic_log_start_offset,
            )
        )  # fmt: skip
        for producer in adopted.producers:
            window = decode_window(producer.producer_epoch, producer.window, producer.last_timestamp)
            view.load_producer(key, producer.producer_id, window)
            view.load_transaction_state(
                key, producer.producer_id, producer.coordinator_epoch, producer.txn_first_offset
            )
        view.load_topic_configs(adopted.topic_id, {config.name: config.value for config in adopted.topic_configs})

    def apply(self, transaction: StateTransaction, adopted: rec.PartitionAdopted) -> None:
        _check_positions(adopted)
        db = transaction.db
        row = db.execute(
            "SELECT staged_partition_key, topic_id, partition FROM partition_adoptions "
            "WHERE from_coordinator = ? AND move_id = ? AND adopted = 0",
            (adopted.from_coordinator, adopted.move_id),
        ).fetchone()
        served = db.execute(
            "SELECT 1 FROM partitions WHERE topic_id = ? AND partition = ?", (adopted.topic_id, adopted.partition)
        ).fetchone()
        _check_staged(adopted, None if row is None else (int(row[0]), bytes(row[1]), int(row[2])), served is not None)
        key = adopted.staged_partition_key
        db.execute(
            "INSERT INTO partitions (partition_key, topic_id, topic_name, partition, log_start_offset, high_watermark, "
            "local_log_start_offset, remote_max_timestamp, classic_log_start_offset, seal_offset, switch_leader_epoch, "
            "switch_producers) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                key, adopted.topic_id, adopted.topic_name, adopted.partition, adopted.log_start_offset,
                adopted.high_watermark, adopted.local_log_start_offset, adopted.remote_max_timestamp,
                adopted.classic_log_start_offset, adopted.seal_offset, adopted.switch_leader_epoch,
                adopted.switch_producers,
            ),
        )  # fmt: skip
        for producer in adopted.producers:
            transaction.changed_windows[(key, producer.producer_id)] = (
                producer.producer_epoch,
                producer.window,
                producer.last_timestamp,
            )
        db.executemany(
            "INSERT INTO producer_transactions (partition_key, producer_id, coordinator_epoch, first_offset) "
            "VALUES (?,?,?,?)",
            [
                (key, p.producer_id, p.coordinator_epoch, p.txn_first_offset)
                for p in adopted.producers
                if p.coordinator_epoch >= 0 or p.txn_first_offset >= 0
            ],
        )
        db.execute("DELETE FROM topic_configs WHERE topic_id = ?", (adopted.topic_id,))
        db.executemany(
            "INSERT INTO topic_configs (topic_id, name, value) VALUES (?,?,?)",
            [(adopted.topic_id, config.name, config.value) for config in adopted.topic_configs],
        )
        db.execute(
            "UPDATE partition_adoptions SET adopted = 1 WHERE from_coordinator = ? AND move_id = ?",
            (adopted.from_coordinator, adopted.move_id),
        )

    def partition_changes(self, adopted: rec.PartitionAdopted) -> PartitionChanges:
        return PartitionChanges(
            created=(_created(adopted),), next_offsets=((adopted.staged_partition_key, adopted.high_watermark),)
        )

    def names_given(self, adopted: rec.PartitionAdopted) -> NamesGiven:
        return NamesGiven(partitions=(_created(adopted),))

    def describe(self, adopted: rec.PartitionAdopted, names: RecordNames) -> RecordDescription:
        partition = f"{adopted.topic_name}-{adopted.partition}"
        producers = len(adopted.producers)
        return RecordDescription(
            f"partition adopted: {partition} from coordinator {adopted.from_coordinator} (move {adopted.move_id}) "
            f"as partition key {adopted.staged_partition_key}, offsets {adopted.log_start_offset}.."
            f"{adopted.high_watermark}, {producers} producer{'' if producers == 1 else 's'}",
            {
                "partition": partition,
                "from_coordinator": adopted.from_coordinator,
                "move_id": adopted.move_id,
                "partition_key": adopted.staged_partition_key,
                "high_watermark": adopted.high_watermark,
                "producers": [p.producer_id for p in adopted.producers],
            },
        )
