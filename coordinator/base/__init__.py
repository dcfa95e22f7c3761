"""What every layer uses and no domain knows: errors, invariants, results, the clock, backoff, metrics, log output,
the directory lock and child processes.
"""
