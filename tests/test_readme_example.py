"""The README's example runs against a real node, again and again; the docs hold together inside the repository."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.harness import ServerProcess

REPOSITORY = Path(__file__).resolve().parent.parent
EXAMPLE = REPOSITORY / "docs" / "examples" / "commit_and_fetch.py"
DOCUMENTS = [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").glob("**/*.md"))]
COMMITTED = re.compile(r"^committed wal/[0-9a-f]{2}/[0-9a-f]{32}\.wal: offsets (\d+)\.\.(\d+)$", re.MULTILINE)
RESENT = re.compile(r"^resent in wal/\S+: duplicate=True, offset (\d+)$", re.MULTILINE)
FOUND = re.compile(r"^offset (\d+) is in (wal/\S+), bytes 0\.\.1000$", re.MULTILINE)


def run_example(address: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), address], cwd=REPOSITORY, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_example_runs_again_and_again(server: ServerProcess) -> None:
    offsets = []
    for _ in range(3):
        output = run_example(server.address)
        committed, resent, found = COMMITTED.search(output), RESENT.search(output), FOUND.search(output)
        assert committed and resent and found, output
        base, last = int(committed.group(1)), int(committed.group(2))
        assert (last - base, int(resent.group(1)), int(found.group(1))) == (9, base, base), output
        assert output.count(found.group(2)) == 2, output  # found in the file first committed, not the resent one
        offsets.append(base)
    assert offsets == [offsets[0], offsets[0] + 10, offsets[0] + 20]


def test_the_readme_is_short_and_shows_the_example() -> None:
    readme = (REPOSITORY / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "docs/examples/commit_and_fetch.py" in readme
    assert "<!-- test-command -->" in readme and "<!-- run-command -->" in readme


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", markdown, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_the_docs_depend_on_nothing_outside_the_repository() -> None:
    for document in DOCUMENTS:
        text = document.read_text()
        name = document.relative_to(REPOSITORY)
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if re.match(r"[a-z]+:", target):  # a web address
                continue
            resolved = (document.parent / target).resolve() if target else document  # `(#heading)`: this page
            assert resolved.is_relative_to(REPOSITORY), f"{name} links outside the repository: {target}"
            assert resolved.exists(), f"{name} links to a missing file: {target}"
            if anchor:
                assert anchor in heading_anchors(resolved.read_text()), f"{name} links to a missing heading: {anchor}"
        assert "../shared" not in text, f"{name} refers to a file outside the repository"


TRANSACTIONS = REPOSITORY / "docs" / "examples" / "transactions.py"


def test_the_transactions_example_commits_one_aborts_one_and_reads_them_as_read_committed(
    server: ServerProcess,
) -> None:
    for _ in range(2):  # a second run finds the topic and starts new producers after the first run's markers
        done = subprocess.run(
            [sys.executable, str(TRANSACTIONS), server.address], cwd=REPOSITORY, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        waiting, ended, kept = done.stdout.splitlines()
        first = int(re.search(r"keeps \['(\d+)\.\.", kept).group(1)) if "keeps ['" in kept else -1  # type: ignore[union-attr]
        assert waiting == f"both open: last stable offset {first}, 0 batches readable", done.stdout
        # paid: first..first+4 and first+8..first+12 committed; refunded: first+5..first+7 aborted; markers after.
        assert ended == f"committed and aborted: last stable offset {first + 15}, aborted from [{first + 5}]"
        assert kept == f"a read_committed consumer keeps ['{first}..{first + 4}', '{first + 8}..{first + 12}']"
