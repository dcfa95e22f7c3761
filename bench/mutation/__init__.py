"""A sampled mutation run over coordinator/ (`python -m bench.mutation`; docs/testing.md)."""
