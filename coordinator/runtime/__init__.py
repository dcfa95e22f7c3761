"""One coordinator at run time: its shard (pipeline, lifecycle, loading, snapshots), its metadata log (`log`), the
replication of that log (`replication`), and the node's set of coordinators as operations see them
(`node_coordinators`). The domain packages plug into it; it imports none of them.
"""
