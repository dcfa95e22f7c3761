"""Topics and partitions: CreatePartitions and DeleteTopics (`admin`), their plans over the catalog (`rules`), the
per-coordinator checks (`partition_checks`), and DeleteRecords (`delete_records`).
"""
