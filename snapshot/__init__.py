"""Snapshots of a coordinator's SQLite state (SQLite backup API) and the crash-safe file steps they and the
metadata log are built on. It imports nothing of the coordinator: the coordinator builds on it."""
