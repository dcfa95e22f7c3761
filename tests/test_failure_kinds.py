"""Why a coordinator went out of service, as its failure metric and DescribeCoordinators name it
(coordinator/runtime/shard/loading.py `failure_kind`): pure, so that the classification is pinned in the fast lane
(the disk-full test that shows it end to end needs a small tmpfs and is skipped elsewhere). What the mutation run over
coordinator/ found unpinned (issue #40, item 5; docs/testing.md)."""

from __future__ import annotations

import errno

import apsw

from coordinator.base.invariants import InvariantViolation
from coordinator.runtime.shard.loading import DISK_NEARLY_FULL_BYTES, failure_kind


def test_a_full_disk_or_quota_is_disk_full_and_other_os_errors_are_io_errors() -> None:
    """Kills `error.errno in _DISK_FULL_ERRNOS` made `not in`."""
    assert failure_kind(OSError(errno.ENOSPC, "No space left on device")) == "disk_full"
    assert failure_kind(OSError(errno.EDQUOT, "Disk quota exceeded")) == "disk_full"
    assert failure_kind(apsw.FullError("database or disk is full")) == "disk_full"
    assert failure_kind(OSError(errno.EIO, "Input/output error")) == "io_error"


def test_a_broken_invariant_is_named_as_one_and_anything_else_is_an_error() -> None:
    """Kills `isinstance(error, InvariantViolation)` negated."""
    assert failure_kind(InvariantViolation("the high watermark went back")) == "invariant"
    assert failure_kind(ValueError("unexpected")) == "error"


def test_an_io_error_on_a_nearly_full_disk_is_disk_full() -> None:
    """SQLite reports a WAL index that cannot grow on a full disk as a plain I/O error (a fresh-clone run of
    test_disk_full saw a load fail with "disk I/O error"): with almost nothing free it is the disk being full,
    with room left it stays an I/O error, and free space unknown changes nothing."""
    io_error = apsw.IOError("disk I/O error")
    assert failure_kind(io_error, free=0) == "disk_full"
    assert failure_kind(OSError(errno.EIO, "Input/output error"), free=DISK_NEARLY_FULL_BYTES - 1) == "disk_full"
    assert failure_kind(io_error, free=DISK_NEARLY_FULL_BYTES) == "io_error"
    assert failure_kind(io_error, free=None) == "io_error"
    assert failure_kind(apsw.CorruptError("database disk image is malformed"), free=0) == "state_damaged"
    assert failure_kind(ValueError("unexpected"), free=0) == "error"
