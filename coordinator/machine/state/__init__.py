"""A coordinator's SQLite state: a cache of its metadata log, never the truth.

Its snapshots (copies by SQLite's backup API, snapshot/snapshots.py) are taken and pruned by the runtime
(coordinator/runtime/shard/snapshots.py, pruning.py) (DESIGN §6).
"""
