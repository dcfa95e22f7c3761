"""`diskless consolidate`: options, one consolidation, the summary (stdout) and progress (stderr).

Exit codes: see spark/consolidation_report.py; 2 when the options or settings are refused. Spark is
imported only once the options are good, for a quick `--help`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from spark.consolidation_options import add_consolidate_arguments, options_from_arguments
from spark.options import OptionsError


def main(
    argv: list[str] | None = None,
    spark: Any = None,
    prog: str = "diskless consolidate",
    after_upload: Callable[[str], None] | None = None,
) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Merge small WAL files into per-partition objects (PySpark; DESIGN §4c)."
    )
    add_consolidate_arguments(parser)
    args = parser.parse_args(argv)
    try:
        options = options_from_arguments(args)
    except OptionsError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
    from spark.consolidation import open_consolidation_session, run_consolidation

    created: list[Any] = []

    def session() -> Any:
        if spark is not None:
            return spark
        created.append(open_consolidation_session(args.master, nice=options.job_nice, idle=options.job_cpu_idle))
        return created[0]

    try:
        report = run_consolidation(session, options, after_upload=after_upload)
    finally:
        for made in created:
            made.stop()
    print(report.to_json() if args.json else report.to_table(), flush=True)
    return report.exit_code
