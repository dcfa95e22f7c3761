"""Every repository path and every module the docs name is there.

The README and docs/*.md name files (`coordinator/commits/rules.py`, `tests/test_layers.py`, links such as
`../protos/coordinator.proto`) and modules (`coordinator.runtime.shard.loading`, `python -m bench.recovery`). A
move of the code rewrites imports, not prose: this test finds what the prose still names after the code left.

- A path is any word beginning with a top-level directory of the repository (ROOTS), wherever it stands in a
  document (prose, code spans, code blocks), and every relative link target. It must exist; a glob
  (`protos/*_pb2.py`) must match something; a placeholder (`bench/results/<name>/`, `bench/…`) is checked up to
  the directory before it.
- A file or directory named in a code span without its top-level directory, as prose names a module beside
  its package (`rules.py`, `kinds/`, `log_recovery/plan.py`), must be the end of some path in the repository:
  a module gone or renamed (`commits.py`, `operations/routing.py`, `interpreter/`) is found so.
- A dotted name `coordinator.x.y` must be a module or package, or end in attributes of one: its longest prefix
  that is a module is imported and the rest looked up on it (`coordinator.runtime.shard.CoordinatorShard`). A
  file name such as `coordinator.proto` is not a module name. The module of `python -m NAME` must exist.

Sources are README.md and docs/**/*.md; bench/results/ holds historical records and is never a source.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
SOURCES = [
    path
    for path in [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").glob("**/*.md"))]
    if not path.is_relative_to(REPOSITORY / "bench" / "results")
]
ROOTS = ("coordinator", "tests", "bench", "protos", "spark", "snapshot", "docs", r"\.ci")
# A word that starts with a top-level directory and a slash, not inside a longer path or a web address.
PATH = re.compile(r"(?<![\w./-])(?:" + "|".join(ROOTS) + r")/[^\s`'\"()\[\],;:|]*")
LINK = re.compile(r"\]\(([^)#\s]*)")
MODULE = re.compile(r"(?<![\w./-])coordinator(?:\.\w+)+")
RUN_MODULE = re.compile(r"python -m (\w+(?:\.\w+)*)")
PLACEHOLDER = re.compile(r"[<…{$]")
GLOB = re.compile(r"[*?\[]")
CODE_SPAN = re.compile(r"`([^`\s]+)`")
# A relative file name (a known suffix) or directory name (a trailing slash), as a code span holds it whole.
RELATIVE_NAME = re.compile(r"[\w-][\w.-]*(?:/[\w.-]+)*(?:\.(?:py|proto|md|toml|json|txt)|/)")
SKIPPED_DIRECTORIES = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
FILE_SUFFIXES = {"proto", "py", "pyi", "md", "toml", "json", "log", "wal", "txt", "yaml"}


def _line(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def path_problem(named: str) -> str | None:
    """Why a repository path named in a document does not hold, or None."""
    path = named.split("#")[0].rstrip(".,")
    placeholder = PLACEHOLDER.search(path)
    if placeholder:  # `bench/results/<name>/`: the directory before the placeholder
        path = path[: placeholder.start()].rpartition("/")[0] + "/"
    if GLOB.search(path):
        return None if any(REPOSITORY.glob(path.rstrip("/"))) else f"{named}: nothing matches"
    target = REPOSITORY / path
    if path.endswith("/") and not target.is_dir():
        return f"{named}: no such directory"
    return None if target.exists() else f"{named}: no such file or directory"


@functools.cache
def _repository_paths() -> frozenset[str]:
    """Every file and directory of the repository, relative, directories ending in a slash."""
    found = set()
    for directory, directories, files in os.walk(REPOSITORY):
        directories[:] = [d for d in directories if d not in SKIPPED_DIRECTORIES]  # not walked: .venv is 30,000 files
        relative = Path(directory).relative_to(REPOSITORY)
        found.update((relative / d).as_posix() + "/" for d in directories)
        found.update((relative / f).as_posix() for f in files)
    return frozenset(found)


def relative_name_problem(named: str) -> str | None:
    """Why a name without its top-level directory ends no path of the repository, or None."""
    if any(path == named or path.endswith("/" + named) for path in _repository_paths()):
        return None
    return f"{named}: no file or directory of the repository ends so"


def _module_file(parts: list[str]) -> Path | None:
    base = REPOSITORY.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_problem(named: str) -> str | None:
    """Why a dotted name is neither a module nor attributes of one (by its longest prefix that is a module)."""
    parts = named.rstrip(".").split(".")
    if parts[-1] in FILE_SUFFIXES:  # a file name such as coordinator.proto
        return None
    for length in range(len(parts), 0, -1):
        if _module_file(parts[:length]) is None:
            continue
        value: object = importlib.import_module(".".join(parts[:length]))
        for attribute in parts[length:]:
            if not hasattr(value, attribute):
                return f"{named}: {'.'.join(parts[:length])} has no {'.'.join(parts[length:])}"
            value = getattr(value, attribute)
        return None
    return f"{named}: no such module"


def problems_in(text: str, document: Path) -> list[str]:
    """Every path, link and module `text` (the text of `document`) names that is not in the repository."""
    problems = []
    for match in CODE_SPAN.finditer(text):
        named = match.group(1)
        if PATH.fullmatch(named) or not RELATIVE_NAME.fullmatch(named):  # a path from the top, or no path
            continue
        problem = relative_name_problem(named)
        if problem:
            problems.append(f"line {_line(text, match.start())}: {problem}")
    for match in PATH.finditer(text):
        problem = path_problem(match.group())
        if problem:
            problems.append(f"line {_line(text, match.start())}: {problem}")
    for match in LINK.finditer(text):
        target = match.group(1)
        if not target or re.match(r"[a-z]+:", target):  # this page's heading, or a web address
            continue
        if not (document.parent / target).resolve().exists():
            problems.append(f"line {_line(text, match.start())}: link to {target}: no such file or directory")
    for match in MODULE.finditer(text):
        problem = module_problem(match.group())
        if problem:
            problems.append(f"line {_line(text, match.start())}: {problem}")
    for match in RUN_MODULE.finditer(text):
        if _module_file(match.group(1).split(".")) is None:
            problems.append(f"line {_line(text, match.start())}: python -m {match.group(1)}: no such module")
    return sorted(problems, key=lambda problem: int(problem.split()[1].rstrip(":")))


@pytest.mark.parametrize("document", SOURCES, ids=lambda path: str(path.relative_to(REPOSITORY)))
def test_every_path_and_module_the_docs_name_is_there(document: Path) -> None:
    problems = problems_in(document.read_text(), document)
    assert not problems, f"{document.relative_to(REPOSITORY)} names what is not there:\n" + "\n".join(problems)


def test_the_docs_are_read_and_bench_results_are_not() -> None:
    names = {str(path.relative_to(REPOSITORY)) for path in SOURCES}
    assert {"README.md", "docs/design.md", "docs/operations.md", "docs/benchmarks.md"} <= names
    assert not any(name.startswith("bench/results/") for name in names)


def test_the_check_finds_what_is_not_there() -> None:
    """The check can fail: a made-up text naming missing paths, links and modules is reported, item by item."""
    document = REPOSITORY / "docs" / "made_up.md"
    text = (
        "The rules are in `coordinator/commits/nowhere.py`, the tests in tests/test_nowhere.py.\n"
        "See [the shard](../coordinator/runtime/gone/) and the old `coordinator/router.py`.\n"
        "It calls coordinator.commits.rules.no_such_check and coordinator.operations.routing;\n"
        "run `python -m bench.nowhere`; the files `protos/*_nowhere.py`, `bench/gone/<name>/`.\n"
        "The pure checks (`commits.py`, `operations/routing.py`) and the record interpreter (`interpreter/`).\n"
    )
    problems = problems_in(text, document)
    for missing in (
        "coordinator/commits/nowhere.py",
        "tests/test_nowhere.py",
        "link to ../coordinator/runtime/gone/",
        "coordinator/router.py",
        "coordinator.commits.rules has no no_such_check",
        "coordinator.operations.routing: coordinator has no operations.routing",
        "python -m bench.nowhere",
        "protos/*_nowhere.py: nothing matches",
        "bench/gone/<name>/: no such directory",
        "commits.py: no file or directory of the repository ends so",
        "operations/routing.py",
        "interpreter/",
    ):
        assert any(missing in problem for problem in problems), (missing, problems)
    assert len(problems) == 12, problems
    assert problems[0].startswith("line 1: ")


def test_the_check_accepts_what_is_there() -> None:
    text = (
        "`coordinator/commits/rules.py` (`check_commit_part`), `coordinator/runtime/shard/`, tests/test_layers.py.\n"
        "[the contract](../protos/coordinator.proto), `protos/*_pb2.py`, `bench/results/<name>/results.md`,\n"
        "`bench/…`, coordinator.runtime.shard.CoordinatorShard, coordinator.machine.kinds, `coordinator.proto`,\n"
        "the setting diskless.coordinator.append.linger.ms, `python -m protos.generate`; see coordinator/node/.\n"
        "Beside their packages: `rules.py`, `kinds/`, `log_recovery/plan.py`; not names: `.part`, `<data dir>/x.py`.\n"
    )
    assert problems_in(text, REPOSITORY / "docs" / "made_up.md") == []
