"""A seeded run of a simulated cluster: commits, crashes, restarts, pauses, partitions, lossy network, etcd
elections; the cluster checked after every step, and in full at the end.

Brokers ask a running node `FindCoordinator` (an answer may be stale, as a broker's cache is) and commit files of
non-idempotent batches to the leader it names, many in flight at once. What a broker was told is recorded:

- **acknowledged**: each batch answered NONE, with its offset, and the node and leader epoch that answered;
- after every step: no two acknowledgements for one offset of a partition (an offset given twice is a batch
  moved or lost), at most one node acknowledged in each leader epoch of a coordinator, no two running nodes
  lead one coordinator in the same epoch, and a sample of the acknowledged batches is found where it was
  acknowledged, at the coordinator's current leader;
- at the end (every node running and reachable again, time passed): every acknowledged batch is found at its
  offset, each partition's offsets are contiguous from its log start up to the high watermark, and every
  replica's log and state end where the leader's do.

The run's trace (each step and its outcome) is a function of the seed: `run` twice with one seed gives one trace.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, final

from coordinator.machine.topic_names import coordinator_for_new_partition
from protos import coordinator_pb2 as pb
from tests.harness import batch, find_batches_request
from tests.simulation.cluster import SimCluster

TOPIC_ID = bytes(range(1, 17))
PARTITIONS = 8
SAMPLE_CHECKED_PER_STEP = 8
COMMIT_TIMEOUT_MS = 5_000
SETTLE_MS = 60_000  # at the end: time for elections, catch-up and ISR changes to settle
# Relative weights of a step's action.
ACTIONS = {
    "commit": 50,
    "pass_time": 20,
    "crash": 3,
    "start": 6,
    "pause": 2,
    "resume": 4,
    "partition": 2,
    "heal": 3,
    "lossy_network": 2,
    "etcd_election": 2,
}


class SimulationFailure(AssertionError):
    """A check failed; the message names the seed, the step and what was seen."""


@final
@dataclass(frozen=True, slots=True)
class Acknowledged:
    partition: int
    coordinator_id: int
    offset: int
    object_key: str
    node_id: int
    leader_epoch: int
    step: int


@final
@dataclass(slots=True)
class RunReport:
    seed: int
    steps: int
    trace: list[str] = field(default_factory=list)
    acknowledged: int = 0
    refused: int = 0
    wall_s: float = 0.0
    simulated_s: float = 0.0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0


class Workload:
    def __init__(self, cluster: SimCluster, seed: int, steps: int, actions: Mapping[str, int] = ACTIONS) -> None:
        self.cluster = cluster
        self.actions = dict(actions)  # a step's action by these weights
        self.seed = seed
        self.steps = steps
        self.random = random.Random(seed * 7919 + 1)
        self.report = RunReport(seed, steps)
        self.acknowledged: dict[tuple[int, int], Acknowledged] = {}  # (partition, offset) -> the batch
        self.acking_node: dict[tuple[int, int], int] = {}  # (coordinator, leader epoch) -> the node that acked
        self._in_flight: set[asyncio.Task[None]] = set()
        self._files = 0
        self.step = 0

    def fail(self, message: str) -> SimulationFailure:
        return SimulationFailure(f"seed {self.seed}, step {self.step}: {message}")

    # ------------------------------------------------------------------ the run

    async def run(self) -> RunReport:
        started = time.monotonic()
        loop_started = asyncio.get_running_loop().time()
        await self.cluster.start_all()
        await self._create_topic()
        for step in range(1, self.steps + 1):
            self.step = step
            action = self.random.choices(list(self.actions), weights=list(self.actions.values()))[0]
            outcome = await self._act(action)
            self.report.trace.append(f"{self.step} {action} {outcome}")
            self._check_step()
        await self._settle()
        self._check_end()
        for coordinator_id in range(self.cluster.coordinators):
            ends = [n.shard(coordinator_id).statistics().log_end_offset for n in self.cluster.nodes]
            self.report.trace.append(f"coordinator {coordinator_id}: log ends {ends}")
        self.report.wall_s = time.monotonic() - started
        self.report.simulated_s = asyncio.get_running_loop().time() - loop_started
        return self.report

    async def _create_topic(self) -> None:
        request = pb.CreatePartitionsRequest(
            topics=[pb.CreatePartitionsRequest.Topic(topic_id=TOPIC_ID, name="orders", num_partitions=PARTITIONS)],
            timeout_ms=COMMIT_TIMEOUT_MS,
        )
        for _ in range(100):
            node = self.cluster.running()[0].node
            assert node is not None
            answer = await node.router.create_partitions(request)
            if answer.topics[0].error_code == pb.NONE:
                return
            await asyncio.sleep(0.5)
        raise self.fail("the topic could not be created")

    async def _act(self, action: str) -> str:
        cluster, rng = self.cluster, self.random
        running = [n for n in cluster.running() if not n.paused]
        up = [n for n in cluster.nodes if n.up and not n.paused]
        down = [n for n in cluster.nodes if n.down]
        if action == "commit" and running:
            self._spawn(self._commit(rng.choice(running).node_id, rng.randrange(PARTITIONS), rng.randint(1, 3)))
            await asyncio.sleep(rng.randint(0, 20) / 1000)
            return "sent"
        if action == "pass_time":
            ms = rng.choice((10, 100, 500, 2000))
            await asyncio.sleep(ms / 1000)
            return f"{ms} ms"
        if action == "crash" and len(up) == len(cluster.nodes):  # one node down at most
            victim = rng.choice(up).node_id
            await cluster.crash(victim)
            return f"node {victim}"
        if action == "start" and down:
            node_id = rng.choice(down).node_id
            self._spawn(cluster.start(node_id))
            return f"node {node_id}"
        if action == "pause" and len(up) == len(cluster.nodes):
            victim = rng.choice(up).node_id
            cluster.pause(victim)
            return f"node {victim}"
        if action == "resume":
            cluster.resume_all()
            return "all"
        if action == "partition" and len(running) >= 2:
            first, second = rng.sample(running, 2)
            cluster.network.partition(first.address, second.address)
            return f"nodes {first.node_id}, {second.node_id}"
        if action == "heal":
            cluster.heal_network()
            return "network"
        if action == "lossy_network":
            faults = cluster.network.faults
            faults.drop_request, faults.drop_answer = rng.choice((0.0, 0.05)), rng.choice((0.0, 0.05))
            faults.duplicate, faults.delay, faults.delay_max_ms = rng.choice((0.0, 0.05)), 0.2, rng.choice((5, 200))
            return f"drop {faults.drop_request}/{faults.drop_answer} duplicate {faults.duplicate}"
        if action == "etcd_election":
            pause_ms = rng.choice((200, 1000, 3000))
            cluster.etcd.elect_leader(pause_ms)
            return f"{pause_ms} ms"
        return "skipped"

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    # ------------------------------------------------------------------ a broker's commit

    async def _commit(self, asked_node: int, partition: int, batches: int) -> None:
        self._files += 1
        object_key = f"wal/{self.seed}/{self._files}"
        made = [batch(TOPIC_ID, partition, 1 + i, byte_offset=100 * i) for i in range(batches)]
        await self._send(asked_node, partition, made, object_key)

    async def _send(
        self, asked_node: int, partition: int, batches: list[pb.CommitFileRequest.Batch], object_key: str
    ) -> list[int] | None:
        """Commits a file of `batches` (one partition's) at the leader `asked_node` names, as a broker does: each
        batch's offset, or -1 when it was refused or its outcome is unknown; None when no call was made."""
        cluster = self.cluster
        coordinator_id = coordinator_for_new_partition(TOPIC_ID, partition, cluster.coordinators)
        asked = cluster.nodes[asked_node].node
        if asked is None:
            return None
        topic = pb.FindCoordinatorRequest.Topic(topic_id=TOPIC_ID, partitions=[partition])
        found = await asked.router.find_coordinator(pb.FindCoordinatorRequest(topics=[topic]))
        endpoint = next((e for e in found.coordinators if e.coordinator_id == coordinator_id), None)
        if endpoint is None or endpoint.port == 0:
            return None
        target = next((n for n in cluster.nodes if n.address.endswith(f":{endpoint.port}")), None)
        if target is None or target.node is None or (target.paused and self.random.random() < 0.5):
            return None
        request = pb.CommitFileRequest(
            object_key=object_key,
            object_format=1,
            file_size=max(b.byte_offset + b.size for b in batches),
            uploader_broker_id=1,
            owner_ids=[coordinator_id],
            batches=batches,
            timeout_ms=COMMIT_TIMEOUT_MS,
        )
        node = target.node
        try:
            answer = await node.router.commit_file(request)
        except Exception as error:  # a node closing under the call: the broker was told nothing
            self.report.trace.append(f"commit {object_key} at node {target.node_id}: {type(error).__name__}")
            return [-1] * len(batches)
        epoch = node.shards[coordinator_id].leader_epoch
        outcomes = ",".join(
            f"{result.assigned_base_offset}" if result.error_code == pb.NONE else pb.ErrorCode.Name(result.error_code)
            for result in answer.batches
        )
        self.report.trace.append(f"commit {object_key} at node {target.node_id} epoch {epoch}: {outcomes}")
        offsets = []
        for result in answer.batches:
            if result.error_code != pb.NONE:
                self.report.refused += 1
                offsets.append(-1)
                continue
            self.report.acknowledged += 1
            offset = result.assigned_base_offset
            offsets.append(offset)
            self._acknowledge(
                Acknowledged(partition, coordinator_id, offset, object_key, target.node_id, epoch, self.step)
            )
        return offsets

    def _acknowledge(self, acked: Acknowledged) -> None:
        earlier = self.acknowledged.get((acked.partition, acked.offset))
        if earlier is not None and earlier.object_key != acked.object_key:
            raise self.fail(
                f"offset {acked.offset} of partition {acked.partition} acknowledged twice: {earlier}, {acked}"
            )
        self.acknowledged[(acked.partition, acked.offset)] = acked
        node = self.acking_node.setdefault((acked.coordinator_id, acked.leader_epoch), acked.node_id)
        if node != acked.node_id:
            raise self.fail(
                f"coordinator {acked.coordinator_id}: nodes {node} and {acked.node_id} both acknowledged in leader "
                f"epoch {acked.leader_epoch}"
            )

    # ------------------------------------------------------------------ checks

    def _check_step(self) -> None:
        for coordinator_id in range(self.cluster.coordinators):
            epochs = [n.shard(coordinator_id).leader_epoch for n in self.cluster.leaders(coordinator_id)]
            if len(epochs) != len(set(epochs)):
                raise self.fail(f"coordinator {coordinator_id}: two leaders in one epoch ({epochs})")
        if self.acknowledged:
            keys = list(self.acknowledged)
            for key in [keys[-1], *self.random.sample(keys, min(SAMPLE_CHECKED_PER_STEP, len(keys)))]:
                self._check_found(self.acknowledged[key], required=False)

    def _check_found(self, acked: Acknowledged, required: bool) -> None:
        leaders = [n for n in self.cluster.leaders(acked.coordinator_id) if not n.paused]
        serving = [n for n in leaders if n.shard(acked.coordinator_id).state.name == "ACTIVE"]
        if not serving:
            if required:
                raise self.fail(f"coordinator {acked.coordinator_id} has no serving leader")
            return
        result = self._find(serving[0], acked.partition, acked.offset)
        if result.error_code == pb.OFFSET_OUT_OF_RANGE and not required and acked.offset >= result.log_start_offset:
            return  # a new leader's high watermark not yet past it: its followers' next fetches move it
        if result.error_code != pb.NONE:
            if required or result.error_code not in _RETRIABLE:
                raise self.fail(f"{acked} not readable: {pb.ErrorCode.Name(result.error_code)} {result.error_message}")
            return
        if acked.offset >= result.high_watermark and not required:
            return  # acknowledged by a leader whose successor has not caught up to it yet: it will
        first = result.batches[0] if result.batches else None
        if first is None or first.base_offset != acked.offset or first.object_key != acked.object_key:
            raise self.fail(f"{acked} lost or moved: found {first} (high watermark {result.high_watermark})")

    def _find(
        self, sim: Any, partition: int, offset: int, batches_max: int = 1
    ) -> pb.FindBatchesResponse.PartitionResult:
        """FindBatches at a node from `offset`: up to `batches_max` batches (0: as many as fit in one answer)."""
        request = find_batches_request(TOPIC_ID, partition, offset, batches_max)
        return pb.FindBatchesResponse.FromString(sim.node.router.find_batches(request)).topics[0].partitions[0]

    async def _settle(self) -> None:
        """Every node running and reachable, the network and etcd sound; then time for the cluster to heal."""
        cluster = self.cluster
        cluster.resume_all()
        cluster.heal_network()
        await asyncio.sleep(COMMIT_TIMEOUT_MS / 1000 * 2)  # commits in flight end
        for task in list(self._in_flight):
            await task
        for sim in cluster.nodes:
            if sim.down:
                await cluster.start(sim.node_id)
        await asyncio.sleep(SETTLE_MS / 1000)

    def _check_end(self) -> None:
        for acked in self.acknowledged.values():
            self._check_found(acked, required=True)
        for partition in range(PARTITIONS):
            self._check_partition(partition)
        for coordinator_id in range(self.cluster.coordinators):
            leaders = self.cluster.leaders(coordinator_id)
            if len(leaders) != 1:
                raise self.fail(f"coordinator {coordinator_id}: {len(leaders)} leaders after the run settled")
            ends = {
                n.node_id: (n.shard(coordinator_id).statistics().log_end_offset,
                            n.shard(coordinator_id).statistics().applied_offset)
                for n in self.cluster.running()
            }  # fmt: skip
            if len(set(ends.values())) != 1:
                raise self.fail(f"coordinator {coordinator_id}: replicas did not converge (log end, applied): {ends}")

    def _check_partition(self, partition: int) -> None:
        coordinator_id = coordinator_for_new_partition(TOPIC_ID, partition, self.cluster.coordinators)
        leader = self.cluster.leaders(coordinator_id)[0]
        offset, expected = 0, 0
        while True:
            result = self._find(leader, partition, offset, batches_max=0)
            if result.error_code != pb.NONE:
                raise self.fail(f"partition {partition}: {pb.ErrorCode.Name(result.error_code)}")
            for found in result.batches:
                if found.base_offset != expected:
                    raise self.fail(f"partition {partition}: batch at {found.base_offset}, expected {expected}")
                expected = found.last_offset + 1
            if not result.batches or expected >= result.high_watermark:
                if expected != result.high_watermark:
                    raise self.fail(
                        f"partition {partition}: ends at {expected}, high watermark {result.high_watermark}"
                    )
                return
            offset = expected


_RETRIABLE = {
    pb.NOT_COORDINATOR,
    pb.NOT_LEADER_OR_FOLLOWER,
    pb.COORDINATOR_NOT_AVAILABLE,
    pb.COORDINATOR_LOAD_IN_PROGRESS,
    pb.REQUEST_TIMED_OUT,
    pb.UNKNOWN_TOPIC_OR_PARTITION,
}
