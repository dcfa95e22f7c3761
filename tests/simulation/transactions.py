"""The seeded randomized run with transactional producers (DESIGN §4b) besides the plain commits.

Each producer runs one transaction at a time, as a Kafka producer with a `transactional.id` does: transactional
batches in up to PARTITIONS_PER_TRANSACTION_MAX partitions (each in a WAL file of its own, sent to whichever leader
a node names), then, in later files, one marker per partition it sent to, committed the way a broker commits
WriteTxnMarkers and retried with the same object key until acknowledged (the transaction coordinator never gives
up a marker). A batch refused or whose outcome is unknown (a timeout, a leader gone) dooms the transaction: it can
only abort, as Kafka's producer aborts after an abortable error; the markers still go to every partition the
batch may have reached. Every end bumps the producer's epoch (KIP-890's rule), so the next transaction starts at
sequence 0 whatever the last one left. Crashes, pauses, partitions and elections fall between batches and markers.

Checked besides the plain run's checks (every acknowledged batch and marker found where it was acknowledged):
- after every step, per replica (every running node, followers included) and partition (a sample of them): the last
  stable offset a READ_COMMITTED FindBatches answers never moves back;
- after every step, on one partition drawn per step, on every replica: its batches (read uncommitted) replayed
  through a small model of Kafka's rules (a transactional batch opens its producer's transaction, a marker ends
  it; an ABORT records the range) give the LSO the replica answers, and a READ_COMMITTED call from a random offset
  returns the uncommitted batches from there below the LSO, and lists exactly the model's aborted ranges that
  overlap what it returns, by first offset;
- at the end (every transaction ended): LSO = high watermark everywhere, every replica answers the leader's
  read_committed answer (batches, LSO, aborted list), a committed transaction's acknowledged batches are outside
  every aborted range of their producer and an aborted one's inside one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, final

from coordinator.machine.topic_names import coordinator_for_new_partition
from protos import coordinator_pb2 as pb
from tests.harness import batch
from tests.simulation.cluster import SimCluster
from tests.simulation.workload import ACTIONS, PARTITIONS, TOPIC_ID, Workload

TRANSACTIONAL_ACTIONS = {**ACTIONS, "txn_data": 30, "txn_end": 8}
PRODUCER_IDS = (9001, 9002, 9003, 9004)
PARTITIONS_PER_TRANSACTION_MAX = 3
COMMIT_CHANCE = 0.7  # of a transaction not doomed, the chance it commits
MARKER_RETRY_MS = 500
MARKER_ATTEMPTS_AFTER_SETTLE_MAX = 240  # 2 minutes of a healed cluster that acknowledges no marker is a failure
TAIL_SETTLE_MS = 20_000  # after the last markers: time for every replica to apply them
PAGE_BATCHES = 500
STABLE_CHECKED_PER_STEP = 3  # partitions whose LSO each replica is asked after a step (all of them: 3x the run)


@final
@dataclass(slots=True)
class TransactionalProducer:
    producer_id: int
    epoch: int = 0
    busy: bool = False  # a batch or the markers in flight: one thing at a time, in order
    doomed: bool = False  # a batch refused or of unknown outcome: the transaction can only abort
    ended: int = 0  # transactions ended
    sequences: dict[int, int] = field(default_factory=dict)  # partition -> next sequence in this transaction
    sent: set[int] = field(default_factory=set)  # partitions a batch of this transaction may be in
    acknowledged: dict[int, list[int]] = field(default_factory=dict)  # partition -> offsets acknowledged


@final
@dataclass(frozen=True, slots=True)
class EndedTransaction:
    producer_id: int
    partition: int
    committed: bool
    offsets: tuple[int, ...]  # its acknowledged batches in the partition
    marker_offset: int


Aborted = tuple[int, int, int]  # (producer id, first offset, marker offset)


def replay_transactions(batches: list[pb.BatchInfo], commits: dict[str, bool]) -> tuple[dict[int, int], list[Aborted]]:
    """Kafka's rules over a partition's batches from offset 0: the open transactions (producer -> first offset)
    and the aborted ones. A marker's kind is the one its object key was written with (`commits`)."""
    open_first: dict[int, int] = {}
    aborted: list[Aborted] = []
    for found in batches:
        if found.is_control:
            first = open_first.pop(found.producer_id, None)
            if first is not None and not commits[found.object_key]:
                aborted.append((found.producer_id, first, found.base_offset))
        elif found.is_transactional:
            open_first.setdefault(found.producer_id, found.base_offset)
    return open_first, aborted


