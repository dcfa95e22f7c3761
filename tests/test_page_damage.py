"""A bit flipped on disk under a running node: refused, rebuilt, never a wrong answer (issue #29, item 1).

A node in the test's process (tests/in_process.py) commits, and bits are flipped in its coordinators'
files while it runs: a page of the SQLite state, a page of its WAL, a snapshot. Every FindBatches answer
is held to a model of what was acknowledged (the object key, byte range and offsets of every batch): an
answer is either that or a retriable refusal, never a different key. A refused read takes the
coordinator out of service; it sets the damaged state aside, restores the newest snapshot that verifies,
replays the log and serves again, with no restart and no operator. A flip that no read reaches is found by
the state check (every page read) or is harmless (a page's older copy, superseded in the WAL).

The sweep prints its seed; `DISKLESS_PAGE_DAMAGE_SEED=N` replays it (and `DISKLESS_PAGE_DAMAGE_TRIALS=N`
runs that many trials).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import apsw
import pytest
from grpc_health.v1 import health_pb2

from coordinator.machine.state.reads import StateDamaged
from coordinator.runtime.shard.availability import ShardState
from protos import coordinator_pb2 as pb
from snapshot import page_checksums
from snapshot.snapshots import list_snapshots, snapshot_directory
from tests.harness import Broker, batch, coordinators_of
from tests.in_process import InProcessNode, wait_until

COORDINATORS = 2
PARTITIONS = 6
RETRIABLE = {pb.COORDINATOR_NOT_AVAILABLE, pb.COORDINATOR_LOAD_IN_PROGRESS, pb.NOT_COORDINATOR}
SETTINGS = {
    # A small WAL threshold: the state's newest pages are in its WAL, older ones in its file, both flipped.
    "diskless.coordinator.state.checkpoint.pages": "40",
    "diskless.coordinator.snapshot.interval.bytes": "0",
    "diskless.coordinator.snapshot.interval.ms": "0",
}
PAGE_BYTES = 4096


@dataclass
class Model:
    """What the node acknowledged: per partition, (base offset, last offset, object key, byte offset, size)."""

    topic_id: bytes
    partition_coordinator: dict[int, int]
    batches: dict[int, list[tuple[int, int, str, int, int]]] = field(default_factory=dict)
    commits: int = 0


@pytest.fixture
def node(tmp_path: Path) -> Iterator[InProcessNode]:
    server = InProcessNode(tmp_path / "data", coordinators=COORDINATORS, settings=SETTINGS).start()
    try:
        yield server
    finally:
        if server.is_running():
            server.stop()


def setup(node: InProcessNode, commits: int = 12) -> Model:
    broker = Broker(node.stub, COORDINATORS)
    topic_id = broker.create_topic("pages", PARTITIONS)
    located = coordinators_of(node.stub, {topic_id: PARTITIONS})
    model = Model(topic_id, {p: located[(topic_id, p)] for p in range(PARTITIONS)})
    assert set(model.partition_coordinator.values()) == set(range(COORDINATORS))
    for _ in range(commits // 2):
        commit(node, model)
    snapshot_every_coordinator(node)
    for _ in range(commits - commits // 2):
        commit(node, model)
    snapshot_every_coordinator(node)
    for _ in range(3):
        commit(node, model)  # and a log tail after the newest snapshot
    return model


def snapshot_every_coordinator(node: InProcessNode) -> None:
    for shard in node.node.shards:
        node.loop.run(shard.create_snapshot())


def commit(node: InProcessNode, model: Model, deadline_s: float = 60) -> None:
    """One file with a batch on every partition, sent again (the same request, as a broker would) until it is
    answered: a refusal is retriable, and a commit whose answer was lost is answered alike when it comes again."""
    model.commits += 1
    key = f"wal/{model.commits:06d}-" + "0123456789abcdef" * 4  # long keys: a flip in one is a wrong answer
    batches = [batch(model.topic_id, p, records=1 + (model.commits + p) % 3, byte_offset=100 * p) for p in range(6)]
    request = pb.CommitFileRequest(
        object_key=key, object_format=1, file_size=100 * PARTITIONS, uploader_broker_id=1,
        owner_ids=sorted(set(model.partition_coordinator.values())), batches=batches,
    )  # fmt: skip
    started = time.monotonic()
    while True:
        response = node.stub.CommitFile(request, timeout=30)
        codes = {result.error_code for result in response.batches}
        if codes == {pb.NONE}:
            break
        assert codes <= RETRIABLE | {pb.NONE}, response
        assert time.monotonic() - started < deadline_s, f"the commit was refused for {deadline_s} s: {response}"
        wait_serving(node)
    for p, (sent, result) in enumerate(zip(batches, response.batches, strict=True)):
        last = result.assigned_base_offset + sent.last_offset - sent.base_offset
        model.batches.setdefault(p, []).append((result.assigned_base_offset, last, key, sent.byte_offset, sent.size))


def wait_serving(node: InProcessNode) -> None:
    wait_until(
        lambda: (
            node.health() == health_pb2.HealthCheckResponse.SERVING
            and all(shard.state is ShardState.ACTIVE for shard in node.node.shards)
        ),
        "every coordinator serves",
    )


def read_and_compare(node: InProcessNode, model: Model) -> int:
    """Every partition from offset 0 in one call; each answer the model's, or refused. Returns the refusals."""
    request = pb.FindBatchesRequest(
        fetch_max_bytes=1 << 30,
        topics=[pb.FindBatchesRequest.Topic(
            topic_id=model.topic_id,
            partitions=[pb.FindBatchesRequest.Partition(partition=p, offset=0, max_partition_fetch_bytes=1 << 30)
                        for p in range(PARTITIONS)],
        )],
    )  # fmt: skip
    refused = 0
    for p, result in enumerate(node.stub.FindBatches(request, timeout=30).topics[0].partitions):
        if result.error_code in RETRIABLE:
            assert not result.batches, result
            refused += 1
            continue
        assert result.error_code == pb.NONE, result
        served = [(b.base_offset, b.last_offset, b.object_key, b.byte_offset, b.byte_size) for b in result.batches]
        assert served == model.batches[p], f"partition {p}: a wrong answer"
    return refused


