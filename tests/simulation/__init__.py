"""A whole cluster in one process, on one simulated clock (TigerBeetle's VOPR, FoundationDB's simulation).

`loop` is an event loop whose time jumps to its next timer once nothing is ready, with blocking calls run
inline; `cluster` runs nodes on it over the in-memory etcd and network; `workload` drives seeded commits and
faults and checks the cluster after every step.
"""
