"""The orphan-file scan of object storage (DESIGN §7) and object consolidation (DESIGN §4c), on PySpark.

Object consolidation (`diskless consolidate`): `consolidation` (the job's phases), `consolidation_command`,
`consolidation_options`, `consolidation_rules` (runs, keys, reads, extents: pure), `consolidation_tasks`
(planning and one run on executors), `consolidation_report`, `record_batches` (Kafka v2 batches, CRC-32C).

The orphan scan:

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
