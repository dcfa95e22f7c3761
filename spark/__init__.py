"""The orphan-file scan of object storage, on PySpark (DESIGN §7).

- `orphan_scan`: the job and its phases (`run_scan`); runnable with spark-submit;
- `command`: `diskless orphan-scan`, the spark-submit entry point and the periodic loop;
- `options`: the scan's options, from the coordinators' settings file and the flags;
- `rules`: the safety rules (threshold, grace floor, orphan share), pure functions;
- `coordinators`: discovery (DescribeCoordinators) and classification (DescribeFiles);
- `listing`: the store listed on executors, by key prefix;
- `deletion`: deletes on executors, re-checked, in batches, paced;
- `report`: the report, as a table or JSON; `progress`: progress lines while it runs.

Imports go one way: this package uses `coordinator` and `protos`, never the reverse
(but for the registration of the command in `coordinator/cli.py`).
"""
