"""bench/cpu_split.py: a node's py-spy samples go to the part of the node's work their stacks name."""

from __future__ import annotations

from bench.cpu_split import (
    FOLLOWER_APPEND,
    FOLLOWER_APPLY,
    LEADER_COMMIT,
    LEADER_FETCHES,
    LOOPS,
    OTHER,
    split,
    table,
)

ROOT = 'process 1:"python -m coordinator serve";Runner.run (asyncio/runners.py:118)'
STORE_APPLY = "StateStore.apply (coordinator/machine/state/store.py:373)"


def test_the_same_apply_is_the_followers_under_the_follower_and_the_leaders_under_the_pipeline() -> None:
    raw = "\n".join([
        f"{ROOT};_Session._hand (coordinator/runtime/replication/fetcher.py:250);"
        f"Follower._apply_up_to (coordinator/runtime/replication/follower.py:385);{STORE_APPLY} 7",
        f"{ROOT};Pipeline.run (coordinator/runtime/shard/pipeline.py:225);{STORE_APPLY} 5",
        f"{ROOT};_Session._hand (coordinator/runtime/replication/fetcher.py:250);"
        "Follower._append (coordinator/runtime/replication/follower.py:360);decode_batch (x.py:1) 3",
        f"{ROOT};answer_fetch_logs (coordinator/runtime/replication/fetch_answers.py:60) 2",
        f"{ROOT} 4",
        f"{ROOT};WalCheckpoints._checkpoint (coordinator/machine/state/checkpoints.py:9) 1",
    ])  # fmt: skip
    counts = split(raw)
    assert counts == {FOLLOWER_APPLY: 7, LEADER_COMMIT: 5, FOLLOWER_APPEND: 3, LEADER_FETCHES: 2, LOOPS: 4, OTHER: 1}
    assert "| follower: SQLite apply and view replay of replicated records | 32% |" in table({"node 0": counts})
