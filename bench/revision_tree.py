"""A git revision's source tree beside the working tree, for `diskless bench compare` to run its node from.

The tree is `git archive`'s extract of the commit in a cache directory outside the checkout
(`$XDG_CACHE_HOME/diskless-bench/trees/<full sha>`, else `~/.cache/…`, else the system's temp directory): a
plain directory, not a `git worktree`, so the repository's own metadata is never touched. It is extracted
into a `.part` directory and renamed into place, so a tree that is there is whole and is reused as it is.
The generated protobuf modules are committed, so nothing is built; `check_imports` makes sure the tree's
node can start under this interpreter before anything is measured.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

BUILD_TIMEOUT_S = 300  # one small C file: seconds; the bound only ends a hang
GIT_TIMEOUT_S = 300  # git archive of a tree of a few MB takes about a second; the bound only ends a hang
IMPORT_CHECK_TIMEOUT_S = 120  # two interpreter starts importing the node's modules on a loaded machine
CACHE_DIRECTORY = "diskless-bench"
OUTPUT_SHOWN_CHARS = 2000  # of a failed import check's output, in the error


class RevisionProblem(Exception):
    """The revision cannot be compared (unknown, not a commit, its tree does not import): a usage error."""


@dataclass(frozen=True, slots=True)
class Revision:
    asked: str  # as the user named it: a sha, a branch, HEAD~3
    sha: str  # the full commit id

    @property
    def short(self) -> str:
        return self.sha[:7]


def _git(repo: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), *arguments], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
    )


def resolve_revision(repo: Path, asked: str) -> Revision:
    """The commit `asked` names in `repo`; RevisionProblem if it names none."""
    # A name starting with '-' would be read as an option of rev-parse, not a revision.
    if not asked or asked.startswith("-"):
        raise RevisionProblem(f"{asked!r} is not a revision")
    found = _git(repo, "rev-parse", "--verify", "--quiet", f"{asked}^{{commit}}")
    if found.returncode != 0:
        where = "" if _git(repo, "rev-parse", "--git-dir").returncode == 0 else " (not a git repository)"
        raise RevisionProblem(f"unknown revision {asked!r} in {repo}{where}")
    return Revision(asked, found.stdout.strip())


@dataclass(frozen=True, slots=True)
class WorkingTree:
    path: Path
    head: str  # the commit checked out ("" outside a repository)
    uncommitted_changes: bool  # tracked files differ from HEAD (what runs is the files, not HEAD)


def describe_working_tree(repo: Path) -> WorkingTree:
    head = _git(repo, "rev-parse", "--verify", "--quiet", "HEAD")
    # Untracked files are not counted: the comparison's own results land in the tree.
    status = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return WorkingTree(repo, head.stdout.strip() if head.returncode == 0 else "", bool(status.stdout.strip()))


def cache_root() -> Path:
    """Where revisions' trees are kept between runs, created if missing."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    for root in (Path(base) / CACHE_DIRECTORY, Path(tempfile.gettempdir()) / f"{CACHE_DIRECTORY}-{os.getuid()}"):
        try:
            (root / "trees").mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        return root / "trees"
    raise RevisionProblem(f"no writable cache directory (tried {base} and {tempfile.gettempdir()})")


def materialise(repo: Path, revision: Revision, root: Path) -> tuple[Path, bool]:
    """The revision's tree under `root` and whether it was already there; extracted with `git archive` if not."""
    tree = root / revision.sha
    if tree.is_dir():
        return tree, True
    part = root / f"{revision.sha}.part-{os.getpid()}"
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", revision.sha],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert archive.stdout is not None
    extract = subprocess.run(["tar", "-x", "-C", str(part)], stdin=archive.stdout, capture_output=True,
                             timeout=GIT_TIMEOUT_S, check=False)  # fmt: skip
    archive.stdout.close()
    _, archive_error = archive.communicate(timeout=GIT_TIMEOUT_S)
    if archive.returncode != 0 or extract.returncode != 0:
        shutil.rmtree(part, ignore_errors=True)
        problem = (archive_error or extract.stderr).decode(errors="replace").strip()
        raise RevisionProblem(f"git archive {revision.sha} failed: {problem}")
    _build_extensions(part)
    try:
        part.rename(tree)
    except OSError:  # another comparison extracted it meanwhile: theirs is as good
        shutil.rmtree(part, ignore_errors=True)
    return tree, False


def _build_extensions(tree: Path) -> None:
    """Builds a tree's C extensions in place (the state's checksum VFS since issue #37), as `pip install -e` does
    for the working tree; a tree that declares none needs nothing."""
    project = tree / "pyproject.toml"
    if not project.exists() or "ext-modules" not in project.read_text():
        return
    built = subprocess.run(
        [sys.executable, "-c", "from setuptools import setup; setup()", "build_ext", "--inplace"],
        cwd=tree, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False,
    )  # fmt: skip
    if built.returncode != 0:
        shutil.rmtree(tree, ignore_errors=True)
        raise RevisionProblem(f"{tree}: building its C extensions failed: {built.stderr[-OUTPUT_SHOWN_CHARS:]}")


_IMPORTS_CHECKED = "import coordinator, protos.coordinator_pb2, snapshot.page_checksums; print(coordinator.__file__)"


def check_imports(tree: Path) -> None:
    """RevisionProblem unless `diskless serve` of `tree` starts its imports under this interpreter, as the
    benchmark will run it (cwd and PYTHONPATH the tree, exactly as bench.coordinator_system does)."""
    environment = dict(os.environ, PYTHONPATH=str(tree))
    found = subprocess.run(
        [sys.executable, "-c", _IMPORTS_CHECKED],
        cwd=tree, env=environment, capture_output=True, text=True, timeout=IMPORT_CHECK_TIMEOUT_S, check=False,
    )  # fmt: skip
    if found.returncode != 0:
        raise RevisionProblem(f"{tree} does not import: {found.stderr[-OUTPUT_SHOWN_CHARS:]}")
    imported = Path(found.stdout.strip()).resolve()
    if not imported.is_relative_to(tree.resolve()):
        raise RevisionProblem(f"{tree}: `import coordinator` found {imported}, not the tree's own")
    serve = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--help"],
        cwd=tree, env=environment, capture_output=True, text=True, timeout=IMPORT_CHECK_TIMEOUT_S, check=False,
    )  # fmt: skip
    if serve.returncode != 0:
        raise RevisionProblem(f"{tree}: `diskless serve --help` failed: {serve.stderr[-OUTPUT_SHOWN_CHARS:]}")