class TransactionalWorkload(Workload):
    def __init__(self, cluster: SimCluster, seed: int, steps: int) -> None:
        super().__init__(cluster, seed, steps, TRANSACTIONAL_ACTIONS)
        self.producers = [TransactionalProducer(producer_id) for producer_id in PRODUCER_IDS]
        self.commits: dict[str, bool] = {}  # a marker's object key -> COMMIT (else ABORT)
        self.ended: list[EndedTransaction] = []
        self.stable_seen: dict[tuple[int, int], int] = {}  # (node, partition) -> the last LSO it answered
        self.settling = False
        self.transactions_checked = 0

    # ------------------------------------------------------------------ the producers' steps

    async def _act(self, action: str) -> str:
        running = [n for n in self.cluster.running() if not n.paused]
        if action == "txn_data":
            idle = [p for p in self.producers if not p.busy and not p.doomed]
            if not idle or not running:
                return "skipped"
            producer = self.random.choice(idle)
            if len(producer.sent) < PARTITIONS_PER_TRANSACTION_MAX and (
                not producer.sent or self.random.random() < 0.3
            ):
                partition = self.random.randrange(PARTITIONS)
            else:
                partition = self.random.choice(sorted(producer.sent))
            records = self.random.randint(1, 3)
            producer.busy = True
            self._spawn(self._data(producer, self.random.choice(running).node_id, partition, records))
            return f"producer {producer.producer_id} partition {partition}"
        if action == "txn_end":
            ready = [p for p in self.producers if not p.busy and p.sent]
            if not ready:
                return "skipped"
            producer = self.random.choice(ready)
            commit = not producer.doomed and self.random.random() < COMMIT_CHANCE
            producer.busy = True
            self._spawn(self._end(producer, commit))
            return f"producer {producer.producer_id} {'commit' if commit else 'abort'} {sorted(producer.sent)}"
        return await super()._act(action)

    def _key(self, kind: str) -> str:
        self._files += 1
        return f"wal/{self.seed}/{kind}{self._files}"

    async def _data(self, producer: TransactionalProducer, asked_node: int, partition: int, records: int) -> None:
        try:
            sequence = producer.sequences.get(partition, 0)
            made = batch(TOPIC_ID, partition, records, producer_id=producer.producer_id, epoch=producer.epoch,
                         sequence=sequence)  # fmt: skip
            made.is_transactional = True
            outcome = await self._send(asked_node, partition, [made], self._key("t"))
            if outcome is None:
                return  # not sent: nothing changed
            producer.sent.add(partition)
            if outcome[0] >= 0:
                producer.sequences[partition] = sequence + records
                producer.acknowledged.setdefault(partition, []).append(outcome[0])
            else:
                producer.doomed = True
        finally:
            producer.busy = False

    async def _end(self, producer: TransactionalProducer, commit: bool) -> None:
        try:
            epoch = producer.epoch + 1
            coordinator_epoch = producer.ended // 3  # the transaction coordinator moves now and then (fencing)
            for partition in sorted(producer.sent):
                marker = pb.CommitFileRequest.Batch(
                    magic=2, topic_id=TOPIC_ID, partition=partition, size=78, base_offset=0, last_offset=0,
                    batch_max_timestamp=1_700_000_000_000, timestamp_type=pb.CREATE_TIME,
                    producer_id=producer.producer_id, producer_epoch=epoch, base_sequence=-1, last_sequence=-1,
                    is_transactional=True, is_control=True, coordinator_epoch=coordinator_epoch,
                    control_type=pb.CONTROL_COMMIT if commit else pb.CONTROL_ABORT,
                )  # fmt: skip
                key = self._key("m")
                self.commits[key] = commit
                offset = await self._marker(partition, marker, key)
                offsets = tuple(producer.acknowledged.get(partition, ()))
                self.ended.append(EndedTransaction(producer.producer_id, partition, commit, offsets, offset))
            producer.epoch, producer.ended, producer.doomed = epoch, producer.ended + 1, False
            producer.sequences.clear()
            producer.sent.clear()
            producer.acknowledged.clear()
        finally:
            producer.busy = False

    async def _marker(self, partition: int, marker: pb.CommitFileRequest.Batch, key: str) -> int:
        """The marker's offset: retried with the same file (a retried commit) until a leader acknowledges it."""
        attempts_after_settle = 0
        while True:
            running = [n for n in self.cluster.running() if not n.paused]
            if running:
                outcome = await self._send(self.random.choice(running).node_id, partition, [marker], key)
                if outcome is not None and outcome[0] >= 0:
                    return outcome[0]
                if outcome is not None and outcome[0] < 0:
                    self.report.trace.append(f"marker {key} retried")
            if self.settling:
                attempts_after_settle += 1
                if attempts_after_settle > MARKER_ATTEMPTS_AFTER_SETTLE_MAX:
                    raise self.fail(f"marker {key} of partition {partition} never acknowledged by a healed cluster")
            await asyncio.sleep(MARKER_RETRY_MS / 1000)

    async def _settle(self) -> None:
        self.settling = True
        await super()._settle()
        for producer in self.producers:  # every transaction left open ends (the coordinator's timeout aborts it)
            if producer.sent:
                producer.busy = True
                await self._end(producer, commit=False)
        await asyncio.sleep(TAIL_SETTLE_MS / 1000)

    # ------------------------------------------------------------------ checks

    def _read(self, sim: Any, partition: int, offset: int, batches_max: int, committed: bool) -> Any:
        wanted = pb.FindBatchesRequest.Partition(partition=partition, offset=offset, max_partition_fetch_bytes=2**30)
        request = pb.FindBatchesRequest(
            fetch_max_bytes=2**30, max_batches_per_partition=batches_max,
            isolation_level=pb.READ_COMMITTED if committed else pb.READ_UNCOMMITTED,
            topics=[pb.FindBatchesRequest.Topic(topic_id=TOPIC_ID, partitions=[wanted])],
        )  # fmt: skip
        return pb.FindBatchesResponse.FromString(sim.node.router.find_batches(request)).topics[0].partitions[0]

    def _every_batch(self, sim: Any, partition: int, committed: bool) -> tuple[list[pb.BatchInfo], Any] | None:
        """Every batch a replica answers from offset 0 (paged), and its last answer; None if it does not answer."""
        batches: list[pb.BatchInfo] = []
        offset = 0
        while True:
            result = self._read(sim, partition, offset, PAGE_BATCHES, committed)
            if result.error_code != pb.NONE:
                return None
            if result.log_start_offset != 0:
                raise self.fail(f"partition {partition}: log start {result.log_start_offset} (nothing removes any)")
            batches += result.batches
            if not result.batches:
                return batches, result
            offset = result.batches[-1].last_offset + 1

    def _check_step(self) -> None:
        super()._check_step()
        for sim in self.cluster.running():
            for partition in self.random.sample(range(PARTITIONS), STABLE_CHECKED_PER_STEP):
                result = self._read(sim, partition, 0, 1, committed=True)
                if result.error_code != pb.NONE:
                    continue  # loading, or not serving yet
                seen = self.stable_seen.get((sim.node_id, partition), 0)
                if not seen <= result.last_stable_offset <= result.high_watermark:
                    raise self.fail(
                        f"node {sim.node_id} partition {partition}: last stable offset {result.last_stable_offset} "
                        f"after {seen} (high watermark {result.high_watermark})"
                    )
                self.stable_seen[(sim.node_id, partition)] = result.last_stable_offset
        partition = self.random.randrange(PARTITIONS)
        for sim in self.cluster.running():
            self._check_replica(sim, partition)

    def _check_replica(self, sim: Any, partition: int) -> None:
        """One replica's answers against the model replayed over its own batches."""
        every = self._every_batch(sim, partition, committed=False)
        if every is None:
            return
        batches, last = every
        open_first, aborted = replay_transactions(batches, self.commits)
        stable = min(open_first.values(), default=last.high_watermark)
        where = f"node {sim.node_id} partition {partition}"
        offset = self.random.randint(0, last.high_watermark)
        batches_max = self.random.choice((0, 1, 3, 10))
        answer = self._read(sim, partition, offset, batches_max, committed=True)
        if answer.error_code != pb.NONE or answer.high_watermark != last.high_watermark:
            return  # it applied more between the two reads (or cannot answer): nothing to compare
        if answer.last_stable_offset != stable:
            raise self.fail(f"{where}: last stable offset {answer.last_stable_offset}, its batches say {stable}")
        wanted = [b for b in batches if b.last_offset >= offset and b.last_offset < stable]
        if batches_max > 0:
            wanted = wanted[:batches_max]
        if list(answer.batches) != wanted:
            raise self.fail(f"{where}: read_committed from {offset} answered {[b.base_offset for b in answer.batches]}"
                            f", expected {[b.base_offset for b in wanted]} (LSO {stable})")  # fmt: skip
        returned_last = answer.batches[-1].last_offset if answer.batches else -1
        overlapping = sorted(
            (first, producer) for producer, first, end in aborted if first <= returned_last and end >= offset
        )
        listed = [(a.first_offset, a.producer_id) for a in answer.aborted_transactions]
        if listed != overlapping:
            raise self.fail(f"{where}: from {offset} to {returned_last} aborted {listed}, expected {overlapping}")
        self.transactions_checked += 1

    def _check_end(self) -> None:
        super()._check_end()
        for partition in range(PARTITIONS):
            coordinator_id = coordinator_for_new_partition(TOPIC_ID, partition, self.cluster.coordinators)
            leader = self.cluster.leaders(coordinator_id)[0]
            answers = {sim.node_id: self._every_batch(sim, partition, committed=True) for sim in self.cluster.running()}
            expected = answers[leader.node_id]
            if expected is None:
                raise self.fail(f"partition {partition}: its leader does not answer read_committed")
            batches, last = expected
            if last.last_stable_offset != last.high_watermark:
                raise self.fail(f"partition {partition}: LSO {last.last_stable_offset} after every transaction ended")
            for node_id, answer in answers.items():
                if answer is None or answer[0] != batches or answer[1] != last:
                    raise self.fail(f"partition {partition}: node {node_id} answers read_committed unlike its leader")
            self._check_replica(leader, partition)
            every = self._every_batch(leader, partition, committed=False)
            assert every is not None, f"partition {partition}: its leader answered read_committed, not uncommitted"
            _, aborted = replay_transactions(every[0], self.commits)
            for ended in (e for e in self.ended if e.partition == partition):
                for offset in ended.offsets:
                    covered = any(p == ended.producer_id and first <= offset < end for p, first, end in aborted)
                    if covered == ended.committed:
                        raise self.fail(f"{ended}: batch {offset} {'aborted' if covered else 'not aborted'}")
