"""How many coordinators a lone node has: `--coordinators` at formation, the recorded count after an add.

`diskless coordinators add` (CreateCoordinators) records the new total in the data directory *before* it creates
the coordinators, so a crash at any point of the add leaves a count that the next start completes; the flag never
lowers it (a lower count would hide the partitions of the coordinators past it). A cluster keeps its count in its
formation record in etcd instead (coordinator/cluster/).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import final

from coordinator.base.errors import ErrorCode
from coordinator.config.rules import COORDINATORS_MAX
from coordinator.config.settings import Settings, SettingsError
from snapshot.durable_files import write_durably

COUNT_FILE = "coordinators.json"


class CountFileDamaged(SettingsError):
    """The recorded count cannot be read: the node refuses to start rather than guess (a guess could hide data)."""


def recorded_count(data_dir: Path) -> int | None:
    """The count an add recorded in the data directory, or None where none was ever added."""
    path = data_dir / COUNT_FILE
    if not path.exists():
        return None
    try:
        count = json.loads(path.read_bytes())["coordinators"]
    except (ValueError, KeyError, TypeError) as error:
        raise CountFileDamaged(f"{path} cannot be read ({error}): restore it (the count an add made)") from None
    if not isinstance(count, int) or not 1 <= count <= COORDINATORS_MAX:
        raise CountFileDamaged(f"{path} records {count!r} coordinators, not 1..{COORDINATORS_MAX}")
    return count


def record_count(data_dir: Path, count: int) -> None:
    """Records the count durably (written aside, fsynced, renamed): it is in place before any new coordinator."""
    data_dir.mkdir(parents=True, exist_ok=True)
    write_durably(data_dir / COUNT_FILE, json.dumps({"coordinators": count}).encode())


def with_recorded_count(settings: Settings) -> Settings:
    """The settings with the node's real count: the recorded one where it is above the flag's."""
    recorded = recorded_count(settings.data_dir)
    if recorded is None or recorded <= settings.coordinators:
        return settings
    return dataclasses.replace(settings, coordinators=recorded)


@final
@dataclass(frozen=True, slots=True)
class CountChange:
    """What CreateCoordinators does: the error (NONE: go on) and the count before and after it."""

    error_code: ErrorCode
    message: str
    previous: int
    count: int

    @property
    def adds(self) -> bool:
        return self.error_code is ErrorCode.NONE and self.count > self.previous


def plan_count_change(current: int, wanted: int, expected: int) -> CountChange:
    """CreateCoordinators' rules (pure), as Kafka's CreatePartitions on a total count: the same total again is no
    change (a retry); fewer is refused (coordinators are never removed: their partitions would be lost)."""
    if expected >= 0 and expected != current and wanted != current:
        return CountChange(
            ErrorCode.INVALID_REQUEST,
            f"the node has {current} coordinators, not the {expected} expected: another add ran first",
            current,
            current,
        )
    if wanted < current:
        return CountChange(
            ErrorCode.INVALID_PARTITIONS,
            f"{wanted} coordinators asked, fewer than the {current} there are: coordinators are never removed",
            current,
            current,
        )
    if wanted > COORDINATORS_MAX:
        return CountChange(
            ErrorCode.INVALID_PARTITIONS, f"{wanted} coordinators asked, more than {COORDINATORS_MAX}", current, current
        )
    return CountChange(ErrorCode.NONE, "", current, wanted)
