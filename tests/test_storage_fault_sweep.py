"""The storage-fault sweep (issue #29, item 3) and the faults it found, each replayed on its own.

One flipped bit per trial in any file a stopped node wrote (tests/storage_faults.py): every trial ends
intact, repaired or refused; never a wrong answer, never an internal error. The seed is printed;
DISKLESS_SWEEP_SEED=N replays it and DISKLESS_SWEEP_TRIALS=N sets the length (a long one on demand:
`python -m tests.storage_faults --trials 10000`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import apsw
import pytest

from coordinator.runtime.shard.availability import ShardState
from snapshot import page_checksums
from snapshot.manifests import manifest_path
from snapshot.snapshots import MANIFEST_SUFFIX, list_snapshots, snapshot_directory
from tests import storage_faults
from tests.in_process import InProcessNode
from tests.lanes import sized
from tests.storage_faults import (
    COORDINATORS,
    CRASH_SETTINGS,
    SETTINGS,
    Template,
    Trial,
    build_templates,
    check_node,
    commit,
    flip_bit,
    in_process_repairs,
    load,
    parameters,
    settle,
)
from tests.storage_faults_served import run_served_trial

PAGE_BYTES = 4096


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Template]:
    return build_templates(tmp_path_factory.mktemp("templates"))


def run_sweep(tmp_path: Path, default_trials: int, runner: storage_faults.TrialRunner) -> None:
    seed, trials = parameters(default_trials)
    result = storage_faults.sweep(seed, trials, tmp_path, print, runner)
    print(result.table())
    print(result.repairs_line())
    print("examples:\n" + result.examples())
    assert sum(result.outcomes.values()) == trials
    # Each trial "repaired" counted at least one repair the node did (run_trial checks each is of its file's kind).
    repaired = sum(count for (_, outcome), count in result.outcomes.items() if outcome == "repaired")
    assert sum(result.repairs.values()) >= repaired


def test_a_sweep_of_flipped_bits_in_every_kind_of_file_never_serves_a_wrong_answer(tmp_path: Path) -> None:
    run_sweep(tmp_path, sized(40, 24), storage_faults.run_trial)


@pytest.mark.slow
def test_a_long_sweep_of_flipped_bits_never_serves_a_wrong_answer(tmp_path: Path) -> None:
    run_sweep(tmp_path, 1000, storage_faults.run_trial)


@pytest.mark.slow
def test_a_sweep_through_diskless_serve_never_serves_a_wrong_answer(tmp_path: Path) -> None:
    run_sweep(tmp_path, 24, run_served_trial)


def copy_of(template: Template, tmp_path: Path) -> Path:
    data_dir = tmp_path / "data"
    shutil.copytree(template.directory, data_dir)
    return data_dir


def first_page_of(state: Path, name: str) -> int:
    """The first page (numbered from 1) of a table or index, as SQLite's dbstat says."""
    connection = page_checksums.connect(state, apsw.SQLITE_OPEN_READONLY)
    try:
        row = connection.execute("SELECT min(pageno) FROM dbstat WHERE name = ?", (name,)).fetchone()
        assert row is not None and row[0] is not None, f"no page of {name}"
        return int(row[0])
    finally:
        connection.close()


def test_a_damaged_producers_page_found_at_open_is_rebuilt_at_once(
    templates: dict[str, Template], tmp_path: Path
) -> None:
    """The producers' pages are first read when the state opens: damage there is set aside and rebuilt in that
    load, as any damage found opening the state; it was a failed load, waiting for the clock to load again."""
    data_dir = copy_of(templates["clean"], tmp_path)
    state = data_dir / "coordinator-0" / "state.sqlite"
    flip_bit(state, (first_page_of(state, "producers") - 1) * PAGE_BYTES + 1000, 3)
    node = InProcessNode(data_dir, coordinators=COORDINATORS, settings=SETTINGS).start()  # no clock moved
    try:
        assert all(shard.state is ShardState.ACTIVE for shard in node.node.shards)
        output = "".join(node.output)
        assert "fails its checksum; moved it to state.sqlite.corrupt-" in output, output
        result = check_node(
            node,
            templates["clean"].model,
            "producers page",
            lambda: settle(node, "producers"),
            in_process_repairs(node),
        )
        assert result.outcome == "repaired", result
    finally:
        node.stop()


def test_a_commit_whose_check_meets_a_damaged_page_is_refused_retriably_and_the_state_rebuilt(
    templates: dict[str, Template], tmp_path: Path
) -> None:
    """A commit's check reads the files' key index (is the key new?), which no read before it touched: a
    retriable refusal and a rebuild, where it was UNKNOWN_SERVER_ERROR and the damaged state kept serving."""
    data_dir = copy_of(templates["clean"], tmp_path)
    state = data_dir / "coordinator-0" / "state.sqlite"
    flip_bit(state, (first_page_of(state, "sqlite_autoindex_files_1") - 1) * PAGE_BYTES + 2000, 6)
    node = InProcessNode(data_dir, coordinators=COORDINATORS, settings=SETTINGS).start()
    try:
        result = check_node(
            node, templates["clean"].model, "files index", lambda: settle(node, "files index"), in_process_repairs(node)
        )
        assert result.outcome == "repaired", result
        output = "".join(node.output)
        assert "coordinator 0 out of service (state_damaged)" in output and "check failed" not in output, output
        assert list((data_dir / "coordinator-0").glob("state.sqlite.corrupt-*")), "set aside"
    finally:
        node.stop()


