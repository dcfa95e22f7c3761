"""A node assembled: its composition root (`assembly`), the node and its coordinators (`node`), the router, the
gRPC services, the per-coordinator gauges, and a node spread over processes (`processes`).
"""
