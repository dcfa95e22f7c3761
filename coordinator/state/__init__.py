"""A coordinator's SQLite state: a cache of its metadata log, never the truth."""
