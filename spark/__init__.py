"""The orphan-file scan of object storage, on PySpark (DESIGN §7)."""
