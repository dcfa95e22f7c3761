"""A node's py-spy samples split by what the node was doing: leading, following, its loops, gRPC (issue #37).

`python -m bench.cluster_cpu --py-spy DIR` records each node of the cluster with py-spy (raw, collapsed stacks)
while the load runs; `split` sorts every sample into one of `PARTS` by the frames on its stack, and `table`
prints a node's shares. A sample belongs to the most specific part its stack names: a SQLite apply under
`Follower._apply_up_to` is the follower's apply, the same apply under the write pipeline is the leader's.

    python -m bench.cpu_split FILE.raw [FILE.raw ...]
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

LEADER_COMMIT = "leader: CommitFile (receive, check, write, apply, answer)"
LEADER_FETCHES = "leader: answering fetches (fencing, read, progress, high watermark)"
FOLLOWER_APPEND = "follower: decode, log append and fdatasync"
FOLLOWER_APPLY = "follower: SQLite apply and view replay of replicated records"
FOLLOWER_TRUNCATE = "follower: truncation, OffsetForLeaderEpoch"
FOLLOWER_SESSION = "follower: stream receive and send, session (fetcher)"
CLUSTER = "cluster control (etcd session, refresh, elections)"
GRPC = "gRPC (grpc.aio, edge, ACL, metrics)"
LOOPS = "event loops' own time (uvloop, wake-ups, thread hand-overs)"
OTHER = "other (checkpoints, snapshots, workers, ...)"
PARTS = (
    LEADER_COMMIT, LEADER_FETCHES, FOLLOWER_APPEND, FOLLOWER_APPLY, FOLLOWER_TRUNCATE, FOLLOWER_SESSION, CLUSTER,
    GRPC, LOOPS, OTHER,
)  # fmt: skip

# (part, markers): the first rule one of whose markers is in a frame of the stack wins, so the specific ones first.
_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (FOLLOWER_APPLY, ("Follower._apply_up_to",)),
    (FOLLOWER_APPEND, ("Follower._append", "decode_fetched")),
    (FOLLOWER_TRUNCATE, ("Follower._truncate",)),
    (FOLLOWER_SESSION, ("replication/fetcher.py", "replication/follower.py")),
    (LEADER_FETCHES, ("replication/fetch_answers.py", "replication/leader.py", "FetchLogs", "fetch_logs")),
    (LEADER_COMMIT, ("shard/pipeline.py", "commit_file", "CommitFile", "append_ticks.py")),
    (CLUSTER, ("coordinator/cluster/", "etcd")),
    (GRPC, ("grpc/", "coordinator/edge/")),
)
# A stack whose innermost Python frame is one of these ran the loop's native code (callbacks, polling) or a
# thread pool's hand-over (a worker taking its next item).
_LOOP_LEAVES = (
    "Runner.run", "EdgeLoop._run", "run_forever", "_run_once", "Handle._run", "run_until_complete", "_worker",
    "Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap",
)  # fmt: skip


def part_of(frames: list[str]) -> str:
    """The part a sample's stack (outermost frame first, `name (path:line)` each) belongs to."""
    for part, markers in _RULES:
        if any(marker in frame for frame in frames for marker in markers):
            return part
    if frames and frames[-1].split(" (", 1)[0] in _LOOP_LEAVES:
        return LOOPS
    return OTHER


def split(raw: str) -> Counter[str]:
    """Samples per part of one py-spy raw file (`frame;frame;... count` lines)."""
    counts: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        # --subprocesses names the process first, --threads the thread: neither is a function.
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        counts[part_of(frames)] += int(count_text)
    return counts


def table(named: dict[str, Counter[str]]) -> str:
    """A markdown table: one row per part, one column per node (its share of that node's samples)."""
    names = list(named)
    lines = ["| part | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for part in PARTS:
        cells = []
        for name in names:
            total = sum(named[name].values())
            cells.append(f"{100 * named[name][part] / total:.0f}%" if total else "-")
        lines.append(f"| {part} | " + " | ".join(cells) + " |")
    lines.append("| samples | " + " | ".join(str(sum(named[name].values())) for name in names) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    named = {Path(path).stem: split(Path(path).read_text()) for path in sys.argv[1:]}
    print(table(named), end="")


if __name__ == "__main__":
    main()
