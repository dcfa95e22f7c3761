"""The node's RPCs, one module per operation; the router dispatches to them.

`routing` holds what they share: the catalog lookup, admission, running one
typed operation per coordinator (`coordinator.shard.Operation`) and waiting.
"""
