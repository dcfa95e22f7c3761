"""What consumers and brokers read: FindBatches with its byte budget, ListOffsets, FindCoordinator and
DescribeCoordinators, and the reader processes that serve FindBatches off the node's loop (`readers`).
"""
