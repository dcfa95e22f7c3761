"""A coordinator's SQLite state: a cache of its metadata log, never the truth.

With its snapshots (`snapshots`: copies by SQLite's backup API, restore) and the pruning of the
snapshots and log segments no longer needed (`pruning`) (DESIGN §6).
"""
