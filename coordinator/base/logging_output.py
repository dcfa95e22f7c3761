"""Log set-up: one line per notable event, human-readable by default or JSON."""

from __future__ import annotations

import json
import logging
import sys
import time

LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(log_format: str = "text", level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        formatter: logging.Formatter = JsonFormatter()
        formatter.converter = time.gmtime
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class EveryInterval:
    """Lets a repeated event through at most once per interval (overload would otherwise flood the log)."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._last: dict[object, float] = {}
        self.suppressed: dict[object, int] = {}

    def allow(self, key: object) -> bool:
        now = time.monotonic()
        if now - self._last.get(key, float("-inf")) >= self._interval_s:
            self._last[key] = now
            return True
        self.suppressed[key] = self.suppressed.get(key, 0) + 1
        return False

    def take_suppressed(self, key: object) -> int:
        return self.suppressed.pop(key, 0)
