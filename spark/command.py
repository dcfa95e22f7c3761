"""`diskless orphan-scan` and the spark-submit entry point: options, one scan or periodic scans, the report.

Run it as `diskless orphan-scan ...` or `spark-submit spark/command.py ...` (same flags). It imports
no Spark until a scan runs, for a quick `--help`: the job (spark/orphan_scan.py) is imported then, and the Spark
application starts only once every coordinator has answered (a scan that
aborts there costs no JVM). The report goes to stdout, as a table or with
`--json` as JSON (one line per scan with `--periodic`); progress goes to
stderr. Exit codes: see spark/report.py; 2 when the options or settings are
refused. With `--periodic` a failed scan does not end the loop (the next one
may succeed); the exit code is the worst of the scans run.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from spark.options import OptionsError, ScanOptions, add_scan_arguments, options_from_arguments
from spark.progress import Say, say_on_stderr


def main(argv: list[str] | None = None, spark: Any = None, prog: str = "command.py") -> int:
    """`diskless orphan-scan ...` and the spark-submit entry point (`spark-submit spark/command.py --help`)."""
    parser = argparse.ArgumentParser(prog=prog, description="The diskless orphan-file scan on PySpark.")
    add_scan_arguments(parser)
    return run_command(parser.parse_args(argv), spark)


def run_command(args: argparse.Namespace, spark: Any = None, say: Say = say_on_stderr) -> int:
    """Runs the scan(s) of parsed arguments; `spark`: a session to use instead of starting one."""
    try:
        options = options_from_arguments(args)
        if args.scans < 0:
            raise OptionsError(f"--scans must be >= 0, got {args.scans}")
    except OptionsError as error:
        print(f"diskless orphan-scan: {error}", file=sys.stderr)
        return 2
    from spark import orphan_scan  # Spark's import takes a second: not for `diskless --help`

    sessions: list[Any] = []

    def session() -> Any:
        if spark is not None:
            return spark
        if not sessions:
            sessions.append(orphan_scan.open_session(args.master))
        return sessions[0]

    stop = threading.Event()
    try:
        with _stopped_by_signals(stop) if args.periodic else contextlib.nullcontext():
            return run_scans(
                options, session, json=args.json, periodic=args.periodic, scans=args.scans, stop=stop, say=say
            )
    finally:
        for created in sessions:
            created.stop()


def run_scans(
    options: ScanOptions,
    session: Callable[[], Any],
    *,
    json: bool = False,
    periodic: bool = False,
    scans: int = 0,
    stop: threading.Event | None = None,
    say: Say = say_on_stderr,
) -> int:
    """One scan, or with `periodic` one every interval until `stop` is set or `scans` ran; the worst exit code."""
    from spark.orphan_scan import run_scan

    stop = stop or threading.Event()
    worst, count = 0, 0
    while True:
        report = run_scan(session, options, say=say)
        count += 1
        print(report.to_json(indent=None if periodic else 2) if json else report.to_table(), flush=True)
        worst = max(worst, report.exit_code)
        if not periodic or (scans and count >= scans):
            return worst
        say(f"next scan in {options.interval_ms / 1000:g} s (diskless.coordinator.orphan.scan.interval.ms)")
        if stop.wait(options.interval_ms / 1000):
            say("stopped")
            return worst


@contextlib.contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT end a periodic run between scans (a scan under way finishes first)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    for number in previous:
        signal.signal(number, lambda *_: stop.set())
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


if __name__ == "__main__":
    # Run as a script (spark-submit spark/command.py): the script's directory must not shadow top-level modules.
    import os

    script_directory = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == script_directory:
        sys.path[0] = os.path.dirname(script_directory)
    from spark.command import main as submitted  # this module again, under its package's name

    sys.exit(submitted())
