"""Snapshots of a coordinator's SQLite state (SQLite backup API), log pruning and restore (DESIGN §6)."""
