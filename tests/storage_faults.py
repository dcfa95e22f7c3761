"""The storage-fault sweep (issue #29, item 3): one flipped bit per trial in any file a stopped node wrote.

A node is loaded with idempotent commits (a producer per partition, sequences in order), snapshotted twice
with a log tail after each snapshot, and stopped cleanly: its data directory is the template. A second
template is taken from a running node with its WAL unchecked (what a crash leaves: the state's `-wal` and
`-shm`). Each trial copies a template, flips one random bit at a random offset of one random file of a
random kind, starts a node on the copy, asks FindBatches for every acknowledged batch and sends the last
commit's batches again under a new key (each must be a duplicate with its original offsets: the producer
state is read too). Every answer is held to the model. Outcomes:

- intact: every answer right, nothing logged about damage, and reading everything finds nothing (a flip
  that changes nothing read: a -shm SQLite rebuilds at open);
- latent: every answer right and nothing reported at start, but one scrub pass finds it (issue #40: a sealed
  segment below the applied offset, which only a replay reads again, an older snapshot a restore did not
  need, a state page no read touched) and hands it on as a read would: the state is rebuilt, the snapshot
  set aside, and every answer is checked again. Damage that reading everything finds (the state check, a
  scan of the whole log, the snapshots' verification) and the pass did not fails the sweep;
- repaired: every answer right, and the node repaired what held the damage, as its metrics count it
  (diskless_coordinator_repairs_total: a state set aside and rebuilt from a snapshot or the log, at load or
  after a refused read; a damaged snapshot or manifest passed over; an epoch checkpoint rebuilt from the log),
  each repair of a kind that cures damage in that kind of file (REPAIRS_OF_KIND), never a log line alone;
- refused: the damaged coordinator stays out of service (retriable COORDINATOR_NOT_AVAILABLE with the
  reason, health NOT_SERVING), the other coordinators answer right.

A wrong answer, a non-retriable error code or an RPC failure (an internal error) fails the sweep, naming
the seed and the trial: `python -m tests.storage_faults --seed S --trials N` replays it and prints the
table of file kind x outcome (DISKLESS_SWEEP_SEED / DISKLESS_SWEEP_TRIALS set them for the tests).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import grpc
from grpc_health.v1 import health_pb2

from coordinator.base.workers import WorkerState
from coordinator.machine.state.reads import StateDamaged
from coordinator.runtime.log.inspection import scan_log
from coordinator.runtime.shard.availability import ShardState
from coordinator.runtime.worker_specs import COORDINATOR_LIFE
from protos import coordinator_pb2 as pb
from protos import coordinator_pb2_grpc as pb_grpc
from snapshot.snapshots import MANIFEST_SUFFIX, check_snapshots, snapshot_directory
from tests.harness import Broker, batch, coordinators_of
from tests.in_process import InProcessNode, wait_until

COORDINATORS = 2
PARTITIONS = 6
COMMITS = 14
RETRIABLE = {pb.COORDINATOR_NOT_AVAILABLE, pb.COORDINATOR_LOAD_IN_PROGRESS, pb.NOT_COORDINATOR}
SETTINGS = {
    "diskless.coordinator.log.segment.bytes": "2048",  # several segments, the older ones sealed
    "diskless.coordinator.snapshot.interval.bytes": "0",  # snapshots only when the loader asks
    "diskless.coordinator.snapshot.interval.ms": "0",
    "diskless.coordinator.scrub.bytes.per.second": "0",  # no background pass: the trial asks for one, unpaced
}
# The crash image keeps its WAL: no checkpoint before 10,000 pages, and no clean close.
CRASH_SETTINGS = {**SETTINGS, "diskless.coordinator.state.checkpoint.pages": "10000"}
KINDS = ("log segment", "state", "wal", "shm", "snapshot", "manifest", "epoch checkpoint")
CRASH_KINDS = frozenset({"wal", "shm"})  # a cleanly stopped node has neither
OUTCOMES = ("intact", "latent", "repaired", "refused")
SETTLE_S = 30
RELOADS_MAX = 3
# What the node logs for a failure it did not expect (a bug, never an answer to damage): an unexpected exception
# in a call, a check or a worker (logged with its traceback), a dead coordinator loop, an unclassified failure.
INTERNAL_ERROR_SIGNS = ("Traceback", "CRITICAL", "unexpected error", "check failed", "(error)", "(invariant)")
READ_ON_RESTORE = frozenset({"snapshot", "manifest"})
FORCED_REBUILD = "sweep: rebuild from the snapshots"
REPAIRS_METRIC = "diskless_coordinator_repairs_total"
STATE_REBUILDS = frozenset({"state_from_snapshot", "state_from_log"})
# The repairs that cure damage in each kind of file: a trial "repaired" counted at least one of them (and a count of
# another kind is a repair of damage that was never made: the trial fails).
REPAIRS_OF_KIND = {
    "log segment": STATE_REBUILDS,  # a state applied past a damaged frame, rebuilt up to where the log reads
    "state": STATE_REBUILDS,
    "wal": STATE_REBUILDS,
    "shm": STATE_REBUILDS,
    "snapshot": frozenset({"snapshot_skipped"}),
    "manifest": frozenset({"snapshot_skipped"}),
    "epoch checkpoint": frozenset({"epoch_checkpoint"}),
}
Repairs = Callable[[], Counter[str]]  # what the node counts in REPAIRS_METRIC so far, by repair


@dataclass
class Model:
    """What the node acknowledged: per partition, (base offset, last offset, object key, byte offset, size)."""

    topic_id: bytes
    batches: dict[int, list[tuple[int, int, str, int, int]]] = field(default_factory=dict)
    last_request: pb.CommitFileRequest | None = None  # the last commit, sent again as duplicates
    commits: int = 0
    sequences: dict[int, int] = field(default_factory=dict)  # per partition, the next sequence of its producer


@dataclass(frozen=True)
class Template:
    directory: Path
    model: Model


@dataclass(frozen=True)
class Trial:
    number: int
    kind: str
    path: Path  # inside the data directory
    offset: int
    bit: int

    def __str__(self) -> str:
        return f"trial {self.number}: bit {self.bit} of byte {self.offset} of {self.path} ({self.kind})"


@dataclass(frozen=True)
class Result:
    outcome: str
    detail: str  # the refusal's reason, or the first damage line the node logged
    repairs: Counter[str] = field(default_factory=Counter)  # what the node counted doing, by repair


class Node(Protocol):
    """What a trial needs of a node: InProcessNode, or tests.harness.ServerProcess (`diskless serve`)."""

    data_dir: Path
    output: list[str]
    stub: pb_grpc.DisklessCoordinatorStub

    def health(self) -> int: ...


# ---------------------------------------------------------------------- the templates


def commit(stub: pb_grpc.DisklessCoordinatorStub, model: Model, owners: list[int]) -> None:
    """One file with an idempotent batch on every partition; the model keeps what was acknowledged."""
    model.commits += 1
    key = f"wal/{model.commits:06d}-" + "0123456789abcdef" * 4  # long keys: a flip in one is a wrong answer
    batches = []
    for p in range(PARTITIONS):
        records = 1 + (model.commits + p) % 3
        sequence = model.sequences.get(p, 0)
        model.sequences[p] = sequence + records
        batches.append(batch(model.topic_id, p, records, byte_offset=100 * p, producer_id=1000 + p, epoch=0,
                             sequence=sequence))  # fmt: skip
    request = pb.CommitFileRequest(
        object_key=key, object_format=1, file_size=100 * PARTITIONS, uploader_broker_id=1, owner_ids=owners,
        batches=batches,
    )  # fmt: skip
    response = stub.CommitFile(request, timeout=30)
    assert [r.error_code for r in response.batches] == [pb.NONE] * PARTITIONS, response
    for p, (sent, result) in enumerate(zip(batches, response.batches, strict=True)):
        last = result.assigned_base_offset + sent.last_offset - sent.base_offset
        model.batches.setdefault(p, []).append((result.assigned_base_offset, last, key, sent.byte_offset, sent.size))
    model.last_request = request


def load(node: InProcessNode) -> Model:
    broker = Broker(node.stub, COORDINATORS)
    topic_id = broker.create_topic("faults", PARTITIONS)
    located = coordinators_of(node.stub, {topic_id: PARTITIONS})
    owners = sorted({located[(topic_id, p)] for p in range(PARTITIONS)})
    assert owners == list(range(COORDINATORS)), located
    model = Model(topic_id)
    for round_commits in (COMMITS // 2, COMMITS - COMMITS // 2):
        for _ in range(round_commits):
            commit(node.stub, model, owners)
        for shard in node.node.shards:
            node.loop.run(shard.create_snapshot())
    for _ in range(3):
        commit(node.stub, model, owners)  # a log tail after the newest snapshot
    return model


def build_templates(root: Path) -> dict[str, Template]:
    """`clean`: a node stopped cleanly; `crash`: a copy of a running node's files (WAL and -shm included)."""
    clean = InProcessNode(root / "clean", coordinators=COORDINATORS, settings=SETTINGS).start()
    try:
        clean_model = load(clean)
    finally:
        clean.stop()
    running = InProcessNode(root / "running", coordinators=COORDINATORS, settings=CRASH_SETTINGS).start()
    try:
        crash_model = load(running)
        # Every commit is answered, so fsynced: the copy is what a kill -9 now would leave.
        shutil.copytree(running.data_dir, root / "crash")
    finally:
        running.stop()
    return {"clean": Template(root / "clean", clean_model), "crash": Template(root / "crash", crash_model)}


