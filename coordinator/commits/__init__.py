"""CommitFile (DESIGN §3, §4): the RPC (`commit_file`), the per-coordinator pure check (`rules`), a commit's parts
(`parts`) and the rules for a retried commit (`retries`).
"""