def test_a_stale_shm_between_runs_is_rebuilt_by_sqlite_never_trusted(tmp_path: Path) -> None:
    """SQLite's first connection to a WAL database rebuilds the -shm (its WAL index) from the WAL: a -shm from an
    earlier moment (well-formed, checksums right, fewer frames) is never trusted, so no newer page is missed."""
    running = InProcessNode(tmp_path / "running", coordinators=COORDINATORS, settings=CRASH_SETTINGS).start()
    try:
        model = load(running)
        shm = running.data_dir / "coordinator-0" / "state.sqlite-shm"
        stale = shm.read_bytes()
        owners = list(range(COORDINATORS))
        for _ in range(4):
            commit(running.stub, model, owners)  # frames the stale -shm does not know
        shutil.copytree(running.data_dir, tmp_path / "crash")
    finally:
        running.stop()
    copied_shm = tmp_path / "crash" / "coordinator-0" / "state.sqlite-shm"
    assert copied_shm.read_bytes() != stale
    copied_shm.write_bytes(stale)
    node = InProcessNode(tmp_path / "crash", coordinators=COORDINATORS, settings=SETTINGS).start()
    try:
        result = check_node(node, model, "stale -shm", lambda: settle(node, "stale -shm"), in_process_repairs(node))
        assert result.outcome == "intact", result
    finally:
        node.stop()


def test_damage_met_inside_an_apply_is_named_with_its_file_and_offset(
    templates: dict[str, Template], tmp_path: Path
) -> None:
    """The files' table is first read by a commit's apply: SQLite ends the transaction on meeting the damaged page,
    so leaving it fails its ROLLBACK; the coordinator says what it met (file, offset), not "cannot rollback"."""
    data_dir = copy_of(templates["clean"], tmp_path)
    state = data_dir / "coordinator-0" / "state.sqlite"
    page = first_page_of(state, "files")
    flip_bit(state, (page - 1) * PAGE_BYTES + 2500, 1)
    node = InProcessNode(data_dir, coordinators=COORDINATORS, settings=SETTINGS).start()
    try:
        result = check_node(
            node, templates["clean"].model, "files page", lambda: settle(node, "files page"), in_process_repairs(node)
        )
        assert result.outcome == "repaired", result
        output = "".join(node.output)
        assert f"{state}: the page at offset {(page - 1) * PAGE_BYTES} fails its checksum" in output, output
        assert "cannot rollback" not in output, output
    finally:
        node.stop()


def _newest_snapshot_file(data_dir: Path, suffix: str) -> Path:
    directory = snapshot_directory(data_dir / "coordinator-0")
    newest = list_snapshots(directory)[0]
    path = newest.data_path if suffix == ".sqlite" else manifest_path(directory, newest.snapshot_id)
    assert path.exists(), path
    return path


@pytest.mark.parametrize(
    ("kind", "repairs"),
    [
        ("epoch checkpoint", {"epoch_checkpoint": 1}),
        ("manifest", {"snapshot_skipped": 1}),
        ("snapshot", {"snapshot_skipped": 1}),
        ("state", {"state_from_snapshot": 1}),
    ],
)
def test_a_repair_is_what_the_node_counts_doing(
    templates: dict[str, Template], tmp_path: Path, kind: str, repairs: dict[str, int]
) -> None:
    """ "Repaired" is what the node did, as diskless_coordinator_repairs_total counts it, never a log line: one flip
    in each kind of file a node repairs alone is repaired by exactly the repair that cures it. A node that no longer
    rebuilt (or skipped, or rebuilt the checkpoint) would leave the trial refused, or intact, and fail here."""
    data_dir = templates["clean"].directory
    if kind == "epoch checkpoint":
        path, offset = data_dir / "coordinator-0" / "leader-epoch-checkpoint", 0
    elif kind == "state":
        path = data_dir / "coordinator-0" / "state.sqlite"
        offset = (first_page_of(path, "producers") - 1) * PAGE_BYTES + 1000
    else:
        path = _newest_snapshot_file(data_dir, ".sqlite" if kind == "snapshot" else MANIFEST_SUFFIX)
        offset = path.stat().st_size // 2
    trial = Trial(0, kind, path.relative_to(data_dir), offset, 3)
    result = storage_faults.run_trial(templates, "clean", trial, tmp_path)
    assert (result.outcome, dict(result.repairs)) == ("repaired", repairs), result