def files_of_kind(data_dir: Path, coordinator_id: int, kind: str) -> list[Path]:
    directory = data_dir / f"coordinator-{coordinator_id}"
    found = {
        "log segment": sorted((directory / "log").glob("*.log")),
        "state": [directory / "state.sqlite"],
        "wal": [directory / "state.sqlite-wal"],
        "shm": [directory / "state.sqlite-shm"],
        "snapshot": sorted((directory / "snapshots").glob("*.sqlite")),
        "manifest": sorted((directory / "snapshots").glob(f"*{MANIFEST_SUFFIX}")),
        "epoch checkpoint": [directory / "leader-epoch-checkpoint"],
    }[kind]
    return [path for path in found if path.exists() and path.stat().st_size > 0]


def plan_trial(rng: random.Random, number: int, templates: dict[str, Template]) -> tuple[str, Trial]:
    """(template name, trial): a random kind, coordinator, file of that kind, byte and bit."""
    while True:
        kind = rng.choice(KINDS)
        template = "crash" if kind in CRASH_KINDS else "clean"
        data_dir = templates[template].directory
        paths = files_of_kind(data_dir, rng.randrange(COORDINATORS), kind)
        if paths:
            path = rng.choice(paths)
            offset = rng.randrange(path.stat().st_size)
            return template, Trial(number, kind, path.relative_to(data_dir), offset, rng.randrange(8))


