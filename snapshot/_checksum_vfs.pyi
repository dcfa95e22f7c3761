"""The diskless-checksums SQLite VFS, in C (snapshot/checksum_vfs.c); snapshot/page_checksums.py loads it."""

def take_last_damage() -> str | None:
    """The damage the last refused read on this thread met (file, offset, what failed), once; else None."""
