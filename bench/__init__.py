"""Load generators and benchmarks of the coordinator."""