def flip_bit(path: Path, offset: int, bit: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        (byte,) = file.read(1)
        file.seek(offset)
        file.write(bytes([byte ^ (1 << bit)]))


# ---------------------------------------------------------------------- one trial


def read_all(stub: pb_grpc.DisklessCoordinatorStub, model: Model) -> list[pb.FindBatchesResponse.PartitionResult]:
    request = pb.FindBatchesRequest(
        fetch_max_bytes=1 << 30,
        topics=[pb.FindBatchesRequest.Topic(
            topic_id=model.topic_id,
            partitions=[pb.FindBatchesRequest.Partition(partition=p, offset=0, max_partition_fetch_bytes=1 << 30)
                        for p in range(PARTITIONS)],
        )],
    )  # fmt: skip
    return list(stub.FindBatches(request, timeout=30).topics[0].partitions)


def refusals(stub: pb_grpc.DisklessCoordinatorStub, model: Model, what: str) -> list[str]:
    """Every partition's batches against the model: the reasons of the retriable refusals; fails on a wrong answer."""
    reasons = []
    for p, result in enumerate(read_all(stub, model)):
        if result.error_code in RETRIABLE:
            assert not result.batches and result.error_message, f"{what}: partition {p}: refused so: {result}"
            reasons.append(result.error_message)
            continue
        assert result.error_code == pb.NONE, f"{what}: partition {p}: {result}"
        served = [(b.base_offset, b.last_offset, b.object_key, b.byte_offset, b.byte_size) for b in result.batches]
        assert served == model.batches[p], f"{what}: partition {p}: a wrong answer: {served} != {model.batches[p]}"
    return reasons


def duplicate_refusals(stub: pb_grpc.DisklessCoordinatorStub, model: Model, what: str) -> list[str]:
    """The last commit's batches again in a new file: each a duplicate with its offsets, or refused (retriably).

    A new key each time: a refused commit may still land (its records were in the log), and a key committed
    once takes no other batches."""
    assert model.last_request is not None
    request = pb.CommitFileRequest()
    request.CopyFrom(model.last_request)
    model.commits += 1
    request.object_key = request.object_key.replace("wal/", f"wal/again-{model.commits}-")
    response = stub.CommitFile(request, timeout=30)
    reasons = []
    for p, result in enumerate(response.batches):
        if result.error_code in RETRIABLE:
            reasons.append(result.error_message or pb.ErrorCode.Name(result.error_code))
            continue
        assert result.error_code == pb.NONE and result.is_duplicate, f"{what}: partition {p}: {result}"
        assert result.assigned_base_offset == model.batches[p][-1][0], f"{what}: partition {p}: a wrong duplicate"
    return reasons


def settled(node: InProcessNode) -> bool:
    """Every coordinator serves, or is out of service for good (its loop ended: it needs an operator) or until
    the clock moves (it waits to load again)."""
    return all(
        shard.state is ShardState.ACTIVE
        or (
            shard.state is ShardState.FAILED
            and (waits_to_load(shard.problem) or _life_ended(node, shard.coordinator_id))
        )
        for shard in node.node.shards
    )


def _life_ended(node: InProcessNode, coordinator_id: int) -> bool:
    """The coordinator's life loop ended (it returned: an operator is needed) or died (FAILED, not started again)."""
    life = [s for s in node.node.workers.statuses() if (s.name, s.coordinator_id) == (COORDINATOR_LIFE.name,
                                                                                      coordinator_id)]  # fmt: skip
    return not life or life[0].state is WorkerState.FAILED


def waits_to_load(problem: str) -> bool:
    return "loading again in" in problem


def settle(node: InProcessNode, what: str) -> None:
    """Waits until the node settles; a coordinator waiting to load again gets the time it waits for (the sweep's
    clock stands still otherwise), a few times: a failure that lasts is then a refusal."""
    for _ in range(RELOADS_MAX):
        wait_until(lambda: settled(node), f"{what}: the coordinators settle", SETTLE_S)
        if not any(shard.state is ShardState.FAILED and waits_to_load(shard.problem) for shard in node.node.shards):
            return
        node.advance(node.node.settings.reload_backoff_max_ms)
    wait_until(lambda: settled(node), f"{what}: the coordinators settle", SETTLE_S)


def damage_lines(lines: list[str]) -> list[str]:
    """What the node said about damage, but for the rebuild the sweep asked for (its lines name it)."""
    said = [line for line in lines if " WARNING " in f" {line}" or " ERROR " in f" {line}"]
    return [line for line in said if FORCED_REBUILD not in line and "coordinators out of service" not in line]


def rebuilt(node: InProcessNode) -> bool:
    return any(FORCED_REBUILD in line for line in node.output)


def repairs_in(samples: Iterable[tuple[str, Mapping[str, str], float]]) -> Counter[str]:
    counted: Counter[str] = Counter()
    for name, labels, value in samples:
        if name == REPAIRS_METRIC:
            counted[labels["repair"]] += int(value)
    return counted


def in_process_repairs(node: InProcessNode) -> Repairs:
    def read() -> Counter[str]:  # the running node's (read when called: the node may start after this)
        registry = node.node.metrics.registry
        return repairs_in((s.name, s.labels, s.value) for m in registry.collect() for s in m.samples)

    return read


def check_node(
    node: Node,
    model: Model,
    what: str,
    settle: Callable[[], None],
    repairs: Repairs,
    before: Counter[str] | None = None,
) -> Result:
    """Reads everything and sends the duplicates, again after a refusal until the node settles: a refusal takes
    the coordinator out of service, and it rebuilds what is damaged (or stays out, saying why). Repaired: the node
    counted repairs since `before`."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        reasons = refusals(node.stub, model, what)
        reasons += duplicate_refusals(node.stub, model, what)
        if not reasons:
            # Damage these reads met may be taking a coordinator out to rebuild as they answer: its repair counts
            # once it has loaded again. Done when, after the node settled, everything reads right again and the
            # count stood still.
            counted = repairs()
            settle()
            if not refusals(node.stub, model, what) + duplicate_refusals(node.stub, model, what) and (
                repairs() == counted
            ):
                break
            assert time.monotonic() < deadline, f"{what}: no settled moment in {SETTLE_S} s"
            continue
        # Refused for good only when refused again twice, each after the node settled (an answer may come back
        # before the failure it reports takes the coordinator out of service), and the node says NOT_SERVING.
        settle()
        again = refusals(node.stub, model, what) + duplicate_refusals(node.stub, model, what)
        if again:
            time.sleep(0.05)
            settle()
            again = refusals(node.stub, model, what) + duplicate_refusals(node.stub, model, what)
        if again and node.health() != health_pb2.HealthCheckResponse.SERVING:
            return Result("refused", again[0])
        if not again:
            break
        assert time.monotonic() < deadline, f"{what}: refused for {SETTLE_S} s while serving: {reasons}"
        time.sleep(0.01)
    internal = [line for line in node.output if any(sign in line for sign in INTERNAL_ERROR_SIGNS)]
    assert not internal, f"{what}: an internal error: {''.join(internal)}"
    done = repairs() - (before or Counter())
    damage = damage_lines(node.output)
    if done:
        return Result("repaired", damage[0].strip() if damage else str(dict(done)), done)
    return Result("intact", "")


def scrubbed(node: InProcessNode, trial: Trial) -> str | None:
    """What one scrub pass of the damaged coordinator finds (handed on as a read meeting it would), or None."""
    shard = node.node.shards[int(trial.path.parts[0].removeprefix("coordinator-"))]
    report = node.loop.run(shard.scrub())
    return f"{report.findings[0].kind}: {report.findings[0].problem}" if report.findings else None


def latent_damage(node: InProcessNode, trial: Trial) -> str | None:
    """Damage no read at start reached, found by reading everything: the on-demand state check (every page,
    after which the coordinator rebuilds its state), a scan of the whole log or the snapshots' verification
    (which only name it)."""
    coordinator_directory = node.data_dir / trial.path.parts[0]
    if trial.kind == "log segment":
        damage = scan_log(coordinator_directory / "log", from_offset=0).damage
        return None if damage is None else damage.describe()
    if trial.kind == "snapshot":  # an older one a restore did not need: verified as ListSnapshots --verify does
        problems = [c.problem for c in check_snapshots(snapshot_directory(coordinator_directory)) if c.problem]
        return problems[0] if problems else None
    if trial.kind in ("state", "wal"):
        shard = node.node.shards[int(trial.path.parts[0].removeprefix("coordinator-"))]
        return node.loop.run(shard.check_state()).problem
    return None


def run_trial(templates: dict[str, Template], template: str, trial: Trial, scratch: Path) -> Result:
    data_dir = scratch / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    shutil.copytree(templates[template].directory, data_dir)
    flip_bit(data_dir / trial.path, trial.offset, trial.bit)
    node = InProcessNode(data_dir, coordinators=COORDINATORS, settings=SETTINGS)
    repairs = in_process_repairs(node)
    model = templates[template].model
    try:
        node.start(wait_serving=False)
        settle(node, str(trial))
        result = check_node(node, model, str(trial), lambda: settle(node, str(trial)), repairs)
        if trial.kind in READ_ON_RESTORE and result.outcome != "refused":
            # A snapshot is read only when a state is rebuilt: rebuild the coordinator's from its snapshots. That
            # rebuild is the sweep's own doing: its one state rebuild is not counted as a repair of the damage.
            shard = node.node.shards[int(trial.path.parts[0].removeprefix("coordinator-"))]
            before = repairs()
            node.loop.call(lambda: shard.report_damage(StateDamaged(FORCED_REBUILD)))
            wait_until(lambda: shard.state is not ShardState.ACTIVE or rebuilt(node), f"{trial}: a rebuild")
            at_start = result.repairs
            result = check_node(node, model, str(trial), lambda: settle(node, str(trial)), repairs, before)
            if result.outcome != "refused":
                forced = [repair for repair in STATE_REBUILDS for _ in range(result.repairs[repair])]
                assert len(forced) == 1, f"{trial}: the one rebuild asked for counted {dict(result.repairs)}"
                done = at_start + result.repairs - Counter(forced)
                result = Result("repaired", result.detail, done) if done else Result("intact", "")
        if result.outcome == "intact":
            found = scrubbed(node, trial)
            if found is None:  # then reading everything finds nothing either, or the pass missed it
                missed = latent_damage(node, trial)
                assert missed is None, f"{trial}: latent damage one scrub pass did not find: {missed}"
            else:  # state damage takes the coordinator out to rebuild: everything right after it
                check_node(node, model, f"{trial} (scrubbed)", lambda: settle(node, str(trial)), repairs)
                result = Result("latent", found)
        if result.outcome == "repaired":
            unexpected = set(result.repairs) - REPAIRS_OF_KIND[trial.kind]
            assert not unexpected, f"{trial}: repaired by {dict(result.repairs)}, none of which cures {trial.kind}"
        return result
    except grpc.RpcError as error:
        raise AssertionError(f"{trial}: an internal error: {error}") from error
    finally:
        if node.is_running():
            node.stop()


# ---------------------------------------------------------------------- the sweep


@dataclass
class Sweep:
    seed: int
    trials: int
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    repairs: Counter[str] = field(default_factory=Counter)  # what the node counted doing, over every trial
    reasons: dict[tuple[str, str], str] = field(default_factory=dict)  # an example per (kind, outcome)
    seconds: float = 0.0

    def table(self) -> str:
        kinds = [k for k in KINDS if any(self.outcomes[(k, o)] for o in OUTCOMES)]
        width = max(len(k) for k in [*kinds, "file kind"])
        lines = [f"{'file kind':{width}}  " + "  ".join(f"{o:>8}" for o in OUTCOMES) + "     total"]
        for kind in kinds:
            counts = [self.outcomes[(kind, o)] for o in OUTCOMES]
            lines.append(f"{kind:{width}}  " + "  ".join(f"{c:>8}" for c in counts) + f"  {sum(counts):>8}")
        totals = [sum(self.outcomes[(k, o)] for k in KINDS) for o in OUTCOMES]
        lines.append(f"{'all':{width}}  " + "  ".join(f"{c:>8}" for c in totals) + f"  {sum(totals):>8}")
        return "\n".join(lines)

    def repairs_line(self) -> str:
        return "repairs counted: " + (", ".join(f"{k} {v}" for k, v in sorted(self.repairs.items())) or "none")

    def examples(self) -> str:
        return "\n".join(f"  {k} / {o}: {r[:200]}" for (k, o), r in sorted(self.reasons.items()) if r)


def parameters(default_trials: int) -> tuple[int, int]:
    """(seed, trials): DISKLESS_SWEEP_SEED replays a sweep, DISKLESS_SWEEP_TRIALS sets its length."""
    seed = int(os.environ.get("DISKLESS_SWEEP_SEED", random.randrange(2**32)))
    trials = int(os.environ.get("DISKLESS_SWEEP_TRIALS", default_trials))
    return seed, trials


TrialRunner = Callable[[dict[str, Template], str, Trial, Path], Result]


def sweep(
    seed: int,
    trials: int,
    scratch: Path,
    progress: Callable[[str], None] = lambda _: None,
    runner: TrialRunner = run_trial,
) -> Sweep:
    progress(f"storage-fault sweep: seed {seed}, {trials} trials (replay: DISKLESS_SWEEP_SEED={seed})")
    started = time.monotonic()
    templates = build_templates(scratch / "templates")
    rng = random.Random(seed)
    result = Sweep(seed, trials)
    for number in range(trials):
        template, trial = plan_trial(rng, number, templates)
        try:
            outcome = runner(templates, template, trial, scratch / "trial")
        except AssertionError as error:
            raise AssertionError(f"seed {seed}, {error}") from error
        result.outcomes[(trial.kind, outcome.outcome)] += 1
        result.repairs += outcome.repairs
        result.reasons.setdefault((trial.kind, outcome.outcome), outcome.detail)
        if (number + 1) % 100 == 0:
            progress(f"  {number + 1} trials, {time.monotonic() - started:.0f} s")
    result.seconds = time.monotonic() - started
    return result


def main(arguments: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.storage_faults", description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=None, help="replays a sweep (default: a random seed)")
    parser.add_argument("--scratch", type=Path, default=None, help="working directory (default: a temporary one)")
    parser.add_argument("--serve", action="store_true", help="each trial through `diskless serve` (slower)")
    args = parser.parse_args(arguments)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="storage-faults-") as temporary:
        scratch = args.scratch or Path(temporary)
        runner = run_trial
        if args.serve:
            from tests.storage_faults_served import run_served_trial  # it imports this module

            runner = run_served_trial
        result = sweep(seed, args.trials, scratch, lambda line: print(line, flush=True), runner)
    print(result.table())
    print(result.repairs_line())
    print("examples:\n" + result.examples())
    print(f"{args.trials} trials in {result.seconds:.0f} s (seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
