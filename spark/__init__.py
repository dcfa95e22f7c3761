"""The orphan-file scan of object storage, on PySpark (DESIGN §7).

- `orphan_scan`: the job and its phases (`run_scan`);
- `command`: `diskless orphan-scan` and the spark-submit script (`spark-submit spark/command.py`), the periodic loop;
- `options`: the scan's options, from the coordinators' settings file and the flags;
- `rules`: the safety rules (threshold, grace floor, orphan share), pure functions;
- `coordinator_client`: discovery (DescribeCoordinators) and classification (DescribeFiles);
- `listing`: the store listed on executors, by key prefix;
- `deletion`: deletes on executors, re-checked, in batches, paced;
- `report`: the report, as a table or JSON; `progress`: progress lines while it runs.

Imports go one way: this package uses `coordinator` and `protos`, never the reverse (`diskless
orphan-scan` in coordinator/cli/main.py imports `command` only when it runs); `command` imports the job
only when a scan runs.
"""