def check_every_state(node: InProcessNode) -> int:
    """The on-demand state check (every page read, every checksum verified); returns the damaged states found."""
    found = 0
    for shard in node.node.shards:
        if shard.state is not ShardState.ACTIVE:
            continue
        if node.loop.run(shard.check_state()).problem is not None:
            found += 1
    return found


def flip_bit(path: Path, offset: int, bit: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        (byte,) = file.read(1)
        file.seek(offset)
        file.write(bytes([byte ^ (1 << bit)]))


def coordinator_dir(node: InProcessNode, coordinator_id: int) -> Path:
    return node.data_dir / f"coordinator-{coordinator_id}"


def current_frames(wal: Path) -> list[tuple[int, int]]:
    """(page number, where its page starts) of each frame of the WAL's current generation, in order."""
    data = wal.read_bytes() if wal.exists() else b""
    frame_bytes = 24 + PAGE_BYTES
    frames = []
    for k in range(max(0, (len(data) - 32) // frame_bytes)):
        header = 32 + k * frame_bytes
        if data[header + 8 : header + 16] != data[16:24]:
            break  # the WAL's salts end its current frames: what follows is left from before it started over
        frames.append((int.from_bytes(data[header : header + 4], "big"), header + 24))
    return frames


def newest_frames(wal: Path) -> dict[int, int]:
    """Page number -> where the page of the WAL frame holding its newest copy starts (what reads read)."""
    return dict(current_frames(wal))


def batches_leaf_pages(state: Path) -> list[int]:
    """The batches table's leaf pages (numbered from 1), which every FindBatches of the table reads."""
    connection = page_checksums.connect(state, apsw.SQLITE_OPEN_READONLY)
    try:
        query = "SELECT pageno FROM dbstat WHERE name = 'batches' AND pagetype = 'leaf' ORDER BY pageno"
        return [page for (page,) in connection.execute(query)]
    finally:
        connection.close()


def checkpoint(state: Path) -> None:
    """Copies the WAL into the file and empties it, from a connection of the test's own beside the node's."""
    connection = page_checksums.connect(state, apsw.SQLITE_OPEN_READWRITE)
    try:
        # Busy while the node's own checkpoint thread runs a pass: again, briefly.
        wait_until(lambda: connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0, "a checkpoint")
    finally:
        connection.close()


def rebuild(node: InProcessNode, coordinator_id: int, reason: str) -> None:
    """Takes the coordinator out of service as a read meeting damage does: it sets its state aside and rebuilds."""
    shard = node.node.shards[coordinator_id]
    node.loop.call(lambda: shard.report_damage(StateDamaged(reason)))


def touch_header(state: Path) -> None:
    """A write of the header page alone (user_version, which the node does not use), from the test's connection:
    the WAL changes, so the node's readers start their page caches over, and no other page gets a new copy."""
    connection = page_checksums.connect(state, apsw.SQLITE_OPEN_READWRITE)
    try:
        (version,) = connection.execute("PRAGMA user_version").fetchone()
        connection.execute(f"PRAGMA user_version = {version + 1}")
    finally:
        connection.close()


def rebuilt_states(directory: Path) -> int:
    return len(list(directory.glob("state.sqlite.corrupt-*")))


def test_a_flipped_bit_in_a_state_page_is_refused_and_the_coordinator_rebuilds_without_a_restart(
    node: InProcessNode,
) -> None:
    model = setup(node)
    victim = model.partition_coordinator[0]
    directory = coordinator_dir(node, victim)
    state = directory / "state.sqlite"
    checkpoint(state)  # every page's newest copy is in the file; the node's readers read it again
    page = batches_leaf_pages(state)[0]
    flip_bit(state, (page - 1) * PAGE_BYTES + 2000, 4)
    assert read_and_compare(node, model) > 0, "the damaged page is refused"
    wait_until(lambda: rebuilt_states(directory) == 1, "the damaged state set aside")
    wait_serving(node)  # rebuilt from the newest snapshot and the log, while the node ran
    assert read_and_compare(node, model) == 0
    output = "".join(node.output)
    assert f"{state}: the page at offset {(page - 1) * PAGE_BYTES} fails its checksum" in output, output
    commit(node, model)
    assert read_and_compare(node, model) == 0
    assert check_every_state(node) == 0


@pytest.fixture
def node_keeping_its_wal(tmp_path: Path) -> Iterator[InProcessNode]:
    """No checkpoint until 10,000 pages: the WAL holds the newest copy of every page the node wrote."""
    settings = {**SETTINGS, "diskless.coordinator.state.checkpoint.pages": "10000"}
    server = InProcessNode(tmp_path / "data", coordinators=COORDINATORS, settings=settings).start()
    try:
        yield server
    finally:
        if server.is_running():
            server.stop()


def test_a_flipped_bit_in_a_wal_page_is_refused_and_the_coordinator_rebuilds(
    node_keeping_its_wal: InProcessNode,
) -> None:
    node = node_keeping_its_wal
    model = setup(node)
    victim = model.partition_coordinator[0]
    directory = coordinator_dir(node, victim)
    state, wal = directory / "state.sqlite", directory / "state.sqlite-wal"
    for _ in range(50):  # a WAL holding the newest copy of a batches leaf
        commit(node, model)
        in_wal = newest_frames(wal)
        leaves = [page for page in batches_leaf_pages(state) if page in in_wal]
        if leaves:
            break
    offset = in_wal[leaves[-1]] + 1500
    flip_bit(wal, offset, 1)
    touch_header(state)  # a write: the node's readers read again, and find the leaf's newest copy in the WAL
    assert read_and_compare(node, model) > 0, "the damaged WAL page is refused"
    wait_until(lambda: rebuilt_states(directory) == 1, "the damaged state set aside")
    wait_serving(node)
    assert read_and_compare(node, model) == 0
    output = "".join(node.output)
    assert f"{wal}: frame" in output and "fails its checksum" in output, output
    commit(node, model)
    assert read_and_compare(node, model) == 0
    assert check_every_state(node) == 0


def test_a_flipped_bit_in_a_snapshot_is_refused_when_restored_and_an_older_one_or_the_log_serves(
    node: InProcessNode,
) -> None:
    model = setup(node)
    victim = model.partition_coordinator[0]
    directory = coordinator_dir(node, victim)
    newest = list_snapshots(snapshot_directory(directory))[0]
    flip_bit(newest.data_path, newest.size_bytes // 3, 5)
    rebuild(node, victim, "test: rebuild from the snapshots")
    wait_until(lambda: rebuilt_states(directory) == 1, "the state set aside")
    wait_serving(node)
    assert read_and_compare(node, model) == 0
    output = "".join(node.output)
    assert f"snapshot {newest.snapshot_id} does not verify" in output, output


# ---------------------------------------------------------------------- the sweep


def sweep(node: InProcessNode, trials: int, seed: int) -> Counter[tuple[str, str]]:
    """Trials of one flipped bit each, in a random file of a random coordinator: (file kind, outcome) counts."""
    rng = random.Random(seed)
    model = setup(node)
    outcomes: Counter[tuple[str, str]] = Counter()
    for trial in range(trials):
        coordinator_id = rng.randrange(COORDINATORS)
        directory = coordinator_dir(node, coordinator_id)
        state, wal = directory / "state.sqlite", directory / "state.sqlite-wal"
        kind = rng.choice(["state", "wal", "snapshot"])
        if kind == "wal" and not (wal.exists() and wal.stat().st_size > 32):
            kind = "state"
        path = {"state": state, "wal": wal, "snapshot": None}[kind]
        newest_snapshot = list_snapshots(snapshot_directory(directory))[0]
        if path is None:
            path = newest_snapshot.data_path  # the one a rebuild restores first
        # In a WAL, its current frames (those after them are left from before it started over, never read).
        end = 32 + (24 + PAGE_BYTES) * len(current_frames(wal)) if kind == "wal" else path.stat().st_size
        offset, bit = rng.randrange(end if end > 32 else path.stat().st_size), rng.randrange(8)
        rebuilt_before = rebuilt_states(directory)
        output_before = len(node.output)
        what = f"trial {trial} (seed {seed}): bit {bit} of byte {offset} of {path.name} of coordinator {coordinator_id}"
        flip_bit(path, offset, bit)
        if kind == "snapshot":  # read only when restored: rebuild from it
            rebuild(node, coordinator_id, f"sweep: {what}")
            wait_until(
                lambda at=directory, before=rebuilt_before: rebuilt_states(at) > before, f"{what}: the state set aside"
            )
        try:
            commit(node, model)  # after a flip the readers' caches start over; a refused commit is sent again
            refused = read_and_compare(node, model)
            wait_serving(node)
            found = check_every_state(node)
            wait_serving(node)
            assert read_and_compare(node, model) == 0, f"{what}: refused after the rebuild"
        except AssertionError as error:
            raise AssertionError(f"{what}: {error}") from error
        rebuilt = rebuilt_states(directory) > rebuilt_before
        if kind == "snapshot":
            skipped = f"snapshot {newest_snapshot.snapshot_id} does not verify" in "".join(node.output[output_before:])
            outcome = "restore refused it, rebuilt" if skipped else "restored (not refused)"
            flip_bit(path, offset, bit)  # put back: a later trial may need the snapshot
        elif refused:
            outcome = "read refused, rebuilt" if rebuilt else "read refused"
        elif found:
            outcome = "found by the check, rebuilt"
        else:
            outcome = "rebuilt (commit refused)" if rebuilt else "intact (no read reaches it)"
        outcomes[(kind, outcome)] += 1
    assert read_and_compare(node, model) == 0
    return outcomes


def _sweep_parameters(default_trials: int) -> tuple[int, int]:
    seed = int(os.environ.get("DISKLESS_PAGE_DAMAGE_SEED", random.randrange(2**32)))
    trials = int(os.environ.get("DISKLESS_PAGE_DAMAGE_TRIALS", default_trials))
    print(f"page damage sweep: seed {seed}, {trials} trials (replay: DISKLESS_PAGE_DAMAGE_SEED={seed})")
    return seed, trials


def _report(outcomes: Counter[tuple[str, str]]) -> None:
    for (kind, outcome), count in sorted(outcomes.items()):
        print(f"  {kind:9} {outcome:32} {count}")


def test_a_sweep_of_flipped_bits_never_serves_a_wrong_answer(node: InProcessNode) -> None:
    seed, trials = _sweep_parameters(24)
    _report(sweep(node, trials, seed))


@pytest.mark.slow
def test_a_long_sweep_of_flipped_bits_never_serves_a_wrong_answer(node: InProcessNode) -> None:
    seed, trials = _sweep_parameters(300)
    _report(sweep(node, trials, seed))
