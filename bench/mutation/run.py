"""The mutation run over coordinator/: a seeded sample of mutants per module, each against the tests covering it.

`python -m bench.mutation --seed S --per-module K` (docs/testing.md has the run's report):

1. The coverage pass (skipped when `--coverage-dir` already holds one): the fast lane once under `coverage run`,
   each test in its own coverage context (bench/mutation/contexts.py), giving line -> covering tests, each test's
   duration, and the tests that fail with no mutant (never used to judge one).
2. The sample: `--per-module` mutants of each module of coordinator/ that has any (bench/mutation/mutants.py),
   drawn uniformly with a generator seeded by the seed and the module's path.
3. Each mutant is written into a private copy of the tree (one per job, under `--work-dir`) and the fast tests
   covering its line run there, fastest first, stopping at the first failure, within a time limit. A mutant on a
   line no fast test covers is "not covered", listed and not run.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from queue import Queue

from bench.mutation.mutants import Mutant, module_mutants, sample

ROOT = Path(__file__).resolve().parents[2]
COPIED_IGNORE = shutil.ignore_patterns(".venv", ".git", "__pycache__", "results", "*.egg-info", "docs", ".*cache")
OUTCOMES = ("killed", "survived", "timeout", "not covered", "error")


@dataclass(frozen=True, slots=True)
class CoverageMap:
    lines: dict[str, dict[int, list[str]]]  # module path (relative) -> line -> covering test node ids
    durations: dict[str, float]
    failed: frozenset[str]


@dataclass(frozen=True, slots=True)
class Outcome:
    mutant: Mutant
    outcome: str
    tests_covering: int
    tests_run: int
    seconds: float
    killed_by: str


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.mutation", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="the sample's seed (printed; random if not given)")
    parser.add_argument("--per-module", type=int, default=3, help="mutants drawn per module")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once, each in its own copy of the tree")
    parser.add_argument("--only", default="coordinator/", help="modules whose path starts with this")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="added to 3x the covering tests' own time")
    parser.add_argument(
        "--work-dir", type=Path, default=Path("/dev/shm/mutation") if Path("/dev/shm").is_dir() else None
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=40.0,
        help="covering tests run, fastest first, until their time in the coverage pass reaches this (0: all)",
    )
    parser.add_argument("--coverage-dir", type=Path, default=None, help="reuse (or keep) the coverage pass here")
    parser.add_argument("--out", type=Path, default=None, help="every outcome as JSON")
    return parser.parse_args(argv)


def coverage_pass(directory: Path) -> CoverageMap:
    """Run the fast lane once under coverage (unless `directory` holds a finished pass) and read its map back."""
    database, tests_json = directory / "coverage.db", directory / "tests.json"
    if not tests_json.exists():
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "coveragerc").write_text(f"[run]\nsource = coordinator\ndata_file = {database}\n")
        command = [sys.executable, "-m", "coverage", "run", f"--rcfile={directory / 'coveragerc'}", "-m", "pytest"]
        command += ["-m", "not slow", "-p", "no:xdist", "-p", "no:cacheprovider", "-p", "bench.mutation.contexts"]
        print("coverage pass:", " ".join(command), flush=True)
        environment = {**os.environ, "MUTATION_TESTS_JSON": str(tests_json)}
        subprocess.run([*command, "-q"], cwd=ROOT, env=environment, check=False)
    import coverage  # only the driver needs it, not the package

    data = coverage.CoverageData(basename=str(database))
    data.read()
    lines: dict[str, dict[int, list[str]]] = {}
    for measured in data.measured_files():
        relative = os.path.relpath(measured, ROOT)
        by_line = data.contexts_by_lineno(measured)
        lines[relative] = {line: [c for c in contexts if c] for line, contexts in by_line.items()}
    tests = json.loads(tests_json.read_text())
    return CoverageMap(lines, tests["durations"], frozenset(tests["failed"]))


def _copy_tree(work_dir: Path, job: int) -> Path:
    copy = work_dir / f"tree-{job}"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(ROOT, copy, ignore=COPIED_IGNORE)
    # The C extension (snapshot/_checksum_vfs*.so) came along: the copy imports its own packages, not the tree's.
    found = subprocess.run(
        [sys.executable, "-c", "import coordinator; print(coordinator.__file__)"],
        cwd=copy,
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip().startswith(str(copy)), (found.stdout, found.stderr)
    return copy


def _forget_bytecode(module: Path) -> None:
    # A mutant may keep the module's size and modification second: its cached bytecode must not be reused.
    for cached in (module.parent / "__pycache__").glob(f"{module.stem}.*.pyc"):
        cached.unlink()


def within_budget(covering: list[str], durations: dict[str, float], budget_s: float) -> list[str]:
    """The fastest covering tests whose summed time stays within the budget (at least one; all if it is 0)."""
    if budget_s <= 0:
        return covering
    chosen: list[str] = []
    spent = 0.0
    for test in covering:
        spent += durations.get(test, 1.0)
        if chosen and spent > budget_s:
            break
        chosen.append(test)
    return chosen


def run_mutant(
    mutant: Mutant, tree: Path, covering: list[str], durations: dict[str, float], timeout_s: float, budget_s: float
) -> Outcome:
    if not covering:
        return Outcome(mutant, "not covered", 0, 0, 0.0, "")
    run = within_budget(covering, durations, budget_s)
    module = tree / mutant.path
    source = module.read_text()
    started = time.monotonic()
    limit = timeout_s + 3 * sum(durations.get(test, 1.0) for test in run)
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow", "-p", "no:xdist"]
    command += ["-p", "no:cacheprovider", "--no-header", "-o", "addopts=", "--timeout=120", *run]
    try:
        module.write_text(mutant.apply(source))
        _forget_bytecode(module)
        process = subprocess.Popen(
            command, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        try:
            output, _ = process.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return Outcome(mutant, "timeout", len(covering), len(run), time.monotonic() - started, "")
    finally:
        module.write_text(source)
        _forget_bytecode(module)
    seconds = time.monotonic() - started
    failed = [line.split(" ", 2)[1] for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    if process.returncode == 0:
        return Outcome(mutant, "survived", len(covering), len(run), seconds, "")
    if process.returncode in (1, 2):  # a test failed, or collection failed on the mutant (an import broke)
        return Outcome(mutant, "killed", len(covering), len(run), seconds, failed[0] if failed else "collection")
    return Outcome(mutant, "error", len(covering), len(run), seconds, output[-300:])


def _package(path: str) -> str:
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0] + "/ (top)"


def summary(outcomes: list[Outcome]) -> str:
    counts: dict[str, Counter[str]] = {}
    for outcome in outcomes:
        counts.setdefault(_package(outcome.mutant.path), Counter())[outcome.outcome] += 1
    total: Counter[str] = Counter(outcome.outcome for outcome in outcomes)
    rows = [f"{'package':<28}" + "".join(f"{name:>13}" for name in OUTCOMES) + f"{'score':>8}"]
    for package, counter in [*sorted(counts.items()), ("all", total)]:
        run = counter["killed"] + counter["survived"] + counter["timeout"]
        score = f"{100 * (counter['killed'] + counter['timeout']) / run:.0f}%" if run else "-"
        rows.append(f"{package:<28}" + "".join(f"{counter[name]:>13}" for name in OUTCOMES) + f"{score:>8}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    arguments = _arguments(argv)
    seed = arguments.seed if arguments.seed is not None else secrets.randbelow(2**31)
    print(f"seed {seed}, {arguments.per_module} mutants per module", flush=True)
    work_dir: Path = arguments.work_dir or Path("/tmp/mutation")
    coverage_map = coverage_pass(arguments.coverage_dir or work_dir / "coverage")
    mutants: list[Mutant] = []
    for module in sorted(ROOT.glob("coordinator/**/*.py")):
        path = str(module.relative_to(ROOT))
        if path.startswith(arguments.only):
            mutants += sample(module_mutants(path, module.read_text()), arguments.per_module, seed, path)
    print(f"{len(mutants)} mutants from {len({m.path for m in mutants})} modules", flush=True)

    def covering(mutant: Mutant) -> list[str]:
        tests = coverage_map.lines.get(mutant.path, {}).get(mutant.line, [])
        usable = {test for test in tests if test not in coverage_map.failed}
        return sorted(usable, key=lambda test: (coverage_map.durations.get(test, 1.0), test))

    trees: Queue[Path] = Queue()
    for job in range(arguments.jobs):
        trees.put(_copy_tree(work_dir, job))
    outcomes: list[Outcome] = []

    def one(mutant: Mutant) -> Outcome:
        tree = trees.get()
        try:
            outcome = run_mutant(
                mutant, tree, covering(mutant), coverage_map.durations, arguments.timeout_s, arguments.budget_s
            )
        finally:
            trees.put(tree)
        outcomes.append(outcome)
        print(
            f"[{len(outcomes)}/{len(mutants)}] {outcome.outcome:<11} {outcome.seconds:5.1f}s "
            f"{outcome.tests_run:4}/{outcome.tests_covering:<4} tests  {mutant.describe()}",
            flush=True,
        )
        return outcome

    with ThreadPoolExecutor(arguments.jobs) as pool:
        ordered = list(pool.map(one, mutants))
    print(summary(ordered))
    for outcome in ordered:
        if outcome.outcome in ("survived", "not covered"):
            ran = f"{outcome.tests_run}/{outcome.tests_covering} tests"
            print(f"{outcome.outcome:<11} {ran:>13}  {outcome.mutant.describe()}")
    if arguments.out is not None:
        records = [{**asdict(outcome), "mutant": asdict(outcome.mutant)} for outcome in ordered]
        arguments.out.write_text(
            json.dumps({"seed": seed, "per_module": arguments.per_module, "outcomes": records}, indent=1)
        )
    return 0
