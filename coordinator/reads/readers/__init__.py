"""Reader processes: FindBatches served from the coordinators' state files, off the node's event loop (DESIGN §4a).

`board` is the shared memory the node publishes each coordinator's readability on; `state_files` is a reader's
view of the state files (what `coordinator.reads.find_batches` reads through); `worker` is a reader process;
`supervisor` starts, watches and stops them in the node's process.
"""
